//! The command line as a whole: parsing, the checks clap cannot express, and the requests.

use std::time::Duration;

use clap::ValueEnum as _;
use exitprof_core::{analysis::records::TaskName, diff::Input, export::Format};
use exitprof_engine::{
    conditions::Condition,
    probes::plan::PointSet,
    profiled::{ForkParams, NetnsParams, Storm, Target, ThreadsParams},
    run::record::view::Shown,
    serve,
};
use proptest::{collection::vec, prelude::*};

use super::{hidden::*, parse::*, probes::*, values::*, *};

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_checked(std::iter::once("exitprof").chain(args.iter().copied()))
}

fn target(args: &[&str]) -> Target {
    parse(args).unwrap().run.target()
}

#[test]
fn defaults_are_the_2006_benchmark() {
    let cli = parse(&[]).unwrap();
    let benchmark = ThreadsParams { threads: 1000, reps: 10, stagger_us: 2, rate: None };
    assert_eq!(cli.run.target(), Target::Storm(Storm::Threads(benchmark)));
    assert!(!cli.run.json);
    let fork = ForkParams { count: 1024, parallel: 1 };
    assert_eq!(target(&["--workload", "ipcns"]), Target::Storm(Storm::Ipcns(fork)));
    let netns = NetnsParams { forks: ForkParams { count: 3, parallel: 1 }, veth_pairs: 100 };
    assert_eq!(
        target(&["--workload", "netns", "--count", "3", "--veth-pairs", "100"]),
        Target::Storm(Storm::Netns(netns))
    );
    let err = parse(&["--workload", "ipcns", "--veth-pairs", "4"]).unwrap_err();
    assert!(err.to_string().contains("--veth-pairs applies to --workload netns only"), "{err}");
}

#[test]
fn flags_are_read() {
    let cli = parse(&[
        "--workload",
        "threads",
        "--threads",
        "50",
        "--reps",
        "3",
        "--stagger-us",
        "0",
        "--json",
    ])
    .unwrap();
    let params = ThreadsParams { threads: 50, reps: 3, stagger_us: 0, rate: None };
    assert_eq!(cli.run.target(), Target::Storm(Storm::Threads(params)));
    assert!(cli.run.json);
    let Target::Storm(Storm::Threads(p)) = target(&["--rate", "5000"]) else { panic!() };
    assert_eq!(p.rate, Some(5000));
    assert_eq!(
        target(&["--workload", "fork", "--count", "64", "--parallel", "2"]),
        Target::Storm(Storm::Fork(ForkParams { count: 64, parallel: 2 }))
    );
}

#[test]
fn file_modes_are_octal_on_every_command() {
    assert_eq!(parse(&[]).unwrap().file_mode, None);
    assert_eq!(parse(&["--file-mode", "644"]).unwrap().file_mode, Some(0o644));
    let record = parse(&["record", "-o", "run.rec", "--file-mode", "0640"]).unwrap();
    assert_eq!(record.file_mode, Some(0o640));
    assert_eq!(parse(&["report", "x.rec", "--file-mode", "0o600"]).unwrap().file_mode, Some(0o600));
    for bad in ["888", "1777", "rw-r--r--", ""] {
        let error = parse(&["--file-mode", bad]).unwrap_err().to_string();
        assert!(error.contains("not a file mode in octal"), "{bad}: {error}");
    }
}

#[test]
fn sampling_is_on_by_default_and_off_when_asked() {
    let hz = |args: &[&str]| parse(args).unwrap().run.probes.options().sample_hz;
    assert_eq!(hz(&[]), DEFAULT_SAMPLE_HZ);
    assert_eq!(hz(&["--sample-hz", "4999"]), 4999);
    assert_eq!(hz(&["--no-cpu-stacks"]), 0);
}

#[test]
fn targets_are_read() {
    assert_eq!(
        target(&["--", "sh", "-c", "true"]),
        Target::Command(vec!["sh".into(), "-c".into(), "true".into()])
    );
    assert_eq!(target(&["--pid", "42", "--duration", "1.5"]), Target::Pid(42));
    assert_eq!(target(&["--comm", "nginx"]), Target::Comm("nginx".into()));
    assert_eq!(
        target(&["--cgroup", "/sys/fs/cgroup/a"]),
        Target::Cgroup("/sys/fs/cgroup/a".into())
    );
    assert_eq!(target(&["--all"]), Target::All);
    let cli = parse(&["--all", "--duration", "0.25"]).unwrap();
    assert_eq!(cli.run.duration, Some(Duration::from_millis(250)));
}

