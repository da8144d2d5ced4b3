//! `--cgroup PATH`: the exits of the tasks in a cgroup of the v2 hierarchy and below it are the
//! target, decided in the kernel by each exiting task's cgroup ancestry; the exits elsewhere are
//! neither recorded nor counted lost. A path that is no such cgroup is refused, saying why.

use std::process::Command;

use serde_json::Value;

use crate::support::{Watcher, cgroups::TestCgroups, exitprof, num, require_root};

/// Exits in the test's cgroup (`outer`), in a cgroup below it (`outer/inner`) and beside it
/// (`beside`), all while a `record --cgroup outer --slower-than 1s` watches (ended by Ctrl-C,
/// as a watch is): the 21 and 31 exits in and below `outer` are recorded, and no other, none
/// lost; the record's report says the same.
#[test]
fn the_exits_of_a_cgroup_and_below_it_are_recorded_and_no_other() {
    require_root();
    let cgroups = TestCgroups::new("target");
    for name in ["outer", "outer/inner", "beside"] {
        cgroups.make(name);
    }
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("cgroup.rec");
    let outer = cgroups.procs("outer");
    let outer = outer.parent().unwrap().to_str().unwrap();
    let record_path = record.to_str().unwrap();
    let mut recording = exitprof();
    recording.arg("record");
    let watcher = Watcher::start_command(
        recording,
        &["-o", record_path, "--cgroup", outer, "--slower-than", "1s"],
    );
    // Each shell runs in its cgroup (moved there before it execs), with N children: N + 1 exits.
    let run_in = |name: &str, children: u32| {
        let script = format!("i=0; while [ $i -lt {children} ]; do /bin/true; i=$((i+1)); done");
        let mut shell = Command::new("sh");
        shell.args(["-c", &script]);
        cgroups.spawn_in(name, &mut shell)
    };
    let runs = [run_in("outer", 20), run_in("outer/inner", 30), run_in("beside", 25)];
    for mut run in runs {
        assert!(run.wait().unwrap().success());
    }
    watcher.signal(libc::SIGINT);
    let doc: Value = watcher.finish();
    assert_eq!(num(&doc, "lost"), 0.0, "{}", doc["losses"]);
    assert_eq!(num(&doc, "exits_recorded"), 52.0, "21 + 31 exits in and below outer: {doc:#}");
    assert_eq!(doc["workload"]["kind"], "cgroup", "{}", doc["workload"]);
    let report = exitprof().args(["report", record_path, "--json"]).output().unwrap();
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(num(&report, "exits_recorded"), 52.0, "{report:#}");
}

/// A path that is not a cgroup of the v2 hierarchy is refused before anything is loaded, and
/// the error says why: not in a cgroup filesystem, a cgroup's file, a cgroup of a v1 hierarchy
/// (where this machine mounts one), no such path.
#[test]
fn a_path_that_is_no_v2_cgroup_is_refused_clearly() {
    require_root();
    let cgroups = TestCgroups::new("refused");
    cgroups.make("c");
    let procs = cgroups.procs("c");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let v1 = mounts.lines().find_map(|l| {
        let fields: Vec<&str> = l.split_whitespace().collect();
        (fields.get(2) == Some(&"cgroup")).then(|| fields[1].to_owned())
    });
    let mut cases = vec![
        ("/tmp".to_owned(), "is not a cgroup"),
        (procs.display().to_string(), "give its directory"),
        ("/sys/fs/cgroup/no-such-cgroup-here".to_owned(), "No such file"),
    ];
    if let Some(v1) = v1 {
        cases.push((v1, "v1 hierarchy"));
    }
    for (path, why) in cases {
        let out = exitprof().args(["--cgroup", &path, "--duration", "1"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--cgroup {path}: {}\n{stderr}", out.status);
        assert!(stderr.contains(why) && stderr.contains(&path), "--cgroup {path}: {stderr}");
    }
}
