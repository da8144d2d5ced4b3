//! A workload named from the cgroup v2 path of its tasks (relative to the cgroup2 root), as
//! systemd and the common container runtimes lay their cgroups out: no runtime is asked.
//!
//! A name is a Prometheus label value: short, stable (a cgroup's name depends on its path alone)
//! and one per workload. The names, the innermost workload of the path first:
//!
//! - a pod's container: `pod:<uid>/container:<id12>`
//!   (`/kubepods.slice/.../kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope`,
//!   `/kubepods/burstable/pod<uid>/<id>`);
//! - a container: `container:<id12>` (`/system.slice/docker-<id>.scope`, `/docker/<id>`,
//!   `/machine.slice/libpod-<id>.scope`);
//! - a container's monitor, conmon: `pod:<uid>/container:<id12>/conmon` (`crio-conmon-<id>.scope`
//!   in a pod's slice), `container:<id12>/conmon` elsewhere (`libpod-conmon-<id>.scope`);
//! - an LXC container and its monitor: `lxc:<name>`, `lxc:<name>/monitor` (`/lxc/<name>`,
//!   `/lxc.payload.<name>`, `/lxc.monitor.<name>`);
//! - a pod's own cgroup: `pod:<uid>` (`.../kubepods-besteffort-pod<uid>.slice`,
//!   `/kubepods/pod<uid>`);
//! - a machine of systemd-machined (a VM, an nspawn container): `machine:<name>`
//!   (`/machine.slice/machine-<name>.scope`);
//! - a service: `service:<unit>` (`/system.slice/nginx.service`); a socket, mount or swap unit
//!   likewise, `mount:<unit>`;
//! - a login session: `user:<uid>/session:<id>` (`/user.slice/user-1000.slice/session-3.scope`);
//! - another scope: `scope:<unit>` (`/init.scope`, `/system.slice/run-r1.scope`);
//! - a slice's own cgroup: `slice:<unit>` (`/system.slice`, `/kubepods.slice`);
//! - a unit of a user's service manager: as the system's, after `user:<uid>/`
//!   (`/user.slice/user-1000.slice/user@1000.service/app.slice/pipewire.service`:
//!   `user:1000/service:pipewire`);
//! - the root cgroup: `/`; any other cgroup: its path (`/kubepods/burstable`).
//!
//! How the parts are told:
//!
//! - Container ids are shortened to 12 hex digits, as `docker ps` and `crictl ps` show them. They
//!   are found as the runtimes write them: `<runtime>-<64 hex>.scope` under systemd (Docker's
//!   `docker-`, containerd's `cri-containerd-`, CRI-O's `crio-`, Podman's `libpod-`, and any other
//!   runtime that writes a scope this way), a bare 64-hex directory under cgroupfs (`/docker/<id>`,
//!   `/kubepods/.../pod<uid>/<id>`), `crio-<id>` or `libpod-<id>` under cgroupfs.
//! - Pod UIDs as Kubernetes writes them, with dashes: the systemd driver writes them with
//!   underscores (`kubepods-burstable-pod<uid with _>.slice`, a dash being the slice hierarchy's
//!   separator), the cgroupfs driver with dashes (`pod<uid>`). A static pod's UID is 32 hex digits
//!   without dashes, kept so. A Podman pod (`machine-libpod_pod_<id>.slice`) is named by its id
//!   shortened as `podman pod ps` does.
//! - The cgroups below a container's are the container's: crun's `container` sub-cgroup
//!   (`crio-<id>.scope/container`), systemd running inside a container. The innermost container
//!   names an exit, so a Kubernetes node that is itself a container (kind) shows its pods.
//! - The cgroups below a service or scope are the unit's (a delegated subtree), except under a
//!   user's service manager (`user@<uid>.service`), whose units are named as the system's, after
//!   `user:<uid>/`.
//! - A slice names only its own cgroup: a cgroup under a slice that is no unit is named by its
//!   path.
//! - Names longer than [`MAX_NAME`] bytes (free-form paths and unit names) keep their end, after
//!   `…`, and end with `~` and a hash of the whole path, so that two long paths never share a
//!   name. Control characters become `?`.

