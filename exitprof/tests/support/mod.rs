//! Helpers shared by exitprof's integration tests. They run the real binary, which loads real
//! eBPF programs into the running kernel: root is required, and CI runs them as root.

pub mod cgroups;
pub mod confined;

use std::process::{Child, Command, Output};

use serde_json::Value;

/// Fails the test, loudly, when not root: these tests must not silently pass without a kernel.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test loads eBPF programs and must run as root: use `cargo xtask test`"
    );
}

/// The exitprof binary under test: cargo's, or `EXITPROF_TEST_BINARY` where the tests run
/// away from the build (in the VM tests' guests).
pub fn exitprof_path() -> std::path::PathBuf {
    std::env::var_os("EXITPROF_TEST_BINARY")
        .map_or_else(|| env!("CARGO_BIN_EXE_exitprof").into(), Into::into)
}

/// A command of the exitprof binary under test.
pub fn exitprof() -> Command {
    Command::new(exitprof_path())
}

/// The `--attach` mode the tests of attribution run in: `EXITPROF_TEST_ATTACH`, `auto` when
/// unset, so that the same checks run on kernels with and without kprobes and fentry.
pub fn attach_mode() -> String {
    std::env::var("EXITPROF_TEST_ATTACH").unwrap_or_else(|_| "auto".to_owned())
}

/// A child process of a test, killed and reaped if it still runs when dropped: a test that
/// fails leaves nothing running.
pub struct KilledOnDrop(Option<Child>);

impl KilledOnDrop {
    pub fn new(child: Child) -> Self {
        Self(Some(child))
    }

    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the child is running")
    }

    pub fn id(&self) -> u32 {
        self.0.as_ref().expect("the child is running").id()
    }

    /// The child, no longer killed when dropped: to be waited for.
    pub fn take(mut self) -> Child {
        self.0.take().expect("the child is running")
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs exitprof with `args` and returns its output, whatever the status.
pub fn run(args: &[&str]) -> Output {
    exitprof().args(args).output().expect("exitprof starts")
}

/// Runs exitprof with `args` and `--json`, requires success, and parses the document.
pub fn run_json(args: &[&str]) -> Value {
    // --json right after the subcommand, if any: everything after `--` belongs to the command
    // being profiled.
    let subcommand = usize::from(args.first().is_some_and(|a| !a.starts_with('-')));
    let (head, rest) = args.split_at(subcommand);
    let out = exitprof().args(head).arg("--json").args(rest).output().expect("exitprof starts");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "exitprof {args:?} failed ({}):\n{stderr}", out.status);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "exitprof {args:?} printed no JSON document ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// A numeric field of a JSON object, as f64.
pub fn num(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no number {key} in {v}"))
}

/// A running `exitprof --json ...` that watches processes (--pid, --comm, --all).
pub struct Watcher {
    child: Child,
    stderr: std::sync::mpsc::Receiver<String>,
    args: Vec<String>,
}

impl Watcher {
    /// Starts exitprof with `--json args` and returns once it says it is watching.
    pub fn start(args: &[&str]) -> Self {
        Self::start_command(exitprof(), args)
    }

    /// [`Watcher::start`] with `command`, exitprof as some confinement runs it.
    pub fn start_command(mut command: Command, args: &[&str]) -> Self {
        use std::io::BufRead as _;
        let mut child = command
            .arg("--json")
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("exitprof starts");
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut watcher =
            Self { child, stderr: rx, args: args.iter().map(ToString::to_string).collect() };
        let line = watcher.next_line_containing("watching");
        eprintln!("{line}");
        watcher
    }

    /// Waits (90 s at most: loading under emulation takes tens of seconds) for a line of stderr
    /// containing `needle`; returns it.
    pub fn next_line_containing(&mut self, needle: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match self.stderr.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(line) => seen.push(line),
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        panic!(
            "exitprof {:?} never printed {needle:?}; stderr so far:\n{}",
            self.args,
            seen.join("\n")
        );
    }

    /// Sends `signal` to exitprof.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child, which is not reaped before `finish`.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// The process started (exitprof, or what runs it).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits for exitprof to end; requires success and returns its JSON document.
    pub fn finish(self) -> Value {
        let out = self.child.wait_with_output().expect("exitprof runs");
        let rest: Vec<String> = self.stderr.try_iter().collect();
        assert!(
            out.status.success(),
            "exitprof {:?} failed ({}):\n{}",
            self.args,
            out.status,
            rest.join("\n")
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("exitprof {:?} printed no JSON document ({e})", self.args))
    }
}

/// Whether `pid` has a handler for SIGINT (`SigCgt` in `/proc/PID/status`).
pub fn handles_sigint(pid: u32) -> bool {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).expect("exitprof is running");
    let caught = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).expect("SigCgt");
    let mask = u64::from_str_radix(caught.trim(), 16).unwrap();
    mask & (1 << (libc::SIGINT - 1)) != 0
}

