//! Prometheus text exposition formats: the `.prom` export (text format 0.0.4, for
//! node_exporter's textfile collector or a Pushgateway: one histogram per series, and the run's
//! counters and gauges), and the [`Writer`] it shares with `exitprof serve`, which also writes
//! OpenMetrics 1.0.
//!
//! Histogram buckets are fixed, 1-2-5 per decade from 100 ns to 10 s, so runs on different
//! kernels and machines can be aggregated. Counts are HdrHistogram's (`count_between(0, le)`):
//! the histogram's own bucket holding a bound counts in full, so a value up to 0.1% above a bound
//! can count under it. `_sum` is exact.
//!
//! Written here rather than with a Prometheus client crate: the well-kept ones (prometheus,
//! prometheus-client) fill their own buckets one observation at a time and cannot take the
//! counts of an HdrHistogram, and prometheus-client writes OpenMetrics only, not the text format
//! the `.prom` file needs.

use std::fmt::Write as _;

use exitprof_common::counters::{self, Kind};

use super::{ExportSet, RunStats, Series, Variant};
use crate::analysis::fixed_buckets::{FixedBuckets, bounds_ns};

pub const LATENCY: &str = "exitprof_exit_stage_latency_seconds";

/// The two text formats Prometheus reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextFormat {
    /// The text exposition format 0.0.4.
    Prometheus,
    /// OpenMetrics 1.0.0: counters' families named without `_total`, `# EOF` at the end.
    OpenMetrics,
}