#[test]
fn bad_values_are_usage_errors() {
    for args in [
        &["--threads", "0"][..],
        &["--reps", "-1"],
        &["--reps", "0"],
        &["--workload", "nosuch"],
        &["--stagger-us", "x"],
        &["--ringbuf-bytes", "5000"],
        &["--rate", "0"],
        &["--workload", "fork", "--count", "0"],
        &["--workload", "fork", "--parallel", "0"],
        &["--pid", "0"],
        &["--comm", "a-name-longer-than-15"],
        &["--comm", ""],
        &["--all", "--duration", "0"],
        &["--all", "--duration", "-1"],
        &["--sample-hz", "0"],
        &["--sample-hz", "20001"],
        &["--sample-hz", "99", "--no-cpu-stacks"],
    ] {
        let err = parse(args).unwrap_err();
        assert_ne!(err.kind(), ErrorKind::DisplayHelp, "{args:?}");
        assert_eq!(err.exit_code(), 2, "{args:?}");
    }
}

#[test]
fn exports_take_their_format_from_the_extension_or_format() {
    let cli = parse(&["--export", "a.csv", "--export", "dir/b.txt", "--format", "csv"]).unwrap();
    let targets = cli.run.export_targets().unwrap();
    let formats: Vec<Format> = targets.iter().map(|t| t.format).collect();
    assert_eq!(formats, [Format::Csv, Format::Csv]);
    assert_eq!(targets[1].path, PathBuf::from("dir/b.txt"));
    assert!(parse(&[]).unwrap().run.export_targets().unwrap().is_empty());
}

#[test]
fn exports_of_unknown_format_are_usage_errors() {
    for args in [&["--export", "out.txt"][..], &["--export", "out.json", "--format", "prom"]] {
        let err = parse(args).unwrap().run.export_targets().unwrap_err();
        assert_eq!(err.exit_code(), 2, "{args:?}");
    }
    for args in [&["--format", "csv"][..], &["--export", "a.csv", "--format", "xml"]] {
        assert_eq!(parse(args).unwrap_err().exit_code(), 2, "{args:?}");
    }
}

#[test]
fn one_target_at_a_time() {
    for args in [
        &["--workload", "fork", "--all"][..],
        &["--pid", "1", "--comm", "x"],
        &["--all", "--", "true"],
        &["--workload", "threads", "--", "true"],
    ] {
        let err = parse(args).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ArgumentConflict, "{args:?}: {err}");
    }
}

#[test]
fn serve_watches_every_exit_on_loopback_unless_told() {
    let serve = |args: &[&str]| {
        let cli = parse(&[&["serve"], args].concat())?;
        let Some(Command::Serve(serve)) = cli.command else { panic!("not serve: {args:?}") };
        Ok::<_, clap::Error>(serve.request())
    };
    let default = serve(&[]).unwrap();
    assert_eq!(default.target, Target::All);
    assert_eq!(default.listen.to_string(), "127.0.0.1:19100");
    assert_eq!(default.probes.syscall_tracepoints, Some(false));
    assert!(!default.probes.block_stacks && default.probes.sample_hz == 0);
    assert_eq!(serve(&["--comm", "nginx"]).unwrap().target, Target::Comm("nginx".to_owned()));
    assert_eq!(serve(&["--cgroup", "/a"]).unwrap().target, Target::Cgroup("/a".into()));
    let pid = serve(&["--pid", "7", "--listen", "[::]:9000"]).unwrap();
    assert_eq!((pid.target, pid.listen.port()), (Target::Pid(7), 9000));
    for (args, kind) in [
        (&["--all", "--pid", "1"][..], ErrorKind::ArgumentConflict),
        (&["--comm", "a", "--pid", "1"], ErrorKind::ArgumentConflict),
        (&["--listen", "localhost"], ErrorKind::ValueValidation),
        (&["--workload", "fork"], ErrorKind::UnknownArgument),
    ] {
        let err = serve(args).err().unwrap_or_else(|| panic!("{args:?} accepted"));
        assert_eq!(err.kind(), kind, "{args:?}: {err}");
        assert_eq!(err.exit_code(), 2, "{args:?}");
    }
}

