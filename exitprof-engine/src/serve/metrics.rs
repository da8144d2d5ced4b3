//! What `/metrics` serves: the latest snapshot of the collection (taken by the collection loop,
//! shared read-only), rendered per scrape in the format the scraper asked for, with exitprof's
//! own CPU time and memory read at the scrape.

use std::sync::Arc;

use exitprof_core::{
    analysis::{
        fixed_buckets::FixedBuckets,
        groups::Groups,
        profile::Profile,
        records::ExitKind,
        teardown::{TeardownBuckets, TeardownCounts, TeardownKind},
    },
    export::prom::{
        DIAGNOSTICS, LATENCY, LOSSES, TEARDOWN, TEARDOWN_WAIT, TextFormat, Writer,
        diagnostics_help, losses_help, seconds,
    },
};

use super::read_errors::ReadErrors;
use crate::{
    probes::counts::ProgramCost,
    run::{Losses, own_cost},
};

/// The collection at one moment: every histogram in the fixed buckets, and the counters.
pub struct Snapshot {
    pub series: Vec<StageSeries>,
    pub exits_recorded: u64,
    pub losses: Losses,
    /// Where exits are grouped: the groups kept, the exits that went to `other` past the bound,
    /// and the groups dropped after their time to live.
    pub groups: Option<GroupCounts>,
    /// Each program's runs and run time, with `--bpf-stats`; empty without.
    pub programs: Vec<ProgramCost>,
    /// Reads of the kernel's counters that failed (their last values are served).
    pub read_errors: ReadErrors,
    /// The namespace teardowns of each kind seen: its runs and teardowns joined.
    pub teardown_counts: Vec<(TeardownKind, TeardownCounts)>,
    /// Their histograms, by kind (and by group, where exits are grouped).
    pub teardowns: Vec<TeardownSeries>,
}

/// The namespace teardowns at one moment, as the collection has them.
#[derive(Default)]
pub struct TeardownSnapshot {
    /// Each kind seen: its runs and teardowns joined, and their histograms (of the whole
    /// machine's exits).
    pub kinds: Vec<(TeardownKind, TeardownCounts, TeardownBuckets)>,
}

/// One kind of teardown's histograms (of one group, where exits are grouped).
pub struct TeardownSeries {
    pub kind: TeardownKind,
    pub group: Option<String>,
    pub buckets: TeardownBuckets,
}

pub struct GroupCounts {
    pub kept: usize,
    pub overflowed: u64,
    pub expired: u64,
}

/// One stage's histogram for one kind of exit (of one group, where exits are grouped).
#[derive(Clone)]
pub struct StageSeries {
    pub kind: ExitKind,
    pub stage: String,
    pub group: Option<String>,
    pub buckets: FixedBuckets,
}

impl Snapshot {
    /// The series of the whole machine's exits, or, where they are grouped, of each group's.
    pub fn take(
        profile: &Profile,
        groups: Option<&Groups>,
        losses: Losses,
        programs: Vec<ProgramCost>,
        read_errors: ReadErrors,
        teardowns: &TeardownSnapshot,
    ) -> Self {
        let series = match groups {
            None => profile
                .latencies_by_kind()
                .map(|s| StageSeries {
                    kind: s.kind,
                    stage: s.stage.into_owned(),
                    group: None,
                    buckets: FixedBuckets::of(&s.latency.hist, s.latency.total_ns),
                })
                .collect(),
            Some(groups) => groups
                .iter()
                .flat_map(|(name, group)| {
                    group.series.iter().map(move |((kind, stage), buckets)| StageSeries {
                        kind: *kind,
                        stage: stage.clone(),
                        group: Some(name.to_owned()),
                        buckets: buckets.clone(),
                    })
                })
                .collect(),
        };
        let teardown_series = match groups {
            None => teardowns
                .kinds
                .iter()
                .map(|(kind, _, buckets)| TeardownSeries {
                    kind: *kind,
                    group: None,
                    buckets: buckets.clone(),
                })
                .collect(),
            Some(groups) => groups
                .iter()
                .flat_map(|(name, group)| {
                    group.teardowns.iter().map(move |(kind, buckets)| TeardownSeries {
                        kind: *kind,
                        group: Some(name.to_owned()),
                        buckets: buckets.clone(),
                    })
                })
                .collect(),
        };
        let groups = groups.map(|g| GroupCounts {
            kept: g.kept(),
            overflowed: g.overflowed,
            expired: g.expired,
        });
        Self {
            series,
            exits_recorded: profile.exits,
            losses,
            groups,
            programs,
            read_errors,
            teardown_counts: teardowns.kinds.iter().map(|(k, c, _)| (*k, *c)).collect(),
            teardowns: teardown_series,
        }
    }
}