impl TextFormat {
    /// The HTTP content type of a document in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// A metric with one sample per run.
struct RunMetric {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    /// `None` where the run has no such value (no sample is written).
    value: fn(&ExportSet, &RunStats) -> Option<String>,
}

const RUN_METRICS: [RunMetric; 6] = [
    RunMetric {
        name: "exitprof_exits_expected_total",
        kind: "counter",
        help: "Exits the workload was to produce.",
        value: |_, r| r.exits_expected.map(|n| n.to_string()),
    },
    RunMetric {
        name: "exitprof_exits_recorded_total",
        kind: "counter",
        help: "Exits timed and recorded.",
        value: |_, r| Some(r.exits_recorded.to_string()),
    },
    RunMetric {
        name: "exitprof_exits_lost_total",
        kind: "counter",
        help: "Exits lost, all causes together.",
        value: |_, r| Some(r.exits_lost.to_string()),
    },
    RunMetric {
        name: "exitprof_run_partial",
        kind: "gauge",
        help: "1 when the run was interrupted before its workload finished.",
        value: |set, _| Some(u8::from(set.partial).to_string()),
    },
    RunMetric {
        name: "exitprof_workload_elapsed_seconds",
        kind: "gauge",
        help: "Wall-clock time of the storm.",
        value: |_, r| Some(seconds(r.elapsed.as_nanos())),
    },
    RunMetric {
        name: "exitprof_exit_rate",
        kind: "gauge",
        help: "Exits per second during the storm.",
        value: |_, r| Some(format!("{:.1}", r.exit_rate)),
    },
];

/// The histograms of namespace teardowns, as the `.prom` export and `serve` have them: name,
/// and help.
pub const TEARDOWN: (&str, &str) = (
    "exitprof_namespace_teardown_seconds",
    "Each namespace's share of the kworker run that tore it down (kind net: a cleanup_net run, \
     its time divided equally among the namespaces it tore down; user: free_user_ns), of the \
     namespaces joined to the exit that set their teardown off.",
);
pub const TEARDOWN_WAIT: (&str, &str) = (
    "exitprof_namespace_teardown_wait_seconds",
    "From the end of an exit to the start of the teardown of the namespace it left (0 where the \
     teardown began first).",
);

/// The families of the teardown series (`ExportSet::teardowns`), each with the series' stage
/// prefix (the kind follows it).
const TEARDOWN_FAMILIES: [((&str, &str), &str); 2] =
    [(TEARDOWN, "teardown:"), (TEARDOWN_WAIT, "teardown-wait:")];

/// Losses by cause (`exitprof_common::counters`): the `cause` label.
pub const LOSSES: &str = "exitprof_losses_total";
/// Diagnostics (`exitprof_common::counters`), not losses: the `counter` label.
pub const DIAGNOSTICS: &str = "exitprof_diagnostics_total";

/// The help of [`LOSSES`]: every cause, as the table of counts declares them.
pub fn losses_help() -> String {
    format!(
        "Exits, and parts of exits, lost, by cause. Exits: {}. Parts: {}.",
        labels(Kind::ExitLost),
        labels(Kind::PartLost)
    )
}

/// The help of [`DIAGNOSTICS`].
pub fn diagnostics_help() -> String {
    format!("Not losses, what happened besides: {}.", labels(Kind::Diagnostic))
}

/// `key (what), ...` of every count of `kind`.
fn labels(kind: Kind) -> String {
    let of_kind = counters::all().filter(|(_, c)| c.kind == kind);
    of_kind.map(|(_, c)| format!("{} ({})", c.key, c.what)).collect::<Vec<_>>().join(", ")
}

pub fn encode(set: &ExportSet) -> Vec<u8> {
    let mut out = Writer::new(TextFormat::Prometheus);
    out.family(
        LATENCY,
        "histogram",
        "Time tasks spent in each stage of their exit; stage \"exit\" is the whole exit.",
    );
    for series in &set.series {
        let buckets = FixedBuckets::of(&series.hist, series.sum_ns);
        out.histogram(LATENCY, &series_labels(set, series), &buckets);
    }

    for ((name, help), prefix) in TEARDOWN_FAMILIES {
        let series: Vec<&Series> =
            set.teardowns.iter().filter(|s| s.stage.starts_with(prefix)).collect();
        if series.is_empty() {
            continue;
        }
        out.family(name, "histogram", help);
        for s in series {
            let buckets = FixedBuckets::of(&s.hist, s.sum_ns);
            let mut labels = vec![("kind", s.stage[prefix.len()..].to_owned())];
            labels.extend(run_labels(set, &s.variant));
            out.histogram(name, &labels, &buckets);
        }
    }

    for m in RUN_METRICS {
        out.family(m.name, m.kind, m.help);
        for run in &set.runs {
            if let Some(value) = (m.value)(set, run) {
                out.sample(m.name, &run_labels(set, &run.variant), &[], value);
            }
        }
    }

    let cpu = "exitprof_workload_cpu_seconds";
    out.family(cpu, "gauge", "CPU time of the storm's process (wait4 rusage), by mode.");
    for run in &set.runs {
        for (mode, time) in [("user", run.user), ("sys", run.sys)] {
            let Some(time) = time else { continue };
            let labels = run_labels(set, &run.variant);
            out.sample(cpu, &labels, &[("mode", mode)], seconds(time.as_nanos()));
        }
    }
    out.family(LOSSES, "counter", &losses_help());
    for run in &set.runs {
        for (cause, n) in &run.losses {
            out.sample(LOSSES, &run_labels(set, &run.variant), &[("cause", cause)], n);
        }
    }
    out.finish()
}

/// Labels of every sample of a run: `condition`, `row` (empty when unset), `workload`, `kernel`,
/// `attach`.
fn run_labels(set: &ExportSet, variant: &Variant) -> Vec<(&'static str, String)> {
    let mut labels: Vec<(&'static str, String)> =
        variant.tags().iter().map(|&(name, value)| (name, value.to_owned())).collect();
    labels.push(("workload", set.workload.kind.clone()));
    labels.push(("kernel", set.kernel.clone()));
    labels.push(("attach", set.attach.to_string()));
    labels
}

fn series_labels(set: &ExportSet, series: &Series) -> Vec<(&'static str, String)> {
    let mut labels = vec![("stage", series.stage.clone())];
    labels.extend(run_labels(set, &series.variant));
    labels.push(("group", series.group.clone().unwrap_or_default()));
    labels
}

/// A document in one of the text formats, written family by family.
pub struct Writer {
    out: String,
    format: TextFormat,
}

impl Writer {
    pub fn new(format: TextFormat) -> Self {
        Self { out: String::new(), format }
    }

    /// The `# HELP` and `# TYPE` lines of a family; `name` is its samples' name (a counter's
    /// with `_total`, which OpenMetrics leaves out of the family's).
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        let name = match self.format {
            TextFormat::OpenMetrics if kind == "counter" => {
                name.strip_suffix("_total").unwrap_or(name)
            }
            _ => name,
        };
        let help = match self.format {
            TextFormat::Prometheus => help.replace('\\', r"\\").replace('\n', r"\n"),
            TextFormat::OpenMetrics => escape(help),
        };
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample: `name{labels,extra} value` (`name value` without labels).
    pub fn sample(
        &mut self,
        name: &str,
        labels: &[(&str, String)],
        extra: &[(&str, &str)],
        value: impl std::fmt::Display,
    ) {
        let pairs = labels.iter().map(|(k, v)| (*k, v.as_str())).chain(extra.iter().copied());
        let rendered: Vec<String> = pairs.map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
        if rendered.is_empty() {
            let _ = writeln!(self.out, "{name} {value}");
        } else {
            let _ = writeln!(self.out, "{name}{{{}}} {value}", rendered.join(","));
        }
    }

    /// The samples of one histogram (its family's lines written before): a bucket per fixed
    /// bound and `+Inf`, `_sum` in seconds and `_count`.
    pub fn histogram(&mut self, name: &str, labels: &[(&str, String)], buckets: &FixedBuckets) {
        let bucket = format!("{name}_bucket");
        for (&le_ns, &count) in bounds_ns().iter().zip(buckets.cumulative()) {
            let le = seconds(u128::from(le_ns));
            self.sample(&bucket, labels, &[("le", &le)], count);
        }
        self.sample(&bucket, labels, &[("le", "+Inf")], buckets.count());
        self.sample(&format!("{name}_sum"), labels, &[], seconds(buckets.sum_ns()));
        self.sample(&format!("{name}_count"), labels, &[], buckets.count());
    }

    /// What was written since the last take: a document's next part.
    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out).into_bytes()
    }

