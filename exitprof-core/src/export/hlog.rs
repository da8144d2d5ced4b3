//! HdrHistogram interval log (`.hlog`): each series as one interval histogram (V2 encoding,
//! deflate-compressed, base64), tagged with its stage and variant. HdrHistogram's log readers and
//! tools read it in every language (Java's `HistogramLogProcessor -tag exit`, Python's `hdrh`).
//!
//! Tags may hold neither commas nor whitespace (they end at the first comma of the line). A tag
//! here is the stage name, then `/condition=VALUE` and `/row=VALUE` where set, with `%`, `/`,
//! `,` and whitespace written as `%XX` (their UTF-8 bytes, as in URLs): `exit`,
//! `exit_files/condition=on`, `exit/row=stagger=2`.

use std::time::Duration;

use hdrhistogram::serialization::{
    V2DeflateSerializer,
    interval_log::{IntervalLogWriterBuilder, Tag},
};

use super::{EncodeError, ExportSet, Series};

/// The column legend HdrHistogram's own log writers put after the header.
const LEGEND: &str =
    "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n";

/// Values are recorded in ns; `Interval_Max` is written in ms, as HdrHistogram's tools expect.
const MAX_VALUE_DIVISOR: f64 = 1e6;

pub fn encode(set: &ExportSet) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    let mut header = IntervalLogWriterBuilder::new();
    header.add_comment("[Histogram log format version 1.3]");
    for line in describe(set) {
        header.add_comment(&line);
    }
    header.with_start_time(set.started_at).with_base_time(set.started_at);
    header.begin_log_with(&mut out, &mut serializer)?;
    out.extend_from_slice(LEGEND.as_bytes());

    // The intervals follow the legend. Their writer notes its divisor in a comment line of its
    // own (`#[MaxValueDivisor: ...]`), which readers skip like any comment.
    let mut log = IntervalLogWriterBuilder::new()
        .with_max_value_divisor(MAX_VALUE_DIVISOR)
        .begin_log_with(&mut out, &mut serializer)?;
    for series in set.series.iter().chain(&set.teardowns) {
        let tag = tag(series);
        // Every run's interval starts at the base time and lasts as long as its storm.
        let length = set.run(&series.variant).map_or(Duration::ZERO, |r| r.elapsed);
        log.write_histogram(&series.hist, Duration::ZERO, length, Tag::new(&tag))?;
    }
    Ok(out)
}

/// The header comments: what ran, how it went, how to read the tags.
fn describe(set: &ExportSet) -> Vec<String> {
    let mut lines = vec![
        format!(
            "exitprof {}: exit latency by stage, in nanoseconds (Interval_Max in milliseconds)",
            env!("CARGO_PKG_VERSION")
        ),
        format!("kernel {}, attach {}", set.kernel, set.attach),
        format!("workload {}", set.describe()),
    ];
    if set.partial {
        lines.push("PARTIAL: interrupted before the workload finished".to_owned());
    }
    for run in &set.runs {
        let label = run.variant.label();
        let of = if label.is_empty() { String::new() } else { format!(" {label}") };
        lines.push(format!("run{of}: {}", run.describe()));
    }
    for p in &set.probes {
        lines.push(format!("probe {}: {} {}", p.point, p.how, p.target));
    }
    lines.push(
        "tags: STAGE[/condition=VALUE][/row=VALUE], with %, /, commas and whitespace \
         %-escaped; stage exit is the whole exit"
            .to_owned(),
    );
    lines
}

