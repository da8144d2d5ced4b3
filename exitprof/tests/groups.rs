//! Exits split by workload (`--group-by`): processes in cgroups of the test's own, each exit in
//! its group, counted exactly, the group of heavy exits blamed on the stage that tears their
//! memory down; and by process name.

use serde_json::Value;

use crate::support::{c_program, cgroups::TestCgroups, num, require_root, run_json};

/// The group named `name` in a run's document.
fn group<'a>(doc: &'a Value, name: &str) -> &'a Value {
    let groups = doc["groups"]["groups"].as_array().expect("a groups section");
    groups.iter().find(|g| g["name"] == name).unwrap_or_else(|| {
        let names: Vec<&Value> = groups.iter().map(|g| &g["name"]).collect();
        panic!("no group {name} among {names:?}")
    })
}

/// The stage of a run's stage table that covers `code`.
fn stage_covering<'a>(doc: &'a Value, code: &str) -> &'a Value {
    doc["stages"].as_array().unwrap()[1..]
        .iter()
        .find(|s| s["covers"].as_array().is_some_and(|c| c.iter().any(|f| f == code)))
        .unwrap_or_else(|| panic!("no stage covers {code}: {}", doc["stages"]))
}

/// Three cgroups at once: two of light exits, one of processes tearing down 256 MiB each.
#[test]
fn exits_of_three_cgroups_go_to_their_groups_and_the_heavy_one_shows_its_teardown() {
    require_root();
    let cgroups = TestCgroups::new("groups");
    let program = c_program("mm_teardown");
    let program = program.to_str().unwrap();
    // (cgroup, MiB, children): each process is the program, exec'd in its cgroup, and its
    // children: children + 1 exits.
    let plan = [("light-a", "1", 20), ("light-b", "1", 30), ("heavy", "256", 2)];
    let mut script = String::new();
    for (name, mib, children) in plan {
        cgroups.make(name);
        let procs = cgroups.procs(name);
        script +=
            &format!("sh -c 'echo $$ > {} && exec {program} {mib} {children}' & ", procs.display());
    }
    script += "wait";
    let doc = run_json(&["--group-by", "cgroup", "--", "sh", "-c", &script]);

    assert_eq!(num(&doc, "lost"), 0.0, "{}", doc["losses"]);
    let total: f64 =
        doc["groups"]["groups"].as_array().unwrap().iter().map(|g| num(g, "exits")).sum();
    assert_eq!(total, num(&doc, "exits_recorded"), "every exit in one group");
    for (name, _, children) in plan {
        let g = group(&doc, &cgroups.kernel_path(name));
        assert_eq!(num(g, "exits"), f64::from(children + 1), "{name}: {g}");
    }
    // The heavy group's time is its teardown, in the stage that covers exit_mm; it is the
    // slowest group, by far.
    let heavy = group(&doc, &cgroups.kernel_path("heavy"));
    let teardown = stage_covering(&doc, "exit_mm");
    assert_eq!(heavy["top_stage"], teardown["name"], "{heavy}");
    assert!(num(heavy, "top_stage_share") > 0.5, "{heavy}");
    assert_eq!(doc["groups"]["groups"][0]["name"], heavy["name"], "the slowest group first");
    for light in ["light-a", "light-b"] {
        let g = group(&doc, &cgroups.kernel_path(light));
        assert!(num(heavy, "p50_ns") > 10.0 * num(g, "p50_ns"), "{heavy} against {g}");
    }
}

/// By process name: the exits of a program's processes under its name, in the report and in
/// the exports, each group's whole exit a series labelled with it.
#[test]
fn exits_are_grouped_by_their_process_name() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (prom, csv) = (dir.path().join("run.prom"), dir.path().join("run.csv"));
    let program = c_program("mm_teardown");
    let doc = run_json(&[
        "--group-by",
        "comm",
        "--export",
        prom.to_str().unwrap(),
        "--export",
        csv.to_str().unwrap(),
        "--",
        program.to_str().unwrap(),
        "1",
        "6",
    ]);
    let g = group(&doc, "mm_teardown");
    assert_eq!(num(g, "exits"), 7.0, "{g}");
    assert_eq!(num(&doc, "exits_recorded"), 7.0);

    let prom = std::fs::read_to_string(prom).unwrap();
    let count = prom
        .lines()
        .find(|l| l.contains("_count{") && l.contains(r#"group="mm_teardown""#))
        .unwrap_or_else(|| panic!("no series of the group:\n{prom}"));
    assert!(count.ends_with(" 7"), "{count}");
    let csv = std::fs::read_to_string(csv).unwrap();
    assert!(csv.lines().next().unwrap().split(',').any(|c| c == "group"), "{csv}");
    assert!(csv.lines().any(|l| l.starts_with("exit,,,mm_teardown,")), "{csv}");
}

/// A comparison groups each side's exits: every exit of a side in one of its groups.
#[test]
fn each_side_of_a_comparison_has_its_groups() {
    require_root();
    let doc = run_json(&[
        "compare",
        "--toggle",
        "delayacct",
        "--runs",
        "1",
        "--group-by",
        "comm",
        "--workload",
        "fork",
        "--count",
        "100",
    ]);
    for side in ["on", "off"] {
        let groups = doc[side]["groups"]["groups"].as_array().expect("a side's groups");
        let grouped: f64 = groups.iter().map(|g| num(g, "exits")).sum();
        assert_eq!(grouped, num(&doc[side], "exits_recorded"), "{side}: {groups:?}");
        assert!(grouped >= 100.0, "{side}: {grouped} exits");
    }
}

/// A process may be named `other`, as the group of the exits past `--max-groups` is: its exits
/// are its own group's (named with a backslash before), never counted with the overflow's.
#[test]
fn a_process_named_other_is_not_the_overflow_group() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let mut script = String::new();
    for name in ["other", "third", "fourth"] {
        let program = dir.path().join(name);
        std::os::unix::fs::symlink("/bin/true", &program).unwrap();
        script.push_str(&format!("{}; ", program.display()));
    }
    script.push_str("exit 0");
    let doc = run_json(&["--group-by", "comm", "--max-groups", "2", "--", "sh", "-c", &script]);
    let groups = &doc["groups"];
    let exits_of = |name: &str| -> f64 {
        let all = groups["groups"].as_array().unwrap();
        all.iter().find(|g| g["name"] == name).map_or(0.0, |g| num(g, "exits"))
    };
    // `other` and `third` come first, each a group; `fourth` and the shell overflow.
    assert_eq!(exits_of("\\other"), 1.0, "{groups}");
    assert_eq!(exits_of("third"), 1.0, "{groups}");
    assert_eq!(num(groups, "overflowed_exits"), 2.0, "{groups}");
    assert_eq!(exits_of("other"), 2.0, "the overflow group holds the overflowed exits: {groups}");
}
