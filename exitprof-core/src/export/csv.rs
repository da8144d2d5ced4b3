//! CSV (`.csv`): HdrHistogram's percentile distribution of every series, one row per percentile
//! level, ready for a spreadsheet or `pandas.read_csv`. Columns: `stage,condition,row` (empty
//! when unset), `percentile` (the level, 0 to 100), `value_ns` (the highest latency at that
//! level), `count_at_or_below`, `partial` (the run was interrupted).

use super::{EncodeError, ExportSet, TAG_NAMES};

const VALUE_COLUMNS: [&str; 4] = ["percentile", "value_ns", "count_at_or_below", "partial"];

pub fn encode(set: &ExportSet) -> Result<Vec<u8>, EncodeError> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    w.write_record(TAG_NAMES.iter().chain(&VALUE_COLUMNS))?;
    let partial = set.partial.to_string();
    for series in set.series.iter().chain(&set.teardowns) {
        let tags = series.tags().map(|(_, value)| value);
        for p in series.percentiles() {
            let values = [
                percent(p.quantile),
                p.value_ns.to_string(),
                p.count_at_or_below.to_string(),
                partial.clone(),
            ];
            w.write_record(tags.iter().copied().chain(values.iter().map(String::as_str)))?;
        }
    }
    Ok(w.into_inner().map_err(csv::IntoInnerError::into_error)?)
}

/// A quantile as a percentage, without the float noise of `q * 100` (`99.951171875`, not
/// `99.95117187500001`).
fn percent(q: f64) -> String {
    let s = format!("{:.10}", q * 100.0);
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::{Variant, tests::two_condition_set};

    #[derive(Debug, serde::Deserialize)]
    #[expect(clippy::struct_field_names, reason = "the fields are the CSV's columns")]
    struct Row {
        stage: String,
        condition: String,
        row: String,
        percentile: f64,
        value_ns: u64,
        count_at_or_below: u64,
        partial: bool,
    }

    #[test]
    fn distributions_read_back_monotone_up_to_the_maximum() {
        let set = two_condition_set();
        let bytes = encode(&set).unwrap();
        let mut reader = ::csv::Reader::from_reader(bytes.as_slice());
        let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_owned).collect();
        assert_eq!(
            header,
            [
                "stage",
                "condition",
                "row",
                "group",
                "percentile",
                "value_ns",
                "count_at_or_below",
                "partial"
            ]
        );
        let rows: Vec<Row> = reader.deserialize().collect::<Result<_, _>>().unwrap();
        for series in &set.series {
            let mine: Vec<&Row> = rows
                .iter()
                .filter(|r| {
                    r.stage == series.stage
                        && Variant {
                            condition: Some(r.condition.clone()).filter(|c| !c.is_empty()),
                            row: Some(r.row.clone()).filter(|c| !c.is_empty()),
                        } == series.variant
                })
                .collect();
            let what = format!("{} {}", series.stage, series.variant.label());
            assert!(mine.len() > 50, "{what}: only {} percentile rows", mine.len());
            for w in mine.windows(2) {
                assert!(w[0].percentile < w[1].percentile, "{what}: percentiles {w:?}");
                assert!(w[0].value_ns <= w[1].value_ns, "{what}: values {w:?}");
                assert!(w[0].count_at_or_below <= w[1].count_at_or_below, "{what}: counts {w:?}");
            }
            let (first, last) = (mine[0], mine[mine.len() - 1]);
            assert_eq!(first.percentile, 0.0);
            assert_eq!(first.value_ns, series.hist.highest_equivalent(series.hist.min()), "{what}");
            assert_eq!(last.percentile, 100.0, "{what}");
            assert_eq!(last.value_ns, series.hist.max(), "{what}: last value is not the maximum");
            assert_eq!(last.count_at_or_below, series.hist.len(), "{what}");
            // HdrHistogram's p99 lies between the levels around 99%.
            let p99 = series.hist.value_at_quantile(0.99);
            let below = mine.iter().rfind(|r| r.percentile < 99.0).unwrap();
            let above = mine.iter().find(|r| r.percentile >= 99.0).unwrap();
            assert!(
                below.value_ns <= p99 && p99 <= above.value_ns,
                "{what}: p99 {p99} ns, rows {below:?} {above:?}"
            );
            assert!(mine.iter().all(|r| !r.partial));
        }
        let series_rows: usize = set.series.iter().map(|s| s.percentiles().len()).sum();
        assert_eq!(rows.len(), series_rows);
    }

    #[test]
    fn percentages_have_no_float_noise() {
        assert_eq!(percent(0.99951171875), "99.951171875");
        assert_eq!(percent(0.5), "50");
        assert_eq!(percent(1.0), "100");
        assert_eq!(percent(0.0), "0");
    }
}
