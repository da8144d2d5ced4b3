//! Cgroup churn under `serve --group-by cgroup`: 5,000 short-lived cgroups, each made, given one
//! process that exits, and removed, while serve keeps at most a few groups for a few seconds.
//! Scraped every half second, /metrics must stay within the bound, its counts must only grow,
//! every exit must be counted once, serve's memory must stay flat, and promtool must accept it.

use std::{
    collections::{BTreeSet, HashMap},
    path::Path,
    process::{Command, Stdio},
    sync::atomic::{AtomicBool, Ordering},
    time::{Duration, Instant},
};

use super::{served::Served, task_name};
use crate::support::cgroups::TestCgroups;
use crate::support::require_root;

/// Cgroups made and removed, and how many of them between the two readings of serve's memory.
const CGROUPS: usize = 5_000;
const ROUND: usize = 1_000;
/// Serve's bound and time to live: small, so that the churn fills the bound many times over
/// and groups expire all along it.
const MAX_GROUPS: usize = 20;
const GROUP_TTL: Duration = Duration::from_secs(2);
/// Cgroups churned at once: each waits on its process's fork, exec and exit.
const WORKERS: usize = 4;
const SCRAPE_EVERY: Duration = Duration::from_millis(500);
/// How much serve's resident memory may grow from the first 1,000 cgroups to the last. What
/// grows with the cgroups, by design, is the paths of the removed ones, kept for their late
/// exits (1,000 then 4,096 at most, some 100 bytes each: 0.3 MB); everything else is bounded by
/// the groups alive at once, and a group costs some 4 KiB, so keeping every group seen (5,000)
/// would show many times over.
const RSS_GROWTH: u64 = 2 << 20;
const PROMTOOL: &str = "/usr/bin/promtool";

const LATENCY: &str = "exitprof_exit_stage_latency_seconds";

#[test]
fn five_thousand_short_lived_cgroups_keep_serve_within_its_bounds() {
    require_root();
    assert!(
        Path::new(PROMTOOL).exists(),
        "{PROMTOOL} is missing: this test needs Debian's prometheus package \
         (`apt-get install prometheus`; `cargo xtask test` installs it when run as root)"
    );
    let dir = tempfile::tempdir().unwrap();
    let name = task_name("c");
    // Each process is /bin/true under the watched name: its one exit is recorded.
    let program = dir.path().join(&name);
    std::fs::copy("/bin/true", &program).expect("copying /bin/true");
    let cgroups = TestCgroups::new("churn");
    let (max_groups, ttl) = (MAX_GROUPS.to_string(), format!("{}s", GROUP_TTL.as_secs()));
    let served = Served::start(
        dir.path(),
        &[
            "--comm",
            &name,
            "--group-by",
            "cgroup",
            "--max-groups",
            &max_groups,
            "--group-ttl",
            &ttl,
        ],
    );

    let started = Instant::now();
    let (watch, rss, last) = churn_while_scraping(&served, &cgroups, &program);
    let churn_s = started.elapsed().as_secs_f64();

    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let (first, last_rss) = (rss[0], *rss.last().unwrap());
    eprintln!(
        "{CGROUPS} cgroups in {churn_s:.1} s ({:.0}/s); {} scrapes: at most {} groups and {} \
         latency series; overflowed exits {}, groups expired {}; serve's RSS {:.1} MiB after \
         {ROUND} cgroups, {:.1} MiB after {CGROUPS} ({:?} MiB each {ROUND})",
        CGROUPS as f64 / churn_s,
        watch.scrapes,
        watch.most_groups,
        watch.most_series,
        last.figure("exitprof_group_overflow_exits_total"),
        last.figure("exitprof_groups_expired_total"),
        mib(first),
        mib(last_rss),
        rss.iter().map(|&b| (mib(b) * 10.0).round() / 10.0).collect::<Vec<_>>(),
    );
    assert!(watch.scrapes >= 10, "only {} scrapes during the churn", watch.scrapes);
    assert!(watch.unnamed.is_empty(), "groups named by id: {:?}", watch.unnamed);
    assert!(watch.faults.is_empty(), "during the churn:\n{}", watch.faults.join("\n"));
    assert!(
        watch.most_groups <= MAX_GROUPS + 1,
        "{} groups at once, over --max-groups {MAX_GROUPS} and other",
        watch.most_groups
    );
    assert_eq!(watch.most_groups, MAX_GROUPS + 1, "the churn never filled the bound");
    let overflowed = last.figure("exitprof_group_overflow_exits_total");
    assert!(overflowed > 0.0, "no exit went to group other past --max-groups {MAX_GROUPS}");
    let expired = last.figure("exitprof_groups_expired_total");
    assert!(expired > 0.0, "no group expired after --group-ttl {ttl} in {churn_s:.0} s");
    // One exit per process, each recorded once.
    let (recorded, lost) =
        (last.figure("exitprof_exits_recorded_total"), last.figure("exitprof_exits_lost_total"));
    assert_eq!(
        (recorded, lost),
        (CGROUPS as f64, 0.0),
        "expected {CGROUPS} exits, recorded {recorded}, lost {lost}"
    );
    assert!(
        last_rss <= first + RSS_GROWTH,
        "serve's memory grew from {:.1} MiB after {ROUND} cgroups to {:.1} MiB after {CGROUPS}",
        mib(first),
        mib(last_rss)
    );
    promtool_accepts(&last.body);

    // No exit for the time to live: every group is dropped, and its series with it.
    let quiet = Instant::now();
    let after = loop {
        let scrape = Scrape::of(&served);
        if scrape.figure("exitprof_groups") == 0.0 || quiet.elapsed() > GROUP_TTL * 3 {
            break scrape;
        }
        std::thread::sleep(SCRAPE_EVERY);
    };
    assert_eq!(after.figure("exitprof_groups"), 0.0, "groups kept with no exit for {ttl}");
    assert_eq!(after.series(), 0, "series kept with no group:\n{}", after.body);
    assert_eq!(after.figure("exitprof_exits_recorded_total"), CGROUPS as f64);
}