use std::fmt;

/// The longest name, in bytes.
pub const MAX_NAME: usize = 96;

/// Digits of a container id (or a Podman pod id) in a name.
const SHORT_ID: usize = 12;

/// What kind of workload a cgroup is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A container, with its pod when it has one.
    Container,
    /// A container runtime's monitor of one container (CRI-O's and Podman's conmon, LXC's).
    Monitor,
    /// A pod's own cgroup (Kubernetes or Podman).
    Pod,
    /// A virtual machine or container registered with systemd-machined.
    Machine,
    /// A systemd service, or a unit of another type that runs processes (socket, mount, swap).
    Service,
    /// A login session's scope.
    Session,
    /// Another systemd scope.
    Scope,
    /// A systemd slice's own cgroup.
    Slice,
    /// The root cgroup.
    Root,
    /// Anything else, named by its path.
    Other,
}

/// A workload: its kind and its name (the label value).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Workload {
    pub kind: Kind,
    pub name: String,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// The name of the workload whose cgroup is at `path` (relative to the cgroup2 root).
pub fn workload_name(path: &str) -> String {
    Workload::of(path).name
}

impl Workload {
    /// The workload whose cgroup is at `path` (relative to the cgroup2 root).
    pub fn of(path: &str) -> Self {
        let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let (kind, name) = name(&components);
        let name = bounded(&name, path);
        Self { kind, name }
    }
}

/// What one path component tells.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    /// A pod's slice or directory: its UID (or a Podman pod's short id).
    Pod(String),
    /// A container's cgroup: its short id.
    Container(String),
    /// A container's monitor: the container's short id.
    Monitor(String),
    Lxc(String),
    LxcMonitor(String),
    Machine(String),
    /// A unit: its type (`service`, `scope`, `slice`, ...) and its name without the type.
    Unit(&'static str, String),
    /// Nothing known.
    Plain,
}

/// The unit types whose cgroups hold processes of their own, and slices.
const LEAF_UNITS: [&str; 5] = ["service", "scope", "socket", "mount", "swap"];
const UNITS: [&str; 6] = ["slice", "service", "scope", "socket", "mount", "swap"];

fn name(components: &[&str]) -> (Kind, String) {
    if components.is_empty() {
        return (Kind::Root, "/".to_owned());
    }
    let parts: Vec<Part> = components
        .iter()
        .enumerate()
        .map(|(i, c)| part(c, i.checked_sub(1).map(|p| components[p])))
        .collect();
    let pod = parts.iter().rposition(|p| matches!(p, Part::Pod(_)));
    let container = parts.iter().rposition(|p| {
        matches!(
            p,
            Part::Container(_)
                | Part::Monitor(_)
                | Part::Lxc(_)
                | Part::LxcMonitor(_)
                | Part::Machine(_)
        )
    });
    let pod_uid = |p: usize| match &parts[p] {
        Part::Pod(uid) => uid.as_str(),
        _ => unreachable!("found as a pod"),
    };

    if let Some(c) = container
        && pod.is_none_or(|p| p < c)
    {
        let in_pod = pod.map(|p| format!("pod:{}/", pod_uid(p))).unwrap_or_default();
        return match &parts[c] {
            Part::Container(id) => (Kind::Container, format!("{in_pod}container:{id}")),
            Part::Monitor(id) => (Kind::Monitor, format!("{in_pod}container:{id}/conmon")),
            Part::Lxc(name) => (Kind::Container, format!("lxc:{name}")),
            Part::LxcMonitor(name) => (Kind::Monitor, format!("lxc:{name}/monitor")),
            Part::Machine(name) => (Kind::Machine, format!("machine:{name}")),
            _ => unreachable!("found as a container"),
        };
    }
    if let Some(p) = pod {
        return (Kind::Pod, format!("pod:{}", pod_uid(p)));
    }

    // systemd's units; below a user's service manager, the manager's own units.
    let (prefix, from) = match components.iter().rposition(|c| user_manager(c).is_some()) {
        Some(m) if m + 1 < components.len() => {
            (format!("user:{}/", user_manager(components[m]).unwrap_or_default()), m + 1)
        }
        _ => (String::new(), 0),
    };
    let leaf = parts.iter().enumerate().skip(from).find_map(|(i, p)| match p {
        Part::Unit(kind, unit) if LEAF_UNITS.contains(kind) => Some((i, *kind, unit)),
        _ => None,
    });
    if let Some((i, kind, unit)) = leaf {
        if kind == "scope"
            && let Some(session) = unit.strip_prefix("session-")
        {
            let user = if prefix.is_empty() {
                let uid = components[..i].iter().rev().find_map(|c| {
                    c.strip_prefix("user-")?.strip_suffix(".slice").filter(|uid| is_digits(uid))
                });
                uid.map(|uid| format!("user:{uid}/")).unwrap_or_default()
            } else {
                prefix
            };
            return (Kind::Session, format!("{user}session:{session}"));
        }
        let kind_of = if kind == "scope" { Kind::Scope } else { Kind::Service };
        return (kind_of, format!("{prefix}{kind}:{unit}"));
    }
    if let Some(Part::Unit("slice", slice)) = parts.last() {
        return (Kind::Slice, format!("{prefix}slice:{slice}"));
    }
    (Kind::Other, format!("/{}", components.join("/")))
}

