//! The live cgroup tree: where the v2 hierarchy is mounted, and the paths of the cgroups made
//! before the run (those made during it come as records from the kernel side).

use std::{
    collections::HashMap,
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use super::cgroup_paths::encode_made;
use crate::analysis::records::cgroup_of;

/// Walks of the tree, at most one per this long: a miss on an exit of a cgroup made and removed
/// between two walks must not walk a tree of thousands of cgroups at every exit.
const WALK_INTERVAL: Duration = Duration::from_secs(1);

/// The mounted v2 hierarchy, and what its last walk found.
pub struct CgroupTree {
    root: PathBuf,
    walked: HashMap<u64, String>,
    walked_at: Option<Instant>,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "--group-by cgroup needs the cgroup v2 hierarchy, and this machine does not mount it (it \
     keeps its tasks in cgroup v1 hierarchies only, as Amazon Linux 2 and RHEL 7 do, where every \
     exit's v2 cgroup is the root): group by process name with --group-by comm instead"
)]
pub struct NoCgroupV2;

impl CgroupTree {
    /// The v2 hierarchy as this machine mounts it.
    pub fn mounted() -> Result<Self, NoCgroupV2> {
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let root = cgroup2_mount(&mounts).ok_or(NoCgroupV2)?;
        Ok(Self { root, walked: HashMap::new(), walked_at: None })
    }

    /// The path of cgroup `id` from the hierarchy's root, if it is in the tree now (walked at
    /// most once per [`WALK_INTERVAL`]).
    pub fn path(&mut self, id: u64) -> Option<&str> {
        let stale = self.walked_at.is_none_or(|at| at.elapsed() >= WALK_INTERVAL);
        if !self.walked.contains_key(&id) && stale {
            self.walked.clear();
            walk(&self.root, &self.root, &mut self.walked);
            self.walked_at = Some(Instant::now());
        }
        self.walked.get(&id).map(String::as_str)
    }
}

impl CgroupTree {
    /// For an exit record whose cgroup `known` does not know, the record of that cgroup as the
    /// tree has it now, if it is there.
    pub fn record_of_unknown(
        &mut self,
        exit: &[u8],
        known: impl Fn(u64) -> bool,
    ) -> Option<Vec<u8>> {
        let id = cgroup_of(exit)?;
        if known(id) {
            return None;
        }
        self.path(id).map(|path| encode_made(id, path))
    }
}

/// Where `mounts` (as `/proc/self/mounts` lists them) has the v2 hierarchy: the unified mount of
/// a v2-only host, or of a hybrid one (`/sys/fs/cgroup/unified`).
fn cgroup2_mount(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_, dir, kind) = (fields.next()?, fields.next()?, fields.next()?);
        (kind == "cgroup2").then(|| PathBuf::from(dir.replace("\\040", " ")))
    })
}

/// Every cgroup under `dir`: its id (its directory's inode number) -> its path from `root`.
fn walk(root: &Path, dir: &Path, found: &mut HashMap<u64, String>) {
    let Ok(meta) = fs::metadata(dir) else { return };
    let relative = dir.strip_prefix(root).unwrap_or(dir);
    found.insert(meta.ino(), format!("/{}", relative.display()));
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            walk(root, &entry.path(), found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v2_hierarchy_is_found_on_v2_only_and_hybrid_hosts() {
        let v2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
        assert_eq!(cgroup2_mount(v2), Some(PathBuf::from("/sys/fs/cgroup")));
        let hybrid = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(cgroup2_mount(hybrid), Some(PathBuf::from("/sys/fs/cgroup/unified")));
        let v1 = "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n";
        assert_eq!(cgroup2_mount(v1), None);
    }

    /// The tree's ids are the ids the kernel gives cgroups: the root's is that of the cgroup
    /// of a task in it (`/proc/self/cgroup` names exitprof's own).
    #[test]
    fn the_walk_names_exitprofs_own_cgroup() {
        let cgroups = fs::read_to_string("/proc/self/cgroup").unwrap();
        let own = cgroups.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/");
        match CgroupTree::mounted() {
            Ok(mut tree) => {
                let dir = tree.root.join(own.trim_start_matches('/'));
                let id = fs::metadata(dir).unwrap().ino();
                assert_eq!(tree.path(id), Some(own));
            }
            // Unmounted, the v2 hierarchy holds no task but in its root.
            Err(NoCgroupV2) => assert_eq!(own, "/", "{cgroups}"),
        }
    }
}
