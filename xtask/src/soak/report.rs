//! The soak's figures and checks: what `target/soak.json` holds and the command prints.

use std::{collections::BTreeMap, fmt::Write as _, path::Path, time::Duration};

use anyhow::Context as _;
use serde::Serialize;

use super::{RSS_BOUND_BYTES, Watch, bpf_maps::Occupancy, instance::KernelCounts, metrics::Scrape};

/// The counts at one end of the soak (see `super::boundary`).
pub struct Boundary {
    /// The perf counts (all exits, the churn's, its deep chain's) before and after `began`.
    pub perf: [[u64; 3]; 2],
    /// Each instance's kernel counts, between the two perf reads.
    pub began: [KernelCounts; 2],
    /// Each instance's kernel counts before and after its scrape.
    pub accounted: [[KernelCounts; 2]; 2],
    /// Each instance's recorded + lost exits, from its scrape.
    pub recorded_lost: [(u64, u64); 2],
    pub losses: [BTreeMap<String, u64>; 2],
}

/// Exits recorded and lost, from a scrape.
pub fn recorded_lost(scrape: &Scrape) -> (u64, u64) {
    (
        scrape.sum("exitprof_exits_recorded_total") as u64,
        scrape.sum("exitprof_exits_lost_total") as u64,
    )
}

/// Each loss cause's count, from a scrape.
pub fn losses_by_cause(scrape: &Scrape) -> BTreeMap<String, u64> {
    scrape
        .samples
        .iter()
        .filter(|(series, _)| series.starts_with("exitprof_losses_total{"))
        .filter_map(|(series, &n)| {
            let cause = series.split("cause=\"").nth(1)?.split('"').next()?;
            Some((cause.to_owned(), n as u64))
        })
        .collect()
}

/// What the churn did, by its own count.
#[derive(Serialize)]
pub struct Churn {
    pub seconds: f64,
    /// Exits of tasks named as the churn: every task it created, and itself.
    pub exits: u64,
    /// Exits of its deep chains' tasks.
    pub deep_exits: u64,
    pub exits_per_second: f64,
    pub rounds: BTreeMap<String, u64>,
    pub failed: BTreeMap<String, u64>,
    pub mix_seconds: BTreeMap<String, f64>,
}

impl Churn {
    pub fn new(counts: &serde_json::Value, took: Duration) -> anyhow::Result<Self> {
        let n = |key: &str| counts[key].as_u64().with_context(|| format!("the churn's {key}"));
        let map = |key: &str| -> anyhow::Result<BTreeMap<String, u64>> {
            Ok(serde_json::from_value(counts[key].clone())?)
        };
        let (exits, deep_exits) = (n("tasks")? + 1, n("deep_tasks")?);
        let seconds = took.as_secs_f64();
        Ok(Self {
            seconds,
            exits,
            deep_exits,
            exits_per_second: (exits + deep_exits) as f64 / seconds,
            rounds: map("rounds")?,
            failed: map("failed")?,
            mix_seconds: serde_json::from_value(counts["seconds"].clone())?,
        })
    }
}

/// A count known between two bounds: read between two reads of what it is compared with.
#[derive(Clone, Copy, Serialize)]
pub struct Between {
    pub low: u64,
    pub high: u64,
}

impl Between {
    fn holds(self, n: u64) -> bool {
        (self.low..=self.high).contains(&n)
    }
}

impl std::fmt::Display for Between {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.low == self.high {
            write!(f, "{}", self.low)
        } else {
            write!(f, "{}..{}", self.low, self.high)
        }
    }
}

