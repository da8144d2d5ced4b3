//! Locked memory for the eBPF object, where the kernel charges BPF maps and programs to
//! RLIMIT_MEMLOCK (before 5.11: [`crate::kernel::bpf_memory`]). systemd leaves a service, and
//! containerd or Docker a container, the kernel's default limit unless told otherwise: 64 KiB
//! before 5.16 (8 MiB since), far below one exit ring buffer of 4 MiB. exitprof works out what
//! its maps (each by the kernel's formula, at the sizes planned) and programs will be charged,
//! raises the limit, and where it cannot, refuses before anything is loaded, saying what to do:
//! never the kernel's bare `EPERM`, which reads as a missing privilege.

use std::collections::HashMap;

use aya::{EbpfError, maps::MapError, programs::ProgramError};
use aya_obj::{EbpfSectionKind, Object, generated::bpf_map_type};

use crate::{base::UsageError, kernel::bpf_memory::MemlockLimit};

/// Bytes the kernel will charge for the object's maps and programs, where it charges them to
/// RLIMIT_MEMLOCK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    pub maps: u64,
    pub programs: u64,
}

impl Need {
    pub fn total(self) -> u64 {
        self.maps + self.programs
    }

    /// What the maps of `object` and its programs named in `programs` will be charged, each map
    /// with the entries `max_entries` gives it where it names it (as the loader sizes it). The
    /// kernel charges whole pages for each (`bpf_map_charge_init`, `bpf_prog_charge_memlock`).
    pub fn of(
        object: &[u8],
        max_entries: &HashMap<&str, u32>,
        programs: &[&str],
    ) -> anyhow::Result<Self> {
        let mut object = Object::parse(object)?;
        let maps: u64 = object
            .maps
            .iter()
            .map(|(name, map)| {
                let shape = MapShape {
                    map_type: map.map_type(),
                    key_size: map.key_size(),
                    value_size: map.value_size(),
                    max_entries: max_entries
                        .get(name.as_str())
                        .copied()
                        .unwrap_or_else(|| map.max_entries()),
                    mmapable: map.map_flags() & BPF_F_MMAPABLE != 0,
                    global_data: matches!(
                        map.section_kind(),
                        EbpfSectionKind::Bss | EbpfSectionKind::Data | EbpfSectionKind::Rodata
                    ),
                };
                pages(shape.charge())
            })
            .sum();
        // Each program is loaded with the functions it calls linked in, as the loader does.
        let text_sections = object.functions.keys().map(|(section, _)| *section).collect();
        object.relocate_calls(&text_sections)?;
        let programs: u64 = programs
            .iter()
            .filter_map(|name| object.programs.get(*name))
            .filter_map(|program| object.functions.get(&program.function_key()))
            .map(|function| pages(PROG_HEADER + INSN * function.instructions.len() as u64))
            .sum();
        Ok(Self { maps: maps * page_size(), programs: programs * page_size() })
    }
}

/// `BPF_F_MMAPABLE` (include/uapi/linux/bpf.h).
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// Bytes of `struct bpf_prog` before its instructions, and of one instruction (`bpf_prog_size`).
const PROG_HEADER: u64 = 56;
const INSN: u64 = 8;

/// Sizes of the kernel's own structures that 5.10 counts in a map's charge (x86_64 and arm64):
/// `struct bpf_array` and `struct bpf_ringbuf_map` (a cache-line aligned `struct bpf_map` and a
/// few fields), `struct bpf_ringbuf` (its header and its consumer and producer positions, a page
/// each), a hash table's `struct bucket` and `struct htab_elem`.
const BPF_ARRAY: u64 = 320;
const BPF_RINGBUF_MAP: u64 = 320;
const BPF_RINGBUF_PAGES: u64 = 3;
const BUCKET: u64 = 16;
const HTAB_ELEM: u64 = 48;

/// A map as the loader asks the kernel to make it.
struct MapShape {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    mmapable: bool,
    /// `.bss`, `.data`, `.rodata`: one-entry arrays of the section's size.
    global_data: bool,
}