/// What every exitprof sample is labelled with.
pub struct Labels {
    pub kernel: String,
    pub attach: String,
}

/// Latency series rendered in one chunk of a document: some 100 KB of text.
const SERIES_PER_CHUNK: usize = 16;

/// The document of one scrape, rendered a chunk at a time as it is sent: with a thousand
/// groups it is some 15 MB of text, which a scrape then never holds whole.
pub struct Document {
    snapshot: Arc<Snapshot>,
    labels: Arc<Labels>,
    /// `None` once the document is finished.
    out: Option<Writer>,
    /// The next latency series to render.
    next: usize,
}

impl Document {
    pub fn new(snapshot: Arc<Snapshot>, labels: Arc<Labels>, format: TextFormat) -> Self {
        Self { snapshot, labels, out: Some(Writer::new(format)), next: 0 }
    }
}

impl Iterator for Document {
    type Item = Vec<u8>;

    /// The next chunk: the latency family's series, [`SERIES_PER_CHUNK`] at a time, then
    /// everything else.
    fn next(&mut self) -> Option<Vec<u8>> {
        let out = self.out.as_mut()?;
        let common =
            [("kernel", self.labels.kernel.clone()), ("attach", self.labels.attach.clone())];
        let series = &self.snapshot.series;
        if self.next == 0 {
            out.family(LATENCY, "histogram", LATENCY_HELP);
        }
        if self.next < series.len() {
            let end = series.len().min(self.next + SERIES_PER_CHUNK);
            for series in &series[self.next..end] {
                let mut series_labels =
                    vec![("stage", series.stage.clone()), ("kind", series.kind.name().to_owned())];
                series_labels.extend(series.group.clone().map(|group| ("group", group)));
                series_labels.extend(common.iter().cloned());
                out.histogram(LATENCY, &series_labels, &series.buckets);
            }
            self.next = end;
            return Some(out.take());
        }
        let mut out = self.out.take()?;
        render_counters(&mut out, &self.snapshot, &common);
        Some(out.finish())
    }
}

const LATENCY_HELP: &str = "Time exiting tasks spent in each stage of their exit since exitprof \
    started, by kind (thread: a thread of a process that lives on; process: its last thread; \
    unknown: not told apart on this kernel); stage exit is the whole exit from its first \
    instant, exit_from_<point> the whole exits timed from a later point (no start probe covered \
    their path).";

/// The document of one scrape, whole.
#[cfg(test)]
pub fn render(snapshot: Snapshot, labels: Labels, format: TextFormat) -> Vec<u8> {
    Document::new(Arc::new(snapshot), Arc::new(labels), format).flatten().collect()
}

/// Everything after the latency series: counters, groups, programs, exitprof's own cost.
fn render_counters(out: &mut Writer, snapshot: &Snapshot, common: &[(&str, String)]) {
    let recorded = "exitprof_exits_recorded_total";
    out.family(recorded, "counter", "Exits timed and recorded.");
    out.sample(recorded, common, &[], snapshot.exits_recorded);
    let lost = "exitprof_exits_lost_total";
    out.family(lost, "counter", "Exits lost, all causes together.");
    out.sample(lost, common, &[], snapshot.losses.exits());
    out.family(LOSSES, "counter", &losses_help());
    for (cause, n) in snapshot.losses.by_cause() {
        out.sample(LOSSES, common, &[("cause", cause.key)], n);
    }
    out.family(DIAGNOSTICS, "counter", &diagnostics_help());
    for (counter, n) in snapshot.losses.diagnostics() {
        out.sample(DIAGNOSTICS, common, &[("counter", counter.key)], n);
    }
    if let Some(groups) = &snapshot.groups {
        let families = [
            (
                "exitprof_groups",
                "gauge",
                "Groups of exits with series now (at most --max-groups and other).",
                groups.kept as u64,
            ),
            (
                "exitprof_group_overflow_exits_total",
                "counter",
                "Exits counted under group \"other\": --max-groups groups were there already.",
                groups.overflowed,
            ),
            (
                "exitprof_groups_expired_total",
                "counter",
                "Groups dropped, their series with them, after --group-ttl without an exit.",
                groups.expired,
            ),
        ];
        for (name, kind, help, value) in families {
            out.family(name, kind, help);
            out.sample(name, common, &[], value);
        }
    }
    render_programs(out, &snapshot.programs, common);
    render_teardowns(out, snapshot, common);
    let read_errors = "exitprof_read_errors_total";
    out.family(
        read_errors,
        "counter",
        "Reads of the kernel's counters that failed, by what was read; the last values read \
         are served meanwhile.",
    );
    for (source, n) in snapshot.read_errors.by_source() {
        out.sample(read_errors, common, &[("source", source.name())], n);
    }

    let cpu = own_cost::cpu_time();
    let cpu_total = "process_cpu_seconds_total";
    out.family(cpu_total, "counter", "User and system CPU time exitprof spent, in seconds.");
    out.sample(cpu_total, &[], &[], cpu.user_s + cpu.sys_s);
    if let Some(bytes) = own_cost::resident_bytes() {
        let rss = "process_resident_memory_bytes";
        out.family(rss, "gauge", "exitprof's resident memory, in bytes.");
        out.sample(rss, &[], &[], bytes);
    }
}