/// `--group-ttl` takes its default's form (`10m`), and any of the units, or seconds.
#[test]
fn group_ttl_takes_a_time_with_its_unit() {
    let ttl = |args: &[&str]| {
        let cli = parse(&[&["serve", "--group-by", "cgroup"], args].concat())?;
        let Some(Command::Serve(serve)) = cli.command else { panic!("not serve: {args:?}") };
        Ok::<_, clap::Error>(serve.request().groups.and_then(|g| g.ttl))
    };
    let secs = |s: u64| Some(Duration::from_secs(s));
    assert_eq!(ttl(&[]).unwrap(), Some(serve::GROUP_TTL));
    assert_eq!(serve::GROUP_TTL, Duration::from_secs(600), "the help's [default: 10m]");
    for (time, expected) in [("10m", secs(600)), ("90s", secs(90)), ("2", secs(2))] {
        assert_eq!(ttl(&["--group-ttl", time]).unwrap(), expected, "{time}");
    }
    assert_eq!(ttl(&["--group-ttl", "1.5h"]).unwrap(), secs(5400));
    assert_eq!(ttl(&["--group-ttl", "500ms"]).unwrap(), Some(Duration::from_millis(500)));
    for bad in ["0", "0s", "--group-ttl=-1m", "10x", "m", "1d"] {
        let args: &[&str] = if bad.starts_with("--") { &[bad] } else { &["--group-ttl", bad] };
        let err = ttl(args).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ValueValidation, "{bad}: {err}");
    }
}

#[test]
fn options_must_fit_their_target() {
    for (args, flag) in [
        (&["--workload", "fork", "--threads", "5"][..], "--threads"),
        (&["--count", "5"], "--count"),
        (&["--all", "--parallel", "2"], "--parallel"),
        (&["--duration", "1"], "--duration"),
        (&["--duration", "1", "--", "true"], "--duration"),
        (&["--pid", "1", "--rate", "10"], "--rate"),
        (&["--rate", "10", "--stagger-us", "3"], "--stagger-us"),
    ] {
        let err = parse(args).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{args:?}");
        assert!(err.to_string().contains(flag), "{args:?}: {err}");
    }
}

#[test]
fn a_sweep_sets_the_stagger_itself() {
    for (extra, flag) in [(["--rate", "5000"], "--rate"), (["--stagger-us", "3"], "--stagger-us")] {
        let args = [&["sweep", "--toggle", "probes", "--stagger", "0,1"][..], &extra].concat();
        let err = parse(&args).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{args:?}");
        let text = err.to_string();
        assert!(text.contains(flag) && text.contains("--stagger"), "{args:?}: {err}");
    }
}

#[test]
fn bpf_stats_is_for_plain_runs() {
    assert!(parse(&["--bpf-stats", "--json"]).unwrap().run.bpf_stats);
    assert!(!parse(&[]).unwrap().run.bpf_stats);
    for args in [
        &["compare", "--toggle", "probes", "--bpf-stats"][..],
        &["sweep", "--toggle", "probes", "--stagger", "1,2", "--bpf-stats"],
    ] {
        let err = parse(args).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{args:?}");
        assert!(err.to_string().contains("--bpf-stats"), "{args:?}: {err}");
    }
}

#[test]
fn the_point_set_is_full_unless_asked_and_compare_toggles_it_itself() {
    assert_eq!(parse(&[]).unwrap().run.probes.options().points, PointSet::Full);
    let minimal = parse(&["--points", "minimal"]).unwrap();
    assert_eq!(minimal.run.probes.options().points, PointSet::Minimal);
    let toggled = parse(&["compare", "--toggle", "point-set"]).unwrap();
    let Some(Command::Compare(compare)) = toggled.command else { panic!("not compare") };
    assert_eq!(Condition::from(compare.toggle), Condition::PointSet);
    let err = parse(&["compare", "--toggle", "point-set", "--points", "minimal"]).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("--points minimal"), "{err}");
}

#[test]
fn record_takes_a_plain_runs_options_and_report_a_file() {
    let cli =
        parse(&["record", "-o", "run.rec", "--threads", "200", "--reps", "2", "--json"]).unwrap();
    let Some(Command::Record(record)) = cli.command else { panic!("not record") };
    let request = record.request();
    assert_eq!(request.record, Some(PathBuf::from("run.rec")));
    let params = ThreadsParams { threads: 200, reps: 2, stagger_us: 2, rate: None };
    assert_eq!(request.target, Target::Storm(Storm::Threads(params)));
    assert!(request.json);
    assert!(parse(&[]).unwrap().run.request().record.is_none());
    for args in [
        &["record", "-o", "r", "--bpf-stats", "--points", "minimal"][..],
        &["record", "--output", "r", "--all", "--duration", "1"],
    ] {
        assert!(parse(args).is_ok(), "{args:?}");
    }
    for args in [
        &["record", "--threads", "5"][..],
        &["record", "-o", "r", "--workload", "fork", "--threads", "5"],
        &["record", "-o", "r", "--all", "--", "true"],
    ] {
        assert_eq!(parse(args).unwrap_err().exit_code(), 2, "{args:?}");
    }
    let cli = parse(&["report", "run.rec", "--json", "--export", "a.csv"]).unwrap();
    let Some(Command::Report(report)) = cli.command else { panic!("not report") };
    assert_eq!((report.file, report.json), (PathBuf::from("run.rec"), true));
    assert_eq!(report.exports, [PathBuf::from("a.csv")]);
    for args in [&["report"][..], &["report", "run.rec", "--threads", "5"]] {
        assert_eq!(parse(args).unwrap_err().exit_code(), 2, "{args:?}");
    }
}

