//! What the kernel side keeps of an exit (its slot, its refusal, its process's mark waiting for
//! an heir, the watch on its task's free, an awaited free) goes with the exit: read from the
//! kernel's maps while exitprof still runs, once the exits are over.

use std::{
    collections::HashSet,
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

use crate::support::{HeldMaps, KilledOnDrop, Watcher, c_program, num, require_root};

/// Processes deeper than the kernel side's walk up the ancestry (64 generations; 24 with the
/// compat object): their exits cannot be told followed or not, and are refused.
const DEEPER_THAN_THE_WALK: &str = "100";

/// Chains of processes deeper than the walk, one after the other, until dropped.
struct DeepChurn {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<u32>>,
}

impl DeepChurn {
    fn start() -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let program = c_program("deep_tree");
        let thread = thread::spawn({
            let stop = stop.clone();
            move || {
                let mut chains = 0;
                while !stop.load(Ordering::Relaxed) {
                    let status = Command::new(&program).arg(DEEPER_THAN_THE_WALK).status();
                    assert!(status.is_ok_and(|s| s.success()), "deep_tree failed");
                    chains += 1;
                }
                chains
            }
        });
        Self { stop, thread: Some(thread) }
    }

    /// Stops it; how many chains ran.
    fn stop(mut self) -> u32 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// Entries of `map` whose `u32` value (a pid) names no task, in two reads 200 ms apart: kept for
/// a task that is gone. (An entry of a task that ends between the two reads goes with it.)
fn kept_for_gone_tasks(maps: &HeldMaps, map: &str) -> Vec<u32> {
    let gone = |maps: &HeldMaps| -> HashSet<(Vec<u8>, u32)> {
        maps.entries(map)
            .into_iter()
            .map(|(key, value)| (key, u32::from_ne_bytes(value[..4].try_into().unwrap())))
            .filter(|(_, pid)| !Path::new(&format!("/proc/{pid}")).exists())
            .collect()
    };
    let first = gone(maps);
    thread::sleep(Duration::from_millis(200));
    first.intersection(&gone(maps)).map(|&(_, pid)| pid).collect()
}

/// Reaps the children this process was left (it may be a subreaper), without waiting.
fn reap_orphans() {
    // SAFETY: waitpid on any child of ours, without blocking.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
}

/// Holds the exit of `pid` at its exit stop, as a tracer (`PTRACE_O_TRACEEXIT`) does, until
/// dropped. Attached to a task that has not begun its exit.
struct ExitHeld(libc::pid_t);

impl ExitHeld {
    fn attach(pid: u32) -> Self {
        let pid = pid as libc::pid_t;
        // SAFETY: attaching to a task of the test's own; no memory is passed.
        let seized = unsafe {
            libc::ptrace(libc::PTRACE_SEIZE, pid, 0, libc::c_long::from(libc::PTRACE_O_TRACEEXIT))
        };
        assert_eq!(seized, 0, "PTRACE_SEIZE {pid}: {}", std::io::Error::last_os_error());
        Self(pid)
    }

    /// Waits for the task to stop in its exit.
    fn wait_for_exit_stop(&self) {
        let mut status = 0;
        // SAFETY: waiting for our tracee, into a local.
        let waited = unsafe { libc::waitpid(self.0, &raw mut status, libc::__WALL) };
        assert_eq!(waited, self.0, "waitpid {}: {}", self.0, std::io::Error::last_os_error());
        assert_eq!(status >> 8, libc::SIGTRAP | (libc::PTRACE_EVENT_EXIT << 8), "{status:#x}");
    }
}

impl Drop for ExitHeld {
    fn drop(&mut self) {
        // SAFETY: detaching our tracee, stopped at its exit; no memory is passed.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, self.0, 0, 0) };
    }
}

/// A watched process whose last exits are refused (one exit slot, held by its child stopped in
/// its exit by the test): its leader's, which leaves a mark waiting for a thread to take the
/// process over by exec, and its last thread's. Meanwhile other processes on the machine exit
/// deeper than the walk up the ancestry, refused as exitprof attaches and as it watches. Once
/// they are all over (the held child's exit keeps exitprof waiting for it, watching still), the
/// kernel side keeps nothing of them: no refusal of a task that is gone, no awaited free of one,
/// no mark waiting for an heir, no slot but the held exit's.
#[test]
fn nothing_kept_for_an_exit_outlives_it() {
    require_root();
    let process = Command::new(c_program("last_exits_refused"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("last_exits_refused starts");
    let mut process = KilledOnDrop::new(process);
    let pid = process.id();
    let mut stdin = process.child().stdin.take().unwrap();
    let mut stdout = BufReader::new(process.child().stdout.take().unwrap());
    let mut next = |what: &str| -> u32 {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        line.trim().parse().unwrap_or_else(|_| panic!("{what}: {line:?}"))
    };
    let churn = DeepChurn::start();
    // The exits open at their start (the exit syscalls' tracepoints where do_exit cannot be
    // probed): the held child's before its exit stop.
    let args = ["--pid", &pid.to_string(), "--exit-slots", "1", "--syscall-tracepoints", "on"];
    let watcher = Watcher::start(&args);
    let chains = churn.stop();
    stdin.write_all(b"fork\n").unwrap();
    let child = next("the child's pid");
    let held = ExitHeld::attach(child);
    stdin.write_all(b"child exits\n").unwrap();
    held.wait_for_exit_stop();
    stdin.write_all(b"leader exits\n").unwrap();
    let tid = next("the last thread's tid");
    let status = process.take().wait().unwrap();
    assert!(status.success(), "last_exits_refused failed: {status}");
    // Every task's free comes an RCU grace period after its end; exitprof waits (2 s at most)
    // for the held exit, which is in progress.
    thread::sleep(Duration::from_millis(300));

    let maps = HeldMaps::of(watcher.id());
    let refused = kept_for_gone_tasks(&maps, "EXIT_REFUSED");
    let awaited = kept_for_gone_tasks(&maps, "FREES_AWAITED");
    let heirs_waiting = maps.u64_values("HEIRS_WAITING");
    let heirs = maps.entries("HEIRS").len();
    let owners = maps.u64_values("EXIT_OWNERS").into_iter().filter(|&o| o != 0).count();
    drop(held);
    eprintln!(
        "{chains} chains of {DEEPER_THAN_THE_WALK} processes beside; refusals of gone tasks \
         {refused:?}, awaited frees of gone tasks {awaited:?}, heirs waiting {heirs_waiting:?} \
         ({heirs} marks), slots held {owners}"
    );
    let doc = watcher.finish();
    reap_orphans();
    assert!(
        !refused.contains(&pid) && !refused.contains(&tid),
        "the refusals of {pid} and {tid} outlived them"
    );
    assert_eq!(refused, Vec::<u32>::new(), "refusals outlived their tasks");
    assert_eq!(awaited, Vec::<u32>::new(), "awaited frees outlived their tasks");
    assert_eq!((heirs_waiting, heirs), (vec![0], 0), "a mark waits for an heir of a gone process");
    assert_eq!(owners, 1, "slots held, but for the held exit's");
    let losses = &doc["losses"];
    assert_eq!(num(&doc, "exits_recorded"), 1.0, "the held child's: {losses}");
    assert_eq!(num(losses, "state_map_full"), 2.0, "the leader's and the last thread's: {losses}");
}