/// A family of teardown histograms: its name and help, and which of a series' histograms it
/// draws.
type HistogramFamily = ((&'static str, &'static str), fn(&TeardownBuckets) -> &FixedBuckets);
/// A counter of each kind of teardown: its name, its help, and what it counts.
type KindCounter = (&'static str, &'static str, fn(&TeardownCounts) -> u64);

/// The namespace teardowns of each kind seen: their histograms, runs and joins.
fn render_teardowns(out: &mut Writer, snapshot: &Snapshot, common: &[(&str, String)]) {
    if snapshot.teardown_counts.is_empty() {
        return;
    }
    let labels = |series: &TeardownSeries| {
        let mut labels = vec![("kind", series.kind.proc_name().to_owned())];
        labels.extend(series.group.clone().map(|group| ("group", group)));
        labels.extend(common.iter().cloned());
        labels
    };
    // Where exits are grouped, by the group of the exit that set each teardown off.
    let histograms: [HistogramFamily; 2] =
        [(TEARDOWN, |b| &b.teardown), (TEARDOWN_WAIT, |b| &b.wait)];
    for ((name, help), buckets) in histograms {
        out.family(name, "histogram", help);
        for series in &snapshot.teardowns {
            out.histogram(name, &labels(series), buckets(&series.buckets));
        }
    }
    // What became of the teardowns that were not joined is in the table of counts, served
    // above: teardowns_outlived and teardowns_without_exit, teardowns_not_seen.
    let per_kind: [KindCounter; 2] = [
        (
            "exitprof_namespace_teardown_runs_total",
            "Runs of the teardowns' work functions (cleanup_net, free_user_ns).",
            |c| c.runs,
        ),
        (
            "exitprof_namespace_teardowns_joined_total",
            "Namespaces torn down that were joined to the exit that set their teardown off (the \
             others are counted in exitprof_diagnostics_total: teardowns_outlived, \
             teardowns_without_exit).",
            |c| c.joined,
        ),
    ];
    for (name, help, value) in per_kind {
        out.family(name, "counter", help);
        for (kind, counts) in &snapshot.teardown_counts {
            out.sample(name, common, &[("kind", kind.proc_name())], value(counts));
        }
    }
}

/// Each program's runs and run time (`--bpf-stats`): what exitprof costs the node in the kernel.
fn render_programs(out: &mut Writer, programs: &[ProgramCost], common: &[(&str, String)]) {
    if programs.is_empty() {
        return;
    }
    let runs = "exitprof_bpf_program_runs_total";
    out.family(runs, "counter", "Runs of each of exitprof's eBPF programs (--bpf-stats).");
    for p in programs {
        out.sample(runs, common, &[("program", &p.program)], p.runs);
    }
    let time = "exitprof_bpf_program_run_seconds_total";
    out.family(
        time,
        "counter",
        "CPU time in each of exitprof's eBPF programs, in seconds, as the kernel's BPF \
         statistics count it (--bpf-stats).",
    );
    for p in programs {
        out.sample(time, common, &[("program", &p.program)], seconds(u128::from(p.run_ns)));
    }
}

#[cfg(test)]
mod tests {
    use openmetrics_parser::{
        MetricsExposition, OpenMetricsType, OpenMetricsValue, PrometheusType, PrometheusValue,
        openmetrics::parse_openmetrics, prometheus::parse_prometheus,
    };