/// The user whose service manager's cgroup `component` is (`user@<uid>.service`).
fn user_manager(component: &str) -> Option<&str> {
    component.strip_prefix("user@")?.strip_suffix(".service").filter(|uid| is_digits(uid))
}

/// What `component` tells, `previous` being the component above it.
fn part(component: &str, previous: Option<&str>) -> Part {
    if let Some(uid) = pod(component) {
        return Part::Pod(uid);
    }
    let base = component.strip_suffix(".scope").unwrap_or(component);
    if is_id(base) {
        return Part::Container(short(base));
    }
    if let Some((runtime, id)) = base.rsplit_once('-')
        && is_id(id)
        && !runtime.is_empty()
    {
        return if runtime == "conmon" || runtime.ends_with("-conmon") {
            Part::Monitor(short(id))
        } else {
            Part::Container(short(id))
        };
    }
    if let Some(name) = component.strip_prefix("lxc.payload.") {
        return Part::Lxc(name.to_owned());
    }
    if let Some(name) = component.strip_prefix("lxc.monitor.") {
        return Part::LxcMonitor(name.to_owned());
    }
    if previous == Some("lxc") {
        return Part::Lxc(component.to_owned());
    }
    if let Some(name) = component.strip_prefix("machine-").and_then(|m| m.strip_suffix(".scope")) {
        return Part::Machine(unescape(name));
    }
    if let Some((unit, kind)) = component.rsplit_once('.')
        && !unit.is_empty()
        && let Some(kind) = UNITS.into_iter().find(|&t| t == kind)
    {
        return Part::Unit(kind, unit.to_owned());
    }
    Part::Plain
}

/// The pod whose slice (systemd driver) or directory (cgroupfs driver) `component` is: its UID
/// as Kubernetes writes it, or a Podman pod's short id.
fn pod(component: &str) -> Option<String> {
    let Some(slice) = component.strip_suffix(".slice") else {
        return component.strip_prefix("pod").and_then(pod_uid);
    };
    // The slice's own name is after the hierarchy's last dash: `kubepods-burstable-pod<uid>`.
    let own = slice.rsplit('-').next()?;
    if let Some(id) = own.strip_prefix("libpod_pod_")
        && is_id(id)
    {
        return Some(short(id));
    }
    own.strip_prefix("pod").and_then(pod_uid)
}

