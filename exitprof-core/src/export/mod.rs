//! Exports: histograms written to files for other tools to compare, plot and monitor —
//! HdrHistogram interval log (`.hlog`), JSON, CSV, an SVG figure and Prometheus text (`.prom`);
//! and kernel stacks for flame graphs: folded stacks (`.folded`) and a flame graph
//! (`.flame.svg`).
//!
//! Every format is built from one [`ExportSet`]: what ran, one [`RunStats`] per [`Variant`] (a
//! condition of an A/B compare, a row of a sweep; a plain run has one plain variant), and the
//! [`Series`]: one histogram per stage per variant, and the [`WeightedStack`]s. Files are written atomically, so no reader
//! ever sees half an export, and a failed write leaves nothing behind.
//!
//! The set is built from what a run or comparison produced and the documents made of
//! it. A diff's files are drawn from its document instead (`diff/`). Part of the presentation
//! layer, under `present`: must not import `cli` or `present`, nor load, attach or read the eBPF
//! object; `run`, `compare` and the folders under them never import it.

mod csv;
pub mod diff;
pub(crate) mod folded;
mod from_compare;
mod from_run;
mod hlog;
pub mod html;
mod json;
pub mod prom;
pub(crate) mod svg;

use std::{
    fmt,
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use hdrhistogram::Histogram;

use crate::{
    analysis::histogram::{PercentilePoint, percentile_distribution},
    base::atomic_file,
    document::fmt_rate,
    probes::plan::{AttachMode, Planned},
};

/// An export file format: each encoder is in this folder's file of its name (what each holds is
/// the `--format` help, `cli/values.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Hlog,
    Json,
    Csv,
    Svg,
    Prom,
    Folded,
    /// `.flame.svg`: the folded stacks drawn (`folded.rs`).
    FlameSvg,
    Html,
}

impl Format {
    pub const ALL: [Self; 8] = [
        Self::Hlog,
        Self::Json,
        Self::Csv,
        Self::Svg,
        Self::Prom,
        Self::Folded,
        Self::FlameSvg,
        Self::Html,
    ];

    /// The ending of a file name that selects this format (after a dot).
    pub fn extension(self) -> &'static str {
        match self {
            Self::Hlog => "hlog",
            Self::Json => "json",
            Self::Csv => "csv",
            Self::Svg => "svg",
            Self::Prom => "prom",
            Self::Folded => "folded",
            Self::FlameSvg => "flame.svg",
            Self::Html => "html",
        }
    }

    /// The format a file name's ending names, if it names one: the longest ending that matches
    /// wins, so `run.flame.svg` is a flame graph and `run.svg` the percentile figure.
    pub fn of_path(path: &Path) -> Option<Self> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .filter(|f| name.strip_suffix(f.extension()).is_some_and(|stem| stem.ends_with('.')))
            .max_by_key(|f| f.extension().len())
    }

    fn encode(self, set: &ExportSet) -> Result<Vec<u8>, EncodeError> {
        match self {
            Self::Hlog => hlog::encode(set),
            Self::Json => Ok(json::encode(set)),
            Self::Csv => csv::encode(set),
            Self::Svg => svg::encode(set),
            Self::Prom => Ok(prom::encode(set)),
            Self::Folded => Ok(folded::encode(set)),
            Self::FlameSvg => folded::encode_svg(set),
            Self::Html => html::encode(set),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.extension())
    }
}

/// One file to write, and its format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportTarget {
    pub path: PathBuf,
    pub format: Format,
}

/// Pairs each `--export` path with its format. The extension names the format; `format` (from
/// `--format`) names it for paths whose extension does not, and must agree with those that do.
pub fn targets(paths: &[PathBuf], format: Option<Format>) -> Result<Vec<ExportTarget>, String> {
    let mut targets: Vec<ExportTarget> = Vec::new();
    for path in paths {
        if targets.iter().any(|t| t.path == *path) {
            return Err(format!("--export {} is given twice", path.display()));
        }
        let format = match (Format::of_path(path), format) {
            (Some(by_extension), Some(asked)) if by_extension != asked => {
                return Err(format!(
                    "--export {} names the {by_extension} format by its extension, but --format \
                     asks for {asked}",
                    path.display()
                ));
            }
            (Some(by_extension), _) => by_extension,
            (None, Some(asked)) => asked,
            (None, None) => {
                let known: Vec<String> =
                    Format::ALL.iter().map(|f| format!(".{}", f.extension())).collect();
                return Err(format!(
                    "cannot tell the format of --export {} from its extension: use one of {}, or \
                     name it with --format",
                    path.display(),
                    known.join(", ")
                ));
            }
        };
        targets.push(ExportTarget { path: path.clone(), format });
    }
    Ok(targets)
}

