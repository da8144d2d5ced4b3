//! exitprof processes side by side in kprobe mode, as an always-on `serve` and an ad-hoc run, or
//! two containers each running exitprof as pid 1 of a PID namespace of its own: their kprobe
//! events do not collide, each counts only its own missed probe hits, and a later exitprof
//! removes the events of one killed hard, but not those of the ones that run.

use std::{
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::support::{
    KernelOffers, Watcher, children_of, confined::in_new_pid_namespace, exitprof,
    exitprof_kprobe_events, num, require_root, run,
};

/// An exitprof watching every exit, as pid 1 of a PID namespace of its own where the object the
/// kernel loads follows processes across PID namespaces.
struct Instance {
    watcher: Watcher,
    /// exitprof's pid here (the grandchild of the process started, in a namespace).
    pid: u32,
    /// Its kprobe events' group.
    group: String,
}

impl Instance {
    fn start(mode: &str, namespaced: bool, extra: &[&str]) -> Self {
        let mut command = exitprof();
        if namespaced {
            in_new_pid_namespace(&mut command);
        }
        let mut args = vec!["--all", "--attach", mode, "--no-cpu-stacks", "--no-block-stacks"];
        args.extend(extra);
        let watcher = Watcher::start_command(command, &args);
        let pid = if namespaced { exitprof_in(watcher.id()) } else { watcher.id() };
        let group = format!("exitprof_{}_{}", pid_namespace(pid), if namespaced { 1 } else { pid });
        Self { watcher, pid, group }
    }

    /// Its kprobe events (lines of `kprobe_events`).
    fn events(&self) -> Vec<String> {
        let group = format!(":{}/", self.group);
        exitprof_kprobe_events().into_iter().filter(|e| e.contains(&group)).collect()
    }

    /// Ends it with SIGINT, as Ctrl-C does; its document.
    fn finish(self) -> Value {
        // SAFETY: a process of this test's, still running (its parent, if any, waits for it).
        assert_eq!(unsafe { libc::kill(self.pid as i32, libc::SIGINT) }, 0);
        self.watcher.finish()
    }
}

/// The exitprof that the process `parent` started as the first of a PID namespace.
fn exitprof_in(parent: u32) -> u32 {
    let started = Instant::now();
    loop {
        if let [child] = children_of(parent)[..] {
            return child;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{parent} started no exitprof");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn pid_namespace(pid: u32) -> u64 {
    use std::os::linux::fs::MetadataExt as _;
    std::fs::metadata(format!("/proc/{pid}/ns/pid")).expect("a running process").st_ino()
}

/// Concurrent `synchronize_rcu` calls: `membarrier(MEMBARRIER_CMD_GLOBAL)` waits for an RCU
/// grace period where more than one CPU is online (kernel/sched/membarrier.c), and two threads
/// calling it are inside `synchronize_rcu` together, where a kretprobe with one instance
/// (`maxactive` 1) misses the second.
fn concurrent_grace_periods() {
    /// `MEMBARRIER_CMD_GLOBAL` (include/uapi/linux/membarrier.h).
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    let threads: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                for _ in 0..50 {
                    // SAFETY: membarrier with a command and no flags.
                    let rc =
                        unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
                    assert_eq!(rc, 0, "membarrier: {}", std::io::Error::last_os_error());
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}

fn probe_misses(doc: &Value) -> f64 {
    num(&doc["losses"], "probe_misses")
}

#[test]
fn instances_side_by_side_count_their_own_misses_and_keep_their_events() {
    require_root();
    let offers = KernelOffers::probe();
    let mode = if offers.kprobes { "kprobe" } else { "auto" };
    // The compat object (5.10 to 5.17) follows processes by their pids in the initial PID
    // namespace, and refuses to run in another.
    let plan = crate::support::run_json(&["plan", "--attach", mode]);
    let namespaced = plan["object"]["name"] != "compat";
    if !offers.kprobes {
        eprintln!("this kernel has no kprobes: the instances run in {mode} mode, no event made");
    }
    if !namespaced {
        eprintln!("the compat object: the instances run in the initial PID namespace");
    }
    // One kretprobe instance: a second task inside a probed function at once is a miss.
    let starved = Instance::start(mode, namespaced, &["--kretprobe-maxactive", "1"]);
    let other = Instance::start(mode, namespaced, &[]);
    // One killed hard after it attached leaves its events behind.
    let killed = Instance::start(mode, namespaced, &[]);
    let left = killed.events();
    // SAFETY: processes of this test's: exitprof, then the process that started it, reaped here.
    unsafe {
        assert_eq!(libc::kill(killed.pid as i32, libc::SIGKILL), 0);
        libc::waitpid(killed.watcher.id() as i32, std::ptr::null_mut(), 0);
    }
    for instance in [&starved, &other] {
        assert_eq!(instance.events().len(), left.len(), "{}", instance.group);
    }
    assert_eq!(left.is_empty(), !offers.kprobes, "{left:?}");
    eprintln!("{} kprobe events each, those of the one killed left", left.len());

    concurrent_grace_periods();
    for _ in 0..10 {
        assert!(Command::new("/bin/true").status().expect("/bin/true runs").success());
    }
    // A later run removes the events of the exitprof that is gone, and no other.
    let later = run(&["--json", "--attach", mode, "--", "/bin/true"]);
    assert!(later.status.success(), "{}", String::from_utf8_lossy(&later.stderr));
    let events = exitprof_kprobe_events();
    for line in &left {
        assert!(!events.contains(line), "{line} left after a later run: {events:?}");
    }
    let (starved_events, other_events) = (starved.events().len(), other.events().len());
    assert_eq!((starved_events, other_events), (left.len(), left.len()), "{events:?}");

    let (starved, other) = (starved.finish(), other.finish());
    for doc in [&starved, &other] {
        assert!(num(doc, "exits_recorded") >= 11.0, "{}", doc["exits_recorded"]);
    }
    eprintln!(
        "probe misses: {} with one kretprobe instance, {} beside it",
        probe_misses(&starved),
        probe_misses(&other)
    );
    if offers.kprobes {
        assert!(probe_misses(&starved) > 0.0, "no miss forced: {}", starved["losses"]);
        assert_eq!(probe_misses(&other), 0.0, "another's misses counted: {}", other["losses"]);
    }
    assert!(exitprof_kprobe_events().is_empty(), "{:?}", exitprof_kprobe_events());
}