/// Short-lived cgroups, each its own group here: few enough to keep them all.
const NAMED: usize = 1_000;
/// serve's peak resident memory with [`NAMED`] groups, at most, and what a group may add to an
/// ungrouped serve's.
const PEAK_RSS: u64 = 48 << 20;
const PER_GROUP: u64 = 27 << 10;

/// A thousand short-lived cgroups, one exit each, under `--max-groups 1000`, beside an
/// ungrouped serve watching the same exits: every exit is named after its cgroup's path even
/// when the cgroup was made after serve last read the cgroups' records and removed before it
/// read the exit (and so missing from the tree); all 1,000 groups are served, promtool accepts
/// the document, and serve's peak memory (scrapes of the 1,000 groups' series included) is
/// within [`PEAK_RSS`] and [`PER_GROUP`] a group over the ungrouped serve's.
#[test]
fn a_thousand_cgroups_are_named_and_served_within_their_memory() {
    require_root();
    assert!(Path::new(PROMTOOL).exists(), "{PROMTOOL} is missing: `apt-get install prometheus`");
    let dir = tempfile::tempdir().unwrap();
    let name = task_name("n");
    let program = dir.path().join(&name);
    std::fs::copy("/bin/true", &program).expect("copying /bin/true");
    let cgroups = TestCgroups::new("names");
    let grouped = Served::start(
        dir.path(),
        &["--comm", &name, "--group-by", "cgroup", "--max-groups", "1000"],
    );
    let ungrouped = Served::start(dir.path(), &["--comm", &name]);
    churn(&cgroups, &program, 0..NAMED);
    wait_for_exits(&ungrouped, NAMED);
    // Past a publish (once a second), each scraped in both formats.
    let scrape = wait_for_exits(&grouped, NAMED);
    std::thread::sleep(Duration::from_millis(1500));
    for served in [&grouped, &ungrouped] {
        served.get("/metrics", Some("application/openmetrics-text"));
    }
    let groups = scrape.groups();
    let by_id: Vec<&&str> = groups.iter().filter(|g| g.starts_with("cgroup ")).collect();
    let (peak, base) = (grouped.peak_rss_bytes(), ungrouped.peak_rss_bytes());
    let (now, base_now) = (grouped.rss_bytes(), ungrouped.rss_bytes());
    // Over the ungrouped serve's, at the peak (the start's, both ways) or now.
    let per_group = peak.saturating_sub(base).max(now.saturating_sub(base_now)) / NAMED as u64;
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    eprintln!(
        "{NAMED} cgroups: {} groups, {} named by their cgroup's id, {} series, a scrape of {:.1} \
         MB; serve's peak RSS {:.1} MiB (now {:.1}), ungrouped {:.1} MiB (now {:.1}): {:.1} KiB \
         a group",
        groups.len(),
        by_id.len(),
        scrape.series(),
        scrape.body.len() as f64 / 1e6,
        mib(peak),
        mib(now),
        mib(base),
        mib(base_now),
        per_group as f64 / 1024.0,
    );
    assert!(by_id.is_empty(), "groups named by id, their path unknown: {by_id:?}");
    let recorded = scrape.figure("exitprof_exits_recorded_total");
    let lost = scrape.figure("exitprof_exits_lost_total");
    assert_eq!(
        groups.len(),
        NAMED,
        "one group per cgroup ({recorded} exits recorded, {lost} lost)"
    );
    assert_eq!(scrape.figure("exitprof_groups"), NAMED as f64);
    assert_eq!(scrape.whole_exits(), NAMED as f64, "each exit in its group's series");
    promtool_accepts(&scrape.body);
    assert!(peak <= PEAK_RSS, "serve's peak RSS {:.1} MiB with {NAMED} groups", mib(peak));
    assert!(per_group <= PER_GROUP, "{per_group} bytes a group over an ungrouped serve");
}