/// Why an export failed. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot export to {}: {reason}", path.display())]
    Unwritable { path: PathBuf, reason: String },
    #[error("could not write the {format} export {}", path.display())]
    Write {
        path: PathBuf,
        format: Format,
        #[source]
        source: std::io::Error,
    },
    #[error("could not encode the {format} export {}", path.display())]
    Encode {
        path: PathBuf,
        format: Format,
        #[source]
        source: EncodeError,
    },
}

/// What an encoder's library reported.
pub type EncodeError = Box<dyn std::error::Error + Send + Sync>;

/// Checks, before anything runs, that `path` can be written: its directory exists and takes a
/// new file.
pub fn check_writable(path: &Path) -> Result<(), ExportError> {
    atomic_file::check_writable(path)
        .map_err(|reason| ExportError::Unwritable { path: path.to_owned(), reason })
}

/// Encodes the set in the target's format and writes it atomically.
pub fn write(set: &ExportSet, target: &ExportTarget) -> Result<(), ExportError> {
    let ExportTarget { path, format } = target;
    let bytes = format.encode(set).map_err(|source| ExportError::Encode {
        path: path.clone(),
        format: *format,
        source,
    })?;
    write_encoded(target, &bytes)
}

/// Writes what was encoded elsewhere (`diff`'s document and figure) atomically.
pub fn write_encoded(target: &ExportTarget, bytes: &[u8]) -> Result<(), ExportError> {
    let ExportTarget { path, format } = target;
    atomic_file::write(path, bytes).map_err(|source| ExportError::Write {
        path: path.clone(),
        format: *format,
        source,
    })
}

/// Histograms and what produced them, ready for any format.
pub struct ExportSet {
    pub kernel: String,
    pub attach: AttachMode,
    /// Every probe point, with the symbol or tracepoint it is attached to.
    pub probes: Vec<Planned>,
    pub workload: WorkloadLabel,
    /// The condition an A/B compare or sweep switched on and off (its variants' `condition`).
    pub compared: Option<String>,
    /// When the (first) storm started.
    pub started_at: SystemTime,
    /// A run was cut short: its figures cover what ran until then.
    pub partial: bool,
    /// One per variant.
    pub runs: Vec<RunStats>,
    /// Per variant, the whole exit (stage `exit`) first, then each stage in kernel order.
    pub series: Vec<Series>,
    /// The namespace teardowns the exits set off, per kind joined: stage `teardown:<kind>`,
    /// each namespace's share of its kworker's run, and `teardown-wait:<kind>`, from its exit's
    /// end to the run's start (`net`, `user`).
    pub teardowns: Vec<Series>,
    /// The producing command's `--json` document (histogram buckets included), which the JSON
    /// export writes as is.
    pub document: String,
    /// Kernel stacks where exits computed and blocked, for the flame graphs.
    pub stacks: Vec<WeightedStack>,
    /// The verdict, and the report as the terminal shows it (for the HTML report; empty where
    /// the producing command has none).
    pub verdict: Option<String>,
    pub report: String,
}

/// One kernel stack of the flame graphs, weighed by the time it stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightedStack {
    pub variant: Variant,
    pub kind: StackKind,
    /// The stage it lies in.
    pub stage: String,
    /// Function names, innermost first, down to `do_exit`.
    pub frames: Vec<String>,
    /// On-CPU: the on-CPU time its samples stand for; off-CPU: the time blocked there (µs).
    pub us: u64,
}

/// Where a stack comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackKind {
    /// Sampled on a CPU.
    OnCpu,
    /// Where an exit blocked.
    OffCpu,
}

/// What was profiled, as the exports label it: its kind and parameters, as text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadLabel {
    pub kind: String,
    /// Its parameters, named as on the command line (`threads`, `reps`, ...).
    pub params: Vec<(String, String)>,
}

/// Which run a series belongs to in a set of several: the condition of an A/B compare
/// (`on`/`off`) and the row of a sweep (`stagger=2`). Both are `None` for a plain run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Variant {
    pub condition: Option<String>,
    pub row: Option<String>,
}