/// The interval tag of a series (see the module documentation).
fn tag(series: &Series) -> String {
    let [(_, stage), rest @ ..] = series.tags();
    let mut tag = escape(stage);
    for (name, value) in rest {
        if !value.is_empty() {
            tag.push_str(&format!("/{name}={}", escape(value)));
        }
    }
    tag
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '/' | ',') || c.is_whitespace() {
            let mut utf8 = [0; 4];
            for byte in c.encode_utf8(&mut utf8).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use hdrhistogram::{
        Histogram,
        serialization::{
            Deserializer,
            interval_log::{IntervalLogIterator, LogEntry},
        },
    };

    use super::*;
    use crate::export::{Variant, tests::two_condition_set};

    /// Reads a tag back into (stage, variant).
    fn parse_tag(tag: &str) -> (String, Variant) {
        let unescape = |s: &str| {
            let mut bytes = Vec::new();
            let mut rest = s.as_bytes();
            while let [first, tail @ ..] = rest {
                if *first == b'%' {
                    let hex = std::str::from_utf8(&tail[..2]).unwrap();
                    bytes.push(u8::from_str_radix(hex, 16).unwrap());
                    rest = &tail[2..];
                } else {
                    bytes.push(*first);
                    rest = tail;
                }
            }
            String::from_utf8(bytes).unwrap()
        };
        let mut parts = tag.split('/');
        let stage = unescape(parts.next().unwrap());
        let mut variant = Variant::default();
        for part in parts {
            let (name, value) = part.split_once('=').unwrap();
            match name {
                "condition" => variant.condition = Some(unescape(value)),
                "row" => variant.row = Some(unescape(value)),
                other => panic!("unknown tag field {other} in {tag}"),
            }
        }
        (stage, variant)
    }

    struct Interval {
        tag: String,
        start: Duration,
        length: Duration,
        max_ms: f64,
        hist: Histogram<u64>,
    }

    /// Every interval of a log, decoded through the hdrhistogram crate's reader.
    fn read_back(log: &[u8]) -> (Vec<Duration>, Vec<Interval>) {
        let mut times = Vec::new();
        let mut intervals = Vec::new();
        let mut deserializer = Deserializer::new();
        for entry in IntervalLogIterator::new(log) {
            match entry.expect("a well-formed interval log") {
                LogEntry::StartTime(t) | LogEntry::BaseTime(t) => times.push(t),
                LogEntry::Interval(i) => {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(i.encoded_histogram())
                        .expect("base64");
                    let hist: Histogram<u64> =
                        deserializer.deserialize(&mut bytes.as_slice()).expect("a V2 histogram");
                    intervals.push(Interval {
                        tag: i.tag().expect("every interval is tagged").to_string(),
                        start: i.start_timestamp(),
                        length: i.duration(),
                        max_ms: i.max(),
                        hist,
                    });
                }
            }
        }
        (times, intervals)
    }

    #[test]
    fn every_series_reads_back_equal() {
        let set = two_condition_set();
        let log = encode(&set).unwrap();
        let (times, intervals) = read_back(&log);
        let start = set.started_at.duration_since(std::time::UNIX_EPOCH).unwrap();
        assert_eq!(times, [start, start], "StartTime and BaseTime");
        assert_eq!(intervals.len(), set.series.len());
        for (series, back) in set.series.iter().zip(&intervals) {
            let (stage, variant) = parse_tag(&back.tag);
            assert_eq!((&stage, &variant), (&series.stage, &series.variant), "tag {}", back.tag);
            let (h, b) = (&series.hist, &back.hist);
            assert_eq!((b.len(), b.min(), b.max()), (h.len(), h.min(), h.max()), "{}", back.tag);
            for q in [0.0, 0.5, 0.9, 0.99, 0.999, 0.9999, 1.0] {
                assert_eq!(b.value_at_quantile(q), h.value_at_quantile(q), "{} q {q}", back.tag);
            }
            assert_eq!(b, h, "{}: the histograms differ", back.tag);
            let run = set.run(&series.variant).unwrap();
            assert_eq!((back.start, back.length), (Duration::ZERO, run.elapsed));
            assert!((back.max_ms - h.max() as f64 / 1e6).abs() < 1e-3, "max {} ms", back.max_ms);
        }
    }

    #[test]
    fn header_follows_the_format() {
        let text = String::from_utf8(encode(&two_condition_set()).unwrap()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "#[Histogram log format version 1.3]");
        let legend = lines.iter().position(|l| l.starts_with("\"StartTimestamp\"")).unwrap();
        assert!(lines[legend - 1].starts_with("#[BaseTime: 1700000000.000 "), "{text}");
        assert_eq!(lines[legend + 1], "#[MaxValueDivisor: 1000000.000]");
        assert!(lines.iter().any(|l| l.starts_with("#[StartTime: 1700000000.000 ")), "{text}");
        assert!(lines.iter().any(|l| l.starts_with("#run condition=off: 5000 exits")), "{text}");
        assert!(lines[legend + 2..].iter().all(|l| l.starts_with("Tag=")), "{text}");
        assert!(!text.contains("PARTIAL"));
    }

    #[test]
    fn tags_survive_any_value() {
        let mut series = two_condition_set().series.remove(0);
        for (stage, condition, row) in [
            ("perf_event_exit_task…exit_thread", None, None),
            ("exit_files", Some("on"), None),
            ("exit", None, Some("stagger=2")),
            ("a b,c/d%e", Some("taskstats listener, 2 cpus"), Some("rate=50%/s")),
        ] {
            series.stage = stage.to_owned();
            series.variant =
                Variant { condition: condition.map(str::to_owned), row: row.map(str::to_owned) };
            let tag = tag(&series);
            assert!(Tag::new(&tag).is_some(), "{tag} is not a valid interval tag");
            assert_eq!(parse_tag(&tag), (series.stage.clone(), series.variant.clone()), "{tag}");
        }
        series.stage = "exit_files".to_owned();
        series.variant = Variant { condition: Some("on".to_owned()), row: None };
        assert_eq!(tag(&series), "exit_files/condition=on");
    }
}
