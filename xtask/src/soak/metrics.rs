//! serve's `/metrics` as the soak reads it: every sample by its series, and which series must
//! only grow (counters and histograms, by their `# TYPE`).

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{Read as _, Write as _},
    net::TcpStream,
    time::Duration,
};

use anyhow::{Context as _, bail};

/// One scrape: each sample's value by its series (`name{labels}` as served).
pub struct Scrape {
    pub text: String,
    pub samples: BTreeMap<String, f64>,
    /// The families typed `counter` or `histogram`.
    monotonic: BTreeSet<String>,
}

/// GET /metrics from serve at `addr`.
pub fn scrape(addr: &str) -> anyhow::Result<Scrape> {
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connecting {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response).with_context(|| format!("reading {addr}/metrics"))?;
    let (head, body) = response.split_once("\r\n\r\n").context("an HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("{addr}/metrics answered {}", head.lines().next().unwrap_or(""));
    }
    Scrape::parse(body.to_owned())
}

impl Scrape {
    pub fn parse(text: String) -> anyhow::Result<Self> {
        let mut samples = BTreeMap::new();
        let mut monotonic = BTreeSet::new();
        for line in text.lines() {
            if let Some(typed) = line.strip_prefix("# TYPE ") {
                let (family, kind) = typed.split_once(' ').context("a # TYPE line")?;
                if kind == "counter" || kind == "histogram" {
                    monotonic.insert(family.to_owned());
                }
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').context("a sample line")?;
            let value: f64 = value.parse().with_context(|| format!("the value of {line}"))?;
            samples.insert(series.to_owned(), value);
        }
        Ok(Self { text, samples, monotonic })
    }

    /// The sum of every sample of the family `name` (its labels whatever they are).
    pub fn sum(&self, name: &str) -> f64 {
        self.samples
            .iter()
            .filter(|(series, _)| series.split('{').next() == Some(name))
            .map(|(_, v)| v)
            .sum()
    }

    /// The values of label `label` in the series of family `name`.
    pub fn label_values(&self, name: &str, label: &str) -> BTreeSet<String> {
        let key = format!("{label}=\"");
        self.samples
            .keys()
            .filter(|series| series.split('{').next() == Some(name))
            .filter_map(|series| {
                let start = series.find(&key)? + key.len();
                let end = series[start..].find('"')? + start;
                Some(series[start..end].to_owned())
            })
            .collect()
    }

    /// Whether `series` belongs to a counter or histogram family.
    fn is_monotonic(&self, series: &str) -> bool {
        let name = series.split('{').next().unwrap_or(series);
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .filter(|base| self.monotonic.contains(*base))
            .unwrap_or(name);
        self.monotonic.contains(family)
    }

    /// The counter and histogram series that went down from `earlier` to this scrape. A series
    /// of a group dropped after its time to live may come back from zero: allowed where
    /// `groups_expired` says a group expired in between.
    pub fn decreases_since(&self, earlier: &Self, groups_expired: bool) -> Vec<String> {
        self.samples
            .iter()
            .filter(|(series, _)| self.is_monotonic(series))
            .filter(|(series, _)| !(groups_expired && series.contains("group=\"")))
            .filter_map(|(series, &now)| {
                let before = *earlier.samples.get(series)?;
                (now < before).then(|| format!("{series}: {before} -> {now}"))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE a_total counter\na_total{k=\"1\"} 5\n# TYPE h histogram\n\
                        h_bucket{group=\"g\",le=\"1\"} 2\nh_count{group=\"g\"} 2\n\
                        # TYPE g gauge\ng 7\n";

    #[test]
    fn counters_and_histograms_must_not_go_down() {
        let earlier = Scrape::parse(TEXT.to_owned()).unwrap();
        let later = Scrape::parse(TEXT.replace(" 5\n", " 4\n").replace("g 7", "g 1")).unwrap();
        assert_eq!(later.decreases_since(&earlier, false), ["a_total{k=\"1\"}: 5 -> 4"]);
        let reset = Scrape::parse(TEXT.replace("} 2\n", "} 1\n")).unwrap();
        assert_eq!(reset.decreases_since(&earlier, false).len(), 2);
        assert!(reset.decreases_since(&earlier, true).is_empty(), "a group expired meanwhile");
        assert_eq!(later.sum("a_total"), 4.0);
        assert_eq!(later.label_values("h_count", "group").into_iter().collect::<Vec<_>>(), ["g"]);
    }
}