/// Waits, polling every `poll`, until `pid` handles SIGINT: it installs its signal handlers
/// first thing, before it loads and attaches its probes.
pub fn wait_for_sigint_handler(pid: u32, poll: std::time::Duration) {
    let started = std::time::Instant::now();
    while !handles_sigint(pid) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "exitprof never got to handling SIGINT"
        );
        std::thread::sleep(poll);
    }
}

/// The BPF programs, links and maps a process holds, from `/proc/PID/fdinfo`.
#[derive(Debug, Default)]
pub struct BpfIds {
    pub programs: std::collections::BTreeSet<u32>,
    pub links: std::collections::BTreeSet<u32>,
    pub maps: std::collections::BTreeSet<u32>,
}

impl BpfIds {
    pub fn held_by(pid: u32) -> Self {
        let mut ids = Self::default();
        let dir = format!("/proc/{pid}/fdinfo");
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {dir}: {e}")) {
            // A descriptor can be closed while we read.
            let Ok(info) = std::fs::read_to_string(entry.unwrap().path()) else { continue };
            for line in info.lines() {
                let Some((key, value)) = line.split_once(':') else { continue };
                let set = match key {
                    "prog_id" => &mut ids.programs,
                    "link_id" => &mut ids.links,
                    "map_id" => &mut ids.maps,
                    _ => continue,
                };
                set.insert(value.trim().parse().expect("a numeric id"));
            }
        }
        ids
    }

    pub fn is_empty(&self) -> bool {
        self.programs.is_empty() && self.links.is_empty() && self.maps.is_empty()
    }

    /// Those of these ids the kernel still has loaded. (One that goes away while the kernel's
    /// list is read fails to open: it is not loaded.)
    pub fn still_loaded(&self) -> Self {
        Self {
            programs: aya::programs::loaded_programs()
                .filter_map(Result::ok)
                .map(|p| p.id())
                .filter(|id| self.programs.contains(id))
                .collect(),
            links: aya::programs::loaded_links()
                .filter_map(Result::ok)
                .map(|l| l.id())
                .filter(|id| self.links.contains(id))
                .collect(),
            maps: aya::maps::loaded_maps()
                .filter_map(Result::ok)
                .map(|m| m.id())
                .filter(|id| self.maps.contains(id))
                .collect(),
        }
    }
}

/// Requires every id in `held` to be unloaded within 10 s (the kernel frees links and programs
/// asynchronously once their last descriptor is closed).
pub fn assert_unloaded(held: &BpfIds) {
    let started = std::time::Instant::now();
    loop {
        let left = held.still_loaded();
        if left.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "exitprof held {held:?} and left {left:?} loaded"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The lines of tracefs `kprobe_events` that are exitprof's (none where the kernel has no
/// kprobes, and so no such file).
pub fn exitprof_kprobe_events() -> Vec<String> {
    ["/sys/kernel/tracing/kprobe_events", "/sys/kernel/debug/tracing/kprobe_events"]
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .flat_map(|text| text.lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|line| line.contains(":exitprof_"))
        .collect()
}

/// The group of the kprobe events of the exitprof of pid `pid` in this test's PID namespace.
pub fn kprobe_group(pid: u32) -> String {
    use std::os::linux::fs::MetadataExt as _;
    let pidns = std::fs::metadata("/proc/self/ns/pid").expect("/proc/self/ns/pid").st_ino();
    format!("exitprof_{pidns}_{pid}")
}

/// The tracefs instances on the machine.
pub fn tracefs_instances() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/kernel/tracing/instances")
        .map(|dir| dir.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Waits for `child` to end and collects its output; fails the test, killing the child, after
/// `limit`: exitprof must never hang.
pub fn wait_with_deadline(child: Child, limit: std::time::Duration, what: &str) -> Output {
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("waiting for exitprof"),
        Err(_) => {
            // SAFETY: our own child, not reaped while its waiter is blocked on it.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{what}: exitprof still running after {limit:?}");
        }
    }
}

/// Makes this test process the reaper of orphaned descendants: a process exitprof leaves
/// behind then becomes this process's child instead of init's, where a test can see it.
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    assert_eq!(rc, 0, "PR_SET_CHILD_SUBREAPER: {}", std::io::Error::last_os_error());
}

/// The pids of `pid`'s children (in any of its threads).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("children")).ok())
        .flat_map(|list| list.split_whitespace().map(|p| p.parse().unwrap()).collect::<Vec<_>>())
        .collect()
}

