//! The probe effect: how much of each exit is exitprof's own programs running, as the report
//! shows it (`--bpf-stats`), and the proof that the figure is right: the same storm with every
//! probe point and with only an exit's start and end (`compare --toggle point-set`) differs by
//! what the report says the extra points' runs add.

use serde_json::Value;

use crate::support::{attach_mode, c_program, num, require_root, run_json};

/// `exitprof ARGS --attach MODE --no-cpu-stacks -- serial_threads THREADS`: threads that exit
/// one after another, real-time on one CPU, so that nothing else delays them and their spread is
/// their own work's (no sampling either: its ticks would land in some exits and not others).
fn profile_serial_threads(args: &[&str], threads: u32) -> Value {
    let program = c_program("serial_threads");
    let (attach, threads) = (attach_mode(), threads.to_string());
    let tail = ["--attach", &attach, "--no-cpu-stacks", "--", program.to_str().unwrap(), &threads];
    run_json(&[args, &tail].concat())
}

/// The stage rows of a run's document (the whole exit first).
fn stages(doc: &Value) -> &[Value] {
    doc["stages"].as_array().expect("stages is a list")
}

#[test]
fn bpf_stats_show_exitprofs_own_time_beside_each_stage() {
    require_root();
    let doc = profile_serial_threads(&["--bpf-stats"], 300);
    let effect = &doc["probe_effect"];
    let per_exit = num(effect, "ns_per_exit");
    assert!(per_exit > 0.0, "no time of exitprof's own in the exits: {effect}");
    let rows = stages(&doc);
    assert_eq!(num(&rows[0], "probe_effect_ns"), per_exit, "the exit's row: {}", rows[0]);
    // Every run counted in an exit is counted in one of its stages (the stage that starts at its
    // hit): the stages' effects, weighed by the exits through them, add up to the exit's. Only
    // a truncated record's runs are in the whole exit alone, and these exits have far fewer
    // hits than a record holds.
    assert_eq!(num(&doc, "truncated"), 0.0, "truncated records: {}", doc["losses"]);
    let exits = num(&doc, "exits_recorded");
    let in_stages: f64 =
        rows[1..].iter().map(|s| num(s, "probe_effect_ns") * num(s, "count")).sum();
    assert!(
        (in_stages - per_exit * exits).abs() <= 1e-9 * per_exit * exits,
        "the stages hold {in_stages} ns of exitprof's time, the exits {} ns:\n{}",
        per_exit * exits,
        rows.iter()
            .map(|r| format!("{} x{}: {} ns", r["name"], r["count"], r["probe_effect_ns"]))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // exitprof's programs run on the CPU inside the stages they are charged to: no stage is
    // charged more than its own on-CPU time, nor the exit more than its.
    for row in rows {
        let on_cpu = num(row, "mean_ns") * (1.0 - num(row, "off_cpu_share"));
        let effect = num(row, "probe_effect_ns");
        assert!(
            (0.0..=on_cpu).contains(&effect),
            "{} is charged {effect} ns of exitprof's time, its on-CPU time is {on_cpu} ns",
            row["name"]
        );
    }
    // Only programs attached for the exit's points are counted, and each ran as often as the
    // kernel says at least.
    let attached: Vec<&str> = doc["probes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["programs"].as_array().unwrap())
        .filter_map(Value::as_str)
        .collect();
    let kernel = doc["kernel_cost"]["programs"].as_array().unwrap();
    for program in effect["programs"].as_array().unwrap() {
        let name = program["program"].as_str().unwrap();
        assert!(attached.contains(&name), "{name} is not attached for any point: {attached:?}");
        let runs = kernel.iter().find(|k| k["program"] == name).map(|k| num(k, "runs"));
        assert!(
            runs.is_some_and(|runs| runs >= num(program, "runs_in_exits")),
            "{name}: {} runs inside exits, the kernel counted {runs:?}",
            program["runs_in_exits"]
        );
    }
    assert!(num(effect, "share_of_exit") > 0.0 && num(effect, "share_of_exit") < 1.0, "{effect}");

    let without = profile_serial_threads(&[], 10);
    assert!(without["probe_effect"].is_null(), "without --bpf-stats: {}", without["probe_effect"]);
    assert!(stages(&without)[0]["probe_effect_ns"].is_null(), "{}", stages(&without)[0]);
}

/// How far the measured difference may be from the reported one, as a ratio measured /
/// reported. The report prices a hit at its program's run time; the exit also pays what is not
/// in that time — the attach mechanism's dispatch (a tracepoint's call into BPF, a kprobe's
/// breakpoint, a fentry trampoline) and the statistics' own clock reads around each run — so the
/// measured difference is the larger. See `docs/reference/probe-effect.md` for the figures these
/// bounds come from.
const MIN_RATIO: f64 = 0.4;
const MAX_RATIO: f64 = 3.0;

/// Rounds of `compare` in a batch, and batches at most: while the measured difference's
/// confidence interval is not inside the bounds, another batch adds its rounds.
const ROUNDS: &str = "20";
const MAX_BATCHES: usize = 3;

/// The confidence of the interval around the rounds' median difference.
const CONFIDENCE: f64 = 0.95;

/// One `compare --toggle point-set` of threads that exit one after another: each round's
/// 10th-percentile exit with every point minus that with the minimal set, and the difference
/// the report accounts for.
fn point_set_batch() -> (Vec<f64>, f64) {
    // Each run's records fit the ring buffer whole (3000 exits of some 400 bytes; a command's
    // default is 1 MiB): a loss here would be the machine starving exitprof of a CPU, which is
    // not what this test is about (the reliability tests count losses).
    let doc = profile_serial_threads(
        &["compare", "--toggle", "point-set", "--runs", ROUNDS, "--ringbuf-bytes", "4194304"],
        3000,
    );
    for side in ["on", "off"] {
        assert_eq!(num(&doc[side], "lost"), 0.0, "{side}: losses {}", doc[side]["losses"]);
    }
    let minimal = doc["off"]["stages"].as_array().unwrap();
    assert_eq!(minimal.len(), 2, "the minimal point set makes one stage: {minimal:?}");
    let p10s = |side: &str| -> Vec<f64> {
        doc[side]["runs"].as_array().unwrap().iter().map(|r| num(r, "exit_p10_ns")).collect()
    };
    let rounds = p10s("on").iter().zip(p10s("off")).map(|(on, off)| on - off).collect();
    let check = &doc["probe_effect_check"];
    eprintln!(
        "probe effect ({}): every point {:.0} ns per exit, the minimal set {:.0}: reported \
         {:+.0} ns; measured {:+.0} ns (10th percentile, median of {ROUNDS} rounds), {:+.0} ns \
         (medians), {:+.0} ns (means)",
        attach_mode(),
        num(check, "effect_on_ns"),
        num(check, "effect_off_ns"),
        num(check, "reported_ns"),
        num(&check["measured_by_round_ns"], "median"),
        num(check, "measured_median_ns"),
        num(check, "measured_ns"),
    );
    (rounds, num(check, "reported_ns"))
}

/// The interval between order statistics that holds a sample's median with at least
/// `confidence`, whatever its distribution (the sign test's): `[x(k), x(n+1-k)]`.
fn median_interval(values: &[f64], confidence: f64) -> (f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    // P(fewer than k of n values below the median) = P(Binomial(n, 1/2) < k), one tail.
    let (mut k, mut below, mut pmf) = (0, 0.0, 0.5f64.powi(n as i32));
    while k < n / 2 && below + pmf <= (1.0 - confidence) / 2.0 {
        below += pmf;
        pmf *= (n - k) as f64 / (k + 1) as f64;
        k += 1;
    }
    let k = k.max(1);
    (v[k - 1], v[n - k])
}

#[test]
fn the_reported_effect_is_what_the_extra_probe_points_cost_the_exits() {
    require_root();
    // The rounds differ by what the machine's neighbours did between a round's two runs, and
    // the report's figure by its programs' run times: the measured difference is an interval,
    // which must meet the bounds around the pooled report; while it reaches past them, more
    // rounds narrow it.
    let (mut rounds, mut reported) = (Vec::new(), Vec::new());
    let (mut low, mut high, mut bounds) = (0.0, 0.0, (0.0, 0.0));
    for _ in 0..MAX_BATCHES {
        let (batch, effect) = point_set_batch();
        rounds.extend(batch);
        reported.push(effect);
        let pooled = reported.iter().sum::<f64>() / reported.len() as f64;
        assert!(pooled > 0.0, "the extra points' runs are not counted: {reported:?}");
        bounds = (MIN_RATIO * pooled, MAX_RATIO * pooled);
        (low, high) = median_interval(&rounds, CONFIDENCE);
        eprintln!(
            "{} rounds: measured {low:+.0}..{high:+.0} ns ({:.0} % confidence), reported \
             {pooled:+.0} ns, bounds {:+.0}..{:+.0}",
            rounds.len(),
            CONFIDENCE * 100.0,
            bounds.0,
            bounds.1
        );
        if bounds.0 <= low && high <= bounds.1 {
            break;
        }
    }
    assert!(
        low <= bounds.1 && bounds.0 <= high,
        "the exits differ by {low:+.0}..{high:+.0} ns round by round ({} rounds, {:.0} % \
         confidence), the report accounts for {:+.0}..{:+.0} ns at {MIN_RATIO}..={MAX_RATIO} \
         times: rounds {rounds:?}, reported {reported:?}",
        rounds.len(),
        CONFIDENCE * 100.0,
        bounds.0,
        bounds.1,
    );
}
