//! Every workload end to end on the running kernel: the exits recorded are exactly the exits the
//! workload made, the drivers' own left out.

use std::{
    fs,
    io::Write as _,
    os::unix::{ffi::OsStrExt as _, fs::symlink},
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::support::{Watcher, num, require_root, run_json};

/// Requires exactly `expected` exits recorded and none lost.
fn assert_exits(doc: &Value, expected: u64, what: &str) {
    let recorded = num(doc, "exits_recorded");
    let lost = num(doc, "lost");
    assert_eq!(
        recorded, expected as f64,
        "{what}: expected {expected} exits, recorded {recorded}, lost {lost} ({})",
        doc["losses"]
    );
    assert_eq!(lost, 0.0, "{what}: losses {}", doc["losses"]);
}

/// A storm's own accounting: expected, created and recorded agree, and it used CPU time.
fn assert_storm(args: &[&str], expected: u64) -> Value {
    require_root();
    let doc = run_json(args);
    assert_eq!(num(&doc, "exits_expected"), expected as f64, "{args:?}");
    assert_eq!(num(&doc, "tasks_created"), expected as f64, "{args:?}: tasks created");
    assert_exits(&doc, expected, &format!("{args:?}"));
    let (user, sys) = (num(&doc, "user_s"), num(&doc, "sys_s"));
    assert!(user + sys > 0.0, "{args:?}: the storm used no CPU time? user {user} sys {sys}");
    let (elapsed, rate) = (num(&doc, "elapsed_s"), num(&doc, "exit_rate"));
    assert!(elapsed > 0.0, "{args:?}: elapsed {elapsed}");
    let seed_rate = expected as f64 / elapsed;
    assert!(
        (rate / seed_rate - 1.0).abs() < 1e-9,
        "{args:?}: exit rate {rate}, (created + exited) / elapsed / 2 = {seed_rate}"
    );
    doc
}

#[test]
fn threads_storm_records_every_thread_exit() {
    assert_storm(&["--workload", "threads", "--threads", "16", "--reps", "4"], 64);
}

#[test]
fn fork_storm_records_every_child_exit() {
    let doc = assert_storm(&["--workload", "fork", "--count", "64"], 64);
    assert_eq!(doc["workload"]["kind"], "fork");
}

#[test]
fn ipcns_storm_records_every_child_exit() {
    let doc = assert_storm(&["--workload", "ipcns", "--count", "64"], 64);
    assert_eq!(doc["workload"]["kind"], "ipcns");
}

/// Each exit of a netns storm leaves a namespace of its own: every one is accounted once, joined
/// to its teardown, outlived by it (its free unseen) or its teardown not seen, however the
/// kernel reuses the namespaces' memory (the next namespace mostly takes the last one's address).
#[test]
fn netns_storm_accounts_every_namespace_once() {
    let count = 300;
    let args = ["--workload", "netns", "--count", "300", "--veth-pairs", "1"];
    let doc = assert_storm(&args, count);
    let net = &doc["teardowns"]["net"];
    let (joined, outlived, not_seen) =
        (num(net, "joined"), num(net, "outlived"), num(net, "not_seen"));
    assert_eq!(joined + outlived + not_seen, count as f64, "{net:#}");
    assert!(joined >= 0.9 * count as f64, "{net:#}");
}

#[test]
fn parallel_loops_leave_their_drivers_out() {
    assert_storm(&["--workload", "fork", "--count", "64", "--parallel", "2"], 64);
    assert_storm(&["--workload", "ipcns", "--count", "63", "--parallel", "2"], 63);
}

#[test]
fn paced_threads_storm_reaches_its_rate() {
    require_root();
    let args = ["--threads", "100", "--reps", "10", "--rate", "2000"];
    let doc = run_json(&args);
    assert_exits(&doc, 1000, "paced storm");
    let rate = &doc["rate"];
    let achieved = num(&doc, "exit_rate");
    assert_eq!(rate["reached"], true, "target 2000 exits/s, achieved {achieved}: {rate}");
    assert_eq!(rate["staggers_ns"].as_array().map(Vec::len), Some(10), "{rate}");
    assert!(num(rate, "burst_max") >= 2000.0, "{rate}");
}

#[test]
fn a_command_is_profiled_with_its_descendants() {
    require_root();
    // The shell and the five processes it forks; each child execs /bin/true and exits once.
    let doc = run_json(&["--", "sh", "-c", "for i in 1 2 3 4 5; do /bin/true; done"]);
    assert_exits(&doc, 6, "sh and its 5 children");
    assert_eq!(doc["exits_expected"], Value::Null);
    assert_eq!(doc["tasks_created"], Value::Null);
    assert_eq!(doc["workload"]["kind"], "command");
    assert!(doc["user_s"].is_number(), "a command is exitprof's child: {}", doc["user_s"]);
}

/// A FIFO in a fresh directory, for a shell to wait on.
fn fifo(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("exitprof-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join("go");
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo {}", path.display());
    path
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < Duration::from_secs(10), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn pid_follows_the_process_and_the_children_it_had_and_forks() {
    require_root();
    let go = fifo("pid");
    // The outer shell already has its inner shell when exitprof starts watching; the inner one
    // waits on the FIFO, then forks two processes; the outer forks one more after it.
    let script = format!(
        "sh -c 'read x < {go}; /bin/true; /bin/true; exit 0' & wait; /bin/true; exit 0",
        go = go.display()
    );
    let mut target = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let pid = target.id();
    let children = format!("/proc/{pid}/task/{pid}/children");
    wait_for("the inner shell", || {
        fs::read_to_string(&children).is_ok_and(|c| !c.trim().is_empty())
    });

    let watcher = Watcher::start(&["--pid", &pid.to_string(), "--duration", "30"]);
    fs::OpenOptions::new().write(true).open(&go).unwrap().write_all(b"go\n").unwrap();
    let doc = watcher.finish();
    target.wait().unwrap();
    fs::remove_dir_all(go.parent().unwrap()).unwrap();

    // inner: 2 x /bin/true + itself; outer: 1 x /bin/true + itself.
    assert_exits(&doc, 5, "the watched shell and its descendants");
    assert_eq!(doc["ended"], "process-exited");
    assert_eq!(doc["user_s"], Value::Null, "no rusage for a process exitprof did not start");
}

#[test]
fn comm_records_tasks_by_name() {
    require_root();
    let dir = std::env::temp_dir().join(format!("exitprof-comm-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    // The task name is the executable's file name: a unique one for this test.
    let name = format!("xpc{}", std::process::id());
    let program = dir.join(&name);
    symlink("/bin/true", &program).unwrap();

    let watcher = Watcher::start(&["--comm", &name]);
    for _ in 0..5 {
        assert!(Command::new(&program).status().unwrap().success());
    }
    watcher.signal(libc::SIGINT);
    let doc = watcher.finish();
    fs::remove_dir_all(&dir).unwrap();

    assert_exits(&doc, 5, &format!("tasks named {name}"));
    assert_eq!(doc["ended"], "signal");
    assert_eq!(doc["partial"], false, "Ctrl-C is how a --comm run ends");
}

#[test]
fn all_records_exits_of_the_whole_machine() {
    require_root();
    let watcher = Watcher::start(&["--all", "--duration", "2"]);
    for _ in 0..5 {
        assert!(Command::new("/bin/true").status().unwrap().success());
    }
    let doc = watcher.finish();
    let recorded = num(&doc, "exits_recorded");
    assert!(recorded >= 5.0, "5 /bin/true ran while watching, {recorded} exits recorded");
    assert_eq!(doc["ended"], "duration");
    let elapsed = num(&doc, "elapsed_s");
    assert!((2.0..3.0).contains(&elapsed), "--duration 2 ran {elapsed} s");
}