/// (state, parent pid, process group) of a process, from `/proc/PID/stat`.
pub fn stat_of(pid: u32) -> Option<(char, u32, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name, in parentheses, may hold anything: the fields after it are plain.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// exitprof running its workload.
pub struct Started {
    child: Option<Child>,
    pub pid: u32,
    /// exitprof's workload children when it was caught running; each leads its process group.
    pub workload: Vec<u32>,
    /// The BPF objects exitprof held then.
    pub held: BpfIds,
    args: Vec<String>,
}

impl Started {
    /// Starts exitprof with `args` (no stdin: not a terminal) and returns once its probes are
    /// attached and its workload has run for `into_it`.
    pub fn start(args: &[&str], into_it: std::time::Duration) -> Self {
        let child = exitprof()
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("exitprof starts");
        let pid = child.id();
        wait_for_sigint_handler(pid, std::time::Duration::from_millis(20));
        let started = std::time::Instant::now();
        let workload = loop {
            let children = children_of(pid);
            if !children.is_empty() {
                break children;
            }
            assert!(
                started.elapsed() < std::time::Duration::from_secs(60),
                "exitprof {args:?} never started its workload"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        std::thread::sleep(into_it);
        let held = BpfIds::held_by(pid);
        assert!(!held.programs.is_empty(), "exitprof {args:?} holds no BPF program mid-run");
        let args = args.iter().map(ToString::to_string).collect();
        Self { child: Some(child), pid, workload, held, args }
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: our own child, not reaped before `finish`.
        assert_eq!(unsafe { libc::kill(self.pid as i32, signal) }, 0);
    }

    /// Waits (60 s at most) for exitprof to end; returns its output.
    pub fn finish(&mut self) -> Output {
        let what = format!("exitprof {:?}", self.args);
        let child = self.child.take().expect("exitprof is running");
        wait_with_deadline(child, std::time::Duration::from_secs(60), &what)
    }
}

/// Requires that an ended exitprof left nothing: its workload children reaped, no process of
/// their process groups alive (or a zombie) after 5 s, the BPF objects it held unloaded, no
/// kprobe event of its own. Call [`become_subreaper`] before starting exitprof.
pub fn assert_nothing_left(run: &Started) {
    let me = std::process::id();
    for &child in &run.workload {
        // An unreaped child of an exitprof that has ended is reparented to us.
        if let Some((state, ppid, _)) = stat_of(child)
            && ppid == me
        {
            panic!("exitprof ended without reaping its workload child {child} (state {state})");
        }
    }
    let started = std::time::Instant::now();
    loop {
        // Orphans of the workload come to us: reap those that ended.
        // SAFETY: waitpid on any child of ours, without blocking.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        let left: Vec<(u32, char, u32)> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter_map(|pid| stat_of(pid).map(|(state, _, pgrp)| (pid, state, pgrp)))
            .filter(|(_, _, pgrp)| run.workload.contains(pgrp))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "processes of the workload's process groups {:?} left (pid, state, group): {left:?}",
            run.workload
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_unloaded(&run.held);
    let group = format!(":{}/", kprobe_group(run.pid));
    let events: Vec<String> =
        exitprof_kprobe_events().into_iter().filter(|e| e.contains(&group)).collect();
    assert!(events.is_empty(), "kprobe events left: {events:?}");
}

/// What a program measured itself: `key=value` lines of integers.
pub fn measured(path: &std::path::Path, key: &str) -> f64 {
    measured_text(path, key).parse().unwrap()
}

/// The teardown of the namespace `name` (`net:[4026532008]`) among those a run's document
/// joined to their exits and named (`teardowns.net` or `teardowns.user`).
pub fn joined_teardown<'a>(kind: &'a Value, name: &str) -> &'a Value {
    kind["slowest"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["namespace"] == name)
        .unwrap_or_else(|| panic!("{name} is not among the teardowns joined: {kind:#}"))
}

/// What a program measured itself, as text (`key=value` lines).
pub fn measured_text(path: &std::path::Path, key: &str) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {}: {text}", path.display()))
        .to_owned()
}

/// The tests run in an emulated machine (`EXITPROF_TEST_EMULATED`, set by the VM tests).
pub fn emulated() -> bool {
    std::env::var_os("EXITPROF_TEST_EMULATED").is_some()
}

/// A test program of `exitprof/tests/programs/`, compiled with `cc -O2 -pthread` once per test
/// binary run (into cargo's scratch directory for integration tests); where the tests run away
/// from the build, prebuilt in the directory `EXITPROF_TEST_PROGRAMS` names.
pub fn c_program(name: &str) -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("EXITPROF_TEST_PROGRAMS") {
        let binary = std::path::Path::new(&dir).join(name);
        assert!(binary.exists(), "{} is missing from EXITPROF_TEST_PROGRAMS", binary.display());
        return binary;
    }
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(format!("{name}.c"));
    let binary = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let out = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("cc must be installed to build {}: {e}", source.display()));
    assert!(
        out.status.success(),
        "cc failed on {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    binary
}