/// What one variant's storm did.
#[derive(Clone, Debug)]
pub struct RunStats {
    pub variant: Variant,
    /// `None` where exitprof does not drive the target (--pid, --comm, --all, a command).
    pub exits_expected: Option<u64>,
    pub exits_recorded: u64,
    pub exits_lost: u64,
    /// Every loss cause (as the JSON document names it) with its count.
    pub losses: Vec<(&'static str, u64)>,
    pub elapsed: Duration,
    /// CPU time of exitprof's workload children (`None` for processes it did not start).
    pub user: Option<Duration>,
    pub sys: Option<Duration>,
    /// Exits per second.
    pub exit_rate: f64,
}

/// One histogram: latencies of one stage in one variant, in ns.
#[derive(Clone, Debug)]
pub struct Series {
    pub stage: String,
    pub variant: Variant,
    /// The workload whose exits these are (`--group-by`); all of the variant's when `None`.
    pub group: Option<String>,
    pub hist: Histogram<u64>,
    /// The exact sum of the recorded latencies (the histogram keeps only their buckets).
    pub sum_ns: u128,
}

/// HdrHistogram's usual resolution of a percentile distribution (`outputPercentileDistribution`).
const PERCENTILE_TICKS_PER_HALF_DISTANCE: u32 = 5;

/// The names of a series' tags, in the order every format lists them.
pub const TAG_NAMES: [&str; 4] = ["stage", "condition", "row", "group"];

impl Variant {
    /// `condition` and `row`, empty when unset.
    pub fn tags(&self) -> [(&'static str, &str); 2] {
        [
            ("condition", self.condition.as_deref().unwrap_or_default()),
            ("row", self.row.as_deref().unwrap_or_default()),
        ]
    }

    /// `condition=on row=stagger=2`; empty for a plain run.
    pub fn label(&self) -> String {
        self.tags()
            .iter()
            .filter(|(_, value)| !value.is_empty())
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Series {
    /// `stage`, `condition`, `row` and `group` ([`TAG_NAMES`]), empty when unset.
    pub fn tags(&self) -> [(&'static str, &str); 4] {
        let [condition, row] = self.variant.tags();
        let group = ("group", self.group.as_deref().unwrap_or_default());
        [("stage", self.stage.as_str()), condition, row, group]
    }

    /// HdrHistogram's percentile distribution of this series.
    pub fn percentiles(&self) -> Vec<PercentilePoint> {
        percentile_distribution(&self.hist, PERCENTILE_TICKS_PER_HALF_DISTANCE)
    }
}

impl WorkloadLabel {
    /// `threads (threads=1000 reps=10 stagger_us=2)`.
    pub fn describe(&self) -> String {
        let params: Vec<String> = self.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{} ({})", self.kind, params.join(" "))
    }
}

impl RunStats {
    /// One line: exits, losses, times and rate.
    pub fn describe(&self) -> String {
        let expected = self.exits_expected.map(|n| format!(" of {n} expected")).unwrap_or_default();
        let cpu = match (self.user, self.sys) {
            (Some(user), Some(sys)) => {
                format!(", user {:.3} s, sys {:.3} s", user.as_secs_f64(), sys.as_secs_f64())
            }
            _ => String::new(),
        };
        format!(
            "{} exits recorded{expected}, {} lost; elapsed {:.3} s{cpu}; {} exits/s",
            self.exits_recorded,
            self.exits_lost,
            self.elapsed.as_secs_f64(),
            fmt_rate(self.exit_rate)
        )
    }
}

impl ExportSet {
    /// What ran, in a phrase: the workload, and the condition compared if any.
    pub fn describe(&self) -> String {
        match &self.compared {
            Some(condition) => format!("{}, {condition} on vs off", self.workload.describe()),
            None => self.workload.describe(),
        }
    }

    /// The variants, in order of appearance.
    pub fn variants(&self) -> Vec<&Variant> {
        let mut variants: Vec<&Variant> = Vec::new();
        let all =
            self.runs.iter().map(|r| &r.variant).chain(self.series.iter().map(|s| &s.variant));
        for v in all {
            if !variants.contains(&v) {
                variants.push(v);
            }
        }
        variants
    }

    /// The stage names, in order of appearance (the whole exit first).
    pub fn stages(&self) -> Vec<&str> {
        let mut stages: Vec<&str> = Vec::new();
        for s in &self.series {
            if !stages.contains(&s.stage.as_str()) {
                stages.push(&s.stage);
            }
        }
        stages
    }

    /// The stats of one variant's run.
    pub fn run(&self, variant: &Variant) -> Option<&RunStats> {
        self.runs.iter().find(|r| r.variant == *variant)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::histogram::Latency;

    /// A set as a compare would produce it: the same stages under two conditions, with known
    /// latencies. Condition `on` is slower in `exit_files` and has a long tail.
    pub(crate) fn two_condition_set() -> ExportSet {
        let stages: [(&str, u64); 3] =
            [("exit_signals", 800), ("exit_files", 2_500), ("exit_mm", 40_000)];
        let mut runs = Vec::new();
        let mut series = Vec::new();
        for (condition, slowdown) in [("on", 3), ("off", 1)] {
            let variant = Variant { condition: Some(condition.to_owned()), row: None };
            let mut exit = Latency::default();
            let mut per_stage: Vec<Latency> = stages.iter().map(|_| Latency::default()).collect();
            for i in 0..5_000u64 {
                let mut total = 0;
                for (k, &(name, base)) in stages.iter().enumerate() {
                    let spread = base / 4 * (i % 97) / 97;
                    let tail = if i % 1000 == 7 { base * 20 } else { 0 };
                    let mut ns = base + spread + tail;
                    if name == "exit_files" {
                        ns *= slowdown;
                    }
                    per_stage[k].record(ns, 0);
                    total += ns;
                }
                exit.record(total, 0);
            }
            let mut add = |stage: &str, l: Latency| {
                series.push(Series {
                    stage: stage.to_owned(),
                    variant: variant.clone(),
                    group: None,
                    hist: l.hist,
                    sum_ns: l.total_ns,
                });
            };
            add("exit", exit);
            for (&(name, _), l) in stages.iter().zip(per_stage) {
                add(name, l);
            }
            runs.push(RunStats {
                variant,
                exits_expected: Some(5_000),
                exits_recorded: 5_000,
                exits_lost: 0,
                losses: vec![("ringbuf_full", 0), ("hits", 2)],
                elapsed: Duration::from_millis(250 * slowdown),
                user: Some(Duration::from_millis(10)),
                sys: Some(Duration::from_millis(200)),
                exit_rate: 5_000.0 / (0.25 * slowdown as f64),
            });
        }
        ExportSet {
            compared: Some("taskstats-listener".to_owned()),
            kernel: "6.18.0-test".to_owned(),
            attach: AttachMode::Auto,
            probes: Vec::new(),
            workload: WorkloadLabel {
                kind: "threads".to_owned(),
                params: vec![
                    ("threads".to_owned(), "50".to_owned()),
                    ("reps".to_owned(), "100".to_owned()),
                ],
            },
            started_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            partial: false,
            runs,
            series,
            teardowns: Vec::new(),
            document: "{\"hand_built\": true}".to_owned(),
            stacks: Vec::new(),
            verdict: None,
            report: String::new(),
        }
    }

    fn paths(p: &[&str]) -> Vec<PathBuf> {
        p.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn formats_follow_extensions() {
        let names = [
            "a.hlog",
            "b.JSON",
            "c.csv",
            "d.svg",
            "dir.x/e.prom",
            "f.folded",
            "run.Flame.SVG",
            "report.html",
        ];
        let t = targets(&paths(&names), None).unwrap();
        let formats: Vec<Format> = t.iter().map(|t| t.format).collect();
        assert_eq!(formats, Format::ALL);
        // Only a whole ending after a dot names a format.
        assert_eq!(Format::of_path(Path::new("noflame.svg")), Some(Format::Svg));
        assert_eq!(Format::of_path(Path::new("flame.svg")), Some(Format::Svg));
        assert_eq!(Format::of_path(Path::new("dir.flame.svg/x")), None);
    }

    #[test]
    fn format_names_what_the_extension_does_not() {
        let t = targets(&paths(&["out.txt", "plain", "x.csv"]), Some(Format::Csv)).unwrap();
        assert!(t.iter().all(|t| t.format == Format::Csv), "{t:?}");
    }

    #[test]
    fn unknown_or_contradicting_formats_are_refused() {
        let err = targets(&paths(&["out.txt"]), None).unwrap_err();
        for ext in [".hlog", ".json", ".csv", ".svg", ".prom", "--format", "out.txt"] {
            assert!(err.contains(ext), "{err:?} does not mention {ext}");
        }
        let err = targets(&paths(&["out.json"]), Some(Format::Csv)).unwrap_err();
        assert!(err.contains("out.json") && err.contains("csv"), "{err}");
        let err = targets(&paths(&["a.csv", "a.csv"]), None).unwrap_err();
        assert!(err.contains("twice"), "{err}");
    }

    #[test]
    fn variants_and_stages_keep_their_order() {
        let set = two_condition_set();
        let labels: Vec<String> = set.variants().iter().map(|v| v.label()).collect();
        assert_eq!(labels, ["condition=on", "condition=off"]);
        assert_eq!(set.stages(), ["exit", "exit_signals", "exit_files", "exit_mm"]);
        assert_eq!(Variant::default().label(), "");
    }
}
