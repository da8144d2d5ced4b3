//! Follow marks: userspace marks the processes it follows, the kernel side looks the marks up
//! as exits open (`crate::follow`) and passes one on to a thread that takes its process over by
//! exec. The default object keeps a mark in the task's local storage, which lives and dies with
//! the task; the compat object, for kernels without task storage in tracing programs (before
//! 5.13), in a hash keyed by the process's pid and checked against its start time.

#[cfg(feature = "compat")]
pub use by_pid::{forget_freed, mark, set_mark};
#[cfg(not(feature = "compat"))]
pub use in_task_storage::{forget_freed, mark, set_mark};

#[cfg(not(feature = "compat"))]
mod in_task_storage {
    use aya_ebpf::macros::btf_map;
    use exitprof_common::task::TaskMark;

    use crate::task_storage::{Task, TaskStorage};

    /// The marks of the tasks userspace follows.
    #[btf_map]
    pub static TASKS: TaskStorage<TaskMark> = TaskStorage::new();

    /// The mark of `task`, if it has one.
    #[inline(always)]
    pub fn mark(task: Task) -> Option<u32> {
        // SAFETY: a storage pointer from a successful lookup.
        TASKS.get(task).map(|mark| unsafe { (*mark).follow })
    }

    /// Marks `task`; false when its storage cannot be created.
    #[inline(always)]
    pub fn set_mark(task: Task, follow: u32) -> bool {
        // SAFETY: the task's own storage, just created or found.
        TASKS.get_or_create(task).map(|mark| unsafe { (*mark).follow = follow }).is_some()
    }

    /// Task storage goes with its task: nothing to do.
    #[inline(always)]
    pub fn forget_freed(_task: Task) {}
}

#[cfg(feature = "compat")]
mod by_pid {
    use aya_ebpf::{macros::map, maps::HashMap};
    use exitprof_common::task::PidMark;

    use crate::{
        helpers::{start_ticks, task_pid_tgid},
        task_storage::Task,
    };

    /// The marks of the processes userspace follows, by pid (tgid).
    #[map]
    pub static TASKS: HashMap<u32, PidMark> = HashMap::with_max_entries(4096, 0);

    /// The mark of `task`, if it leads a process that has one and is the process that was
    /// marked: as in task storage, only leaders carry marks (a thread is followed as its leader
    /// is, which may differ: a driver's threads are followed, the driver is not).
    #[inline(always)]
    pub fn mark(task: Task) -> Option<u32> {
        let (pid, tgid) = task_pid_tgid(task);
        if pid != tgid {
            return None;
        }
        // SAFETY: the value is copied out at once.
        let mark = unsafe { TASKS.get(tgid) }.copied()?;
        (mark.start_ticks == start_ticks(task)).then_some(mark.follow)
    }

    /// Marks `task`'s process (`task` leads it); false when the map is full.
    #[inline(always)]
    pub fn set_mark(task: Task, follow: u32) -> bool {
        let (_, tgid) = task_pid_tgid(task);
        let mark = PidMark::new(follow, start_ticks(task));
        TASKS.insert(tgid, mark, 0).is_ok()
    }

    /// A leader is freed: its process is gone, and so is its mark.
    #[inline(always)]
    pub fn forget_freed(task: Task) {
        let (pid, tgid) = task_pid_tgid(task);
        if pid == tgid && mark(task).is_some() {
            let _ = TASKS.remove(tgid);
        }
    }
}
