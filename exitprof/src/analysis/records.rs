//! Decoding the kernel's records: exit records and deferred-work records.

use exitprof_common::{
    deferred::DeferredRecord,
    point::Point,
    record::{
        BLOCK_STACK_DEPTH, ExitRecord, FLAG_GROUP_DEAD, FLAG_TRUNCATED, HEADER_LEN, Hit, MAX_HITS,
        wire_len,
    },
    sample::{SAMPLE_STACK_DEPTH, Sample},
};
use serde::Serialize;

/// One probe hit of a decoded exit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointHit {
    pub point: Point,
    pub ts_ns: u64,
    /// Off-CPU time accumulated since the exit started, at this hit.
    pub off_cpu_ns: u64,
    /// The part of it spent runnable, waiting for a CPU.
    pub runq_ns: u64,
}

/// One task's exit, as the kernel recorded it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exit {
    /// Thread id and thread-group id in the initial PID namespace (how the kernel side's other
    /// records name tasks).
    pub pid: u32,
    pub tgid: u32,
    /// The same as exitprof's PID namespace sees them (0 where the task is not in it).
    pub ns_pid: u32,
    pub ns_tgid: u32,
    pub flags: u32,
    pub lost_hits: u32,
    pub cpu: u32,
    pub ipc_ns: u64,
    /// The longest time the task was blocked during its exit.
    pub longest_block_ns: u64,
    /// The kernel stack of its longest block whose stack was walked, if any.
    pub block: Option<Block>,
    /// In the order they fired.
    pub hits: Vec<PointHit>,
}

/// Where an exit blocked: the kernel stack walked when the task came back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Block {
    /// Return addresses, innermost first, the scheduler's frames included.
    pub stack: Vec<u64>,
    /// How long the block lasted.
    pub ns: u64,
    /// The hits the exit had when it blocked: the block lies after hit `after_hits - 1`.
    pub after_hits: u32,
}

/// What an exit ended: a thread of a process that lives on, or the process (its last thread, or
/// its only one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ExitKind {
    Thread,
    Process,
}

impl ExitKind {
    pub const ALL: [Self; 2] = [Self::Thread, Self::Process];

    pub fn name(self) -> &'static str {
        match self {
            Self::Thread => "thread",
            Self::Process => "process",
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than its {HEADER_LEN}-byte header")]
    Short(usize),
    #[error("record claims {0} hits, more than {MAX_HITS}")]
    TooManyHits(u32),
    #[error("record of {len} bytes does not hold its {n_hits} hits ({expected} bytes)")]
    Length { len: usize, n_hits: u32, expected: usize },
    #[error("unknown probe point code {0}")]
    UnknownPoint(u8),
}

impl Exit {
    /// Decodes one ring-buffer record.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if bytes.len() < HEADER_LEN {
            return Err(DecodeError::Short(bytes.len()));
        }
        let mut record = std::mem::MaybeUninit::<ExitRecord>::zeroed();
        let n = bytes.len().min(size_of::<ExitRecord>());
        // SAFETY: ExitRecord is plain integers, valid for any bytes (zeroed beyond `n`); the copy
        // stays within both buffers.
        let record = unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), record.as_mut_ptr().cast::<u8>(), n);
            record.assume_init()
        };
        if record.n_hits as usize > MAX_HITS {
            return Err(DecodeError::TooManyHits(record.n_hits));
        }
        let expected = wire_len(record.n_hits as usize);
        if bytes.len() != expected {
            return Err(DecodeError::Length { len: bytes.len(), n_hits: record.n_hits, expected });
        }
        let hits = record.points[..record.n_hits as usize]
            .iter()
            .zip(&record.hits)
            .map(|(&code, &Hit { ts_ns, off_cpu_ns, runq_ns })| {
                let point = Point::from_code(code).ok_or(DecodeError::UnknownPoint(code))?;
                Ok(PointHit { point, ts_ns, off_cpu_ns, runq_ns })
            })
            .collect::<Result<_, _>>()?;
        let frames = (record.block_stack_len as usize).min(BLOCK_STACK_DEPTH);
        let block = (frames > 0).then(|| Block {
            stack: record.block_stack[..frames].to_vec(),
            ns: record.block_stack_ns,
            after_hits: record.block_stack_hit,
        });
        Ok(Self {
            pid: record.pid,
            tgid: record.tgid,
            ns_pid: record.ns_pid,
            ns_tgid: record.ns_tgid,
            flags: record.flags,
            lost_hits: record.lost_hits,
            cpu: record.cpu,
            ipc_ns: record.ipc_ns,
            longest_block_ns: record.longest_block_ns,
            block,
            hits,
        })
    }

    /// Whether the exit ended its thread group.
    pub fn kind(&self) -> ExitKind {
        if self.flags & FLAG_GROUP_DEAD != 0 { ExitKind::Process } else { ExitKind::Thread }
    }

    /// Whether hits were lost for want of slots: the stages between the last kept hit and the
    /// final switch-out are unknown, though the whole exit's length is not.
    pub fn truncated(&self) -> bool {
        self.flags & FLAG_TRUNCATED != 0
    }

    /// From the first hit to the last: the whole exit, as far as it was seen.
    pub fn duration_ns(&self) -> u64 {
        match (self.hits.first(), self.hits.last()) {
            (Some(first), Some(last)) => last.ts_ns.saturating_sub(first.ts_ns),
            _ => 0,
        }
    }

    /// When the exit ended (its last hit: the final switch-out).
    pub fn end_ns(&self) -> u64 {
        self.hits.last().map_or(0, |h| h.ts_ns)
    }

    /// Off-CPU time of the whole exit.
    pub fn off_cpu_ns(&self) -> u64 {
        match (self.hits.first(), self.hits.last()) {
            (Some(first), Some(last)) => last.off_cpu_ns.saturating_sub(first.off_cpu_ns),
            _ => 0,
        }
    }

    /// The part of the off-CPU time spent runnable, waiting for a CPU.
    pub fn runq_ns(&self) -> u64 {
        match (self.hits.first(), self.hits.last()) {
            (Some(first), Some(last)) => last.runq_ns.saturating_sub(first.runq_ns),
            _ => 0,
        }
    }
}