impl MapShape {
    /// The bytes the map's `*_map_alloc` charges in 5.10 (kernel/bpf/arraymap.c, hashtab.c,
    /// ringbuf.c); other types, which exitprof does not use there, by their keys and values.
    fn charge(&self) -> u64 {
        use bpf_map_type::{
            BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_LRU_HASH,
            BPF_MAP_TYPE_LRU_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_PERCPU_HASH,
            BPF_MAP_TYPE_PERF_EVENT_ARRAY, BPF_MAP_TYPE_PROG_ARRAY, BPF_MAP_TYPE_RINGBUF,
        };
        let is = |types: &[bpf_map_type]| types.iter().any(|&t| t as u32 == self.map_type);
        let entries = u64::from(self.max_entries);
        let key = round8(self.key_size);
        let value = round8(self.value_size);
        let cpus = possible_cpus();
        if is(&[BPF_MAP_TYPE_RINGBUF]) {
            BPF_RINGBUF_MAP + BPF_RINGBUF_PAGES * page_size() + entries
        } else if is(&[BPF_MAP_TYPE_PERCPU_ARRAY]) {
            BPF_ARRAY + entries * 8 + entries * value * cpus
        } else if self.global_data
            || is(&[BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_PERF_EVENT_ARRAY, BPF_MAP_TYPE_PROG_ARRAY])
        {
            if self.mmapable {
                round_page(BPF_ARRAY) + round_page(entries * value)
            } else {
                BPF_ARRAY + entries * value
            }
        } else if is(&[BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_LRU_HASH]) {
            // One element more per CPU: the free lists' spares.
            let elem = HTAB_ELEM + key + value;
            entries.next_power_of_two() * BUCKET + elem * (entries + cpus)
        } else if is(&[BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_LRU_PERCPU_HASH]) {
            let elem = HTAB_ELEM + key + 8;
            entries.next_power_of_two() * BUCKET + elem * entries + value * cpus * entries
        } else {
            entries * (key + value)
        }
    }
}

fn round8(bytes: u32) -> u64 {
    u64::from(bytes).next_multiple_of(8)
}

fn round_page(bytes: u64) -> u64 {
    bytes.next_multiple_of(page_size())
}

