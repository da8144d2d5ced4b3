//! Task-local storage (`BPF_MAP_TYPE_TASK_STORAGE`, Linux 5.11+): a value that lives and dies
//! with a task. aya-ebpf 0.2 has no wrapper for it, so the BTF map definition is written out
//! here, as aya-ebpf writes its own (`btf_maps`); the map must carry BTF, which a BTF map
//! definition gives it.

#[cfg(not(feature = "compat"))]
use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, bpf_map_type},
    helpers::generated::{bpf_get_current_task_btf, bpf_task_storage_get},
};

/// A task pointer the verifier accepts (`PTR_TO_BTF_ID` of `struct task_struct`): the current
/// task, a `task_struct *` argument of a BTF tracepoint or fentry program, or a task reached
/// from one through its `group_leader` and `real_parent` fields. In the compat object a plain
/// address, whose fields are read with `bpf_probe_read_kernel` (`crate::helpers`).
pub type Task = *mut aya_ebpf::bindings::task_struct;

/// The current task, as a pointer the storage helpers accept.
#[cfg(not(feature = "compat"))]
#[inline(always)]
pub fn current_task() -> Task {
    // SAFETY: a helper without arguments; the task outlives the program.
    unsafe { bpf_get_current_task_btf() }
}

/// The current task's address (kernels before 5.11 have no `bpf_get_current_task_btf`).
#[cfg(feature = "compat")]
#[inline(always)]
pub fn current_task() -> Task {
    // SAFETY: a helper without arguments; the task outlives the program.
    unsafe { aya_ebpf::helpers::bpf_get_current_task() as Task }
}

/// A BTF map definition of task storage holding a `T` per task. The fields are placeholders the
/// loader reads from BTF (their pointee types encode the map's type, key, value and flags).
#[cfg(not(feature = "compat"))]
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: the fields are never dereferenced: the loader replaces the whole definition by the
// map it creates. `#[btf_map]` statics must be `Sync`.
#[cfg(not(feature = "compat"))]
unsafe impl<T> Sync for TaskStorage<T> {}

#[cfg(not(feature = "compat"))]
impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        Self {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    #[inline(always)]
    fn storage(&self, task: Task, flags: u64) -> Option<*mut T> {
        // SAFETY: `task` is a task pointer the verifier accepts (it refuses any other), the map
        // is this definition's, and no initial value is passed (a new value is zeroed).
        let value = unsafe {
            bpf_task_storage_get(
                core::ptr::from_ref(self).cast_mut().cast(),
                task,
                core::ptr::null_mut(),
                flags,
            )
        };
        (!value.is_null()).then_some(value.cast())
    }

    /// The task's value, if it has one.
    #[inline(always)]
    pub fn get(&self, task: Task) -> Option<*mut T> {
        self.storage(task, 0)
    }

    /// The task's value, created zeroed if it has none; `None` when it cannot be created (out of
    /// memory, or the storage is busy on this CPU: a program interrupted another one using it).
    #[inline(always)]
    pub fn get_or_create(&self, task: Task) -> Option<*mut T> {
        self.storage(task, u64::from(BPF_LOCAL_STORAGE_GET_F_CREATE))
    }
}