#[test]
fn report_views_are_read() {
    let view = |args: &[&str]| {
        let cli = parse(&[&["report", "run.rec"][..], args].concat()).unwrap();
        let Some(Command::Report(report)) = cli.command else { panic!("not report") };
        report.view()
    };
    let v = view(&["--pid", "42", "--by-kind"]);
    assert!(v.pid == Some(42) && matches!(v.shown, Shown::ByKind));
    let v = view(&["--stage", "exit_mm"]);
    assert!(v.pid.is_none() && matches!(v.shown, Shown::Stage(ref s) if s == "exit_mm"));
    assert!(matches!(view(&[]).shown, Shown::Report));
    assert_eq!(view(&["--comm", "sh"]).comm, Some(TaskName::of("sh")));
    for args in [
        &["report", "r", "--by-kind", "--stage", "x"][..],
        &["report", "r", "--pid", "0"],
        &["report", "r", "--pid", "1", "--comm", "sh"],
        &["report", "r", "--comm", "a-name-of-16-byte"],
    ] {
        assert_eq!(parse(args).unwrap_err().exit_code(), 2, "{args:?}");
    }
}

#[test]
fn workload_child_parses() {
    let cli = parse(&["__workload", "--channel-fd", "5", "threads", "--threads", "4"]).unwrap();
    let Some(Command::Driver(child)) = cli.command else { panic!("not a workload child") };
    assert_eq!(child.channel_fd, Some(5));
    let DriverCommand::Threads(p) = child.command else { panic!("not threads") };
    assert_eq!(p.threads, 4);
    let cli = parse(&["__workload", "exec", "--program", "/bin/sh", "sh", "-c", "true"]).unwrap();
    let Some(Command::Driver(child)) = cli.command else { panic!("not a workload child") };
    let DriverCommand::Exec { program, argv } = child.command else { panic!("not exec") };
    assert_eq!(program, "/bin/sh");
    assert_eq!(argv, ["sh", "-c", "true"]);
}

#[test]
fn diff_reads_two_documents_or_two_sides_split_by_a_double_dash() {
    let diff = |args: &[&str]| {
        let cli = parse(&[&["diff"], args].concat())?;
        let Some(Command::Diff(diff)) = cli.command else { panic!("not diff: {args:?}") };
        Ok::<_, clap::Error>((diff.request()?, diff.export_targets()?))
    };
    let paths = |inputs: &[Input]| -> Vec<String> {
        inputs.iter().map(|i| i.path().display().to_string()).collect()
    };
    let (one_each, _) = diff(&["a.json", "b.json"]).unwrap();
    assert_eq!(
        (paths(&one_each.a), paths(&one_each.b)),
        (vec!["a.json".to_owned()], vec!["b.json".to_owned()])
    );
    let (repeated, exports) =
        diff(&["--json", "--export", "d.svg", "a1", "a2", "a3", "--", "b1", "b2"]).unwrap();
    assert_eq!(
        (paths(&repeated.a), paths(&repeated.b)),
        (
            vec!["a1".to_owned(), "a2".to_owned(), "a3".to_owned()],
            vec!["b1".to_owned(), "b2".to_owned()]
        )
    );
    assert!(repeated.json);
    assert_eq!(exports[0].format, Format::Svg);
    for (args, mentions) in [
        (&["a1", "a2", "a3"][..], "two sides"),
        (&["a"], "two sides"),
        (&["a1", "--", "b1", "--json"], "options go before `--`"),
        (&["--export", "d.csv", "a", "b"], ".json, .svg, .flame.svg or .html"),
    ] {
        let err = diff(args).err().unwrap_or_else(|| panic!("{args:?} accepted"));
        assert_eq!(err.exit_code(), 2, "{args:?}");
        assert!(err.to_string().contains(mentions), "{args:?}: {err}");
    }
    assert_eq!(parse(&["diff"]).unwrap_err().exit_code(), 2);
}