    use exitprof_common::counters;

    use super::*;
    use crate::{
        kernel::version::KernelVersion,
        probes::{counts::KernelLosses, plan::Plan},
    };
    use exitprof_core::analysis::{histogram::Latency, session::Undecodable};

    fn snapshot() -> Snapshot {
        let mut latency = Latency::default();
        for ns in [900, 4_000, 7_000, 7_500, 30_000] {
            latency.record(ns, 0);
        }
        let series = [
            (ExitKind::Thread, "exit", Some("other")),
            (ExitKind::Process, "exit_mm", Some("system.slice/a \"b\".service")),
        ]
        .map(|(kind, stage, group)| StageSeries {
            kind,
            stage: stage.to_owned(),
            group: group.map(str::to_owned),
            buckets: FixedBuckets::of(&latency.hist, latency.total_ns),
        })
        .into();
        let mut kernel = KernelLosses::default();
        kernel.0[counters::RINGBUF_FULL as usize] = 3;
        kernel.0[counters::STALE_REFUSALS as usize] = 7;
        let undecodable = Undecodable { exits: 2, deferred: 4, stacks: 0 };
        let profile = Profile::new(&Plan::with_sites(KernelVersion::new(6, 18, 0), &[]));
        let losses = Losses::new(&kernel, undecodable, &profile, 0, 0);
        let groups = Some(GroupCounts { kept: 1, overflowed: 4, expired: 6 });
        let programs = ["sched_switch", "sched_process_exit"]
            .map(|program| ProgramCost {
                program: program.to_owned(),
                runs: 4,
                run_ns: 1_500_000_250,
            })
            .into();
        let mut teardown = TeardownBuckets::default();
        for ns in [400_000_000, 12_000_000] {
            teardown.teardown.record(ns);
            teardown.wait.record(ns / 20);
        }
        let counts = TeardownCounts { runs: 2, joined: 2 };
        Snapshot {
            series,
            exits_recorded: 5,
            losses,
            groups,
            programs,
            read_errors: ReadErrors::default(),
            teardown_counts: vec![
                (TeardownKind::Net, counts),
                (TeardownKind::User, TeardownCounts::default()),
            ],
            teardowns: vec![TeardownSeries {
                kind: TeardownKind::Net,
                group: Some("other".to_owned()),
                buckets: teardown,
            }],
        }
    }

    fn labels() -> Labels {
        Labels { kernel: "6.18.0".to_owned(), attach: "auto".to_owned() }
    }

    /// A document of many chunks is one document: each series once, the family declared once,
    /// and the counters after them.
    #[test]
    fn a_document_in_chunks_is_one_document() {
        let mut many = snapshot();
        let one = many.series.pop().unwrap();
        many.series = (0..SERIES_PER_CHUNK * 2 + 3)
            .map(|i| StageSeries { group: Some(format!("g{i}")), ..one.clone() })
            .collect();
        let series = many.series.len();
        let chunks: Vec<Vec<u8>> =
            Document::new(Arc::new(many), Arc::new(labels()), TextFormat::OpenMetrics).collect();
        assert_eq!(chunks.len(), 4, "three chunks of series and the rest");
        let text = String::from_utf8(chunks.concat()).unwrap();
        let doc = parse_openmetrics(&text).unwrap_or_else(|e| panic!("{e:?}:\n{text}"));
        assert_eq!(doc.families[LATENCY].iter_samples().count(), series);
        assert_eq!(text.matches(&format!("# TYPE {LATENCY} ")).count(), 1);
    }

    /// Both formats parse, with every family typed and every sample labelled as served.
    #[test]
    fn both_formats_parse_with_the_same_figures() {
        let text = String::from_utf8(render(snapshot(), labels(), TextFormat::Prometheus)).unwrap();
        let om = String::from_utf8(render(snapshot(), labels(), TextFormat::OpenMetrics)).unwrap();
        assert!(om.ends_with("# EOF\n") && !text.contains("# EOF"));
        let prometheus = parse_prometheus(&text).unwrap_or_else(|e| panic!("{e:?}:\n{text}"));
        let openmetrics = parse_openmetrics(&om).unwrap_or_else(|e| panic!("{e:?}:\n{om}"));
        check(&prometheus);
        // OpenMetrics: the same families, counters named without `_total`.
        let families = |names: Vec<&String>| {
            let mut names: Vec<String> =
                names.into_iter().map(|n| n.trim_end_matches("_total").to_owned()).collect();
            names.sort();
            names
        };
        assert_eq!(
            families(openmetrics.families.keys().collect()),
            families(prometheus.families.keys().collect())
        );
        let latency = &openmetrics.families[LATENCY];
        assert_eq!(latency.family_type, OpenMetricsType::Histogram);
        for sample in latency.iter_samples() {
            let OpenMetricsValue::Histogram(h) = &sample.value else { panic!("not a histogram") };
            assert_eq!(h.count, Some(5));
        }
        let lost = &openmetrics.families["exitprof_exits_lost"];
        assert_eq!(lost.family_type, OpenMetricsType::Counter);
    }