/// One instance's figures over the soak.
#[derive(Serialize)]
pub struct InstanceFigures {
    pub serve: String,
    /// Exits that began between the two ends, by the perf count of its watched set.
    pub exits_began: Between,
    /// ... and as the kernel side counted them: opened or refused.
    pub opened_or_refused: u64,
    /// Exits whose account closed (ended or refused), by the kernel side.
    pub accounted: Between,
    /// Recorded and lost, from `/metrics`.
    pub recorded: u64,
    pub lost: u64,
    pub losses: BTreeMap<String, u64>,
    pub in_progress: [u64; 2],
    pub stale_refusals: u64,
    pub stray_ends: u64,
    pub refusals_forgotten: u64,
    /// Each map's size before the churn (the largest of its reads) and after (the smallest).
    pub maps: BTreeMap<String, (u64, u64)>,
    /// Entries left after the churn, in every read: map, task address, pid, whether it lives.
    pub left: Vec<String>,
    /// Resident memory: first and last sample of the churn, and the least-squares slope over
    /// its last two thirds, with what it predicts over that window.
    pub rss_mib: (f64, f64),
    /// Every sample: (seconds since the churn started, MiB).
    pub rss_samples: Vec<(f64, f64)>,
    pub rss_slope_kib_per_min: f64,
    pub rss_window_growth_kib: f64,
}

#[derive(Serialize)]
pub struct Check {
    pub what: String,
    pub passed: bool,
    pub detail: String,
}

#[derive(Serialize)]
pub struct SoakReport {
    pub churn: Churn,
    /// Every exit of the machine meanwhile, by perf, per second.
    pub machine_exits_per_second: f64,
    pub instances: [InstanceFigures; 2],
    pub groups_before: f64,
    pub groups_after: f64,
    pub group_names_after: Vec<String>,
    pub scrapes: usize,
    pub promtool_runs: usize,
    /// Occupancy of the maps during the churn: (seconds, each instance's).
    pub maps_during: Vec<(f64, [BTreeMap<String, u64>; 2])>,
    pub checks: Vec<Check>,
}

/// Everything the soak measured, for its report.
pub struct Soaked {
    pub churn: Churn,
    /// The counts before the churn and after it settled.
    pub ends: [Boundary; 2],
    /// Each instance's map reads before the churn and after it settled.
    pub maps_before: [Vec<Occupancy>; 2],
    pub maps_after: [Vec<Occupancy>; 2],
    pub maps_during: Vec<(f64, [BTreeMap<String, u64>; 2])>,
    pub groups_before: f64,
    /// The name of the churn's cgroup, which starts its groups' names.
    pub cgroup: String,
    pub watch: Watch,
    /// Each instance's command line.
    pub serves: [String; 2],
}

impl Soaked {
    /// Exits between the two ends by perf: counter 0 every exit (`--all`), 1 the churn's name,
    /// 2 its deep chains'.
    fn perf(&self, counter: usize) -> Between {
        let [a, b] = &self.ends;
        Between {
            low: b.perf[0][counter] - a.perf[1][counter],
            high: b.perf[1][counter] - a.perf[0][counter],
        }
    }

