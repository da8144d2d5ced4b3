//! deploy/grafana-dashboard.json against the exitprof it charts: every query is valid PromQL to
//! promtool, reads only series a running `exitprof serve` exports, and, evaluated by Prometheus
//! scraping that serve after a storm, shows data; the dashboard imports as is (its data source is
//! an input of the import); deploy/prometheus.yml keeps the `group` label the queries split by.

use std::{
    collections::{BTreeSet, HashSet},
    path::Path,
    process::Command,
};

use serde_json::Value;
use yaml_rust2::Yaml;

use super::{Prometheus, Served, named_storm, task_name};
use crate::{
    deploy::{deploy_file, yaml},
    support::require_root,
};

const PROMTOOL: &str = "/usr/bin/promtool";

/// A PromQL expression of the dashboard: where it is, the expression as written, and whether an
/// empty result is allowed (its panel says what no value means).
struct Query {
    place: String,
    written: String,
    may_be_empty: bool,
    /// For a variable's `label_values(SELECTOR, LABEL)`: the label its series must carry.
    label: Option<String>,
}

impl Query {
    /// The expression with Grafana's variables replaced: intervals by durations, the template
    /// variables (all in regex matchers) by `.*`, as "All" selects everything.
    fn concrete(&self) -> String {
        let expr = self
            .written
            .replace("$__rate_interval", "1m")
            .replace("$__range", "1h")
            .replace("$__interval", "15s");
        variable_use().replace_all(&expr, ".*").into_owned()
    }
}

/// A Grafana variable where a query uses it: `$name` or `${name}`.
fn variable_use() -> regex::Regex {
    regex::Regex::new(r"\$\{?(\w+)\}?").unwrap()
}

/// The dashboard's panels, those of collapsed rows included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let top = dashboard["panels"].as_array().expect("panels");
    top.iter()
        .flat_map(|p| std::iter::once(p).chain(p["panels"].as_array().into_iter().flatten()))
        .collect()
}

/// Every PromQL expression of the dashboard: its panels' queries, and the selectors of its
/// variables' `label_values(...)`.
fn queries(dashboard: &Value) -> Vec<Query> {
    let mut queries = Vec::new();
    for panel in panels(dashboard) {
        let may_be_empty = !panel["fieldConfig"]["defaults"]["noValue"].is_null();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("a Prometheus query in every target");
            queries.push(Query {
                place: format!("panel {:?} ({})", panel["title"], target["refId"]),
                written: expr.to_owned(),
                may_be_empty,
                label: None,
            });
        }
    }
    for variable in template_variables(dashboard).iter().filter(|v| v["type"] == "query") {
        let definition = variable["query"]["query"].as_str().expect("a variable's query");
        let inner = definition
            .strip_prefix("label_values(")
            .and_then(|d| d.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable {}: not label_values(...)", variable["name"]));
        let (selector, label) = inner.rsplit_once(',').expect("label_values(SELECTOR, LABEL)");
        queries.push(Query {
            place: format!("variable {}", variable["name"]),
            written: selector.trim().to_owned(),
            may_be_empty: false,
            label: Some(label.trim().to_owned()),
        });
    }
    queries
}

fn template_variables(dashboard: &Value) -> &Vec<Value> {
    dashboard["templating"]["list"].as_array().expect("templating.list")
}

/// PromQL's keywords followed by a list of labels, and its other keywords.
const LABEL_LISTS: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];
const KEYWORDS: [&str; 6] = ["and", "or", "unless", "bool", "offset", "atan2"];

