//! Kernel type information: struct field offsets the eBPF programs need (Rust eBPF has no CO-RE
//! relocations, so userspace reads the offsets from the running kernel's BTF and passes them in
//! as load-time constants).

use btf_rs::{Backend, Btf, Type};

/// Where the kernel exposes its own BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read kernel BTF at {path} (is CONFIG_DEBUG_INFO_BTF on?): {why}")]
    Unreadable { path: String, why: String },
    #[error("kernel BTF has no struct {0}")]
    NoStruct(String),
    #[error("kernel BTF has no field {field} in struct {strukt}")]
    NoField { strukt: String, field: String },
    #[error("reading kernel BTF: {0}")]
    Parse(String),
}

/// The running kernel's BTF.
pub struct KernelBtf(Btf);

impl KernelBtf {
    /// The running kernel's BTF, from [`VMLINUX_BTF`].
    pub fn load() -> Result<Self, BtfError> {
        Self::from_file(VMLINUX_BTF)
    }

    /// Maps the file and parses its types as they are asked for: exitprof asks for a few dozen
    /// of the kernel's ~100,000, and parsing all of them up front cost it most of its start-up
    /// time and memory. (Where the file cannot be mapped, it is read and parsed whole.)
    fn from_file(path: &str) -> Result<Self, BtfError> {
        Btf::from_file_with_backend(path, Backend::Mmap)
            .or_else(|_| Btf::from_file_with_backend(path, Backend::Cache))
            .map(Self)
            .map_err(|e| BtfError::Unreadable { path: path.to_owned(), why: e.to_string() })
    }

    /// Byte offset of `field` in `struct strukt`, looking into anonymous unions and structs.
    pub fn field_offset(&self, strukt: &str, field: &str) -> Result<u32, BtfError> {
        let types =
            self.0.resolve_types_by_name(strukt).map_err(|e| BtfError::Parse(e.to_string()))?;
        let s = types
            .iter()
            .find_map(|t| match t {
                Type::Struct(s) if !s.members.is_empty() => Some(s),
                _ => None,
            })
            .ok_or_else(|| BtfError::NoStruct(strukt.to_owned()))?;
        self.find_in(s, field)?
            .map(|bits| bits / 8)
            .ok_or_else(|| BtfError::NoField { strukt: strukt.to_owned(), field: field.to_owned() })
    }

    /// Bit offset of `field` in `s`, recursing into anonymous members.
    fn find_in(&self, s: &btf_rs::Struct, field: &str) -> Result<Option<u32>, BtfError> {
        let parse = |e: btf_rs::Error| BtfError::Parse(e.to_string());
        for member in &s.members {
            let name = self.0.resolve_name(member).map_err(parse)?;
            if name == field {
                return Ok(Some(member.bit_offset()));
            }
            if name.is_empty() {
                let inner = self.0.resolve_chained_type(member).map_err(parse)?;
                if let Type::Struct(inner) | Type::Union(inner) = inner
                    && let Some(bits) = self.find_in(&inner, field)?
                {
                    return Ok(Some(member.bit_offset() + bits));
                }
            }
        }
        Ok(None)
    }

    /// Whether BTF describes a function named `name` (a prerequisite for fentry/fexit).
    pub fn has_function(&self, name: &str) -> bool {
        self.0
            .resolve_types_by_name(name)
            .is_ok_and(|types| types.iter().any(|t| matches!(t, Type::Func(_))))
    }

    /// How many arguments the tracepoint `name` passes its BTF programs (0 when BTF does not
    /// describe it): its `btf_trace_<name>` prototype less the leading `void *__data`.
    pub fn tracepoint_arg_count(&self, name: &str) -> usize {
        let proto = || -> Option<usize> {
            let types = self.0.resolve_types_by_name(&format!("btf_trace_{name}")).ok()?;
            let Type::Typedef(typedef) = types.first()? else { return None };
            let Type::Ptr(ptr) = self.0.resolve_chained_type(typedef).ok()? else { return None };
            let Type::FuncProto(proto) = self.0.resolve_chained_type(&ptr).ok()? else {
                return None;
            };
            Some(proto.parameters.len().saturating_sub(1))
        };
        proto().unwrap_or(0)
    }

    /// Whether BTF has the `btf_trace_<name>` typedef of a tracepoint (BTF tracepoints need it).
    pub fn has_tracepoint(&self, name: &str) -> bool {
        self.0.resolve_types_by_name(&format!("btf_trace_{name}")).is_ok_and(|t| !t.is_empty())
    }
}

/// What the eBPF programs need of the kernel's types, read once from BTF: the offsets of the
/// fields they read raw, and the shape of a tracepoint that changed.
#[derive(Clone, Copy, Debug)]
pub struct KernelLayout {
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_comm: u32,
    pub task_nsproxy: u32,
    pub task_flags: u32,
    pub task_group_leader: u32,
    pub task_real_parent: u32,
    pub task_signal: u32,
    pub nsproxy_ipc_ns: u32,
    pub signal_live: u32,
    /// `signal_struct.group_exec_task` (v5.16+; 0 where the kernel has none).
    pub signal_group_exec_task: u32,
    pub work_func: u32,
    /// `sched_process_exit(p, group_dead)` since v6.16; `(p)` before.
    pub exit_tp_group_dead: bool,
}

impl KernelLayout {
    pub fn read(btf: &KernelBtf) -> Result<Self, BtfError> {
        let task = |field| btf.field_offset("task_struct", field);
        Ok(Self {
            task_pid: task("pid")?,
            task_tgid: task("tgid")?,
            task_comm: task("comm")?,
            task_nsproxy: task("nsproxy")?,
            task_flags: task("flags")?,
            task_group_leader: task("group_leader")?,
            task_real_parent: task("real_parent")?,
            task_signal: task("signal")?,
            nsproxy_ipc_ns: btf.field_offset("nsproxy", "ipc_ns")?,
            signal_live: btf.field_offset("signal_struct", "live")?,
            signal_group_exec_task: btf
                .field_offset("signal_struct", "group_exec_task")
                .unwrap_or(0),
            work_func: btf.field_offset("work_struct", "func")?,
            exit_tp_group_dead: btf.tracepoint_arg_count("sched_process_exit") >= 2,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracepoint_prototypes_are_read() {
        let btf = KernelBtf::load().expect("this machine has kernel BTF");
        // sched_switch(preempt, prev, next, prev_state) since v5.18.
        assert_eq!(btf.tracepoint_arg_count("sched_switch"), 4);
        assert_eq!(btf.tracepoint_arg_count("no_such_tracepoint"), 0);
    }

    #[test]
    fn missing_or_foreign_btf_names_the_file_and_the_config() {
        for path in ["/nonexistent/vmlinux", "/proc/self/status"] {
            let err = KernelBtf::from_file(path).err().expect("not BTF");
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("cannot read kernel BTF at {path}"))
                    && text.contains("CONFIG_DEBUG_INFO_BTF"),
                "{text}"
            );
        }
    }
}
