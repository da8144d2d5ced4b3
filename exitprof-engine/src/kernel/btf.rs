//! Kernel type information: struct field offsets the eBPF programs need (Rust eBPF has no CO-RE
//! relocations, so userspace reads the offsets from the running kernel's BTF and passes them in
//! as load-time constants).

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

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
pub struct KernelBtf {
    btf: Btf,
    /// The ids of each name looked up so far: a lookup reads the name of every type of the
    /// kernel's (some 150,000), and exitprof asks for some names several times (`task_struct`
    /// for each field it reads, a tracepoint's typedef when planning and when loading).
    ids_by_name: Mutex<HashMap<String, Vec<u32>>>,
}

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
            .map(|btf| Self { btf, ids_by_name: Mutex::default() })
            .map_err(|e| BtfError::Unreadable { path: path.to_owned(), why: e.to_string() })
    }

    /// The ids of the types named `name`.
    fn ids_named(&self, name: &str) -> Result<Vec<u32>, btf_rs::Error> {
        let mut known = self.ids_by_name.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ids) = known.get(name) {
            return Ok(ids.clone());
        }
        let ids = self.btf.resolve_ids_by_name(name)?;
        known.insert(name.to_owned(), ids.clone());
        Ok(ids)
    }

    /// Looks up the types of all `names` in one pass over the kernel's types, for the lookups
    /// that follow.
    pub fn look_up(&self, names: &[&str]) {
        let mut known = self.ids_by_name.lock().unwrap_or_else(PoisonError::into_inner);
        let mut found: HashMap<String, Vec<u32>> = names
            .iter()
            .filter(|name| !known.contains_key(**name))
            .map(|name| ((*name).to_owned(), Vec::new()))
            .collect();
        let alternatives: Vec<String> = found.keys().map(|name| regex::escape(name)).collect();
        if alternatives.is_empty() {
            return;
        }
        let Ok(names) = regex::Regex::new(&format!("^(?:{})$", alternatives.join("|"))) else {
            return;
        };
        let Ok(ids) = self.btf.resolve_ids_by_regex(&names) else { return };
        for id in ids {
            let name = self
                .btf
                .resolve_type_by_id(id)
                .ok()
                .and_then(|t| t.as_btf_type().and_then(|t| self.btf.resolve_name(t).ok()));
            if let Some(ids) = name.and_then(|name| found.get_mut(&name)) {
                ids.push(id);
            }
        }
        known.extend(found);
    }

    /// Looks up the typedefs of `tracepoints` and the `functions` in one pass (see
    /// [`KernelBtf::look_up`]).
    pub fn look_up_probes<'a>(
        &self,
        tracepoints: impl IntoIterator<Item = &'a str>,
        functions: impl IntoIterator<Item = &'a str>,
    ) {
        let typedefs: Vec<String> = tracepoints.into_iter().map(tracepoint_typedef).collect();
        let mut names: Vec<&str> = typedefs.iter().map(String::as_str).collect();
        for function in functions {
            names.push(function);
        }
        self.look_up(&names);
    }

    /// Whether the types named `name` have been looked up.
    #[cfg(test)]
    pub fn is_looked_up(&self, name: &str) -> bool {
        self.ids_by_name.lock().unwrap().contains_key(name)
    }

    /// The types named `name`.
    fn types_named(&self, name: &str) -> Result<Vec<Type>, btf_rs::Error> {
        self.ids_named(name)?.into_iter().map(|id| self.btf.resolve_type_by_id(id)).collect()
    }

    /// Byte offset of `field` in `struct strukt`, looking into anonymous unions and structs.
    pub fn field_offset(&self, strukt: &str, field: &str) -> Result<u32, BtfError> {
        let types = self.types_named(strukt).map_err(|e| BtfError::Parse(e.to_string()))?;
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
            let name = self.btf.resolve_name(member).map_err(parse)?;
            if name == field {
                return Ok(Some(member.bit_offset()));
            }
            if name.is_empty() {
                let inner = self.btf.resolve_chained_type(member).map_err(parse)?;
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
        self.types_named(name).is_ok_and(|types| types.iter().any(|t| matches!(t, Type::Func(_))))
    }

    /// The BTF id of the function `name`, which a tracing program is loaded against.
    pub fn function_id(&self, name: &str) -> Option<u32> {
        let ids = self.ids_named(name).ok()?;
        ids.into_iter().find(|&id| matches!(self.btf.resolve_type_by_id(id), Ok(Type::Func(_))))
    }

    /// How many arguments the tracepoint `name` passes its BTF programs (0 when BTF does not
    /// describe it): its `btf_trace_<name>` prototype less the leading `void *__data`.
    pub fn tracepoint_arg_count(&self, name: &str) -> usize {
        let proto = || -> Option<usize> {
            let types = self.types_named(&tracepoint_typedef(name)).ok()?;
            let Type::Typedef(typedef) = types.first()? else { return None };
            let Type::Ptr(ptr) = self.btf.resolve_chained_type(typedef).ok()? else { return None };
            let Type::FuncProto(proto) = self.btf.resolve_chained_type(&ptr).ok()? else {
                return None;
            };
            Some(proto.parameters.len().saturating_sub(1))
        };
        proto().unwrap_or(0)
    }

    /// Whether the enum `name` has a member `member`: `enum bpf_func_id` lists every BPF helper
    /// the kernel has.
    pub fn has_enumerator(&self, name: &str, member: &str) -> bool {
        self.types_named(name).is_ok_and(|types| {
            types.iter().any(|t| match t {
                Type::Enum(e) => {
                    e.members.iter().any(|m| self.btf.resolve_name(m).is_ok_and(|n| n == member))
                }
                _ => false,
            })
        })
    }

    /// Whether BTF has the `btf_trace_<name>` typedef of a tracepoint (BTF tracepoints need it).
    pub fn has_tracepoint(&self, name: &str) -> bool {
        self.types_named(&tracepoint_typedef(name)).is_ok_and(|t| !t.is_empty())
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
    /// `signal_struct.group_exec_task` (v5.17+), `group_exit_task` before, which `de_thread`
    /// set alike; 0 where the kernel has neither.
    pub signal_group_exec_task: u32,
    /// `task_struct.__state` (`state` before v5.14).
    pub task_state: u32,
    /// `task_struct.start_boottime` (v5.5+).
    pub task_start_boottime: u32,
    pub work_func: u32,
    /// `cgroup.root`, `cgroup_root.hierarchy_id`, `cgroup.kn` and `kernfs_node.id`: a
    /// cgroup's hierarchy and id.
    pub cgroup_root: u32,
    pub cgroup_root_hierarchy_id: u32,
    pub cgroup_kn: u32,
    pub kernfs_node_id: u32,
    /// `task_struct.cgroups`, `css_set.dfl_cgrp`, `cgroup.level` and `cgroup.ancestor_ids`
    /// (v4.x to v5.19; 0 where the kernel has none): where the compat object finds a task's v2
    /// cgroup's ancestors.
    pub task_cgroups: u32,
    pub css_set_dfl_cgrp: u32,
    pub cgroup_level: u32,
    pub cgroup_ancestor_ids: u32,
    /// `sched_process_exit(p, group_dead)` since v6.16; `(p)` before.
    pub exit_tp_group_dead: bool,
    /// Where an exit's network and user namespaces are found, and what their teardowns read.
    pub namespaces: NamespaceLayout,
}

/// The offsets the namespace teardowns need: where a task's network and user namespaces are,
/// and the fields of each that name it, count its references and place it.
#[derive(Clone, Copy, Debug)]
pub struct NamespaceLayout {
    pub nsproxy_net_ns: u32,
    pub task_real_cred: u32,
    pub cred_user_ns: u32,
    /// `net.list`, in `net_namespace_list`.
    pub net_list: u32,
    /// The reference count of a `struct net`: `ns.__ns_ref` (v6.18+), `ns.count` (v5.13+),
    /// `count` before.
    pub net_refs: u32,
    /// `net.ns.inum`.
    pub net_inum: u32,
    /// `net.exit_list`, in a `cleanup_net` run's `net_exit_list`.
    pub net_exit_list: u32,
    /// `user_namespace.work` and `user_namespace.ns.inum`.
    pub user_ns_work: u32,
    pub user_ns_inum: u32,
}

impl NamespaceLayout {
    fn read(btf: &KernelBtf) -> Result<Self, BtfError> {
        btf.look_up(&["net", "ns_common", "cred", "user_namespace"]);
        let common = |field| btf.field_offset("ns_common", field);
        let in_ns = |strukt, field| Ok(btf.field_offset(strukt, "ns")? + common(field)?);
        Ok(Self {
            nsproxy_net_ns: btf.field_offset("nsproxy", "net_ns")?,
            task_real_cred: btf.field_offset("task_struct", "real_cred")?,
            cred_user_ns: btf.field_offset("cred", "user_ns")?,
            net_list: btf.field_offset("net", "list")?,
            net_refs: in_ns("net", "__ns_ref")
                .or_else(|_: BtfError| in_ns("net", "count"))
                .or_else(|_| btf.field_offset("net", "count"))?,
            net_inum: in_ns("net", "inum")?,
            net_exit_list: btf.field_offset("net", "exit_list")?,
            user_ns_work: btf.field_offset("user_namespace", "work")?,
            user_ns_inum: in_ns("user_namespace", "inum")?,
        })
    }
}

impl KernelLayout {
    pub fn read(btf: &KernelBtf) -> Result<Self, BtfError> {
        let exit_tp = tracepoint_typedef("sched_process_exit");
        btf.look_up(&[
            "task_struct",
            "nsproxy",
            "signal_struct",
            "work_struct",
            "cgroup",
            "cgroup_root",
            "css_set",
            "kernfs_node",
            &exit_tp,
        ]);
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
                .or_else(|_| btf.field_offset("signal_struct", "group_exit_task"))
                .unwrap_or(0),
            task_state: task("__state").or_else(|_| task("state"))?,
            task_start_boottime: task("start_boottime")?,
            work_func: btf.field_offset("work_struct", "func")?,
            cgroup_root: btf.field_offset("cgroup", "root")?,
            cgroup_root_hierarchy_id: btf.field_offset("cgroup_root", "hierarchy_id")?,
            cgroup_kn: btf.field_offset("cgroup", "kn")?,
            kernfs_node_id: btf.field_offset("kernfs_node", "id")?,
            task_cgroups: task("cgroups")?,
            css_set_dfl_cgrp: btf.field_offset("css_set", "dfl_cgrp")?,
            cgroup_level: btf.field_offset("cgroup", "level")?,
            cgroup_ancestor_ids: btf.field_offset("cgroup", "ancestor_ids").unwrap_or(0),
            exit_tp_group_dead: btf.tracepoint_arg_count("sched_process_exit") >= 2,
            namespaces: NamespaceLayout::read(btf)?,
        })
    }
}