/// Churns [`CGROUPS`] cgroups, [`ROUND`] at a time, while a thread scrapes serve every
/// [`SCRAPE_EVERY`]. Returns what the scrapes saw, serve's resident memory after each round, and
/// the last scrape of the churn (its groups still there).
fn churn_while_scraping(
    served: &Served,
    cgroups: &TestCgroups,
    program: &Path,
) -> (Watch, Vec<u64>, Scrape) {
    let churned = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let scraper = scope.spawn(|| {
            let mut watch = Watch::default();
            while !churned.load(Ordering::Relaxed) {
                watch.scrape(served);
                std::thread::sleep(SCRAPE_EVERY);
            }
            watch
        });
        let mut rss = Vec::new();
        for round in 0..CGROUPS / ROUND {
            churn(cgroups, program, round * ROUND..(round + 1) * ROUND);
            let scrape = wait_for_exits(served, (round + 1) * ROUND);
            rss.push(scrape.figure("process_resident_memory_bytes") as u64);
        }
        let last = Scrape::of(served);
        churned.store(true, Ordering::Relaxed);
        (scraper.join().unwrap(), rss, last)
    })
}

/// Makes, runs one process in, and removes the cgroups `c<i>` for `range`, [`WORKERS`] at once.
fn churn(cgroups: &TestCgroups, program: &Path, range: std::ops::Range<usize>) {
    std::thread::scope(|scope| {
        for worker in 0..WORKERS {
            let range = range.clone();
            scope.spawn(move || {
                for i in range.skip(worker).step_by(WORKERS) {
                    let cgroup = format!("c{i}");
                    cgroups.make(&cgroup);
                    let mut command = Command::new(program);
                    command.stdin(Stdio::null()).stdout(Stdio::null());
                    let status = cgroups.spawn_in(&cgroup, &mut command).wait().unwrap();
                    assert!(status.success(), "{} in cgroup {cgroup}: {status}", program.display());
                    cgroups.remove(&cgroup);
                }
            });
        }
    });
}

