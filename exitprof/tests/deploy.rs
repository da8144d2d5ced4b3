//! The deployment files of `deploy/` against the exitprof they deploy: every flag they pass is
//! one `exitprof serve --help` lists, every port is serve's 19100, and the capabilities they
//! grant are enough to profile, each of them needed.

use std::{fs, path::PathBuf, process::Command};

use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::{exitprof_path, num, require_root};

/// serve's port (`--listen` defaults to 127.0.0.1:19100).
const PORT: u16 = 19100;

/// A file of `deploy/`: its path and its text.
pub fn deploy_file(name: &str) -> (PathBuf, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(name);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path, text)
}

/// A YAML file of `deploy/`, holding one document.
pub fn yaml(name: &str) -> Yaml {
    let (path, text) = deploy_file(name);
    let mut docs = YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()));
    assert_eq!(docs.len(), 1, "{} should hold one document", path.display());
    docs.remove(0)
}

/// A string at `path` in `doc`, failing with the path when it is missing.
fn string<'a>(doc: &'a Yaml, path: &[&str]) -> &'a str {
    let node = path.iter().fold(doc, |node, key| &node[*key]);
    node.as_str().unwrap_or_else(|| panic!("no string at {}", path.join(".")))
}

fn strings(node: &Yaml, what: &str) -> Vec<String> {
    node.as_vec()
        .unwrap_or_else(|| panic!("{what} is not a list"))
        .iter()
        .map(|s| s.as_str().unwrap_or_else(|| panic!("{what} holds a non-string")).to_owned())
        .collect()
}

/// The DaemonSet's only container.
fn container(daemonset: &Yaml) -> &Yaml {
    let containers = daemonset["spec"]["template"]["spec"]["containers"]
        .as_vec()
        .expect("spec.template.spec.containers");
    assert_eq!(containers.len(), 1, "the DaemonSet runs one container");
    &containers[0]
}

/// The capabilities the DaemonSet adds (Kubernetes names: BPF, PERFMON, ...).
fn daemonset_capabilities() -> Vec<String> {
    let daemonset = yaml("daemonset.yaml");
    let caps = &container(&daemonset)["securityContext"]["capabilities"];
    assert_eq!(strings(&caps["drop"], "capabilities.drop"), ["ALL"], "every other one dropped");
    strings(&caps["add"], "capabilities.add")
}

/// `exitprof serve --help`.
fn serve_help() -> String {
    let out =
        Command::new(exitprof_path()).args(["serve", "--help"]).output().expect("exitprof starts");
    assert!(
        out.status.success(),
        "`exitprof serve --help` failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 help")
}

/// Checks the arguments of one `exitprof` command line of `file`: `serve` first, every flag in
/// serve's help, `--listen` on port 19100.
fn check_serve_arguments(file: &str, args: &[String], help: &str) {
    assert_eq!(args.first().map(String::as_str), Some("serve"), "{file} runs {args:?}");
    let help_words: Vec<&str> =
        help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.')).collect();
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        let name = flag.split('=').next().unwrap_or(flag);
        assert!(help_words.contains(&name), "{file} passes {name}, which `serve --help` lacks");
    }
    let listen = args
        .iter()
        .position(|a| a == "--listen")
        .and_then(|i| args.get(i + 1))
        .unwrap_or_else(|| panic!("{file} gives no --listen ADDR: {args:?}"));
    let port = listen.rsplit_once(':').and_then(|(_, port)| port.parse::<u16>().ok());
    assert_eq!(port, Some(PORT), "{file} listens on {listen}");
}

#[test]
fn deploy_files_use_serves_flags_and_port() {
    let help = serve_help();
    assert!(
        help.contains(&format!("127.0.0.1:{PORT}")),
        "serve's default is not port {PORT}:\n{help}"
    );

    let daemonset = yaml("daemonset.yaml");
    assert_eq!(string(&daemonset, &["kind"]), "DaemonSet");
    let pod = &daemonset["spec"]["template"];
    assert_eq!(pod["spec"]["hostPID"].as_bool(), Some(true), "exitprof needs the host's PIDs");
    let container = container(&daemonset);
    let command = strings(&container["command"], "command");
    assert!(command.len() == 1 && command[0].ends_with("exitprof"), "command {command:?}");
    check_serve_arguments("daemonset.yaml", &strings(&container["args"], "args"), &help);
    let ports = container["ports"].as_vec().expect("ports");
    assert!(
        ports.iter().any(|p| p["containerPort"].as_i64() == Some(i64::from(PORT))),
        "no containerPort {PORT}"
    );
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
    assert_eq!(annotations["prometheus.io/port"].as_str(), Some(PORT.to_string().as_str()));
    assert_eq!(annotations["prometheus.io/path"].as_str(), Some("/metrics"));
    let security = &container["securityContext"];
    assert_eq!(security["privileged"].as_bool(), Some(false), "no privileged container");

    let prometheus = yaml("prometheus.yml");
    let jobs = prometheus["scrape_configs"].as_vec().expect("scrape_configs");
    let targets: Vec<String> = jobs
        .iter()
        .filter_map(|job| job["static_configs"].as_vec())
        .flatten()
        .flat_map(|config| strings(&config["targets"], "targets"))
        .collect();
    assert!(!targets.is_empty(), "prometheus.yml has no static target");
    for target in &targets {
        assert!(target.ends_with(&format!(":{PORT}")), "prometheus.yml scrapes {target}");
    }
    assert!(
        jobs.iter().any(|job| !job["kubernetes_sd_configs"].is_badvalue()),
        "prometheus.yml has no job for the DaemonSet's pods"
    );

    let (_, unit) = deploy_file("exitprof.service");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("exitprof.service has an ExecStart");
    let mut exec: Vec<String> = exec.split_whitespace().map(ToOwned::to_owned).collect();
    assert_eq!(exec.remove(0), "/usr/bin/exitprof", "where the Debian package installs it");
    check_serve_arguments("exitprof.service", &exec, &help);
    let unit_caps: Vec<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("exitprof.service bounds its capabilities")
        .split_whitespace()
        .map(|cap| cap.trim_start_matches("CAP_").to_owned())
        .collect();
    assert_eq!(unit_caps, daemonset_capabilities(), "the unit and the DaemonSet grant the same");
}

