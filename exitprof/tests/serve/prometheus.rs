//! Debian's Prometheus, started on a free loopback port with a configuration and storage of its
//! own, scraping one target (every second unless told); killed with the test.

use std::{
    fs::File,
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::served::{free_port, get};
use crate::support::KilledOnDrop;

const PROMETHEUS: &str = "/usr/bin/prometheus";

pub struct Prometheus {
    // Dropped, Prometheus is killed.
    _child: KilledOnDrop,
    addr: SocketAddr,
    log: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus in `dir`, scraping `target` every second, and waits (60 s at most) until
    /// it is ready.
    pub fn start(dir: &Path, target: SocketAddr) -> Self {
        Self::scraping(
            dir,
            &format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: exitprof\n    static_configs:\n      \
                 - targets: ['{target}']\n"
            ),
        )
    }

    /// Starts Prometheus in `dir` with the configuration `config` (its `prometheus.yml`), and
    /// waits (60 s at most) until it is ready.
    pub fn scraping(dir: &Path, config: &str) -> Self {
        assert!(
            Path::new(PROMETHEUS).exists(),
            "{PROMETHEUS} is missing: this test needs Debian's prometheus package \
             (`apt-get install prometheus`; `cargo xtask test` installs it when run as root)"
        );
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).unwrap();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
        let log = dir.join("prometheus.log");
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("prometheus starts");
        let prometheus = Self { _child: KilledOnDrop::new(child), addr, log };
        let started = Instant::now();
        while !get(addr, "/-/ready", None).is_ok_and(|r| r.status == 200) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "prometheus was not ready within 60 s:\n{}",
                prometheus.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        prometheus
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The value of an instant query that returns one sample; `None` when it returns none.
    pub fn query(&self, promql: &str) -> Option<f64> {
        let result = self.series(promql);
        assert!(result.len() <= 1, "{promql} returned several series: {result:?}");
        let value = result.first()?["value"][1].as_str().expect("a sample value");
        Some(value.parse().expect("a number"))
    }

    /// The samples of an instant query that returns a vector (`{"metric": {...}, "value": [t,
    /// "v"]}` each); fails the test when Prometheus rejects the query.
    pub fn series(&self, promql: &str) -> Vec<Value> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let response = get(self.addr, &path, None).expect("querying prometheus");
        let doc: Value = serde_json::from_str(&response.body)
            .unwrap_or_else(|e| panic!("prometheus answered {promql} with no JSON ({e})"));
        assert_eq!(doc["status"], "success", "{promql}: {doc}");
        assert_eq!(doc["data"]["resultType"], "vector", "{promql}: {doc}");
        doc["data"]["result"].as_array().expect("a vector").clone()
    }

    /// The samples of an instant query, each as its labels (`name="value"`, sorted) and value.
    pub fn query_vector(&self, promql: &str) -> Vec<(Vec<String>, f64)> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let response = get(self.addr, &path, None).expect("querying prometheus");
        let doc: Value = serde_json::from_str(&response.body)
            .unwrap_or_else(|e| panic!("prometheus answered {promql} with no JSON ({e})"));
        assert_eq!(doc["status"], "success", "{promql}: {doc}");
        let result = doc["data"]["result"].as_array().expect("a vector");
        result
            .iter()
            .map(|sample| {
                let metric = sample["metric"].as_object().expect("a sample's labels");
                let mut labels: Vec<String> =
                    metric.iter().map(|(k, v)| format!("{k}={v}")).collect();
                labels.sort();
                let value = sample["value"][1].as_str().expect("a sample value");
                (labels, value.parse().expect("a number"))
            })
            .collect()
    }

    /// Waits (30 s at most) until `promql` returns a sample for which `ok` holds; returns it.
    pub fn wait_for(&self, promql: &str, ok: impl Fn(f64) -> bool) -> f64 {
        let started = Instant::now();
        loop {
            let value = self.query(promql);
            if let Some(v) = value.filter(|&v| ok(v)) {
                return v;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "prometheus: {promql} is {value:?} after 30 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// A query string value: every byte but unreserved ones as %XX.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