    /// The document, with OpenMetrics' end marker where it needs one.
    pub fn finish(mut self) -> Vec<u8> {
        if self.format == TextFormat::OpenMetrics {
            self.out.push_str("# EOF\n");
        }
        self.out.into_bytes()
    }
}

/// A label value (or an OpenMetrics help text) as the formats want it: backslash, double quote
/// and newline escaped.
fn escape(value: &str) -> String {
    value.replace('\\', r"\\").replace('"', "\\\"").replace('\n', r"\n")
}

/// Exact decimal seconds from ns: `0.0000001`, `1.5`, `10`.
pub fn seconds(ns: u128) -> String {
    let (whole, frac) = (ns / 1_000_000_000, ns % 1_000_000_000);
    if frac == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{}", format!("{frac:09}").trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use openmetrics_parser::{
        PrometheusType, PrometheusValue, Sample, prometheus::parse_prometheus,
    };

    use super::*;
    use crate::{
        analysis::histogram::{Latency, recorded_buckets},
        export::tests::two_condition_set,
    };

    fn label(sample: &Sample<PrometheusValue>, name: &str) -> String {
        let labels = sample.get_labelset().expect("a sample of a family");
        labels.get_label_value(name).unwrap_or_default().to_owned()
    }

    #[test]
    fn bounds_are_1_2_5_from_100ns_to_10s() {
        let b = bounds_ns();
        assert_eq!(b.len(), 25);
        assert_eq!(&b[..4], [100, 200, 500, 1_000]);
        assert_eq!(b[24], 10_000_000_000);
        assert_eq!(seconds(100), "0.0000001");
        assert_eq!(seconds(1_500_000_000), "1.5");
        assert_eq!(seconds(10_000_000_000), "10");
        assert_eq!(seconds(0), "0");
    }

    #[test]
    fn a_prometheus_parser_reads_every_histogram_back() {
        let mut set = two_condition_set();
        // Values with a known place in the buckets: exactly on bounds, just above, far out.
        // (5_004 does not share 5_000's HdrHistogram bucket, which ends at 5_003.)
        let known =
            [100u64, 101, 199, 200, 4_999, 5_000, 5_004, 123_456, 2_000_000_000, 20_000_000_000];
        let mut l = Latency::default();
        for v in known {
            l.record(v, 0);
        }
        set.series[0].hist = l.hist;
        set.series[0].sum_ns = l.total_ns;
        set.kernel = "6.18.0 \"quoted\" \\ odd".to_owned();

        let text = String::from_utf8(encode(&set)).unwrap();
        let exposition = parse_prometheus(&text).unwrap_or_else(|e| panic!("{e:?}:\n{text}"));
        let latency = &exposition.families[LATENCY];
        assert_eq!(latency.family_type, PrometheusType::Histogram);
        assert_eq!(latency.iter_samples().count(), set.series.len());
        let bounds = bounds_ns();
        for series in &set.series {
            let sample = latency
                .iter_samples()
                .find(|s| {
                    label(s, "stage") == series.stage
                        && label(s, "condition")
                            == series.variant.condition.as_deref().unwrap_or_default()
                        && label(s, "kernel") == set.kernel
                })
                .unwrap_or_else(|| {
                    panic!("no histogram for {} {:?}", series.stage, series.variant)
                });
            let PrometheusValue::Histogram(h) = &sample.value else { panic!("not a histogram") };
            let what = format!("{} {}", series.stage, series.variant.label());
            assert_eq!(h.count, Some(series.hist.len()), "{what}");
            let sum = h.sum.as_ref().unwrap().as_f64();
            assert!((sum - series.sum_ns as f64 / 1e9).abs() < 1e-9, "{what}: sum {sum}");
            assert_eq!(h.buckets.len(), bounds.len() + 1, "{what}");
            let recorded = recorded_buckets(&series.hist);
            for (bucket, &bound) in h.buckets.iter().zip(&bounds) {
                assert_eq!(bucket.upper_bound, bound as f64 / 1e9, "{what}");
                let want: u64 =
                    recorded.iter().filter(|b| b.low_ns <= bound).map(|b| b.count).sum();
                let got = bucket.count.as_f64();
                assert_eq!(got, want as f64, "{what}: le {bound} ns: {got}, histogram {want}");
            }
            let inf = h.buckets.last().unwrap();
            assert!(inf.upper_bound.is_infinite());
            assert_eq!(inf.count.as_f64(), series.hist.len() as f64);
        }
        // The known values, against where they belong.
        let exit = exposition.families[LATENCY]
            .iter_samples()
            .find(|s| label(s, "stage") == "exit" && label(s, "condition") == "on")
            .unwrap();
        let PrometheusValue::Histogram(h) = &exit.value else { panic!("not a histogram") };
        for (bucket, bound) in h.buckets.iter().zip(&bounds) {
            let want = known.iter().filter(|&&v| v <= *bound).count();
            assert_eq!(bucket.count.as_f64(), want as f64, "le {bound} ns");
        }

        let recorded = &exposition.families["exitprof_exits_recorded_total"];
        assert_eq!(recorded.family_type, PrometheusType::Counter);
        assert_eq!(recorded.iter_samples().count(), 2);
        let losses = &exposition.families["exitprof_losses_total"];
        assert_eq!(losses.iter_samples().count(), 4, "two causes per condition");
        let partial = &exposition.families["exitprof_run_partial"];
        for s in partial.iter_samples() {
            let PrometheusValue::Gauge(g) = &s.value else { panic!("partial is not a gauge") };
            assert_eq!(g.as_f64(), 0.0);
        }
    }
}