/// One sample of a followed exit, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSample {
    /// Thread id of the exiting task.
    pub pid: u32,
    /// Hits the exit's record held when the sample was taken.
    pub n_hits: u32,
    /// The exit's first hit: with `pid`, names the exit.
    pub exit_start_ns: u64,
    pub ts_ns: u64,
    /// Kernel return addresses, innermost first.
    pub stack: Vec<u64>,
}

/// Decodes an on-CPU sample.
pub fn decode_sample(bytes: &[u8]) -> Option<CpuSample> {
    if bytes.len() != size_of::<Sample>() {
        return None;
    }
    // SAFETY: the length matches, and any bit pattern is a valid Sample.
    let s = unsafe { bytes.as_ptr().cast::<Sample>().read_unaligned() };
    let frames = (s.stack_len as usize).min(SAMPLE_STACK_DEPTH);
    Some(CpuSample {
        pid: s.pid,
        n_hits: s.n_hits,
        exit_start_ns: s.exit_start_ns,
        ts_ns: s.ts_ns,
        stack: s.stack[..frames].to_vec(),
    })
}

/// Decodes a deferred-work record.
pub fn decode_deferred(bytes: &[u8]) -> Option<DeferredRecord> {
    (bytes.len() == size_of::<DeferredRecord>())
        // SAFETY: the length matches, and any bit pattern is a valid DeferredRecord.
        .then(|| unsafe { bytes.as_ptr().cast::<DeferredRecord>().read_unaligned() })
}

#[cfg(test)]
pub(crate) mod tests {
    use exitprof_common::{
        deferred::DeferredKind,
        point::{ExitFn, Marker},
    };
    use proptest::{collection::vec, prelude::*};

    use super::*;

