//! The live cgroup tree: where the v2 hierarchy is mounted, and the paths of the cgroups made
//! before the run (those made during it come as records from the kernel side).

use std::{
    collections::HashMap,
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use exitprof_core::analysis::{groups::cgroup_paths::encode_made, records::cgroup_of};

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

/// `statfs`' `f_type` of the cgroup2 and cgroup (v1) filesystems (include/uapi/linux/magic.h).
const CGROUP2_SUPER_MAGIC: i128 = 0x6367_7270;
const CGROUP_SUPER_MAGIC: i128 = 0x0027_e0eb;

/// Why `--cgroup PATH` names no cgroup of the v2 hierarchy; `mounted` says where this machine
/// mounts that hierarchy.
#[derive(Debug, thiserror::Error)]
pub enum NotTargetCgroup {
    #[error("--cgroup {path}: {error}")]
    Unreadable { path: String, error: std::io::Error },
    #[error(
        "--cgroup {path} is a cgroup of a v1 hierarchy: exits are chosen by their cgroup of the \
         v2 hierarchy{mounted}"
    )]
    V1 { path: String, mounted: String },
    #[error(
        "--cgroup {path} is not a cgroup: exits are chosen by their cgroup of the v2 \
         hierarchy{mounted}"
    )]
    NotCgroup { path: String, mounted: String },
    #[error("--cgroup {path} is a file of a cgroup, not a cgroup: give its directory")]
    NotDirectory { path: String },
}

/// The id of the cgroup of the v2 hierarchy at `path` (its directory's inode number, the id
/// the kernel gives it).
pub fn target_cgroup(path: &Path) -> Result<u64, NotTargetCgroup> {
    let shown = path.display().to_string();
    let unreadable = |error| NotTargetCgroup::Unreadable { path: shown.clone(), error };
    let meta = fs::metadata(path).map_err(unreadable)?;
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| unreadable(std::io::Error::other(e)))?;
    // SAFETY: a NUL-terminated path, and a zeroed statfs for the call to fill.
    let mut fs_info: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; both outlive the call.
    if unsafe { libc::statfs(c_path.as_ptr(), &raw mut fs_info) } != 0 {
        return Err(unreadable(std::io::Error::last_os_error()));
    }
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mounted = match cgroup2_mount(&mounts) {
        Some(root) => format!(", which this machine mounts at {}", root.display()),
        None => ", which this machine does not mount".to_owned(),
    };
    // `f_type` is signed or not, and of one size or another, as the C library and the
    // architecture have it.
    match i128::from(fs_info.f_type) {
        CGROUP2_SUPER_MAGIC if meta.is_dir() => Ok(meta.ino()),
        CGROUP2_SUPER_MAGIC => Err(NotTargetCgroup::NotDirectory { path: shown }),
        CGROUP_SUPER_MAGIC => Err(NotTargetCgroup::V1 { path: shown, mounted }),
        _ => Err(NotTargetCgroup::NotCgroup { path: shown, mounted }),
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

    /// The v2 hierarchy's root is a target; a directory that is no cgroup, and a cgroup's file,
    /// are refused, each saying why.
    #[test]
    fn a_target_cgroup_is_a_directory_of_the_v2_hierarchy() {
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
        let Some(root) = cgroup2_mount(&mounts) else { return };
        assert_eq!(target_cgroup(&root).unwrap(), fs::metadata(&root).unwrap().ino());
        let not = target_cgroup(Path::new("/tmp")).unwrap_err().to_string();
        assert!(not.contains("is not a cgroup") && not.contains("mounts at"), "{not}");
        let file = target_cgroup(&root.join("cgroup.procs")).unwrap_err().to_string();
        assert!(file.contains("give its directory"), "{file}");
        let gone = target_cgroup(&root.join("no-such-cgroup")).unwrap_err().to_string();
        assert!(gone.contains("No such file"), "{gone}");
    }

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