/// A pod UID: 8-4-4-4-12 hex digits (dashes, or the systemd driver's underscores, written as
/// dashes), or 32 hex digits (a static pod's, a hash of its manifest).
fn pod_uid(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let valid = match bytes.len() {
        32 => bytes.iter().all(u8::is_ascii_hexdigit),
        36 => bytes.iter().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => matches!(b, b'-' | b'_'),
            _ => b.is_ascii_hexdigit(),
        }),
        _ => false,
    };
    valid.then(|| text.replace('_', "-"))
}

/// A full container id: 64 hex digits.
fn is_id(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn short(id: &str) -> String {
    id[..SHORT_ID].to_owned()
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// A unit name part with systemd's `\xNN` escapes undone (`qemu\x2d1\x2dvm`: `qemu-1-vm`).
fn unescape(text: &str) -> String {
    let hex = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if let (b'\\', [b'x', hi, lo, after @ ..]) = (b, tail)
            && let (Some(hi), Some(lo)) = (hex(*hi), hex(*lo))
        {
            bytes.push(hi << 4 | lo);
            rest = after;
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `name` without control characters and, past [`MAX_NAME`] bytes, its end after `…` and a hash
/// of `path`.
fn bounded(name: &str, path: &str) -> String {
    let name: String = name.chars().map(|c| if c.is_control() { '?' } else { c }).collect();
    if name.len() <= MAX_NAME {
        return name;
    }
    let hash = format!("~{:08x}", fnv1a(path.as_bytes()) as u32);
    let budget = MAX_NAME - hash.len() - '…'.len_utf8();
    let mut start = name.len() - budget;
    while !name.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}{hash}", &name[start..])
}

/// FNV-1a, 64 bits: a hash that stays the same across Rust releases, unlike std's.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4e5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081";
    const ID2: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const UID: &str = "6a1e2b3c-4d5e-4f60-8a9b-0c1d2e3f4a5b";
    const UID_: &str = "6a1e2b3c_4d5e_4f60_8a9b_0c1d2e3f4a5b";

    /// Every layout: its path and the expected kind and name (`{ID}`, `{ID2}`, `{UID}` and
    /// `{UID_}` stand for the constants).
    const LAYOUTS: &[(&str, Kind, &str)] = &[
        // Docker, systemd driver and cgroupfs driver.
        ("/system.slice/docker-{ID}.scope", Kind::Container, "container:3f4e5a6b7c8d"),
        ("/docker/{ID}", Kind::Container, "container:3f4e5a6b7c8d"),
        // Docker in Docker (cgroupfs): the innermost container.
        ("/docker/{ID}/docker/{ID2}", Kind::Container, "container:0123456789ab"),
        // systemd running inside a container: its units are the container's.
        ("/system.slice/docker-{ID}.scope/init.scope", Kind::Container, "container:3f4e5a6b7c8d"),
        (
            "/system.slice/docker-{ID}.scope/system.slice/nginx.service",
            Kind::Container,
            "container:3f4e5a6b7c8d",
        ),
        // Podman: rootful, crun's sub-cgroup, rootless, its conmon, a pod's container.
        ("/machine.slice/libpod-{ID}.scope", Kind::Container, "container:3f4e5a6b7c8d"),
        ("/machine.slice/libpod-{ID}.scope/container", Kind::Container, "container:3f4e5a6b7c8d"),
        (
            "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope",
            Kind::Container,
            "container:3f4e5a6b7c8d",
        ),
        ("/machine.slice/libpod-conmon-{ID}.scope", Kind::Monitor, "container:3f4e5a6b7c8d/conmon"),
        ("/machine.slice/machine-libpod_pod_{ID2}.slice", Kind::Pod, "pod:0123456789ab"),
        (
            "/machine.slice/machine-libpod_pod_{ID2}.slice/libpod-{ID}.scope",
            Kind::Container,
            "pod:0123456789ab/container:3f4e5a6b7c8d",
        ),
        ("/libpod_parent/libpod-{ID}", Kind::Container, "container:3f4e5a6b7c8d"),
        // Kubernetes, systemd driver: containerd, CRI-O and its conmon and crun's sub-cgroup,
        // Docker (dockershim, cri-dockerd); the three QoS classes.
        (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope",
            Kind::Container,
            "pod:{UID}/container:3f4e5a6b7c8d",
        ),
        (
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{ID}.scope",
            Kind::Container,
            "pod:{UID}/container:3f4e5a6b7c8d",
        ),
        (
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-{ID}.scope/container",
            Kind::Container,
            "pod:{UID}/container:3f4e5a6b7c8d",
        ),
        (
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/crio-conmon-{ID}.scope",
            Kind::Monitor,
            "pod:{UID}/container:3f4e5a6b7c8d/conmon",
        ),
        (
            "/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{ID}.scope",
            Kind::Container,
            "pod:{UID}/container:3f4e5a6b7c8d",
        ),
        (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/docker-{ID}.scope",
            Kind::Container,
            "pod:{UID}/container:3f4e5a6b7c8d",
        ),
        // A pod's own slices, and the QoS slices above them.
        (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice",
            Kind::Pod,
            "pod:{UID}",
        ),
        ("/kubepods.slice/kubepods-pod{UID_}.slice", Kind::Pod, "pod:{UID}"),
        ("/kubepods.slice/kubepods-burstable.slice", Kind::Slice, "slice:kubepods-burstable"),
        ("/kubepods.slice", Kind::Slice, "slice:kubepods"),
        // A static pod: its UID is a hash of its manifest.
        (
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b2bd5ad0b4c5c28c3df7d2be1d1bc1d.slice/cri-containerd-{ID}.scope",
            Kind::Container,
            "pod:0b2bd5ad0b4c5c28c3df7d2be1d1bc1d/container:3f4e5a6b7c8d",
        ),
        // CRI-O's conmon in system.slice (conmon_cgroup = "system.slice"): no pod in its path.
        ("/system.slice/crio-conmon-{ID}.scope", Kind::Monitor, "container:3f4e5a6b7c8d/conmon"),
        // Kubernetes, cgroupfs driver: the three QoS classes, CRI-O's names.
        ("/kubepods/burstable/pod{UID}/{ID}", Kind::Container, "pod:{UID}/container:3f4e5a6b7c8d"),
        ("/kubepods/besteffort/pod{UID}/{ID}", Kind::Container, "pod:{UID}/container:3f4e5a6b7c8d"),
        ("/kubepods/pod{UID}/{ID}", Kind::Container, "pod:{UID}/container:3f4e5a6b7c8d"),
        (
            "/kubepods/burstable/pod{UID}/crio-{ID}",
            Kind::Container,
            "pod:{UID}/container:3f4e5a6b7c8d",
        ),
        (
            "/kubepods/burstable/pod{UID}/crio-conmon-{ID}",
            Kind::Monitor,
            "pod:{UID}/container:3f4e5a6b7c8d/conmon",
        ),
        ("/kubepods/burstable/pod{UID}", Kind::Pod, "pod:{UID}"),
        ("/kubepods/pod{UID}", Kind::Pod, "pod:{UID}"),
        // Below a pod, a cgroup that is no container's: the pod's.
        ("/kubepods/pod{UID}/sandbox", Kind::Pod, "pod:{UID}"),
        ("/kubepods/burstable", Kind::Other, "/kubepods/burstable"),
        ("/kubepods", Kind::Other, "/kubepods"),
        // A Kubernetes node that is a Docker container (kind): its pods, seen from the host.
        (
            "/system.slice/docker-{ID2}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope",
            Kind::Container,
            "pod:{UID}/container:3f4e5a6b7c8d",
        ),
        (
            "/system.slice/docker-{ID2}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice",
            Kind::Pod,
            "pod:{UID}",
        ),
        (
            "/system.slice/docker-{ID2}.scope/system.slice/containerd.service",
            Kind::Container,
            "container:0123456789ab",
        ),
        // LXC: the old layout, LXC 4's payload and monitor.
        ("/lxc/web", Kind::Container, "lxc:web"),
        ("/lxc/web/init.scope", Kind::Container, "lxc:web"),
        ("/lxc.payload.web", Kind::Container, "lxc:web"),
        ("/lxc.payload.web/system.slice/cron.service", Kind::Container, "lxc:web"),
        ("/lxc.monitor.web", Kind::Monitor, "lxc:web/monitor"),
        ("/lxc", Kind::Other, "/lxc"),
        // systemd-machined: a libvirt VM (escaped name) and its sub-cgroups, an nspawn container.
        (
            r"/machine.slice/machine-qemu\x2d1\x2ddebian.scope/libvirt/vcpu0",
            Kind::Machine,
            "machine:qemu-1-debian",
        ),
        ("/machine.slice/machine-build.scope", Kind::Machine, "machine:build"),
        // systemd's system services, scopes and slices.
        ("/system.slice/containerd.service", Kind::Service, "service:containerd"),
        ("/system.slice/docker.service", Kind::Service, "service:docker"),
        ("/system.slice/nginx.service", Kind::Service, "service:nginx"),
        (
            "/system.slice/system-getty.slice/getty@tty1.service",
            Kind::Service,
            "service:getty@tty1",
        ),
        ("/system.slice/nginx.service/workers", Kind::Service, "service:nginx"),
        ("/system.slice/boot-efi.mount", Kind::Service, "mount:boot-efi"),
        ("/system.slice/run-r0f3c2d1e.scope", Kind::Scope, "scope:run-r0f3c2d1e"),
        ("/init.scope", Kind::Scope, "scope:init"),
        ("/system.slice", Kind::Slice, "slice:system"),
        ("/system.slice/unmanaged", Kind::Other, "/system.slice/unmanaged"),
        // Users: sessions, the user's slice, its service manager and the manager's units.
        ("/user.slice/user-1000.slice/session-3.scope", Kind::Session, "user:1000/session:3"),
        ("/user.slice/user-0.slice/session-c12.scope", Kind::Session, "user:0/session:c12"),
        ("/session-3.scope", Kind::Session, "session:3"),
        ("/user.slice", Kind::Slice, "slice:user"),
        ("/user.slice/user-1000.slice", Kind::Slice, "slice:user-1000"),
        ("/user.slice/user-1000.slice/user@1000.service", Kind::Service, "service:user@1000"),
        (
            "/user.slice/user-1000.slice/user@1000.service/init.scope",
            Kind::Scope,
            "user:1000/scope:init",
        ),
        (
            "/user.slice/user-1000.slice/user@1000.service/app.slice",
            Kind::Slice,
            "user:1000/slice:app",
        ),
        (
            "/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-firefox-2231.scope",
            Kind::Scope,
            "user:1000/scope:app-gnome-firefox-2231",
        ),
        (
            "/user.slice/user-1000.slice/user@1000.service/session.slice/pipewire.service",
            Kind::Service,
            "user:1000/service:pipewire",
        ),
        (
            "/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1f2e.scope",
            Kind::Scope,
            "user:1000/scope:vte-spawn-1f2e",
        ),
        // The root, and paths no layout matches.
        ("/", Kind::Root, "/"),
        ("", Kind::Root, "/"),
        ("//", Kind::Root, "/"),
        ("/mygroup/sub/", Kind::Other, "/mygroup/sub"),
        ("/docker/not-an-id", Kind::Other, "/docker/not-an-id"),
        // Almost a container id, almost a pod UID: not taken for them.
        ("/system.slice/docker-3f4e5a6b7c8d.scope", Kind::Scope, "scope:docker-3f4e5a6b7c8d"),
        ("/kubepods/burstable/pod1234", Kind::Other, "/kubepods/burstable/pod1234"),
        (".slice", Kind::Other, "/.slice"),
    ];

    fn expand(text: &str) -> String {
        text.replace("{ID}", ID).replace("{ID2}", ID2).replace("{UID}", UID).replace("{UID_}", UID_)
    }

    #[test]
    fn every_layout_is_named() {
        let mut wrong = Vec::new();
        for &(path, kind, expected) in LAYOUTS {
            let path = expand(path);
            let expected = Workload { kind, name: expand(expected) };
            let named = Workload::of(&path);
            if named != expected {
                wrong.push(format!(
                    "{path}\n  expected {:?} {:?}\n  named    {:?} {:?}",
                    expected.kind, expected.name, named.kind, named.name
                ));
            }
            assert_eq!(workload_name(&path), named.to_string());
        }
        assert!(wrong.is_empty(), "{} of {} paths misnamed:\n{}", wrong.len(), LAYOUTS.len(), {
            wrong.join("\n")
        });
    }

    /// Workloads that differ, even slightly (a container and its conmon, a pod and its
    /// container, the same unit name as a service, a user's service and a scope), have names that
    /// differ.
    #[test]
    fn different_workloads_have_different_names() {
        let pod = format!("/kubepods.slice/kubepods-pod{UID_}.slice");
        let paths = [
            pod.clone(),
            format!("{pod}/cri-containerd-{ID}.scope"),
            format!("{pod}/cri-containerd-{ID2}.scope"),
            format!("{pod}/crio-conmon-{ID}.scope"),
            format!("/system.slice/docker-{ID}.scope"),
            format!("/system.slice/crio-conmon-{ID}.scope"),
            "/lxc/web".to_owned(),
            "/lxc.monitor.web".to_owned(),
            "/machine.slice/machine-web.scope".to_owned(),
            "/system.slice/web.service".to_owned(),
            "/system.slice/web.scope".to_owned(),
            "/system.slice/web.socket".to_owned(),
            "/web.slice".to_owned(),
            "/user.slice/user-1000.slice/user@1000.service/app.slice/web.service".to_owned(),
            "/user.slice/user-1001.slice/user@1001.service/app.slice/web.service".to_owned(),
            "/user.slice/user-1000.slice/session-3.scope".to_owned(),
            "/user.slice/user-1000.slice/session-4.scope".to_owned(),
            "/web".to_owned(),
            "/".to_owned(),
        ];
        let mut seen = std::collections::HashMap::new();
        for path in &paths {
            let name = workload_name(path);
            if let Some(other) = seen.insert(name.clone(), path) {
                panic!("{path} and {other} are both named {name}");
            }
        }
    }

    #[test]
    fn long_names_are_bounded_and_stay_distinct() {
        let long = |leaf: &str| format!("/{}/{leaf}", ["nested"; 20].join("/"));
        let (a, b) = (Workload::of(&long("a")), Workload::of(&long("b")));
        for w in [&a, &b] {
            assert!(w.name.len() <= MAX_NAME, "{} bytes: {}", w.name.len(), w.name);
            assert!(w.name.starts_with('…') && w.name.contains("/nested/"), "{}", w.name);
            assert_eq!(w.kind, Kind::Other);
        }
        assert_ne!(a.name, b.name);
        assert!(a.name.contains("/a~") && b.name.contains("/b~"), "{} {}", a.name, b.name);
        // The same path, the same name.
        assert_eq!(a, Workload::of(&long("a")));
        // A long unit name, cut on a character boundary.
        let unit = format!("/system.slice/{}.service", "é".repeat(80));
        let named = Workload::of(&unit);
        assert!(named.name.len() <= MAX_NAME, "{}", named.name);
        assert_eq!(named.kind, Kind::Service);
    }

    #[test]
    fn control_characters_do_not_reach_the_label() {
        assert_eq!(workload_name("/odd\ngroup\x07"), "/odd?group?");
    }

    #[test]
    fn the_hash_is_fnv1a() {
        // The published FNV-1a 64 test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