/// The metric names a PromQL expression reads: its identifiers outside strings, label matchers
/// and range brackets that are no function or aggregation (followed by `(`, or by `by (...)`),
/// no keyword, and in no label list (of `by`, `on`, `group_left`, ...).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut plain = String::new();
    let mut chars = expr.chars();
    let mut closing: Option<char> = None;
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                let mut escaped = false;
                for s in chars.by_ref() {
                    if s == c && !escaped {
                        break;
                    }
                    escaped = s == '\\' && !escaped;
                }
            }
            '{' if closing.is_none() => closing = Some('}'),
            '[' if closing.is_none() => closing = Some(']'),
            c if Some(c) == closing => closing = None,
            _ if closing.is_some() => {}
            c => plain.push(c),
        }
    }
    let mut names = BTreeSet::new();
    let mut rest = plain.as_str();
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        let word_len = rest[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '.')))
            .unwrap_or(rest.len() - start);
        let word = &rest[start..start + word_len];
        rest = &rest[start + word_len..];
        if LABEL_LISTS.contains(&word) {
            if let Some(list_end) = rest.trim_start().strip_prefix('(').and_then(|l| l.find(')')) {
                let skipped = rest.len() - rest.trim_start().len() + 1 + list_end + 1;
                rest = &rest[skipped..];
            }
            continue;
        }
        let is_number = word.starts_with(|c: char| c.is_ascii_digit());
        // A function's name, or an aggregation's, whose `by (...)` may come first.
        let next = rest.trim_start();
        let is_call = next.starts_with('(')
            || ["by", "without"].iter().any(|modifier| {
                next.strip_prefix(modifier).is_some_and(|r| r.trim_start().starts_with('('))
            });
        if !(is_number || is_call || KEYWORDS.contains(&word)) {
            names.insert(word.to_owned());
        }
    }
    names
}

/// The names of the samples a /metrics document holds (`_bucket`, `_sum` and `_count` for a
/// histogram).
fn sample_names(body: &str) -> HashSet<String> {
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_owned())
        .collect()
}

