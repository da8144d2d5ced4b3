//! The paths of the cgroups exits ran in, by id: from the cgroups made and removed during the
//! run (the kernel side's records), and, live, from the cgroup tree for those made before it.

use std::collections::{HashMap, VecDeque};

use exitprof_common::cgroup::{CGROUP_MADE, CGROUP_PATH_LEN, CGROUP_REMOVED, CgroupRecord};

/// Removed cgroups whose paths are kept, at most: exits in them are read a little after their
/// removal, and a node that churns containers for days must not keep every path it saw.
const REMOVED_KEPT: usize = 4096;

/// Cgroup id -> path (from the v2 hierarchy's root).
#[derive(Default)]
pub struct CgroupPaths {
    paths: HashMap<u64, String>,
    /// The removed ones still kept, oldest first.
    removed: VecDeque<u64>,
    /// Records that could not be decoded.
    pub undecodable: u64,
}

impl CgroupPaths {
    /// Takes in one record of a cgroup made or removed.
    pub fn record(&mut self, bytes: &[u8]) {
        let Some(record) = decode(bytes) else {
            self.undecodable += 1;
            log::warn!("undecodable cgroup record of {} bytes", bytes.len());
            return;
        };
        let len = record.path.iter().position(|&b| b == 0).unwrap_or(CGROUP_PATH_LEN);
        let path = String::from_utf8_lossy(&record.path[..len]).into_owned();
        match record.event {
            CGROUP_MADE => {
                self.paths.insert(record.id, path);
            }
            CGROUP_REMOVED => {
                self.paths.entry(record.id).or_insert(path);
                self.removed.push_back(record.id);
                if self.removed.len() > REMOVED_KEPT
                    && let Some(oldest) = self.removed.pop_front()
                {
                    self.paths.remove(&oldest);
                }
            }
            other => log::warn!("cgroup record of unknown event {other}"),
        }
    }

    pub fn knows(&self, id: u64) -> bool {
        self.paths.contains_key(&id)
    }

    pub fn path(&self, id: u64) -> Option<&str> {
        self.paths.get(&id).map(String::as_str)
    }

    /// The workload of the cgroup `id`, by its path; by its id where its path is unknown.
    pub fn workload(&self, id: u64) -> String {
        match self.path(id) {
            Some(path) => super::naming::workload_name(path),
            None => format!("cgroup {id}"),
        }
    }
}

/// The record the kernel side sends of a cgroup `id` made at `path`, as one read from the
/// cgroup tree is kept (in a record file, for `report` to name it as the run did).
pub fn encode_made(id: u64, path: &str) -> Vec<u8> {
    let mut record =
        CgroupRecord { id, event: CGROUP_MADE, reserved: 0, path: [0; CGROUP_PATH_LEN] };
    let bytes = path.as_bytes();
    let len = bytes.len().min(CGROUP_PATH_LEN - 1);
    record.path[..len].copy_from_slice(&bytes[..len]);
    // SAFETY: reading the record's own bytes; it has no padding.
    unsafe {
        std::slice::from_raw_parts((&raw const record).cast::<u8>(), size_of::<CgroupRecord>())
    }
    .to_vec()
}

fn decode(bytes: &[u8]) -> Option<CgroupRecord> {
    (bytes.len() == size_of::<CgroupRecord>())
        // SAFETY: as many bytes as the record, which is plain data valid for any bytes.
        .then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<CgroupRecord>()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn removed(id: u64, path: &str) -> Vec<u8> {
        let mut bytes = encode_made(id, path);
        bytes[8..12].copy_from_slice(&CGROUP_REMOVED.to_ne_bytes());
        bytes
    }

    /// A cgroup removed before its exits are read keeps its path; past the bound on removed
    /// cgroups, the oldest removed are forgotten, live ones never.
    #[test]
    fn removed_cgroups_are_kept_within_a_bound() {
        let mut paths = CgroupPaths::default();
        paths.record(&encode_made(7, "/system.slice/live.service"));
        paths.record(&removed(8, "/gone.scope"));
        assert_eq!(paths.path(8), Some("/gone.scope"));
        for id in 100..100 + REMOVED_KEPT as u64 {
            paths.record(&encode_made(id, "/churn.scope"));
            paths.record(&removed(id, "/churn.scope"));
        }
        assert!(!paths.knows(8), "the oldest removed cgroup is forgotten");
        assert!(paths.knows(100 + REMOVED_KEPT as u64 - 1));
        assert_eq!(paths.path(7), Some("/system.slice/live.service"));
        assert_eq!(paths.paths.len(), REMOVED_KEPT + 1);
    }

    #[test]
    fn a_long_path_is_cut_and_a_damaged_record_counted() {
        let mut paths = CgroupPaths::default();
        paths.record(&encode_made(1, &"x".repeat(1000)));
        assert_eq!(paths.path(1).map(str::len), Some(CGROUP_PATH_LEN - 1));
        paths.record(&[0; 3]);
        assert_eq!(paths.undecodable, 1);
    }
}