fn pages(bytes: u64) -> u64 {
    bytes.div_ceil(page_size())
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// CPUs the kernel could bring online (`num_possible_cpus()`), by which per-CPU maps are sized.
fn possible_cpus() -> u64 {
    aya::util::nr_cpus().map_or(1, |cpus| cpus as u64)
}

/// Makes sure exitprof may lock what it `need`s: raises RLIMIT_MEMLOCK to unlimited (the charge
/// is its user's, shared with every BPF object of the user's other processes, so that no smaller
/// limit is sure to do: beside another exitprof, or systemd's own programs), or else its soft
/// limit to its hard one; refuses, saying what to do, when that is less than `need`. Returns the
/// limit exitprof loads under.
pub fn ensure(need: Need) -> Result<MemlockLimit, UsageError> {
    let limit =
        MemlockLimit::read().map_err(|e| UsageError(format!("reading RLIMIT_MEMLOCK: {e}")))?;
    let unlimited = MemlockLimit { soft: libc::RLIM_INFINITY, hard: libc::RLIM_INFINITY };
    if unlimited.set().is_ok() {
        return Ok(unlimited);
    }
    let raised = MemlockLimit { soft: limit.hard, hard: limit.hard };
    if raised.soft >= need.total() && raised.set().is_ok() {
        return Ok(raised);
    }
    Err(UsageError(format!(
        "this kernel charges BPF maps and programs to the locked-memory limit (RLIMIT_MEMLOCK, \
         as Linux does before 5.11), and exitprof's need about {} ({} for its maps, {} for its \
         programs): more than this process may lock, {} (hard limit {}), which it cannot raise \
         without CAP_SYS_RESOURCE. Nothing was loaded. {HOW_TO_RAISE}",
        bytes(need.total()),
        bytes(need.maps),
        bytes(need.programs),
        bytes(limit.soft),
        bytes(limit.hard),
    )))
}

/// `error`, from loading under `limit`, said as a shortage of locked memory when the kernel
/// refused to make a map or load a program with `EPERM` (the limit was enough for exitprof
/// alone, but the user's other BPF objects count against it too).
pub fn explain(error: anyhow::Error, need: Need, limit: MemlockLimit) -> anyhow::Error {
    let eperm = |e: &std::io::Error| e.raw_os_error() == Some(libc::EPERM);
    let map_refused =
        |e: &MapError| matches!(e, MapError::CreateError { io_error, .. } if eperm(io_error));
    let refused = error.chain().any(|cause| {
        if let Some(EbpfError::MapError(e)) = cause.downcast_ref::<EbpfError>() {
            return map_refused(e);
        }
        cause.downcast_ref::<MapError>().is_some_and(map_refused)
            || matches!(
                cause.downcast_ref::<ProgramError>(),
                Some(ProgramError::LoadError { io_error, .. }) if eperm(io_error)
            )
    });
    if !refused {
        return error;
    }
    UsageError(format!(
        "{error:#}: this kernel charges BPF maps and programs to the locked-memory limit \
         (RLIMIT_MEMLOCK, as Linux does before 5.11), against every BPF object of this user's \
         processes together: exitprof's need about {}, and this process may lock {}, which the \
         user's other BPF objects leave too little of. {HOW_TO_RAISE}",
        bytes(need.total()),
        bytes(limit.soft),
    ))
    .into()
}

/// How each way of running exitprof raises its locked-memory limit.
const HOW_TO_RAISE: &str = "Raise the limit where exitprof runs: in a systemd unit, \
     LimitMEMLOCK=infinity (the unit exitprof ships sets it); in a container, the runtime's \
     memlock ulimit (`docker run --ulimit memlock=-1`, or LimitMEMLOCK=infinity in the unit of \
     containerd or CRI-O, whose containers inherit it), or CAP_SYS_RESOURCE, with which exitprof \
     raises it itself (exitprof's DaemonSet adds SYS_RESOURCE); in a shell, `ulimit -l \
     unlimited` as root before starting it.";

/// `n` bytes for people: KiB or MiB, or "unlimited".
pub fn bytes(n: u64) -> String {
    match n {
        libc::RLIM_INFINITY => "unlimited".to_owned(),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1 << 20)),
        n => format!("{} KiB", n.div_ceil(1 << 10)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::load::{COMPAT_OBJECT, OBJECT};

    /// The ring buffers dominate: each is charged its size and a few pages, so that the need
    /// grows with them page for page.
    #[test]
    fn the_need_follows_the_sizes_planned() {
        for bytes in [OBJECT, COMPAT_OBJECT] {
            let small = HashMap::from([("EXITS", 256 << 10)]);
            let large = HashMap::from([("EXITS", 4 << 20)]);
            let small = Need::of(bytes, &small, &[]).unwrap();
            let large = Need::of(bytes, &large, &[]).unwrap();
            assert_eq!(large.maps - small.maps, (4 << 20) - (256 << 10));
            assert!(small.maps > 256 << 10, "{small:?}");
            assert_eq!(small.programs, 0);
        }
    }

    #[test]
    fn programs_are_charged_whole_pages() {
        let one = Need::of(OBJECT, &HashMap::new(), &["sched_process_exec"]).unwrap();
        let two =
            Need::of(OBJECT, &HashMap::new(), &["sched_process_exec", "sched_switch"]).unwrap();
        assert!(one.programs >= page_size() && one.programs.is_multiple_of(page_size()), "{one:?}");
        assert!(two.programs > one.programs, "{two:?}");
        assert_eq!(one.maps, two.maps);
    }

    #[test]
    fn byte_counts_read_as_people_write_them() {
        assert_eq!(bytes(64 << 10), "64 KiB");
        assert_eq!(bytes(6_815_744), "6.5 MiB");
        assert_eq!(bytes(libc::RLIM_INFINITY), "unlimited");
    }
}
