//! `exitprof serve` against real scrapers: Debian's Prometheus, whose view of a storm's median
//! exit must agree with exitprof's own report, and which sees each cgroup's exits in its group;
//! 50 concurrent scrapers; 2M exits in one serve, with its memory flat; 5,000 short-lived
//! cgroups under `--group-by cgroup`, and 1,000 groups within their memory (`churn`); its HTTP
//! edges and its end on a signal; a flood of idle and trickling connections (`flood`); TLS and
//! basic auth from a web configuration (`tls`); and the Grafana dashboard that charts it.

mod churn;
mod dashboard;
mod flood;
mod prometheus;
mod served;
mod tls;

use std::{
    io::{ErrorKind, Read as _, Write as _},
    net::TcpStream,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use openmetrics_parser::{openmetrics::parse_openmetrics, prometheus::parse_prometheus};

use self::{
    prometheus::Prometheus,
    served::{Served, exchange, named_storm, poll_until},
};
use crate::support::{
    BpfIds, HeldMaps, KilledOnDrop, Watcher, assert_unloaded, cgroups::TestCgroups, num,
    require_root,
};

/// The fixed bucket bounds of exitprof_exit_stage_latency_seconds, in ns: 1-2-5 per decade from
/// 100 ns to 10 s.
fn bounds_ns() -> Vec<u64> {
    let mut bounds: Vec<u64> =
        (2..10).map(|e| 10u64.pow(e)).flat_map(|d| [d, 2 * d, 5 * d]).collect();
    bounds.push(10_000_000_000);
    bounds
}

/// A task name of this test run's own (at most 15 bytes).
fn task_name(test: &str) -> String {
    format!("xs{test}{}", std::process::id())
}

/// Waits for a storm started in the background; it must succeed.
fn wait_for_storm(storm: KilledOnDrop) {
    let status = storm.take().wait().unwrap();
    assert!(status.success(), "the storm failed: {status}");
}

#[test]
fn prometheus_sees_the_median_exitprof_reports() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let name = task_name("p");
    let served = Served::start(dir.path(), &["--comm", &name]);
    let prometheus = Prometheus::start(dir.path(), served.addr);
    // Scraped, with the whole exit's series at zero before the storm: rate() then counts all of
    // the storm's exits (a series that first appears with exits in it loses them from rate()).
    let whole_series = format!(
        r#"count(exitprof_exit_stage_latency_seconds_count{{stage=~"{WHOLE_EXIT}"}} == 0)"#
    );
    let at_zero = prometheus.wait_for(&whole_series, |n| n > 0.0);

    // The same exits measured by a one-shot run watching them beside serve, with the programs
    // serve runs (no block stack walks, no samples).
    let watcher = Watcher::start(&["--comm", &name, "--no-block-stacks", "--no-cpu-stacks"]);
    // Process exits, whose median (some 65 µs here) lies well inside a bucket (50-100 µs): the
    // thread storm's (some 10 µs) sits on a bound, where the two probe sets' few microseconds
    // inside each other's exits put the two medians in different buckets in 2 runs of 5.
    let storm_start = Instant::now();
    let status = named_storm(dir.path(), &name, &["fork", "--count", "3000"]).status().unwrap();
    assert!(status.success(), "the storm failed: {status}");
    watcher.signal(libc::SIGINT);
    let doc = watcher.finish();
    let exit = &doc["stages"][0];
    assert_eq!(exit["name"], "exit");
    let recorded = num(&doc, "exits_recorded");
    assert_eq!(recorded, 3001.0, "3000 children and the storm's process: {doc}");

    let served_all = r#"exitprof_exits_recorded_total{job="exitprof"}"#;
    prometheus.wait_for(served_all, |v| v == recorded);
    let served_whole =
        format!(r#"count(exitprof_exit_stage_latency_seconds_count{{stage=~"{WHOLE_EXIT}"}})"#);
    assert_eq!(
        prometheus.query(&served_whole),
        Some(at_zero),
        "every series of the whole exit was served at zero before the storm"
    );
    let window = storm_start.elapsed().as_secs() + 10;
    let promql = format!(
        r#"histogram_quantile(0.5, sum by (le) (rate(exitprof_exit_stage_latency_seconds_bucket{{stage=~"{WHOLE_EXIT}"}}[{window}s])))"#
    );
    let median_ns = prometheus.query(&promql).expect("a median from prometheus") * 1e9;

    // Exactly: Prometheus's median lies in the bucket of serve's own counts that holds theirs.
    let (lo_ns, hi_ns) = served_median_bucket(&served);
    eprintln!(
        "median exit: prometheus {:.2} µs, in serve's bucket {:.1}-{:.1} µs",
        median_ns / 1e3,
        lo_ns as f64 / 1e3,
        hi_ns as f64 / 1e3
    );
    assert!(
        lo_ns as f64 <= median_ns && median_ns <= hi_ns as f64,
        "prometheus's median {median_ns:.0} ns is not in serve's bucket {lo_ns}-{hi_ns} ns"
    );

    // Against the one-shot run: the two probe sets time the same exits with each other's
    // programs partly inside, so their timings differ by about the difference of their means.
    let served_mean_ns = prometheus
        .query(
            &format!(
                r#"sum(exitprof_exit_stage_latency_seconds_sum{{stage=~"{WHOLE_EXIT}"}}) / sum(exitprof_exit_stage_latency_seconds_count{{stage=~"{WHOLE_EXIT}"}})"#
            ),
        )
        .expect("a mean from prometheus")
        * 1e9;
    let slack_ns = (served_mean_ns - num(exit, "mean_ns")).abs();
    let exitprof_ns = num(exit, "p50_ns");
    let (lo_ns, hi_ns) = allowed_bucket(exitprof_ns, slack_ns);
    eprintln!(
        "median exit: prometheus {:.2} µs, exitprof {:.2} µs (means {:.2} and {:.2} µs; \
         allowed {:.1}-{:.1} µs)",
        median_ns / 1e3,
        exitprof_ns / 1e3,
        served_mean_ns / 1e3,
        num(exit, "mean_ns") / 1e3,
        lo_ns as f64 / 1e3,
        hi_ns as f64 / 1e3
    );
    assert!(
        lo_ns as f64 <= median_ns && median_ns <= hi_ns as f64,
        "prometheus's median {median_ns:.0} ns is not in the bucket {lo_ns}-{hi_ns} ns of \
         exitprof's {exitprof_ns} ns"
    );
}

/// Processes run in each of two cgroups: different numbers, which tell their groups apart
/// whatever the groups are named.
const IN_A: usize = 30;
const IN_B: usize = 70;

#[test]
fn prometheus_sees_each_cgroups_exits_in_its_group() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let name = task_name("g");
    // Each process is /bin/true under the watched name: one exit each.
    let program = dir.path().join(&name);
    std::fs::copy("/bin/true", &program).expect("copying /bin/true");
    let cgroups = TestCgroups::new("groups");
    let served = Served::start(dir.path(), &["--comm", &name, "--group-by", "cgroup"]);
    // Before any exit: no group, no series, and the groups' counters at zero.
    let before = served.get("/metrics", None).body;
    let outside = before
        .lines()
        .filter(|l| l.starts_with("exitprof_exit_stage_latency_seconds") && !l.contains("group="));
    assert_eq!(outside.count(), 0, "series of no group before the first exit:\n{before}");
    assert_eq!(served.figure("exitprof_groups{"), 0.0);
    assert_eq!(served.figure("exitprof_groups_expired_total{"), 0.0);
    let prometheus = Prometheus::start(dir.path(), served.addr);
    for (cgroup, processes) in [("a", IN_A), ("b", IN_B)] {
        cgroups.make(cgroup);
        for _ in 0..processes {
            let mut command = Command::new(&program);
            command.stdin(Stdio::null()).stdout(Stdio::null());
            let status = cgroups.spawn_in(cgroup, &mut command).wait().unwrap();
            assert!(status.success(), "{} in cgroup {cgroup}: {status}", program.display());
        }
        // Gone before serve reads its exits, most likely: it is named by the path kept.
        cgroups.remove(cgroup);
    }

    let all = (IN_A + IN_B) as f64;
    // The total and the groups' series come from one snapshot: once Prometheus has the one, it
    // has the others.
    prometheus.wait_for(r#"exitprof_exits_recorded_total{job="exitprof"}"#, |v| v == all);
    let by_group = format!(
        r#"sum by (group) (exitprof_exit_stage_latency_seconds_count{{stage=~"{WHOLE_EXIT}"}})"#
    );
    let mut groups = prometheus.query_vector(&by_group);
    groups.sort_by(|a, b| a.1.total_cmp(&b.1));
    eprintln!("whole exits by group, as Prometheus has them: {groups:?}");
    let counts: Vec<f64> = groups.iter().map(|(_, n)| *n).collect();
    assert_eq!(
        counts,
        [IN_A as f64, IN_B as f64],
        "expected {IN_A} and {IN_B} exits in two groups, Prometheus has {groups:?}"
    );
    assert_eq!(prometheus.query(r#"exitprof_groups{job="exitprof"}"#), Some(2.0));
    assert_eq!(
        prometheus.query(r#"exitprof_group_overflow_exits_total{job="exitprof"}"#),
        Some(0.0)
    );
}

/// The stages of the whole exit: timed from its first instant (`exit`), or from a later point
/// where no start probe covered its path (`exit_from_<point>`: every exit here, on a kernel
/// without kprobes, as serve leaves the syscall tracepoints off).
const WHOLE_EXIT: &str = "exit(_from_.+)?";

/// The fixed bucket (from its lower bound to its upper one, in ns) that holds the median of
/// serve's own counts of the whole exit, all kinds and starts together, as its /metrics has them.
fn served_median_bucket(served: &Served) -> (u64, u64) {
    let body = served.get("/metrics", None).body;
    let bounds = bounds_ns();
    let mut cumulative = vec![0.0; bounds.len() + 1];
    let bucket = "exitprof_exit_stage_latency_seconds_bucket{";
    let whole = |line: &str| {
        line.strip_prefix(bucket).is_some_and(|labels| {
            labels.starts_with(r#"stage="exit","#) || labels.starts_with(r#"stage="exit_from_"#)
        })
    };
    for line in body.lines().filter(|l| whole(l)) {
        let (labels, count) = line.rsplit_once(' ').unwrap();
        let le = labels.split("le=\"").nth(1).unwrap().trim_end_matches("\"}");
        let index = if le == "+Inf" {
            bounds.len()
        } else {
            let le_ns = (le.parse::<f64>().unwrap() * 1e9).round() as u64;
            bounds.iter().position(|&b| b == le_ns).unwrap_or_else(|| panic!("le {le}"))
        };
        cumulative[index] += count.parse::<f64>().unwrap();
    }
    let half = cumulative[bounds.len()] / 2.0;
    let hi = cumulative.iter().position(|&c| c >= half).unwrap();
    assert!(hi < bounds.len(), "serve's median is over 10 s: {cumulative:?}");
    (if hi == 0 { 0 } else { bounds[hi - 1] }, bounds[hi])
}

/// The fixed bucket (from its lower bound to its upper one, in ns) that holds `median_ns`, where
/// a quantile of the bucket counts must lie; and the neighbouring one where the median is within
/// `slack_ns` of the bound between them (on the 2-CPU test VM, serve's mean was 3.7 to 4.6 µs
/// above the one-shot run's, and a median near 10 µs fell on either side of it).
fn allowed_bucket(median_ns: f64, slack_ns: f64) -> (u64, u64) {
    let bounds = bounds_ns();
    let hi = bounds.iter().position(|&b| b as f64 >= median_ns).expect("a median under 10 s");
    let lower = |i: usize| if i == 0 { 0 } else { bounds[i - 1] };
    let (mut lo_ns, mut hi_ns) = (lower(hi), bounds[hi]);
    if median_ns + slack_ns >= hi_ns as f64 && hi + 1 < bounds.len() {
        hi_ns = bounds[hi + 1];
    }
    if hi > 0 && median_ns - slack_ns <= lo_ns as f64 {
        lo_ns = lower(hi - 1);
    }
    (lo_ns, hi_ns)
}

/// The scrape load: scrapers at once, for how long, and requests per scraper at most.
const SCRAPERS: usize = 50;
const SCRAPE_FOR: Duration = Duration::from_secs(10);
const SCRAPES_EACH: usize = 2_000;

#[test]
fn fifty_scrapers_get_whole_documents_while_exits_are_collected() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let name = task_name("l");
    let served = Served::start(dir.path(), &["--comm", &name]);
    // A storm during the scrapes: collection must keep up with both.
    let storm = KilledOnDrop::new(
        named_storm(dir.path(), &name, &["threads", "--threads", "100", "--reps", "300"])
            .spawn()
            .unwrap(),
    );
    let cpu_before = served.cpu_s();
    let started = Instant::now();
    let latencies: Vec<Duration> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..SCRAPERS)
            .map(|i| {
                let served = &served;
                scope.spawn(move || {
                    let openmetrics = i % 2 == 1;
                    let accept =
                        openmetrics.then_some("application/openmetrics-text;version=1.0.0");
                    let mut latencies = Vec::new();
                    while started.elapsed() < SCRAPE_FOR && latencies.len() < SCRAPES_EACH {
                        let r = served.get("/metrics", accept);
                        assert_eq!(r.status, 200, "{}", r.body);
                        well_formed(&r.body, openmetrics);
                        latencies.push(r.elapsed);
                    }
                    latencies
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    let wall = started.elapsed();
    let cpu = served.cpu_s() - cpu_before;
    wait_for_storm(storm);
    let mut sorted = latencies.clone();
    sorted.sort();
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q) as usize];
    eprintln!(
        "{} scrapes by {SCRAPERS} scrapers in {:.1} s: p50 {:?}, p99 {:?}, max {:?}; exitprof \
         CPU {cpu:.2} s ({:.0}% of one CPU)",
        sorted.len(),
        wall.as_secs_f64(),
        at(0.5),
        at(0.99),
        sorted.last().unwrap(),
        cpu / wall.as_secs_f64() * 100.0
    );
    // Prometheus's default scrape timeout is 10 s: no scrape may come near it, and 99 % of them
    // within half of it, on 2 CPUs shared with the 50 scrapers parsing every document.
    assert!(at(0.99) < Duration::from_secs(5), "p99 scrape latency {:?}", at(0.99));
    let longest = *sorted.last().unwrap();
    assert!(longest < Duration::from_secs(10), "a scrape took {longest:?}");
    // Every exit of the storm was collected while the scrapes ran.
    let expected = f64::from(100 * 300 + 1);
    poll_until(Duration::from_secs(10), || {
        served.figure("exitprof_exits_recorded_total") >= expected
    });
    let recorded = served.figure("exitprof_exits_recorded_total");
    let lost = served.figure("exitprof_exits_lost_total");
    assert_eq!(recorded + lost, expected, "exits recorded and lost");
    served.signal(libc::SIGINT);
    let (status, stderr) = served.finish();
    assert!(status.success(), "serve ended {status} on SIGINT:\n{stderr}");
}

/// A whole document in its format, parsed, with the whole exit's histograms in it.
fn well_formed(body: &str, openmetrics: bool) {
    let families: Vec<String> = if openmetrics {
        assert!(body.ends_with("# EOF\n"), "an OpenMetrics document without its end");
        let doc = parse_openmetrics(body).unwrap_or_else(|e| panic!("{e:?}:\n{body}"));
        doc.families.keys().cloned().collect()
    } else {
        let doc = parse_prometheus(body).unwrap_or_else(|e| panic!("{e:?}:\n{body}"));
        doc.families.keys().cloned().collect()
    };
    for family in ["exitprof_exit_stage_latency_seconds", "process_resident_memory_bytes"] {
        assert!(families.iter().any(|f| f == family), "no {family} in:\n{body}");
    }
    assert!(body.contains(r#"stage="exit",kind="thread""#), "no thread exits in:\n{body}");
}

#[test]
fn memory_stays_flat_over_two_million_exits() {
    require_root();
    // 2,000,000 thread exits, and the storm's process.
    let expected = 2_000_001.0;
    let dir = tempfile::tempdir().unwrap();
    let name = task_name("m");
    let served = Served::start(dir.path(), &["--comm", &name]);
    let args = ["threads", "--threads", "1000", "--reps", "2000", "--stagger-us", "0"];
    let started = Instant::now();
    let storm = KilledOnDrop::new(named_storm(dir.path(), &name, &args).spawn().unwrap());
    let seen = |served: &Served| {
        served.figure("exitprof_exits_recorded_total") + served.figure("exitprof_exits_lost_total")
    };
    // At a tenth of the exits: by then 200,000 records (a few hundred bytes each) have gone
    // through the 4 MiB ring buffer, so all of its pages are resident.
    while seen(&served) < expected / 10.0 {
        assert!(started.elapsed() < Duration::from_secs(600), "the storm is too slow");
        std::thread::sleep(Duration::from_millis(100));
    }
    let rss_10 = served.rss_bytes();
    wait_for_storm(storm);
    poll_until(Duration::from_secs(30), || seen(&served) >= expected);
    let rss_100 = served.rss_bytes();
    let recorded = served.figure("exitprof_exits_recorded_total");
    let lost = served.figure("exitprof_exits_lost_total");
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    eprintln!(
        "{recorded} exits recorded, {lost} lost in {:.0} s; serve's RSS {:.1} MiB at 10%, {:.1} \
         MiB at 100%",
        started.elapsed().as_secs_f64(),
        mib(rss_10),
        mib(rss_100)
    );
    assert_eq!(recorded + lost, expected, "every exit recorded or counted lost");
    // 2 MiB over the 1.8M exits between the two readings: anything kept per exit, even a byte,
    // would show.
    assert!(
        rss_100 <= rss_10 + (2 << 20),
        "serve's memory grew from {:.1} to {:.1} MiB",
        mib(rss_10),
        mib(rss_100)
    );
}

#[test]
fn sigterm_detaches_and_http_edges_are_answered() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &["--comm", &task_name("e")]);
    let held = BpfIds::held_by(served.pid());
    assert!(!held.programs.is_empty(), "serve holds no BPF program");

    let health = served.get("/healthz", None);
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));
    let metrics = served.get("/metrics", None);
    assert_eq!(metrics.content_type, "text/plain; version=0.0.4; charset=utf-8");
    let om = served.get("/metrics", Some("application/openmetrics-text"));
    assert_eq!(om.content_type, "application/openmetrics-text; version=1.0.0; charset=utf-8");
    for path in ["/", "/metric", "/metrics/x", "/healthz/", "/../metrics"] {
        assert_eq!(served.get(path, None).status, 404, "GET {path}");
    }
    let post = exchange(served.addr, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(status_line(&post.unwrap()).starts_with("HTTP/1.1 404"), "POST /metrics");

    // Garbage, a head too large and a body: answered with an error or closed, and serve goes on.
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(64 << 10));
    let body = "POST /healthz HTTP/1.1\r\nContent-Length: 100000\r\n\r\n";
    for request in [&b"\x00\xffGARBAGE\r\n\r\n"[..], huge.as_bytes(), body.as_bytes()] {
        let answer = exchange(served.addr, request).map(|raw| status_line(&raw));
        eprintln!("{:?}: {answer:?}", String::from_utf8_lossy(&request[..12]));
        if let Ok(line) = answer {
            assert!(line.is_empty() || line.contains(" 4"), "answered {line:?}");
        }
        assert_eq!(served.get("/metrics", None).status, 200);
    }
    // A client that trickles a head, a byte every 2 s, is cut off within serve's 10 s for an
    // exchange (a byte does not buy it more time), and others are served meanwhile.
    let mut slow = TcpStream::connect(served.addr).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let waited = Instant::now();
    assert_eq!(served.get("/metrics", None).status, 200, "served beside a trickling client");
    let mut answer = [0u8; 512];
    loop {
        match slow.read(&mut answer) {
            // An answer (408 or 400) before the close.
            Ok(n) if n > 0 => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if slow.write_all(b"X").is_err() {
                    break;
                }
            }
            _ => break,
        }
        assert!(waited.elapsed() < Duration::from_secs(60), "a trickling client kept for a minute");
    }
    assert!(
        waited.elapsed() < Duration::from_secs(15),
        "a trickling client held its connection for {:?}",
        waited.elapsed()
    );

    served.signal(libc::SIGTERM);
    let (status, stderr) = served.finish();
    assert!(status.success(), "serve ended {status} on SIGTERM:\n{stderr}");
    assert!(stderr.contains("detached"), "{stderr}");
    assert_unloaded(&held);
}

/// The status line of a raw response ("" when the server closed without one).
fn status_line(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).lines().next().unwrap_or_default().to_owned()
}

#[test]
fn a_watched_process_that_exits_ends_serve() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let watched = KilledOnDrop::new(Command::new("sleep").arg("600").spawn().unwrap());
    let pid = watched.id().to_string();
    let served = Served::start(dir.path(), &["--pid", &pid]);
    // Killed and reaped.
    drop(watched);
    let (status, stderr) = served.finish();
    assert!(status.success(), "serve ended {status} after its process:\n{stderr}");
    assert!(stderr.contains("the watched process exited"), "{stderr}");
}