/// `promtool check rules` on the expressions, written as recording rules.
fn promtool_checks(dir: &Path, queries: &[Query]) {
    assert!(
        Path::new(PROMTOOL).exists(),
        "{PROMTOOL} is missing: this test needs Debian's promtool, in the prometheus package up \
         to bookworm, a package of its own that prometheus depends on from trixie on (`apt-get \
         install prometheus`, or `apt-get install promtool` on trixie; `cargo xtask test` \
         installs prometheus when run as root)"
    );
    let mut rules = String::from("groups:\n  - name: grafana_dashboard\n    rules:\n");
    for (i, query) in queries.iter().enumerate() {
        // A JSON string is a YAML double-quoted scalar.
        let expr = serde_json::to_string(&query.concrete()).unwrap();
        rules.push_str(&format!("      - record: dashboard:query_{i}\n        expr: {expr}\n"));
    }
    let file = dir.join("dashboard-rules.yml");
    std::fs::write(&file, &rules).unwrap();
    let out = Command::new(PROMTOOL).arg("check").arg("rules").arg(&file).output().unwrap();
    assert!(
        out.status.success(),
        "promtool rejects a query of the dashboard:\n{}{}\n{rules}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_grafana_dashboard_charts_what_serve_exports() {
    require_root();
    let (path, text) = deploy_file("grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    imports_as_is(&dashboard);
    let queries = queries(&dashboard);
    assert!(queries.len() >= 10, "{} queries only", queries.len());
    let dir = tempfile::tempdir().unwrap();
    promtool_checks(dir.path(), &queries);

    // A serve, scraped by Prometheus, that has timed a storm's exits, by process name (every
    // latency series labelled with its group, as the workload panels read them).
    let name = task_name("g");
    let served = Served::start(dir.path(), &["--comm", &name, "--group-by", "comm"]);
    let prometheus = Prometheus::start(dir.path(), served.addr);
    // Two storms, each of 200 children and their parent, each scraped: the first makes every
    // series of its exits appear, so that rate() counts the second one's.
    let recorded = r#"exitprof_exits_recorded_total{job="exitprof"}"#;
    prometheus.wait_for(recorded, |n| n == 0.0);
    for storm in 1..=2 {
        let status = named_storm(dir.path(), &name, &["fork", "--count", "200"]).status().unwrap();
        assert!(status.success(), "storm {storm} failed: {status}");
        prometheus.wait_for(recorded, |n| n == f64::from(201 * storm));
    }

    // Labelled families have no samples before their first exit, so the names are read after.
    let exported = sample_names(&served.get("/metrics", None).body);
    for query in &queries {
        for metric in metric_names(&query.written) {
            assert!(
                exported.contains(&metric),
                "{} reads {metric}, which exitprof serve does not export; it exports {:?}",
                query.place,
                exported.iter().collect::<BTreeSet<_>>()
            );
        }
    }

    // Every query has a number to show (NaN is none), but those of a panel that says what no
    // value means.
    let mut empty = Vec::new();
    for query in &queries {
        let promql = query.concrete();
        let series = prometheus.series(&promql);
        let values: Vec<f64> = series
            .iter()
            .map(|s| s["value"][1].as_str().and_then(|v| v.parse().ok()).expect("a sample value"))
            .collect();
        eprintln!("{}: {} series, values {values:?}", query.place, series.len());
        if let Some(label) = &query.label {
            for s in &series {
                assert!(s["metric"][label].is_string(), "{}: no {label} in {s}", query.place);
            }
        }
        if values.iter().all(|v| v.is_nan()) && !query.may_be_empty {
            empty.push(format!("{}: {promql} = {series:?}", query.place));
        }
    }
    assert!(empty.is_empty(), "queries with no data after the storms:\n{}", empty.join("\n"));
}

/// Imported as is: its data source is the import's input DS_PROMETHEUS, chosen as the
/// `datasource` variable's value, and every panel and query uses that variable; every variable a
/// query uses is defined.
fn imports_as_is(dashboard: &Value) {
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "an old schema");
    let inputs = dashboard["__inputs"].as_array().expect("__inputs");
    assert!(
        inputs.iter().any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"),
        "no Prometheus data source among the inputs: {inputs:?}"
    );
    let variables = template_variables(dashboard);
    let source =
        variables.iter().find(|v| v["type"] == "datasource").expect("a data source variable");
    assert_eq!(source["query"], "prometheus");
    assert_eq!(source["current"]["value"], "${DS_PROMETHEUS}", "the import's choice");
    let uses_variable = format!("${{{}}}", source["name"].as_str().unwrap());
    let names: Vec<&str> = variables.iter().filter_map(|v| v["name"].as_str()).collect();
    for panel in panels(dashboard).into_iter().filter(|p| p["type"] != "row") {
        let title = &panel["title"];
        assert_eq!(panel["datasource"]["uid"], uses_variable.as_str(), "panel {title}");
        for target in panel["targets"].as_array().into_iter().flatten() {
            assert_eq!(target["datasource"]["uid"], uses_variable.as_str(), "panel {title}");
            let expr = target["expr"].as_str().unwrap_or_default();
            for used in variable_use().captures_iter(expr) {
                let used = &used[1];
                assert!(
                    used.starts_with("__") || names.contains(&used),
                    "panel {title} uses ${used}, which is no variable of {names:?}"
                );
            }
        }
        if let Some(repeat) = panel["repeat"].as_str() {
            assert!(names.contains(&repeat), "panel {title} repeats over no variable {repeat}");
        }
    }
}

/// deploy/prometheus.yml keeps the `group` label of the samples: no metric relabelling touches
/// it, and no target label is named `group` (Prometheus would rename the samples' own to
/// `exported_group`).
#[test]
fn prometheus_keeps_the_group_label() {
    let prometheus = yaml("prometheus.yml");
    let jobs = prometheus["scrape_configs"].as_vec().expect("scrape_configs");
    let mentions_group = |rule: &Yaml| {
        let strings = |key: &str| match &rule[key] {
            Yaml::String(s) => vec![s.clone()],
            Yaml::Array(a) => a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect(),
            _ => Vec::new(),
        };
        ["source_labels", "target_label", "regex"]
            .iter()
            .flat_map(|key| strings(key))
            .any(|s| s.contains("group"))
            || rule["action"].as_str().is_some_and(|a| a.starts_with("label"))
    };
    for job in jobs {
        let name = job["job_name"].as_str().unwrap_or("?");
        for rule in job["metric_relabel_configs"].as_vec().into_iter().flatten() {
            assert!(!mentions_group(rule), "job {name} relabels the samples' group: {rule:?}");
        }
        for rule in job["relabel_configs"].as_vec().into_iter().flatten() {
            assert_ne!(rule["target_label"].as_str(), Some("group"), "job {name}");
            assert_ne!(rule["action"].as_str(), Some("labelmap"), "job {name} maps labels");
        }
    }
}

#[test]
fn metric_names_are_told_from_functions_labels_and_keywords() {
    let expr = r#"topk(10, histogram_quantile(0.99, sum by (group, le) (rate(a_bucket{stage=~"x{1}", b="c"}[5m]))) > 0) / on (instance) group_left(kernel) b_total offset 5m or vector(1e-9) + count without (x) (c)"#;
    let names: Vec<String> = metric_names(expr).into_iter().collect();
    assert_eq!(names, ["a_bucket", "b_total", "c"]);
}