    fn figures(&self, i: usize) -> InstanceFigures {
        let [a, b] = &self.ends;
        let accounted = Between {
            low: b.accounted[i][0].accounted() - a.accounted[i][1].accounted(),
            high: b.accounted[i][1].accounted() - a.accounted[i][0].accounted(),
        };
        let losses = b.losses[i]
            .iter()
            .map(|(cause, n)| (cause.clone(), n - a.losses[i].get(cause).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        let (end, start) = (b.accounted[i][1], a.accounted[i][0]);
        let (maps, left) = compare_maps(&self.maps_before[i], &self.maps_after[i]);
        let rss = &self.watch.rss[i];
        let (slope, growth) = rss_slope(rss, self.churn.seconds);
        InstanceFigures {
            serve: self.serves[i].clone(),
            exits_began: self.perf(i),
            opened_or_refused: b.began[i].began() - a.began[i].began(),
            accounted,
            recorded: b.recorded_lost[i].0 - a.recorded_lost[i].0,
            lost: b.recorded_lost[i].1 - a.recorded_lost[i].1,
            losses,
            in_progress: [start.in_progress(), end.in_progress()],
            stale_refusals: end.stale_refusals - start.stale_refusals,
            stray_ends: end.stray_ends - start.stray_ends,
            refusals_forgotten: end.refusals_forgotten - start.refusals_forgotten,
            maps,
            left,
            rss_mib: (
                rss.first().map_or(0.0, |s| s.1 / 1_048_576.0),
                rss.last().map_or(0.0, |s| s.1 / 1_048_576.0),
            ),
            rss_samples: rss.iter().map(|&(t, bytes)| (t, bytes / 1_048_576.0)).collect(),
            rss_slope_kib_per_min: slope,
            rss_window_growth_kib: growth,
        }
    }
}

impl SoakReport {
    pub fn new(soaked: Soaked) -> Self {
        let instances = [soaked.figures(0), soaked.figures(1)];
        let mut checks = Vec::new();
        for (figures, name) in instances.iter().zip(["all", "comm"]) {
            instance_checks(&mut checks, name, figures, soaked.churn.seconds);
        }
        churn_checks(&mut checks, &soaked, &instances[1]);
        serve_checks(&mut checks, &soaked);
        let machine_exits_per_second = soaked.perf(0).high as f64 / soaked.churn.seconds;
        let Soaked { churn, maps_during, groups_before, watch, .. } = soaked;
        Self {
            machine_exits_per_second,
            churn,
            instances,
            groups_before,
            groups_after: watch.groups_after,
            group_names_after: watch.group_names_after,
            scrapes: watch.scrapes,
            promtool_runs: watch.promtool_runs,
            maps_during,
            checks,
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let c = &self.churn;
        let _ = writeln!(
            out,
            "churn: {:.0} s, {} exits named as the churn + {} of its deep chains ({:.0} exits/s); \
             the machine's exits meanwhile: {:.0}/s",
            c.seconds, c.exits, c.deep_exits, c.exits_per_second, self.machine_exits_per_second
        );
        for f in &self.instances {
            let _ = writeln!(out, "serve {}", f.serve);
            let _ = writeln!(
                out,
                "  exits began {} (perf), opened or refused {}; accounted {}, recorded {} + lost {} {:?}; in progress {} -> {}; stale refusals {}, stray ends {}",
                f.exits_began,
                f.opened_or_refused,
                f.accounted,
                f.recorded,
                f.lost,
                f.losses,
                f.in_progress[0],
                f.in_progress[1],
                f.stale_refusals,
                f.stray_ends
            );
            let maps: Vec<String> =
                f.maps.iter().map(|(m, (b, a))| format!("{m} {b}->{a}")).collect();
            let _ = writeln!(out, "  maps before->after: {}", maps.join(", "));
            if !f.left.is_empty() {
                let _ = writeln!(out, "  left: {}", f.left.join(", "));
            }
            let _ = writeln!(
                out,
                "  RSS {:.1} -> {:.1} MiB, slope {:.1} KiB/min ({:.0} KiB over the window)",
                f.rss_mib.0, f.rss_mib.1, f.rss_slope_kib_per_min, f.rss_window_growth_kib
            );
        }
        for check in &self.checks {
            let _ = writeln!(
                out,
                "{} {}: {}",
                if check.passed { "PASS" } else { "FAIL" },
                check.what,
                check.detail
            );
        }
        out
    }
}

fn check(checks: &mut Vec<Check>, what: impl Into<String>, passed: bool, detail: String) {
    checks.push(Check { what: what.into(), passed, detail });
}

/// What each serve must hold: every exit counted once, its maps back, its memory flat.
fn instance_checks(
    checks: &mut Vec<Check>,
    name: &str,
    figures: &InstanceFigures,
    churn_seconds: f64,
) {
    check(
        checks,
        format!("{name}: every exit that began was opened or refused once"),
        figures.exits_began.holds(figures.opened_or_refused),
        format!(
            "{} exits began (perf), exitprof opened or refused {}",
            figures.exits_began, figures.opened_or_refused
        ),
    );
    check(
        checks,
        format!("{name}: every exit accounted was recorded or lost once"),
        figures.accounted.holds(figures.recorded + figures.lost),
        format!(
            "{} ended or refused (kernel), {} recorded + {} lost ({:?})",
            figures.accounted, figures.recorded, figures.lost, figures.losses
        ),
    );
    let grown: Vec<String> = figures
        .maps
        .iter()
        .filter(|(_, (before, after))| after > before)
        .map(|(map, (before, after))| format!("{map} {before} -> {after}"))
        .collect();
    let mut detail = if grown.is_empty() { "all back".to_owned() } else { grown.join(", ") };
    if !figures.left.is_empty() {
        detail += &format!("; left: {}", figures.left.join(", "));
    }
    check(
        checks,
        format!("{name}: every map back to its size before the churn"),
        grown.is_empty(),
        detail,
    );
    if churn_seconds >= SLOPE_FROM_SECONDS {
        check(
            checks,
            format!("{name}: resident memory flat"),
            figures.rss_window_growth_kib * 1024.0 <= RSS_BOUND_BYTES,
            format!(
                "{:.1} KiB/min over the last two thirds of the churn: {:.0} KiB (bound {:.0} KiB)",
                figures.rss_slope_kib_per_min,
                figures.rss_window_growth_kib,
                RSS_BOUND_BYTES / 1024.0
            ),
        );
    } else {
        let peak = figures.rss_samples.iter().map(|s| s.1).fold(0.0, f64::max);
        check(
            checks,
            format!("{name}: resident memory within what its groups may hold"),
            peak - figures.rss_mib.0 <= GROUPS_BOUND_MIB,
            format!(
                "{:.1} MiB at the churn's start, {peak:.1} MiB at most (bound +{GROUPS_BOUND_MIB} MiB: \
                 a slope needs a soak of {SLOPE_FROM_SECONDS} s or more)",
                figures.rss_mib.0
            ),
        );
    }
}

/// The shortest churn whose memory is judged by its slope over its last two thirds, the brief's
/// last 20 minutes of 30.
const SLOPE_FROM_SECONDS: f64 = 1800.0;

/// What a shorter soak allows serve's memory to grow by: what its groups may hold at the default
/// bound (101 groups of some 4 KiB, 4,096 removed cgroups' paths of some 100 bytes: under 1 MiB),
/// and the allocator's slack (serve grew by 0.3 MiB in the first 3 minutes of a soak, and no more).
const GROUPS_BOUND_MIB: f64 = 4.0;

/// The churn's own counts against perf's and the `--comm` serve's, and its mixes all run.
fn churn_checks(checks: &mut Vec<Check>, soaked: &Soaked, comm: &InstanceFigures) {
    let churn = &soaked.churn;
    let by_name = soaked.perf(1);
    check(
        checks,
        "comm: recorded + lost is the churn's own count of its exits",
        comm.recorded + comm.lost == churn.exits && by_name.holds(churn.exits),
        format!(
            "the churn counted {} exits (perf {by_name}), serve --comm {} recorded + {} lost ({:?})",
            churn.exits, comm.recorded, comm.lost, comm.losses
        ),
    );
    let deep = soaked.perf(2);
    check(
        checks,
        "the churn's deep chains counted alike by the churn and perf",
        deep.holds(churn.deep_exits),
        format!("the churn counted {}, perf {deep}", churn.deep_exits),
    );
    let failed: Vec<String> =
        churn.failed.iter().filter(|(_, n)| **n > 0).map(|(m, n)| format!("{m} {n}")).collect();
    let missing: Vec<&String> =
        churn.rounds.iter().filter(|(_, n)| **n == 0).map(|(m, _)| m).collect();
    check(
        checks,
        "every mix of the churn ran, none failed",
        failed.is_empty() && missing.is_empty(),
        format!("rounds {:?}; failed: {failed:?}; never ran: {missing:?}", churn.rounds),
    );
}

/// What the scrapes must show: the churn's groups gone, counters monotonic, promtool clean.
fn serve_checks(checks: &mut Vec<Check>, soaked: &Soaked) {
    let watch = &soaked.watch;
    let left: Vec<&String> =
        watch.group_names_after.iter().filter(|g| g.starts_with(&soaked.cgroup)).collect();
    check(
        checks,
        "all: the churn's groups gone after their time to live",
        left.is_empty() && watch.groups_after as usize == watch.group_names_after.len(),
        format!(
            "{} groups before, {} after (served: {:?}); the churn's left: {left:?}",
            soaked.groups_before, watch.groups_after, watch.group_names_after
        ),
    );
    check(
        checks,
        "every counter and histogram monotonic across the scrapes",
        watch.decreases.is_empty(),
        format!("{} scrapes of each serve; decreases: {:?}", watch.scrapes, watch.decreases),
    );
    check(
        checks,
        "promtool check metrics clean",
        watch.promtool.is_empty(),
        format!("{} scrapes checked; complaints: {:?}", watch.promtool_runs, watch.promtool),
    );
}

/// Each map's largest size before and smallest after, and the pid-valued entries present in
/// every read after (with whether their pid still lives).
fn compare_maps(
    before: &[Occupancy],
    after: &[Occupancy],
) -> (BTreeMap<String, (u64, u64)>, Vec<String>) {
    let mut maps = BTreeMap::new();
    for read in before {
        for (map, &n) in &read.entries {
            let e = maps.entry(map.clone()).or_insert((0, u64::MAX));
            e.0 = e.0.max(n);
        }
    }
    for read in after {
        for (map, &n) in &read.entries {
            let e = maps.entry(map.clone()).or_insert((0, u64::MAX));
            e.1 = e.1.min(n);
        }
    }
    let mut left = Vec::new();
    if let Some((first, rest)) = after.split_first() {
        for (map, entries) in &first.pids {
            for &(address, pid) in entries {
                if rest.iter().all(|r| r.pids.get(map).is_some_and(|e| e.contains(&(address, pid))))
                {
                    let alive = Path::new(&format!("/proc/{pid}")).exists();
                    left.push(format!(
                        "{map} {address:#x} pid {pid} ({})",
                        if alive { "alive" } else { "gone" }
                    ));
                }
            }
        }
        for &(bucket, n) in &first.watched {
            if rest.iter().all(|r| r.watched.contains(&(bucket, n))) {
                left.push(format!("FREE_WATCH[{bucket}] {}", n.cast_signed()));
            }
        }
    }
    (maps, left)
}

/// The least-squares slope of resident memory (KiB per minute) over the last two thirds of a
/// churn of `window` seconds, and what it predicts over those two thirds (KiB).
pub fn rss_slope(samples: &[(f64, f64)], window: f64) -> (f64, f64) {
    let from = window / 3.0;
    let points: Vec<(f64, f64)> =
        samples.iter().filter(|(t, _)| (from..=window).contains(t)).copied().collect();
    if points.len() < 3 {
        return (0.0, 0.0);
    }
    let n = points.len() as f64;
    let (mt, mr) =
        (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let cov: f64 = points.iter().map(|(t, r)| (t - mt) * (r - mr)).sum();
    let var: f64 = points.iter().map(|(t, _)| (t - mt).powi(2)).sum();
    let bytes_per_s = if var == 0.0 { 0.0 } else { cov / var };
    (bytes_per_s * 60.0 / 1024.0, bytes_per_s * (window - from) / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slope_is_taken_over_the_last_two_thirds() {
        // Flat at 10 MiB after a first third that grows.
        let samples: Vec<(f64, f64)> = (0..=90)
            .map(|t| (f64::from(t), if t < 30 { f64::from(t) * 1e5 } else { 1e7 }))
            .collect();
        assert_eq!(rss_slope(&samples, 90.0), (0.0, 0.0));
        let growing: Vec<(f64, f64)> =
            (0..=90).map(|t| (f64::from(t), f64::from(t) * 1024.0)).collect();
        let (slope, growth) = rss_slope(&growing, 90.0);
        assert!((slope - 60.0).abs() < 1e-9 && (growth - 60.0).abs() < 1e-9, "{slope} {growth}");
    }

    #[test]
    fn a_count_between_two_reads() {
        let between = Between { low: 5, high: 7 };
        assert!(between.holds(5) && between.holds(7) && !between.holds(8) && !between.holds(4));
        assert_eq!(between.to_string(), "5..7");
    }
}