    /// Encodes an exit the way the kernel side does, every field included.
    pub(crate) fn encode_exit(exit: &Exit) -> Vec<u8> {
        // SAFETY: all-zero is a valid ExitRecord.
        let mut record: ExitRecord = unsafe { std::mem::zeroed() };
        record.pid = exit.pid;
        record.tgid = exit.tgid;
        record.ns_pid = exit.ns_pid;
        record.ns_tgid = exit.ns_tgid;
        record.flags = exit.flags;
        record.lost_hits = exit.lost_hits;
        record.cpu = exit.cpu;
        record.ipc_ns = exit.ipc_ns;
        record.longest_block_ns = exit.longest_block_ns;
        if let Some(block) = &exit.block {
            record.block_stack[..block.stack.len()].copy_from_slice(&block.stack);
            record.block_stack_len = block.stack.len() as u32;
            record.block_stack_ns = block.ns;
            record.block_stack_hit = block.after_hits;
        }
        record.n_hits = exit.hits.len() as u32;
        for (i, hit) in exit.hits.iter().enumerate() {
            record.points[i] = hit.point.code();
            record.hits[i] =
                Hit { ts_ns: hit.ts_ns, off_cpu_ns: hit.off_cpu_ns, runq_ns: hit.runq_ns };
        }
        // SAFETY: reading the record's own bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts((&raw const record).cast::<u8>(), size_of::<ExitRecord>())
        };
        bytes[..wire_len(exit.hits.len())].to_vec()
    }

    /// Encodes hits the way the kernel side does, for decoder tests.
    pub(crate) fn encode(pid: u32, tgid: u32, hits: &[(Point, u64, u64)]) -> Vec<u8> {
        let hits = hits
            .iter()
            .map(|&(point, ts_ns, off_cpu_ns)| PointHit { point, ts_ns, off_cpu_ns, runq_ns: 0 })
            .collect();
        encode_exit(&Exit { pid, tgid, hits, ..Exit::default() })
    }

    /// Any point the kernel side can record.
    pub(crate) fn any_point() -> impl Strategy<Value = Point> {
        let points: Vec<Point> = (0..=u8::MAX).filter_map(Point::from_code).collect();
        proptest::sample::select(points)
    }

    /// Any exit the kernel side can send: any fields, up to MAX_HITS hits in any order.
    pub(crate) fn any_exit() -> impl Strategy<Value = Exit> {
        let hit =
            (any_point(), any::<[u64; 3]>()).prop_map(|(point, [ts_ns, off_cpu_ns, runq_ns])| {
                PointHit { point, ts_ns, off_cpu_ns, runq_ns }
            });
        let block = proptest::option::of(
            (vec(any::<u64>(), 1..=BLOCK_STACK_DEPTH), any::<u64>(), any::<u32>())
                .prop_map(|(stack, ns, after_hits)| Block { stack, ns, after_hits }),
        );
        (any::<[u32; 7]>(), any::<[u64; 2]>(), block, vec(hit, 0..=MAX_HITS)).prop_map(
            |(
                [pid, tgid, ns_pid, ns_tgid, flags, lost_hits, cpu],
                [ipc_ns, longest_block_ns],
                block,
                hits,
            )| {
                Exit {
                    pid,
                    tgid,
                    ns_pid,
                    ns_tgid,
                    flags,
                    lost_hits,
                    cpu,
                    ipc_ns,
                    longest_block_ns,
                    block,
                    hits,
                }
            },
        )
    }

    proptest! {
        #[test]
        fn decode_undoes_encode(exit in any_exit()) {
            prop_assert_eq!(Exit::decode(&encode_exit(&exit)), Ok(exit));
        }

        #[test]
        fn any_bytes_decode_or_fail_without_panicking(
            bytes in vec(any::<u8>(), 0..2 * size_of::<ExitRecord>())
        ) {
            if let Ok(exit) = Exit::decode(&bytes) {
                prop_assert_eq!(wire_len(exit.hits.len()), bytes.len());
                let _ = (exit.duration_ns(), exit.off_cpu_ns(), exit.end_ns());
            }
        }

        /// A record damaged in transit (bytes changed, maybe cut short) is refused, or decoded
        /// as what its bytes say; never a panic.
        #[test]
        fn damaged_records_are_refused_or_decoded_as_they_read(
            exit in any_exit(),
            changes in vec((any::<usize>(), any::<u8>()), 1..8),
            cut in proptest::option::of(any::<usize>()),
        ) {
            let mut bytes = encode_exit(&exit);
            for (at, byte) in changes {
                let len = bytes.len();
                bytes[at % len] = byte;
            }
            if let Some(cut) = cut {
                bytes.truncate(cut % (bytes.len() + 1));
            }
            let word = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap());
            if let Ok(decoded) = Exit::decode(&bytes) {
                prop_assert_eq!(wire_len(decoded.hits.len()), bytes.len());
                prop_assert_eq!((decoded.pid, decoded.tgid), (word(0), word(4)));
                for (i, hit) in decoded.hits.iter().enumerate() {
                    let at = HEADER_LEN + i * size_of::<Hit>();
                    let ts = u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap());
                    prop_assert_eq!(hit.ts_ns, ts);
                }
            }
        }
    }

    #[test]
    fn decodes_what_the_kernel_encodes() {
        let hits = [
            (Point::Marker(Marker::SysEnterExit), 1_000, 0),
            (Point::Enter(ExitFn::ExitFiles), 1_500, 0),
            (Point::Return(ExitFn::ExitFiles), 1_700, 100),
            (Point::Marker(Marker::FinalSwitch), 4_000, 300),
        ];
        let exit = Exit::decode(&encode(7, 5, &hits)).unwrap();
        assert_eq!((exit.pid, exit.tgid), (7, 5));
        assert_eq!(exit.hits.len(), 4);
        assert_eq!(
            exit.hits[2],
            PointHit {
                point: Point::Return(ExitFn::ExitFiles),
                ts_ns: 1_700,
                off_cpu_ns: 100,
                runq_ns: 0,
            }
        );
        assert_eq!(exit.duration_ns(), 3_000);
        assert_eq!(exit.off_cpu_ns(), 300);
    }

    #[test]
    fn rejects_malformed_records() {
        assert_eq!(Exit::decode(&[0; 8]), Err(DecodeError::Short(8)));
        let mut bytes = encode(1, 1, &[(Point::Marker(Marker::DoExit), 1, 0)]);
        bytes.push(0);
        assert!(matches!(Exit::decode(&bytes), Err(DecodeError::Length { .. })));
        let mut bytes = encode(1, 1, &[(Point::Marker(Marker::DoExit), 1, 0)]);
        let points = std::mem::offset_of!(ExitRecord, points);
        bytes[points] = 200;
        assert_eq!(Exit::decode(&bytes), Err(DecodeError::UnknownPoint(200)));
        let mut bytes = encode(1, 1, &[]);
        let n_hits = std::mem::offset_of!(ExitRecord, n_hits);
        bytes[n_hits] = 99;
        assert_eq!(Exit::decode(&bytes), Err(DecodeError::TooManyHits(99)));
    }

    /// The bytes the kernel side sends for `record`.
    pub(crate) fn encode_deferred(record: &DeferredRecord) -> Vec<u8> {
        // SAFETY: reading the record's own bytes; it has no padding.
        unsafe {
            std::slice::from_raw_parts(
                std::ptr::from_ref::<DeferredRecord>(record).cast::<u8>(),
                size_of::<DeferredRecord>(),
            )
        }
        .to_vec()
    }

    /// Encodes a sample the way the kernel side does.
    pub(crate) fn encode_sample(sample: &CpuSample) -> Vec<u8> {
        let mut stack = [0; SAMPLE_STACK_DEPTH];
        let frames = sample.stack.len().min(SAMPLE_STACK_DEPTH);
        stack[..frames].copy_from_slice(&sample.stack[..frames]);
        let record = Sample {
            pid: sample.pid,
            n_hits: sample.n_hits,
            exit_start_ns: sample.exit_start_ns,
            ts_ns: sample.ts_ns,
            stack_len: u32::try_from(frames).unwrap(),
            cpu: 0,
            stack,
        };
        // SAFETY: reading the record's own bytes; it has no padding.
        unsafe {
            std::slice::from_raw_parts(
                std::ptr::from_ref::<Sample>(&record).cast::<u8>(),
                size_of::<Sample>(),
            )
        }
        .to_vec()
    }

    proptest! {
        /// A sample decodes to what was encoded, and bytes of any other length to nothing.
        #[test]
        fn samples_decode_as_encoded(
            pid in any::<u32>(),
            n_hits in any::<u32>(),
            times in any::<[u64; 2]>(),
            stack in vec(any::<u64>(), 0..=SAMPLE_STACK_DEPTH),
            junk in vec(any::<u8>(), 0..400),
        ) {
            let sample = CpuSample { pid, n_hits, exit_start_ns: times[0], ts_ns: times[1], stack };
            prop_assert_eq!(decode_sample(&encode_sample(&sample)), Some(sample));
            prop_assert_eq!(decode_sample(&junk).is_some(), junk.len() == size_of::<Sample>());
        }
    }

    /// Any deferred-work record: every kind and some that are none, pids and objects from a
    /// small range (so that they meet the exits of a test), any times.
    pub(crate) fn any_deferred() -> impl Strategy<Value = DeferredRecord> {
        (0..8u32, 0..8u32, any::<u64>(), any::<u64>(), 0..8u64, any::<u64>()).prop_map(
            |(kind, pid, start_ns, end_ns, object, wait_ns)| DeferredRecord {
                kind,
                pid,
                start_ns,
                end_ns,
                object,
                wait_ns,
            },
        )
    }

    proptest! {
        #[test]
        fn decode_deferred_undoes_encode(record in any_deferred()) {
            prop_assert_eq!(decode_deferred(&encode_deferred(&record)), Some(record));
        }

        #[test]
        fn deferred_records_of_any_other_length_are_refused(bytes in vec(any::<u8>(), 0..200)) {
            let decoded = decode_deferred(&bytes);
            prop_assert_eq!(decoded.is_some(), bytes.len() == size_of::<DeferredRecord>());
            if let Some(record) = decoded {
                // Only the kinds the kernel side sends mean anything; others are reported.
                let _ = DeferredKind::from_u32(record.kind);
            }
        }
    }
}
