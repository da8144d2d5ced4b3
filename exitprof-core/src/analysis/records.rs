//! Decoding the kernel's records: exit records and deferred-work records.

use exitprof_common::{
    deferred::DeferredRecord,
    point::Point,
    record::{
        COMM_LEN, ExitRecord, FLAG_GROUP_DEAD, FLAG_KIND_KNOWN, FLAG_NET_NS_FREE_AWAITED,
        FLAG_NET_NS_RELEASED, FLAG_TRUNCATED, HEADER_LEN, Hit, MAX_HITS, wire_len,
    },
    stack::{
        STACK_BLOCKED, STACK_DEPTH, STACK_HEADER_LEN, STACK_ON_CPU, STACK_TEARDOWN_BLOCKED,
        STACK_TEARDOWN_ON_CPU, StackRecord,
    },
};
use serde::{Deserialize, Serialize};

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
    /// The run the exit began in.
    pub epoch: u32,
    /// Times the task blocked (switched out asleep) during its exit.
    pub blocks: u32,
    pub ipc_ns: u64,
    /// The addresses of its network and user namespaces (0: unknown, in a record of an earlier
    /// format).
    pub net_ns: u64,
    pub user_ns: u64,
    /// The task's cgroup v2 id as its exit started (0: unknown, in a record of an earlier
    /// format).
    pub cgroup_id: u64,
    /// The thread's name, and its process's.
    pub comm: TaskName,
    pub process_comm: TaskName,
    /// In the order they fired.
    pub hits: Vec<PointHit>,
    /// Its hits' times, or off-CPU and runnable times, did not keep their order (see
    /// [`in_order`]): they were clamped into it.
    pub clamped: bool,
}

/// A task's name (`comm`) as the kernel keeps it: up to 15 bytes, NUL-padded; all zero where
/// it is unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TaskName(pub [u8; COMM_LEN]);

impl TaskName {
    /// A name as the kernel keeps it (cut at 15 bytes).
    pub fn of(name: &str) -> Self {
        let mut bytes = [0; COMM_LEN];
        let len = name.len().min(COMM_LEN - 1);
        bytes[..len].copy_from_slice(&name.as_bytes()[..len]);
        Self(bytes)
    }

    /// The name's bytes, without the padding.
    pub fn bytes(&self) -> &[u8] {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(COMM_LEN);
        &self.0[..len]
    }

    pub fn is_known(&self) -> bool {
        self.0[0] != 0
    }
}

impl Serialize for TaskName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TaskName {
    /// A name as a document wrote it (bytes a name held that were not UTF-8 were written as
    /// U+FFFD, and read so).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|name| Self::of(&name))
    }
}

impl std::fmt::Display for TaskName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.bytes()))
    }
}

/// Puts an exit's hits in the order the kernel takes them, and says whether they were: each
/// time between the one before and the last hit's (the exit's end), each off-CPU time growing
/// by at most the time between its hit and the one before (the task is on a CPU at every hit,
/// so any interval off it lies between two), each runnable time by at most the off-CPU time's
/// growth. The kernel reads its clock on the CPU the task is on: one that reads behind another
/// CPU's could set a time before its predecessor, or an off-CPU interval below zero (2^64 ns
/// once); a damaged record anything. Clamped, the exit's stages still sum to it, and each
/// stage holds no more than all of it.
pub fn in_order(hits: &mut [PointHit]) -> bool {
    let (Some(first), Some(last)) = (hits.first().copied(), hits.last().copied()) else {
        return true;
    };
    let end = last.ts_ns.max(first.ts_ns);
    let mut before = first;
    let mut kept = true;
    for hit in &mut hits[1..] {
        let ts_ns = hit.ts_ns.clamp(before.ts_ns, end);
        let off_most = before.off_cpu_ns.saturating_add(ts_ns - before.ts_ns);
        let off_cpu_ns = hit.off_cpu_ns.clamp(before.off_cpu_ns, off_most);
        let runq_most = before.runq_ns.saturating_add(off_cpu_ns - before.off_cpu_ns);
        let runq_ns = hit.runq_ns.clamp(before.runq_ns, runq_most);
        kept &= (ts_ns, off_cpu_ns, runq_ns) == (hit.ts_ns, hit.off_cpu_ns, hit.runq_ns);
        (hit.ts_ns, hit.off_cpu_ns, hit.runq_ns) = (ts_ns, off_cpu_ns, runq_ns);
        before = *hit;
    }
    kept
}

