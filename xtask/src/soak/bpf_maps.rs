//! exitprof's maps read from outside, by id, through the bpf system call: the maps a process
//! holds are the `bpf-map` descriptors in its `/proc/PID/fdinfo`, each naming its map's id. No
//! map is changed: keys are walked (`BPF_MAP_GET_NEXT_KEY`) and values looked up, as `bpftool map
//! dump` does, without needing bpftool or the exporter's own word for it.

use std::{
    collections::BTreeMap,
    fs,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
};

use anyhow::{Context as _, bail};
use serde::Serialize;

/// `enum bpf_cmd` and `enum bpf_map_type` values (include/uapi/linux/bpf.h).
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
const BPF_MAP_GET_FD_BY_ID: libc::c_long = 14;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;

/// The part of `struct bpf_map_info` read here (the kernel fills what fits `info_len`).
#[repr(C)]
#[derive(Default)]
struct MapInfo {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    name: [u8; 16],
}

/// One map of a process, opened by id.
pub struct Map {
    fd: OwnedFd,
    info: MapInfo,
}

fn bpf(cmd: libc::c_long, attr: &mut [u64]) -> std::io::Result<i64> {
    // SAFETY: `attr` is a zero-padded `union bpf_attr` prefix for `cmd`, whose pointers point at
    // buffers that outlive the call; its size is passed.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr)) };
    if rc < 0 { Err(std::io::Error::last_os_error()) } else { Ok(rc) }
}

impl Map {
    /// The map with id `id`.
    pub fn open(id: u32) -> anyhow::Result<Self> {
        let mut attr = [u64::from(id), 0, 0, 0];
        let fd =
            bpf(BPF_MAP_GET_FD_BY_ID, &mut attr).with_context(|| format!("opening map {id}"))?;
        // SAFETY: a descriptor the kernel just gave this process, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let mut info = MapInfo::default();
        let mut attr = [
            u64::from(fd.as_raw_fd().cast_unsigned()) | ((size_of::<MapInfo>() as u64) << 32),
            (&raw mut info) as u64,
            0,
        ];
        bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr).with_context(|| format!("reading map {id}"))?;
        Ok(Self { fd, info })
    }

    pub fn name(&self) -> String {
        let end = self.info.name.iter().position(|&b| b == 0).unwrap_or(16);
        String::from_utf8_lossy(&self.info.name[..end]).into_owned()
    }

    fn attr(&self, key: *const u8, value_or_next: *mut u8) -> [u64; 4] {
        [u64::from(self.fd.as_raw_fd().cast_unsigned()), key as u64, value_or_next as u64, 0]
    }

    /// Every key of a hash map (a key that goes while it is walked may end the walk early; the
    /// next read sees the rest).
    fn keys(&self) -> Vec<Vec<u8>> {
        let size = self.info.key_size as usize;
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut next = vec![0u8; size];
        loop {
            let key = keys.last().map_or(std::ptr::null(), Vec::as_ptr);
            let mut attr = self.attr(key, next.as_mut_ptr());
            if bpf(BPF_MAP_GET_NEXT_KEY, &mut attr).is_err() || keys.len() > 1 << 20 {
                return keys;
            }
            keys.push(next.clone());
        }
    }

    /// The value at `key` (per-CPU maps: every possible CPU's, one after another), if any.
    fn lookup(&self, key: &[u8], cpus: usize) -> Option<Vec<u8>> {
        let per_cpu = self.info.map_type == BPF_MAP_TYPE_PERCPU_ARRAY;
        let size = if per_cpu {
            (self.info.value_size as usize).next_multiple_of(8) * cpus
        } else {
            self.info.value_size as usize
        };
        let mut value = vec![0u8; size];
        let mut attr = self.attr(key.as_ptr(), value.as_mut_ptr());
        bpf(BPF_MAP_LOOKUP_ELEM, &mut attr).ok().map(|_| value)
    }

    /// Each element of an array map of `u64`s.
    fn u64s(&self) -> Vec<u64> {
        (0..self.info.max_entries)
            .map(|i| {
                self.lookup(&i.to_ne_bytes(), 1)
                    .and_then(|v| v.get(..8).map(|b| u64::from_ne_bytes(b.try_into().unwrap())))
                    .unwrap_or(0)
            })
            .collect()
    }

    /// A per-CPU array of `u64`s, summed over CPUs.
    pub fn per_cpu_sums(&self, cpus: usize) -> Vec<u64> {
        (0..self.info.max_entries)
            .map(|i| {
                self.lookup(&i.to_ne_bytes(), cpus).map_or(0, |v| {
                    v.chunks_exact(8)
                        .map(|b| u64::from_ne_bytes(b.try_into().unwrap()))
                        .fold(0, u64::wrapping_add)
                })
            })
            .collect()
    }
}