/// The attach modes the running kernel offers, found without exitprof's own calibration: the
/// tests assert what this kernel has, whatever it is.
#[derive(Clone, Copy, Debug)]
pub struct KernelOffers {
    /// The kprobe PMU exists (`CONFIG_KPROBES`).
    pub kprobes: bool,
    /// A tracing (fentry) program loads and attaches: kernel BTF, BPF trampolines that reach
    /// kernel functions (arm64 since 6.4) and an open function tracer.
    pub fentry: bool,
}

/// Whether an empty fentry program on `bpf_fentry_test1` attaches (raw `bpf` calls: aya loads
/// tracing programs only from an object): arm64 kernels before 6.4 load it and refuse the attach.
fn fentry_attaches() -> bool {
    let btf = aya::Btf::from_sys_fs().expect("kernel BTF");
    let Ok(id) = btf.id_by_type_name_kind("bpf_fentry_test1", aya_obj::btf::BtfKind::Func) else {
        return false;
    };
    // `union bpf_attr` as BPF_PROG_LOAD fills it, by byte offset (include/uapi/linux/bpf.h).
    let insns: [u64; 2] = [0xb7, 0x95]; // r0 = 0; exit
    let mut attr = [0_u8; 144];
    let mut put = |at: usize, bytes: &[u8]| attr[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &26_u32.to_ne_bytes()); // prog_type: BPF_PROG_TYPE_TRACING
    put(4, &2_u32.to_ne_bytes()); // insn_cnt
    put(8, &(insns.as_ptr() as u64).to_ne_bytes());
    put(16, &(c"GPL".as_ptr() as u64).to_ne_bytes());
    put(68, &24_u32.to_ne_bytes()); // expected_attach_type: BPF_TRACE_FENTRY
    put(108, &id.to_ne_bytes()); // attach_btf_id
    let bpf = |cmd: libc::c_long, attr: &[u8]| {
        // SAFETY: `attr` is a zero-padded bpf_attr whose pointers outlive the call.
        unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_ptr(), attr.len()) }
    };
    let program = bpf(5, &attr); // BPF_PROG_LOAD
    if program < 0 {
        return false;
    }
    // BPF_RAW_TRACEPOINT_OPEN { name: NULL, prog_fd }: a tracing program's attach.
    let mut open = [0_u8; 16];
    open[8..12].copy_from_slice(&(program as u32).to_ne_bytes());
    let link = bpf(17, &open);
    // SAFETY: closing the descriptors the kernel just returned.
    unsafe {
        if link >= 0 {
            libc::close(link as i32);
        }
        libc::close(program as i32);
    }
    link >= 0
}