/// The cgroup id an exit record carries, read without decoding the rest.
pub fn cgroup_of(record: &[u8]) -> Option<u64> {
    let at = std::mem::offset_of!(ExitRecord, cgroup_id);
    Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?))
}

/// What an exit ended: a thread of a process that lives on, or the process (its last thread, or
/// its only one); unknown where the kernel's `group_dead` was not seen and nothing else told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExitKind {
    Thread,
    Process,
    Unknown,
}

impl ExitKind {
    pub const ALL: [Self; 3] = [Self::Thread, Self::Process, Self::Unknown];

    pub fn name(self) -> &'static str {
        match self {
            Self::Thread => "thread",
            Self::Process => "process",
            Self::Unknown => "unknown",
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
        let mut hits: Vec<PointHit> = record.points[..record.n_hits as usize]
            .iter()
            .zip(&record.hits)
            .map(|(&code, &Hit { ts_ns, off_cpu_ns, runq_ns })| {
                let point = Point::from_code(code).ok_or(DecodeError::UnknownPoint(code))?;
                Ok(PointHit { point, ts_ns, off_cpu_ns, runq_ns })
            })
            .collect::<Result<_, _>>()?;
        let clamped = !in_order(&mut hits);
        Ok(Self {
            pid: record.pid,
            tgid: record.tgid,
            ns_pid: record.ns_pid,
            ns_tgid: record.ns_tgid,
            flags: record.flags,
            lost_hits: record.lost_hits,
            cpu: record.cpu,
            epoch: record.epoch,
            blocks: record.blocks,
            ipc_ns: record.ipc_ns,
            net_ns: record.net_ns,
            user_ns: record.user_ns,
            cgroup_id: record.cgroup_id,
            comm: TaskName(record.comm),
            process_comm: TaskName(record.process_comm),
            hits,
            clamped,
        })
    }

    /// Whether the exit ended its thread group, if that is known.
    pub fn kind(&self) -> ExitKind {
        match (self.flags & FLAG_KIND_KNOWN != 0, self.flags & FLAG_GROUP_DEAD != 0) {
            (false, _) => ExitKind::Unknown,
            (true, true) => ExitKind::Process,
            (true, false) => ExitKind::Thread,
        }
    }

    /// Whether its network namespace had no reference left at its end: the namespace died with
    /// it.
    pub fn net_ns_released(&self) -> bool {
        self.flags & FLAG_NET_NS_RELEASED != 0
    }

    /// Whether its task's free looks at its network namespace's count again (references were
    /// left at its end, none from its parent's side).
    pub fn net_ns_free_awaited(&self) -> bool {
        self.flags & FLAG_NET_NS_FREE_AWAITED != 0
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

    /// The exit's name among the exits of a run: its thread id and its first hit's time (a
    /// stack record names its exit so).
    pub fn key(&self) -> Option<ExitKey> {
        Some(ExitKey { pid: self.pid, start_ns: self.hits.first()?.ts_ns })
    }
}

/// Names one exit: its task's thread id and the time of its first hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExitKey {
    pub pid: u32,
    pub start_ns: u64,
}

/// What a kernel stack of an exit says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StackKind {
    /// The sampling clock caught the exit on a CPU there.
    OnCpu,
    /// The exit blocked there, for the record's `ns`.
    Blocked,
}

/// A kernel stack of a followed exit, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelStack {
    pub kind: StackKind,
    /// The exit it belongs to.
    pub exit: ExitKey,
    /// Hits the exit's record held when the stack was taken.
    pub n_hits: u32,
    /// When it was taken.
    pub ts_ns: u64,
    /// A block's length (0 for a sample).
    pub ns: u64,
    /// Kernel return addresses, innermost first.
    pub stack: Vec<u64>,
}

/// Whose kernel stack a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackOwner {
    /// A followed exit's.
    Exit,
    /// A namespace teardown's kworker, in the run that started at the record's `exit` time.
    Teardown,
}

/// Whose stack the kernel stack record `bytes` holds (`None`: no record's kind).
pub fn stack_owner(bytes: &[u8]) -> Option<StackOwner> {
    match u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?) {
        STACK_ON_CPU | STACK_BLOCKED => Some(StackOwner::Exit),
        STACK_TEARDOWN_ON_CPU | STACK_TEARDOWN_BLOCKED => Some(StackOwner::Teardown),
        _ => None,
    }
}