/// The ids of the BPF maps process `pid` holds, from its descriptors' fdinfo.
pub fn map_ids(pid: u32) -> anyhow::Result<Vec<u32>> {
    let dir = format!("/proc/{pid}/fdinfo");
    let mut ids = Vec::new();
    for entry in fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let Ok(info) = fs::read_to_string(entry?.path()) else { continue };
        if let Some(id) = info.lines().find_map(|l| l.strip_prefix("map_id:")) {
            ids.push(id.trim().parse()?);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// How full each of an exitprof instance's maps is, and its counters, at one instant.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Occupancy {
    /// Entries of each hash map; set elements of each array that holds per-exit state (a
    /// non-zero owner, count or flag), and `FREE_WATCH` as the sum of its counters.
    pub entries: BTreeMap<String, u64>,
    /// The per-CPU counters, summed, by index (`exitprof_common::counters`).
    #[serde(skip)]
    pub counters: Vec<u64>,
    /// Hash entries whose value begins with a pid (refusals, awaited frees), by map: (key, pid).
    #[serde(skip)]
    pub pids: BTreeMap<String, Vec<(u64, u32)>>,
    /// The counters of `FREE_WATCH` that are not zero: (bucket, count).
    #[serde(skip)]
    pub watched: Vec<(usize, u64)>,
}

/// Maps whose entries hold a pid first: refused exits and awaited frees (task address -> pid).
const PID_VALUED: [&str; 2] = ["EXIT_REFUSED", "FREES_AWAITED"];

/// Arrays of settings or of state kept per slot, not occupancy: left out.
const NOT_OCCUPANCY: [&str; 2] = ["CONTROL", "EXIT_SLOTS"];

/// Reads the maps of the exitprof process `pid`.
pub fn occupancy(pid: u32) -> anyhow::Result<Occupancy> {
    let cpus = possible_cpus()?;
    let mut occupancy = Occupancy::default();
    for id in map_ids(pid)? {
        let map = Map::open(id)?;
        let name = map.name();
        // The object's globals (`.rodata`, `.bss`): settings, not state.
        if name.starts_with('.') {
            continue;
        }
        match map.info.map_type {
            BPF_MAP_TYPE_HASH => {
                let keys = map.keys();
                if PID_VALUED.contains(&name.as_str()) {
                    let pids = keys
                        .iter()
                        .filter(|k| k.len() == 8)
                        .filter_map(|k| {
                            let value = map.lookup(k, 1)?;
                            let pid = u32::from_ne_bytes(value.get(..4)?.try_into().ok()?);
                            Some((u64::from_ne_bytes(k[..].try_into().ok()?), pid))
                        })
                        .collect();
                    occupancy.pids.insert(name.clone(), pids);
                }
                occupancy.entries.insert(name, keys.len() as u64);
            }
            BPF_MAP_TYPE_ARRAY if map.info.value_size == 8 && !NOT_OCCUPANCY.contains(&&*name) => {
                let values = map.u64s();
                let n = if name == "FREE_WATCH" {
                    occupancy.watched =
                        values.iter().copied().enumerate().filter(|&(_, v)| v != 0).collect();
                    values.iter().fold(0, |a: u64, &v| a.wrapping_add(v))
                } else if values.len() == 1 {
                    values[0]
                } else {
                    values.iter().filter(|&&v| v != 0).count() as u64
                };
                occupancy.entries.insert(name, n);
            }
            BPF_MAP_TYPE_PERCPU_ARRAY if name == "COUNTERS" => {
                occupancy.counters = map.per_cpu_sums(cpus);
            }
            _ => {}
        }
    }
    if occupancy.counters.is_empty() {
        bail!("process {pid} holds no COUNTERS map: is it exitprof?");
    }
    Ok(occupancy)
}

/// The number of possible CPUs, which sizes a per-CPU map's value (`/sys/devices/system/cpu/
/// possible`, e.g. `0-1`).
pub fn possible_cpus() -> anyhow::Result<usize> {
    let text = fs::read_to_string("/sys/devices/system/cpu/possible")?;
    cpu_count(text.trim())
}

/// The CPUs of a kernel CPU list (`0-3,5`).
pub fn cpu_count(list: &str) -> anyhow::Result<usize> {
    let mut n = 0;
    for range in list.split(',') {
        n += match range.split_once('-') {
            Some((a, b)) => b.parse::<usize>()? - a.parse::<usize>()? + 1,
            None => {
                range.parse::<usize>()?;
                1
            }
        };
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(cpu_count("0-1").unwrap(), 2);
        assert_eq!(cpu_count("0").unwrap(), 1);
        assert_eq!(cpu_count("0-3,5,7-8").unwrap(), 7);
        assert!(cpu_count("x").is_err());
    }
}