/// Waits (30 s at most: a busy machine) until serve has recorded (or lost) `exits`; its scrape
/// then.
fn wait_for_exits(served: &Served, exits: usize) -> Scrape {
    let started = Instant::now();
    loop {
        let scrape = Scrape::of(served);
        let seen = scrape.figure("exitprof_exits_recorded_total")
            + scrape.figure("exitprof_exits_lost_total");
        if seen >= exits as f64 || started.elapsed() > Duration::from_secs(30) {
            return scrape;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `promtool check metrics` on a document: Prometheus's own lint of names, types and help.
fn promtool_accepts(body: &str) {
    use std::io::Write as _;
    let mut promtool = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool starts");
    promtool.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One /metrics document (text format), its samples by series.
struct Scrape {
    body: String,
}

impl Scrape {
    fn of(served: &Served) -> Self {
        let response = served.get("/metrics", None);
        assert_eq!(response.status, 200, "{}", response.body);
        Self { body: response.body }
    }

    /// Every sample: its series (name and labels) and value.
    fn samples(&self) -> impl Iterator<Item = (&str, f64)> {
        self.body.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            (series, value.parse().unwrap_or_else(|_| panic!("a sample's value: {line}")))
        })
    }

    /// The value of the first sample of `name`.
    fn figure(&self, name: &str) -> f64 {
        self.samples()
            .find(|(series, _)| series.split('{').next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{}", self.body))
            .1
    }

    /// The latency series' `_count` samples.
    fn counts(&self) -> impl Iterator<Item = (&str, f64)> {
        let count = format!("{LATENCY}_count{{");
        self.samples().filter(move |(series, _)| series.starts_with(&count))
    }

    /// How many latency series there are.
    fn series(&self) -> usize {
        self.counts().count()
    }

    /// The values of the `group` label.
    fn groups(&self) -> BTreeSet<&str> {
        self.counts().filter_map(|(series, _)| label(series, "group")).collect()
    }

    /// The exits counted by the groups' series of the whole exit.
    fn whole_exits(&self) -> f64 {
        self.counts()
            .filter(|(series, _)| {
                label(series, "stage")
                    .is_some_and(|stage| stage == "exit" || stage.starts_with("exit_from_"))
            })
            .map(|(_, count)| count)
            .sum()
    }
}

/// The value of label `name` in a series (values with no escaped quote, as paths here are).
fn label<'a>(series: &'a str, name: &str) -> Option<&'a str> {
    let start =
        series.find(&format!("{{{name}=\"")).or_else(|| series.find(&format!(",{name}=\"")))?;
    let value = &series[start + name.len() + 3..];
    value.split('"').next()
}

/// What the scrapes during the churn saw.
#[derive(Default)]
struct Watch {
    scrapes: usize,
    /// The previous scrape's cumulative samples (each series' `_count` and `_bucket`s).
    previous: HashMap<String, f64>,
    most_groups: usize,
    most_series: usize,
    /// Groups named by a cgroup's id: their cgroup's path was not known when their exits were.
    unnamed: BTreeSet<String>,
    /// What broke an invariant, and when.
    faults: Vec<String>,
}

impl Watch {
    fn scrape(&mut self, served: &Served) {
        let scrape = Scrape::of(served);
        self.scrapes += 1;
        let groups = scrape.groups();
        self.most_groups = self.most_groups.max(groups.len());
        self.most_series = self.most_series.max(scrape.series());
        self.unnamed
            .extend(groups.iter().filter(|g| g.starts_with("cgroup ")).map(ToString::to_string));
        let kept = scrape.figure("exitprof_groups");
        if kept as usize != groups.len() {
            self.fault(&format!(
                "exitprof_groups is {kept}, and {} groups have series",
                groups.len()
            ));
        }
        // Counts only grow, while a series is there.
        let cumulative: HashMap<String, f64> = scrape
            .samples()
            .filter(|(series, _)| {
                series.starts_with(&format!("{LATENCY}_count{{"))
                    || series.starts_with(&format!("{LATENCY}_bucket{{"))
            })
            .map(|(series, value)| (series.to_owned(), value))
            .collect();
        for (series, &now) in &cumulative {
            if let Some(&before) = self.previous.get(series)
                && now < before
            {
                self.fault(&format!("{series} fell from {before} to {now}"));
            }
        }
        self.previous = cumulative;
        // Every exit is in one group's whole-exit series until its group expires.
        let recorded = scrape.figure("exitprof_exits_recorded_total");
        let whole = scrape.whole_exits();
        let expired = scrape.figure("exitprof_groups_expired_total");
        if whole > recorded || (expired == 0.0 && whole != recorded) {
            self.fault(&format!(
                "{recorded} exits recorded, {whole} in the groups' series ({expired} expired)"
            ));
        }
    }

    fn fault(&mut self, what: &str) {
        self.faults.push(format!("scrape {}: {what}", self.scrapes));
    }
}