/// Every `--attach` mode that forces one kind of probe.
pub const FORCED_MODES: [&str; 3] = ["kprobe", "fentry", "tracepoint"];

impl KernelOffers {
    pub fn probe() -> Self {
        let kprobes = std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists();
        let fentry = std::path::Path::new("/sys/kernel/btf/vmlinux").exists()
            && aya::sys::is_program_supported(aya::programs::ProgramType::Tracing).unwrap_or(false)
            && fentry_attaches();
        Self { kprobes, fentry }
    }

    /// Whether `mode`, one of [`FORCED_MODES`], works here (tracepoints always do).
    pub fn has(self, mode: &str) -> bool {
        match mode {
            "kprobe" => self.kprobes,
            "fentry" => self.fentry,
            "tracepoint" => true,
            _ => panic!("not an attach mode: {mode}"),
        }
    }

    /// What a refusal of `mode` must advise: the other modes this kernel has.
    pub fn instead_of(self, mode: &str) -> String {
        let others: Vec<String> = FORCED_MODES
            .iter()
            .filter(|&&m| m != mode && self.has(m))
            .map(|m| format!("--attach {m}"))
            .collect();
        format!("use {} (or auto)", others.join(" or "))
    }
}

/// The names of the files of a directory, sorted.
pub fn file_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The maps a process holds, read from outside through their ids: exitprof's state in the
/// kernel, as a test checks it.
pub struct HeldMaps(Vec<aya::maps::MapInfo>);

impl HeldMaps {
    pub fn of(pid: u32) -> Self {
        let ids = BpfIds::held_by(pid).maps;
        Self(ids.into_iter().filter_map(|id| aya::maps::MapInfo::from_id(id).ok()).collect())
    }

    /// Every entry of the map named `name` (as the kernel keeps names: 15 bytes at most), its
    /// key and value as bytes; every slot of an array.
    pub fn entries(&self, name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        use std::os::fd::{AsFd as _, AsRawFd as _};
        let info = self
            .0
            .iter()
            .find(|m| m.name_as_str() == Some(name))
            .unwrap_or_else(|| panic!("no map named {name} is held"));
        let fd = info.fd().unwrap_or_else(|e| panic!("opening map {name}: {e}"));
        let fd = fd.as_fd().as_raw_fd();
        let (mut key, mut next) =
            (vec![0u8; info.key_size() as usize], vec![0u8; info.key_size() as usize]);
        let mut entries = Vec::new();
        // BPF_MAP_GET_NEXT_KEY without a key gives the first one.
        let mut first = true;
        while map_syscall(4, fd, if first { None } else { Some(&key) }, &mut next) {
            first = false;
            std::mem::swap(&mut key, &mut next);
            let mut value = vec![0u8; info.value_size() as usize];
            // BPF_MAP_LOOKUP_ELEM; an entry removed since its key was read is left out.
            if map_syscall(1, fd, Some(&key), &mut value) {
                entries.push((key.clone(), value));
            }
        }
        entries
    }

    /// The `u64` values of the array or hash named `name`, in its order.
    pub fn u64_values(&self, name: &str) -> Vec<u64> {
        self.entries(name)
            .into_iter()
            .map(|(_, v)| u64::from_ne_bytes(v[..8].try_into().expect("8-byte values")))
            .collect()
    }
}

/// `bpf(cmd)` on a map element: `key` (none: the first), `out` written. Whether it succeeded.
fn map_syscall(cmd: libc::c_long, fd: i32, key: Option<&[u8]>, out: &mut [u8]) -> bool {
    /// The `BPF_MAP_*_ELEM` part of `union bpf_attr` (include/uapi/linux/bpf.h).
    #[repr(C)]
    struct ElemAttr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        out: u64,
        flags: u64,
    }
    let attr = ElemAttr {
        map_fd: fd as u32,
        _pad: 0,
        key: key.map_or(0, |k| k.as_ptr() as u64),
        out: out.as_mut_ptr() as u64,
        flags: 0,
    };
    // SAFETY: the key and the output buffer are of the map's sizes, alive for the call.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, &raw const attr, size_of::<ElemAttr>()) == 0 }
}