/// Decodes a kernel stack record: a sample (sent whole) or a block (sent up to its last frame).
/// A teardown's stack decodes alike, its `exit` naming its run (the kworker and the run's start).
pub fn decode_stack(bytes: &[u8]) -> Option<KernelStack> {
    let len = bytes.len();
    if len < STACK_HEADER_LEN
        || len > size_of::<StackRecord>()
        || !(len - STACK_HEADER_LEN).is_multiple_of(8)
    {
        return None;
    }
    let mut record = std::mem::MaybeUninit::<StackRecord>::zeroed();
    // SAFETY: StackRecord is plain integers, valid for any bytes (zeroed beyond `len`); the copy
    // stays within both buffers.
    let s = unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), record.as_mut_ptr().cast::<u8>(), len);
        record.assume_init()
    };
    let kind = match s.kind {
        STACK_ON_CPU | STACK_TEARDOWN_ON_CPU => StackKind::OnCpu,
        STACK_BLOCKED | STACK_TEARDOWN_BLOCKED => StackKind::Blocked,
        _ => return None,
    };
    let frames = s.stack_len as usize;
    if STACK_HEADER_LEN + frames * 8 > len || frames > STACK_DEPTH {
        return None;
    }
    Some(KernelStack {
        kind,
        exit: ExitKey { pid: s.pid, start_ns: s.exit_start_ns },
        n_hits: s.n_hits,
        ts_ns: s.ts_ns,
        ns: s.ns,
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
        record.net_ns = exit.net_ns;
        record.user_ns = exit.user_ns;
        record.cgroup_id = exit.cgroup_id;
        record.comm = exit.comm.0;
        record.process_comm = exit.process_comm.0;
        record.epoch = exit.epoch;
        record.blocks = exit.blocks;
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
        let names = any::<[[u8; COMM_LEN]; 2]>().prop_map(|n| n.map(TaskName));
        (any::<[u32; 9]>(), any::<[u64; 4]>(), names, vec(hit, 0..=MAX_HITS)).prop_map(
            |(
                [pid, tgid, ns_pid, ns_tgid, flags, lost_hits, cpu, epoch, blocks],
                [ipc_ns, net_ns, user_ns, cgroup_id],
                [comm, process_comm],
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
                    epoch,
                    blocks,
                    ipc_ns,
                    net_ns,
                    user_ns,
                    cgroup_id,
                    comm,
                    process_comm,
                    hits,
                    clamped: false,
                }
            },
        )
    }

    proptest! {
        /// Decoding undoes the encoding, the hits put in order.
        #[test]
        fn decode_undoes_encode(exit in any_exit()) {
            let mut expected = exit.clone();
            expected.clamped = !in_order(&mut expected.hits);
            prop_assert_eq!(Exit::decode(&encode_exit(&exit)), Ok(expected));
        }

        /// Whatever times an exit's hits carry, decoded they keep their order: each stage spans
        /// a part of the exit, off-CPU at most all of it, runnable at most the off-CPU time.
        #[test]
        fn decoded_hits_keep_their_order(exit in any_exit()) {
            let decoded = Exit::decode(&encode_exit(&exit)).unwrap();
            for pair in decoded.hits.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                prop_assert!(a.ts_ns <= b.ts_ns && a.off_cpu_ns <= b.off_cpu_ns);
                prop_assert!(b.off_cpu_ns - a.off_cpu_ns <= b.ts_ns - a.ts_ns);
                prop_assert!(b.runq_ns - a.runq_ns <= b.off_cpu_ns - a.off_cpu_ns);
            }
            prop_assert!(decoded.off_cpu_ns() <= decoded.duration_ns());
            prop_assert!(decoded.runq_ns() <= decoded.off_cpu_ns());
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
                let mut read: Vec<PointHit> = decoded
                    .hits
                    .iter()
                    .enumerate()
                    .map(|(i, hit)| {
                        let at = HEADER_LEN + i * size_of::<Hit>();
                        let u64_at = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap());
                        PointHit { ts_ns: u64_at(at), off_cpu_ns: u64_at(at + 8), runq_ns: u64_at(at + 16), ..*hit }
                    })
                    .collect();
                prop_assert_eq!(!in_order(&mut read), decoded.clamped);
                prop_assert_eq!(read, decoded.hits);
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

    /// A hit after the exit's end (a time the kernel never reads; a damaged record's), and an
    /// off-CPU interval gone below zero (a clock read behind on another CPU, subtracted without
    /// a check): clamped, the exit still ends where its last hit says, its stages within it.
    #[test]
    fn a_hit_in_the_future_and_a_wrapped_off_cpu_time_are_clamped() {
        let hits = [
            (Point::Marker(Marker::SysEnterExit), 1_000, 0),
            (Point::Enter(ExitFn::ExitFiles), 1_000_000_000_000_000, 0),
            (Point::Return(ExitFn::ExitFiles), 1_700, u64::MAX - 5),
            (Point::Marker(Marker::FinalSwitch), 4_000, u64::MAX - 4),
        ];
        let exit = Exit::decode(&encode(7, 5, &hits)).unwrap();
        assert!(exit.clamped);
        let times: Vec<(u64, u64)> = exit.hits.iter().map(|h| (h.ts_ns, h.off_cpu_ns)).collect();
        assert_eq!(times, [(1_000, 0), (4_000, 0), (4_000, 0), (4_000, 0)]);
        assert_eq!((exit.duration_ns(), exit.off_cpu_ns()), (3_000, 0));
        assert!(!Exit::decode(&encode(7, 5, &hits[..1])).unwrap().clamped);
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

    /// Encodes a kernel stack the way the kernel side does: a sample whole, a block up to its
    /// last frame.
    pub(crate) fn encode_stack(stack: &KernelStack) -> Vec<u8> {
        let mut frames = [0; STACK_DEPTH];
        let n = stack.stack.len().min(STACK_DEPTH);
        frames[..n].copy_from_slice(&stack.stack[..n]);
        let record = StackRecord {
            kind: match stack.kind {
                StackKind::OnCpu => STACK_ON_CPU,
                StackKind::Blocked => STACK_BLOCKED,
            },
            pid: stack.exit.pid,
            exit_start_ns: stack.exit.start_ns,
            ts_ns: stack.ts_ns,
            ns: stack.ns,
            n_hits: stack.n_hits,
            stack_len: u32::try_from(n).unwrap(),
            cpu: 0,
            pad: 0,
            stack: frames,
        };
        // SAFETY: reading the record's own bytes; it has no padding.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                std::ptr::from_ref::<StackRecord>(&record).cast::<u8>(),
                size_of::<StackRecord>(),
            )
        };
        let len = match stack.kind {
            StackKind::OnCpu => size_of::<StackRecord>(),
            StackKind::Blocked => exitprof_common::stack::stack_wire_len(n),
        };
        bytes[..len].to_vec()
    }

    /// Any kernel stack record the kernel side can send.
    pub(crate) fn any_stack() -> impl Strategy<Value = KernelStack> {
        (any::<bool>(), any::<[u32; 2]>(), any::<[u64; 3]>(), vec(any::<u64>(), 0..=STACK_DEPTH))
            .prop_map(|(blocked, [pid, n_hits], [start_ns, ts_ns, ns], stack)| KernelStack {
                kind: if blocked { StackKind::Blocked } else { StackKind::OnCpu },
                exit: ExitKey { pid, start_ns },
                n_hits,
                ts_ns,
                ns,
                stack,
            })
    }

    proptest! {
        /// A stack record decodes to what was encoded; bytes of no record's length, or of a
        /// length its frames do not fill, to nothing.
        #[test]
        fn stacks_decode_as_encoded(stack in any_stack(), junk in vec(any::<u8>(), 0..400)) {
            prop_assert_eq!(decode_stack(&encode_stack(&stack)), Some(stack));
            if let Some(decoded) = decode_stack(&junk) {
                prop_assert_eq!(
                    exitprof_common::stack::stack_wire_len(decoded.stack.len()) <= junk.len(),
                    true
                );
            }
        }
    }

    /// Any deferred-work record: every kind and some that are none, pids and objects from a
    /// small range (so that they meet the exits of a test), any times.
    pub(crate) fn any_deferred() -> impl Strategy<Value = DeferredRecord> {
        (
            0..11u32,
            0..8u32,
            any::<u64>(),
            any::<u64>(),
            0..8u64,
            any::<[u64; 2]>(),
            any::<[u32; 3]>(),
        )
            .prop_map(
                |(
                    kind,
                    pid,
                    start_ns,
                    end_ns,
                    object,
                    [wait_ns, runq_ns],
                    [inum, count, flags],
                )| {
                    DeferredRecord {
                        kind,
                        pid,
                        start_ns,
                        end_ns,
                        object,
                        wait_ns,
                        runq_ns,
                        inum,
                        count: count % 8,
                        flags,
                        pad: 0,
                    }
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