/// `--bpf-stats` exports what each program cost in the kernel, counted while serve runs: the
/// exit programs ran at least once per exit of a storm, for a measured time, and the counting
/// stops with serve. Without it, no such series.
#[test]
fn bpf_stats_export_each_programs_runs_and_time() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let name = task_name("b");
    let stats_before = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap();
    let served = Served::start(dir.path(), &["--comm", &name, "--bpf-stats"]);
    let storm = KilledOnDrop::new(
        named_storm(dir.path(), &name, &["threads", "--threads", "100", "--reps", "10"])
            .spawn()
            .unwrap(),
    );
    wait_for_storm(storm);
    let expected = f64::from(100 * 10 + 1);
    poll_until(Duration::from_secs(10), || {
        served.figure("exitprof_exits_recorded_total") + served.figure("exitprof_exits_lost_total")
            >= expected
    });
    // serve publishes its counts once a second.
    std::thread::sleep(Duration::from_millis(1500));
    let body = served.get("/metrics", None).body;
    let program = |family: &str, program: &str| -> f64 {
        let label = format!("program=\"{program}\"");
        let line = body
            .lines()
            .find(|l| l.starts_with(family) && l.contains(&label))
            .unwrap_or_else(|| panic!("no {family} of {program} in /metrics:\n{body}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let runs = program("exitprof_bpf_program_runs_total", "sched_process_exit");
    let seconds = program("exitprof_bpf_program_run_seconds_total", "sched_process_exit");
    eprintln!("sched_process_exit: {runs} runs, {:.0} ns each", seconds * 1e9 / runs);
    // It runs for every exit of the machine, the storm's among them.
    assert!(runs >= expected, "{runs} runs of sched_process_exit for {expected} exits");
    assert!(seconds > 0.0 && seconds * 1e9 / runs < 1e6, "{seconds} s for {runs} runs");
    assert!(program("exitprof_bpf_program_runs_total", "sched_switch") > runs);
    served.signal(libc::SIGINT);
    let (status, stderr) = served.finish();
    assert!(status.success(), "serve ended {status} on SIGINT:\n{stderr}");
    let stats_after = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap();
    assert_eq!(stats_after, stats_before, "BPF statistics left as serve found them");

    let plain = Served::start(dir.path(), &["--comm", &name]);
    let body = plain.get("/metrics", None).body;
    assert!(!body.contains("exitprof_bpf_program"), "statistics served without --bpf-stats");
    plain.signal(libc::SIGINT);
    assert!(plain.finish().0.success());
}

/// serve reports no deferred work: it awaits no task's free (a run reports one in 16 of them).
/// Looked at through a storm, its map of awaited frees stays empty.
#[test]
fn serve_awaits_no_free() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let name = task_name("f");
    let served = Served::start(dir.path(), &["--comm", &name]);
    let mut storm = KilledOnDrop::new(
        named_storm(dir.path(), &name, &["fork", "--count", "3000"]).spawn().unwrap(),
    );
    let (mut looks, mut most) = (0, 0);
    while storm.child().try_wait().unwrap().is_none() {
        most = most.max(HeldMaps::of(served.pid()).entries("FREES_AWAITED").len());
        looks += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    wait_for_storm(storm);
    // serve takes its figures once a second, and the storm may be over in less.
    poll_until(Duration::from_secs(5), || served.figure("exitprof_exits_recorded_total") > 0.0);
    let recorded = served.figure("exitprof_exits_recorded_total");
    eprintln!(
        "{looks} looks through the storm, {recorded} exits recorded so far: at most {most} frees awaited"
    );
    assert!(looks > 10 && recorded > 0.0, "the storm was not looked through");
    assert_eq!(most, 0, "serve awaited frees");
    // The diagnostics that say an exit's end went unseen are served (at 0 here).
    let body = served.get("/metrics", None).body;
    for counter in ["stray_ends", "stale_refusals"] {
        let label = format!("counter=\"{counter}\"");
        let sample = body
            .lines()
            .find(|l| l.starts_with("exitprof_diagnostics_total{") && l.contains(&label));
        assert!(sample.is_some_and(|l| l.ends_with(" 0")), "{counter}: {sample:?}\n{body}");
    }
    served.signal(libc::SIGINT);
    assert!(served.finish().0.success());
}

/// serve joins network namespace teardowns to the exits that set them off, as a run does, and
/// exports them per kind and per group: the killed process's namespace and the two killed
/// during its teardown (see netns_teardown.c), their shares adding up to at least the time the
/// kernel announced for the first.
#[test]
fn serve_exports_the_namespace_teardowns_of_each_group() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    // The program forks its namespaces' holders: every task of it has its name.
    let served = Served::start(dir.path(), &["--comm", "netns_teardown", "--group-by", "comm"]);
    let out = dir.path().join("teardown");
    let status = Command::new(crate::support::c_program("netns_teardown"))
        .args(["256", "2", out.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success(), "netns_teardown failed: {status}");
    let text = std::fs::read_to_string(&out).unwrap();
    let announced_ns: f64 =
        text.lines().find_map(|l| l.strip_prefix("teardown_ns=")).unwrap().parse().unwrap();
    let series = r#"exitprof_namespace_teardown_seconds_count{kind="net",group="netns_teardown""#;
    let started = Instant::now();
    while served.get("/metrics", None).body.lines().all(|l| !l.starts_with(series))
        || served.figure(series) < 3.0
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no three teardowns under netns_teardown's group within 60 s:\n{}",
            served.get("/metrics", None).body
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(served.figure(series), 3.0);
    let sum = served.figure(&series.replace("_count", "_sum"));
    assert!(sum * 1e9 >= 0.8 * announced_ns, "{sum} s of teardowns, {announced_ns} ns announced");
    let joined = r"exitprof_namespace_teardowns_joined_total{kernel";
    let body = served.get("/metrics", None).body;
    assert!(
        body.lines().any(|l| l.starts_with(joined) && l.ends_with(r#"kind="net"} 3"#)),
        "{body}"
    );
    served.signal(libc::SIGINT);
    let (status, stderr) = served.finish();
    assert!(status.success(), "{stderr}");
}