/// The name of the typedef that gives a BTF tracepoint its prototype.
fn tracepoint_typedef(tracepoint: &str) -> String {
    format!("btf_trace_{tracepoint}")
}

/// A type aya's loader looks up by name in the kernel's BTF to load a program: the
/// `btf_trace_<name>` typedef of a BTF tracepoint, or the function an fentry/fexit program
/// attaches to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoaderType<'a> {
    Tracepoint(&'a str),
    Function(&'a str),
}

/// `BTF_KIND_*` (include/uapi/linux/btf.h).
const KIND_PTR: u32 = 2;
const KIND_TYPEDEF: u32 = 8;
const KIND_FUNC: u32 = 12;

impl KernelBtf {
    /// A BTF blob for aya's loader: the `wanted` types at their ids in the running kernel's
    /// BTF, and a placeholder (`void *`) at every other id below the highest. Loading a BTF
    /// tracepoint or fentry program takes the id of its target in the kernel's BTF, which aya
    /// finds by name in a BTF it has parsed whole; the kernel's whole BTF parsed that way was
    /// some 35 MB of exitprof's peak memory and much of its start-up time. Types the kernel
    /// does not have are left out, and their programs fail to load as they would have.
    pub fn loader_skeleton(&self, wanted: &[LoaderType<'_>]) -> Vec<u8> {
        let mut named: Vec<(u32, u32, String)> = wanted
            .iter()
            .filter_map(|&wanted| {
                let (name, kind) = match wanted {
                    LoaderType::Tracepoint(tp) => (tracepoint_typedef(tp), KIND_TYPEDEF),
                    LoaderType::Function(function) => (function.to_owned(), KIND_FUNC),
                };
                let id = self.first_id(&name, kind)?;
                Some((id, kind, name))
            })
            .collect();
        named.sort_unstable();
        named.dedup_by_key(|(id, ..)| *id);
        let last = named.last().map_or(0, |&(id, ..)| id);
        let mut types = Vec::with_capacity(last as usize * 12);
        let mut strings = vec![0u8];
        let mut named = named.into_iter().peekable();
        for id in 1..=last {
            let (name_off, kind) = match named.next_if(|&(wanted, ..)| wanted == id) {
                Some((_, kind, name)) => {
                    let offset = strings.len() as u32;
                    strings.extend_from_slice(name.as_bytes());
                    strings.push(0);
                    // A global function (linkage 1 in `vlen`); a typedef of void.
                    (offset, kind << 24 | u32::from(kind == KIND_FUNC))
                }
                None => (0, KIND_PTR << 24),
            };
            for word in [name_off, kind, 0] {
                types.extend_from_slice(&word.to_ne_bytes());
            }
        }
        let mut blob = Vec::with_capacity(24 + types.len() + strings.len());
        blob.extend_from_slice(&0xEB9F_u16.to_ne_bytes());
        blob.extend_from_slice(&[1, 0]);
        for word in [24, 0, types.len() as u32, types.len() as u32, strings.len() as u32] {
            blob.extend_from_slice(&word.to_ne_bytes());
        }
        blob.extend_from_slice(&types);
        blob.extend_from_slice(&strings);
        blob
    }

    /// The first id of a type named `name` of BTF kind `kind` (as aya's lookup finds it).
    fn first_id(&self, name: &str, kind: u32) -> Option<u32> {
        let ids = self.ids_named(name).ok()?;
        ids.into_iter().filter(|&id| self.kind_is(id, kind)).min()
    }

    fn kind_is(&self, id: u32, kind: u32) -> bool {
        match self.btf.resolve_type_by_id(id) {
            Ok(Type::Typedef(_)) => kind == KIND_TYPEDEF,
            Ok(Type::Func(_)) => kind == KIND_FUNC,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_looked_up_in_one_pass_have_the_ids_of_a_lookup_each() {
        let btf = KernelBtf::load().expect("this machine has kernel BTF");
        // A struct, a tracepoint's typedef, a function, a typedef, a name with regex
        // metacharacters, and one no type has.
        let names = ["task_struct", "btf_trace_sched_switch", "do_exit", "u32", "a.b+", "no_such"];
        btf.look_up(&names);
        let looked_up = btf.ids_by_name.lock().unwrap().clone();
        for name in names {
            let each = btf.btf.resolve_ids_by_name(name).unwrap();
            assert_eq!(looked_up.get(name), Some(&each), "{name}");
        }
        assert!(!looked_up["task_struct"].is_empty());
        assert!(looked_up["no_such"].is_empty());
    }

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

    /// The loader's skeleton holds each wanted type at the id the kernel's BTF gives it, as aya
    /// finds it by name, and nothing else by name.
    #[test]
    fn the_loader_skeleton_keeps_the_kernels_ids() {
        use aya::{Btf as AyaBtf, Endianness};
        use aya_obj::btf::BtfKind;

        let btf = KernelBtf::load().expect("this machine has kernel BTF");
        let wanted = [
            LoaderType::Tracepoint("sched_switch"),
            LoaderType::Function("do_exit"),
            LoaderType::Tracepoint("no_such_tracepoint"),
        ];
        let skeleton = AyaBtf::parse(&btf.loader_skeleton(&wanted), Endianness::default())
            .expect("aya parses the skeleton");
        let id = |name: &str, kind| skeleton.id_by_type_name_kind(name, kind).ok();
        assert_eq!(
            id("btf_trace_sched_switch", BtfKind::Typedef),
            btf.first_id("btf_trace_sched_switch", KIND_TYPEDEF)
        );
        assert_eq!(id("do_exit", BtfKind::Func), btf.first_id("do_exit", KIND_FUNC));
        assert!(id("do_exit", BtfKind::Func).is_some());
        assert_eq!(id("btf_trace_no_such_tracepoint", BtfKind::Typedef), None);
        assert_eq!(id("task_struct", BtfKind::Struct), None);
    }
}