/// Runs a threads storm under `setpriv setpriv_args`, returns the JSON document, or the
/// failure's stderr.
fn storm_under(setpriv_args: &[String]) -> Result<Value, String> {
    let out = Command::new("setpriv")
        .args(setpriv_args)
        .arg(exitprof_path())
        .args(["--json", "--workload", "threads", "--threads", "300", "--reps", "2"])
        .args(["--stagger-us", "0", "--sample-hz", "4999"])
        .output()
        .expect("setpriv (util-linux) starts");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).expect("a JSON document"))
}

/// The kernel stacks of a run (blocks and CPU samples): how many, and how many have no frame
/// (addresses exitprof could not name).
fn stacks(doc: &Value) -> (usize, usize) {
    let blocked = doc["blocked_in"].as_array().into_iter().flatten();
    let on_cpu = doc["stages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|stage| stage["on_cpu_in"].as_array().into_iter().flatten());
    let all: Vec<&Value> = blocked.chain(on_cpu).collect();
    let unnamed = all.iter().filter(|s| s["stack"].as_array().is_none_or(Vec::is_empty)).count();
    (all.len(), unnamed)
}

/// setpriv's arguments for uid 0 with only `caps` (as in the DaemonSet), or for the user nobody
/// with `caps` as ambient capabilities.
fn setpriv_args(caps: &[String], as_nobody: bool) -> Vec<String> {
    let list = ["-all".to_owned()]
        .into_iter()
        .chain(caps.iter().map(|c| format!("+{}", c.to_lowercase())))
        .collect::<Vec<_>>()
        .join(",");
    let mut args = vec![format!("--bounding-set={list}"), format!("--inh-caps={list}")];
    if as_nobody {
        args.extend(["--reuid=nobody", "--regid=nogroup", "--clear-groups"].map(String::from));
        args.push(format!("--ambient-caps={list}"));
    }
    args
}

#[test]
fn the_deployed_capabilities_suffice_and_each_is_needed() {
    require_root();
    let caps = daemonset_capabilities();
    // As the DaemonSet runs it: uid 0 (owner of tracefs), no other capability. A user other
    // than root also needs to read root's tracefs: CAP_DAC_READ_SEARCH.
    let as_nobody = [caps.clone(), vec!["DAC_READ_SEARCH".to_owned()]].concat();
    for (who, args) in
        [("uid 0", setpriv_args(&caps, false)), ("nobody", setpriv_args(&as_nobody, true))]
    {
        let doc = storm_under(&args)
            .unwrap_or_else(|e| panic!("as {who} with {args:?}, exitprof failed:\n{e}"));
        let (expected, recorded, lost) =
            (num(&doc, "exits_expected"), num(&doc, "exits_recorded"), num(&doc, "lost"));
        assert!(
            recorded > 0.0 && recorded + lost == expected,
            "as {who}: {recorded} recorded + {lost} lost of {expected}"
        );
        let (stacks, unnamed) = stacks(&doc);
        eprintln!(
            "as {who} with {args:?}: {recorded} of {expected} exits, {stacks} stacks, {unnamed} unnamed"
        );
        // A stack can be empty with names too (a sample right at do_exit, whose callers are
        // cut): one named stack shows that the kernel's addresses were readable.
        assert!(unnamed < stacks, "as {who}: none of {stacks} stacks has a named frame");
    }
    for left_out in &caps {
        let fewer: Vec<String> = caps.iter().filter(|c| *c != left_out).cloned().collect();
        let degraded = match storm_under(&setpriv_args(&fewer, false)) {
            Err(stderr) => format!("it fails: {}", stderr.trim()),
            Ok(doc) => match stacks(&doc) {
                (0, _) => panic!("without {left_out}, no kernel stack was taken: cannot tell"),
                (n, unnamed) if unnamed == n => format!("none of {n} stacks is named"),
                (n, unnamed) => panic!(
                    "without {left_out}, exitprof still works ({n} stacks, {unnamed} unnamed): the DaemonSet grants more than it needs"
                ),
            },
        };
        eprintln!("without {left_out}: {degraded}");
    }
}