#[test]
fn conditions_are_named_on_the_command_line_as_in_documents() {
    for &arg in ConditionArg::value_variants() {
        let condition = Condition::from(arg);
        assert_eq!(ConditionArg::from_str(condition.name(), false), Ok(arg));
        assert_eq!(serde_json::to_value(condition).unwrap(), condition.name());
    }
}

#[test]
fn the_command_line_definition_is_consistent() {
    Cli::command().debug_assert();
}

/// Words of exitprof's command lines, good and bad, and some odd values.
const WORDS: &[&str] = &[
    "--threads",
    "--reps",
    "--stagger-us",
    "--rate",
    "--workload",
    "threads",
    "fork",
    "ipcns",
    "netns",
    "--veth-pairs",
    "--count",
    "--parallel",
    "--pid",
    "--comm",
    "--all",
    "--duration",
    "--json",
    "--export",
    "--format",
    "csv",
    "json",
    "--ringbuf-bytes",
    "--attach",
    "kprobe",
    "fentry",
    "auto",
    "--kretprobe-maxactive",
    "--",
    "plan",
    "compare",
    "sweep",
    "diff",
    "a.json",
    "--toggle",
    "delayacct",
    "probes",
    "taskstats-listener",
    "--runs",
    "--stagger",
    "--rcvbuf",
    "-v",
    "__workload",
    "__condition",
    "on",
    "off",
    "exec",
    "--program",
    "--channel-fd",
    "record",
    "-o",
    "report",
    "run.rec",
    "--help",
    "0",
    "1",
    "-1",
    "4096",
    "1.5",
    "nan",
    "inf",
    "1e400",
    "5,10,x",
    "a.csv",
    "b.txt",
    "",
    "x",
    "18446744073709551616",
];

proptest! {
    /// Any command line parses or is refused as bad usage (status 2), never a panic; what
    /// parses yields a target and export targets.
    #[test]
    fn any_command_line_parses_or_is_a_usage_error(
        words in vec(prop_oneof![
            4 => proptest::sample::select(WORDS).prop_map(str::to_owned),
            1 => any::<String>(),
        ], 0..10)
    ) {
        match parse(&words.iter().map(String::as_str).collect::<Vec<_>>()) {
            Ok(cli) => {
                let refused = match &cli.command {
                    Some(Command::Diff(diff)) => {
                        diff.request().err().or_else(|| diff.export_targets().err())
                    }
                    Some(Command::Report(report)) => report.export_targets().err(),
                    _ => None,
                };
                if let Some(e) = refused
                {
                    prop_assert_eq!(e.exit_code(), 2);
                }
                let run = match &cli.command {
                    None => Some(&cli.run),
                    Some(Command::Record(r)) => Some(&r.run),
                    Some(Command::Compare(c)) => Some(&c.run),
                    Some(Command::Sweep(s)) => Some(&s.compare.run),
                    Some(_) => None,
                };
                if let Some(run) = run {
                    let _ = run.target();
                    if let Err(e) = run.export_targets() {
                        prop_assert_eq!(e.exit_code(), 2);
                    }
                }
            }
            Err(e) if e.kind() == ErrorKind::DisplayHelp => {}
            Err(e) => prop_assert_eq!(e.exit_code(), 2, "{}", e),
        }
    }

    #[test]
    fn durations_are_positive_and_finite(text in any::<String>(), secs in 1e-9f64..1e9) {
        if let Ok(d) = parse_duration(&text) {
            prop_assert!(d > Duration::ZERO);
        }
        let d = parse_duration(&secs.to_string()).unwrap();
        prop_assert!((d.as_secs_f64() - secs).abs() <= 1e-9 * secs.max(1.0));
    }

    #[test]
    fn task_names_are_the_kernels(text in any::<String>()) {
        let fits = (1..=COMM_MAX).contains(&text.len()) && !text.contains('\0');
        prop_assert_eq!(parse_comm(&text).ok(), fits.then(|| text.clone()));
    }

    #[test]
    fn ring_buffer_sizes_are_powers_of_two_of_a_page_or_more(n in any::<u32>()) {
        let fits = n >= 4096 && n.is_power_of_two();
        prop_assert_eq!(parse_ringbuf_size(&n.to_string()).ok(), fits.then_some(n));
    }

    #[test]
    fn a_stagger_list_is_read_whole(staggers in vec(any::<u32>(), 1..8)) {
        let list = staggers.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let cli = parse(&["sweep", "--toggle", "probes", "--stagger", &list]).unwrap();
        let Some(Command::Sweep(sweep)) = cli.command else { panic!("not a sweep") };
        prop_assert_eq!(sweep.staggers, staggers);
    }
}