    fn check(exposition: &MetricsExposition<PrometheusType, PrometheusValue>) {
        let latency = &exposition.families[LATENCY];
        assert_eq!(latency.family_type, PrometheusType::Histogram);
        let samples: Vec<_> = latency.iter_samples().collect();
        assert_eq!(samples.len(), 2);
        for sample in samples {
            let labels = sample.get_labelset().unwrap();
            assert_eq!(labels.get_label_value("kernel"), Some("6.18.0"));
            assert!(labels.get_label_value("kind").is_some());
            let PrometheusValue::Histogram(h) = &sample.value else { panic!("not a histogram") };
            assert_eq!(h.count, Some(5));
            // 900 ns under 1 µs, 4 µs under 5 µs, both 7 µs under 10 µs, 30 µs under 50 µs.
            let at = |bound: f64| {
                h.buckets.iter().find(|b| b.upper_bound == bound).unwrap().count.as_f64()
            };
            assert_eq!([at(1e-6), at(5e-6), at(1e-5), at(5e-5)], [1.0, 2.0, 4.0, 5.0]);
        }
        let counter = |name: &str| {
            let family = &exposition.families[&format!("{name}_total")];
            assert_eq!(family.family_type, PrometheusType::Counter, "{name}");
            family
        };
        let lost = counter("exitprof_exits_lost");
        let PrometheusValue::Counter(c) = &lost.iter_samples().next().unwrap().value else {
            panic!("not a counter")
        };
        assert_eq!(c.value.as_f64(), 5.0, "ring buffer full and undecodable");
        let causes = Losses::default().by_cause().count();
        assert_eq!(counter("exitprof_losses").iter_samples().count(), causes);
        let diagnostics = counter("exitprof_diagnostics");
        assert_eq!(diagnostics.iter_samples().count(), Losses::default().diagnostics().count());
        let stale = diagnostics
            .iter_samples()
            .find(|s| {
                s.get_labelset().unwrap().get_label_value("counter") == Some("stale_refusals")
            })
            .expect("stale_refusals served");
        let PrometheusValue::Counter(c) = &stale.value else { panic!("not a counter") };
        assert_eq!(c.value.as_f64(), 7.0);
        assert_eq!(counter("exitprof_group_overflow_exits").iter_samples().count(), 1);
        assert_eq!(counter("process_cpu_seconds").iter_samples().count(), 1);
        assert_eq!(counter("exitprof_bpf_program_runs").iter_samples().count(), 2);
        assert_eq!(counter("exitprof_read_errors").iter_samples().count(), 3);
        for sample in counter("exitprof_bpf_program_run_seconds").iter_samples() {
            let PrometheusValue::Counter(c) = &sample.value else { panic!("not a counter") };
            assert_eq!(c.value.as_f64(), 1.50000025);
            assert!(sample.get_labelset().unwrap().get_label_value("program").is_some());
        }
        let rss = &exposition.families["process_resident_memory_bytes"];
        assert_eq!(rss.family_type, PrometheusType::Gauge);
        // A teardown of 400 ms and one of 12 ms, joined, of each kind's.
        let teardown = &exposition.families["exitprof_namespace_teardown_seconds"];
        let sample = teardown.iter_samples().next().unwrap();
        assert_eq!(sample.get_labelset().unwrap().get_label_value("kind"), Some("net"));
        let PrometheusValue::Histogram(h) = &sample.value else { panic!("not a histogram") };
        assert_eq!(h.count, Some(2));
        assert_eq!(counter("exitprof_namespace_teardowns_joined").iter_samples().count(), 2);
        assert_eq!(counter("exitprof_namespace_teardown_runs").iter_samples().count(), 2);
    }
}
