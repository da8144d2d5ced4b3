//! The deployment files of `deploy/` against the exitprof they deploy: every flag they pass is
//! one `exitprof serve --help` lists, every port is serve's 19100, and the privileges and limits
//! they give (the unit's capabilities and LimitMEMLOCK, the DaemonSet's capabilities under a
//! container runtime's locked-memory limit) are enough to profile and serve, each capability
//! needed where it is; without the unit's limit, a kernel that charges BPF memory to
//! RLIMIT_MEMLOCK (before 5.11) gets a clear refusal and nothing loaded. Run on the host and in
//! the VM tests' 5.10 and newest guests.

use std::{
    collections::BTreeSet,
    io::{Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::PathBuf,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::{
    KilledOnDrop,
    confined::{Confinement, DEFAULT_MEMLOCK, can_grant, capability, effective_capabilities},
    exitprof, exitprof_kprobe_events, exitprof_path, num, require_root,
};

/// serve's port (`--listen` defaults to 127.0.0.1:19100).
const PORT: u16 = 19100;

/// A file of `deploy/`: its path and its text, built into the tests (which also run in the VM
/// tests' guests, away from the sources).
pub fn deploy_file(name: &str) -> (PathBuf, String) {
    let text = match name {
        "exitprof.service" => include_str!("../../deploy/exitprof.service"),
        "daemonset.yaml" => include_str!("../../deploy/daemonset.yaml"),
        "prometheus.yml" => include_str!("../../deploy/prometheus.yml"),
        "grafana-dashboard.json" => include_str!("../../deploy/grafana-dashboard.json"),
        _ => panic!("deploy/{name} is not built into the tests"),
    };
    (PathBuf::from("deploy").join(name), text.to_owned())
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
pub fn daemonset_capabilities() -> Vec<String> {
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
    // A pod cannot set its locked-memory limit as the unit does: SYS_RESOURCE, with which
    // exitprof raises it, stands in for the unit's LimitMEMLOCK.
    let unit = Unit::read();
    assert_eq!(unit.memlock, Some(libc::RLIM_INFINITY), "the unit's LimitMEMLOCK");
    let mut unit_caps = unit.capabilities.clone();
    unit_caps.push(capability("SYS_RESOURCE"));
    let daemonset: Vec<u32> = daemonset_capabilities().iter().map(|c| capability(c)).collect();
    assert_eq!(
        daemonset.iter().collect::<BTreeSet<_>>(),
        unit_caps.iter().collect::<BTreeSet<_>>(),
        "the DaemonSet grants the unit's capabilities and SYS_RESOURCE"
    );
}

/// What the unit's `[Service]` section gives exitprof.
struct Unit {
    /// `CapabilityBoundingSet=`: root's capabilities are these alone.
    capabilities: Vec<u32>,
    /// `LimitMEMLOCK=` in bytes, if set.
    memlock: Option<u64>,
    /// `NoNewPrivileges=yes`.
    no_new_privileges: bool,
    /// `ExecStart=`'s arguments after the program.
    args: Vec<String>,
}

impl Unit {
    fn read() -> Self {
        let (_, text) = deploy_file("exitprof.service");
        let setting = |key: &str| {
            text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('=')).map(str::trim)
        };
        let capabilities = setting("CapabilityBoundingSet")
            .expect("exitprof.service bounds its capabilities")
            .split_whitespace()
            .map(capability)
            .collect();
        // systemd's sizes: bytes, or with a suffix of 1024s; `infinity`.
        let memlock = setting("LimitMEMLOCK").map(|limit| match limit {
            "infinity" => libc::RLIM_INFINITY,
            limit => {
                let (digits, shift) = match limit.char_indices().last() {
                    Some((at, 'K')) => (&limit[..at], 10),
                    Some((at, 'M')) => (&limit[..at], 20),
                    Some((at, 'G')) => (&limit[..at], 30),
                    _ => (limit, 0),
                };
                digits.parse::<u64>().expect("LimitMEMLOCK in bytes") << shift
            }
        });
        let args = setting("ExecStart").expect("an ExecStart").split_whitespace().skip(1);
        Self {
            capabilities,
            memlock,
            no_new_privileges: setting("NoNewPrivileges") == Some("yes"),
            args: args.map(str::to_owned).collect(),
        }
    }

    /// exitprof as systemd runs the unit: its capabilities and NoNewPrivileges, and its
    /// LimitMEMLOCK when `with_its_limit`, else systemd's default of a kernel before 5.16.
    fn confinement(&self, with_its_limit: bool) -> Confinement {
        Confinement {
            capabilities: self.capabilities.clone(),
            memlock: self.memlock.filter(|_| with_its_limit).unwrap_or(DEFAULT_MEMLOCK),
            no_new_privileges: self.no_new_privileges,
        }
        .as_far_as_possible()
    }
}

/// exitprof as the DaemonSet's pod runs it: uid 0 with its capabilities alone, without
/// privilege escalation, under a runtime's default locked-memory limit.
fn daemonset_confinement(capabilities: &[String]) -> Confinement {
    Confinement {
        capabilities: capabilities.iter().map(|c| capability(c)).collect(),
        memlock: DEFAULT_MEMLOCK,
        no_new_privileges: true,
    }
    .as_far_as_possible()
}

/// Whether the running kernel charges BPF maps to RLIMIT_MEMLOCK (before 5.11), found as exitprof
/// must not be trusted to: a one-entry array map made by this process while it may lock nothing
/// (by the system call itself: aya raises the limit and tries again where a map is refused).
fn bpf_charged_to_memlock() -> bool {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // BPF_MAP_CREATE's attributes: an array (2) of one 8-byte value under a 4-byte key.
    let attr: [u32; 5] = [2, 4, 8, 1, 0];
    // SAFETY: getrlimit, setrlimit and bpf with valid arguments; the limit and the map's
    // descriptor are given back.
    let made = unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_MEMLOCK, &raw mut limit), 0);
        let none = libc::rlimit { rlim_cur: 0, rlim_max: limit.rlim_max };
        assert_eq!(libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const none), 0);
        let fd = libc::syscall(libc::SYS_bpf, 0, attr.as_ptr(), size_of_val(&attr));
        let error = std::io::Error::last_os_error();
        assert_eq!(libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const limit), 0);
        if fd >= 0 {
            libc::close(fd as i32);
        }
        (fd >= 0).then_some(()).ok_or(error)
    };
    match made {
        Ok(()) => false,
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => true,
        Err(e) => panic!("making a BPF map: {e}"),
    }
}

/// The small storm the confined runs profile, with the largest exit ring buffer exitprof makes
/// (4 MiB, a default storm's), and on-CPU samples where the kernel lets the capabilities open
/// perf events ([`perf_events_need_sys_admin`]).
fn storm() -> Vec<&'static str> {
    let samples = !perf_events_need_sys_admin();
    if !samples {
        eprintln!("kernel.perf_event_paranoid is above 2: no CPU samples without CAP_SYS_ADMIN");
    }
    storm_sampled(samples)
}

fn storm_sampled(samples: bool) -> Vec<&'static str> {
    let mut args = vec!["--json", "--threads", "20", "--reps", "2", "--stagger-us", "0", "-v"];
    args.extend(["--ringbuf-bytes", "4194304"]);
    args.extend(if samples { &["--sample-hz", "4999"][..] } else { &["--no-cpu-stacks"] });
    args
}

/// Whether the kernel opens perf events (`perf_event_open`: the CPU sampler, kprobes, `syscalls:`
/// tracepoints) to CAP_SYS_ADMIN only: Debian's and Ubuntu's kernels do at their own
/// `kernel.perf_event_paranoid` level 3, their default; mainline has no level above 2.
fn perf_events_need_sys_admin() -> bool {
    let level = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .expect("kernel.perf_event_paranoid");
    level.trim().parse::<i32>().expect("a level") > 2
}

/// `exitprof args`, confined; checks that it ran with the capabilities asked for.
fn confined_run(confinement: &Confinement, args: &[&str]) -> Output {
    let mut command = exitprof();
    command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    confinement.apply(&mut command);
    let child = command.spawn().expect("exitprof starts");
    assert_eq!(effective_capabilities(child.id()), confinement.mask(), "the confinement failed");
    child.wait_with_output().expect("exitprof runs")
}

/// A storm's document: every exit recorded. (Losses are the machine's: `follow_unknown` counts
/// exits of tasks whose ancestry could not be told, other than the storm's.)
fn every_exit_recorded(out: &Output, who: &str) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{who}: exitprof failed ({}):\n{stderr}", out.status);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("a JSON document");
    let (expected, recorded) = (num(&doc, "exits_expected"), num(&doc, "exits_recorded"));
    assert_eq!(recorded, expected, "{who}: {}", doc["losses"]);
    eprintln!(
        "{who}: {recorded} of {expected} exits recorded ({} lost); {}",
        num(&doc, "lost"),
        locked_memory_line(&stderr)
    );
    doc
}

/// exitprof's word (with -v) on the locked memory it needs, where the kernel charges it.
fn locked_memory_line(stderr: &str) -> &str {
    stderr.lines().find(|l| l.contains("RLIMIT_MEMLOCK")).unwrap_or("(BPF memory not charged)")
}

/// The refusal of a kernel that charges BPF memory to a limit exitprof cannot raise: status 2,
/// the limit, the need, a fix for each way of running exitprof, and nothing left loaded.
fn clearly_refused(out: &Output, who: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{who}: status {}:\n{stderr}", out.status);
    for says in [
        "RLIMIT_MEMLOCK",
        "64 KiB (hard limit 64 KiB)",
        "MiB for its maps",
        "CAP_SYS_RESOURCE",
        "LimitMEMLOCK=infinity",
        "--ulimit memlock",
        "ulimit -l",
        "Nothing was loaded",
    ] {
        assert!(stderr.contains(says), "{who}: the refusal does not say {says:?}:\n{stderr}");
    }
    assert!(!stderr.contains("Operation not permitted"), "{who}: {stderr}");
    assert!(exitprof_kprobe_events().is_empty(), "{who}: {:?}", exitprof_kprobe_events());
    assert_no_exitprof_map(who);
    eprintln!("{who}: refused: {}", stderr.trim());
}

/// No map of exitprof's is loaded in the kernel (within 10 s: the kernel frees maps once the
/// programs that hold them are gone, after an RCU grace period).
fn assert_no_exitprof_map(who: &str) {
    // The kernel keeps 15 bytes of a map's name.
    let names: Vec<&str> =
        exitprof_common::names::maps::ALL.iter().map(|n| &n[..n.len().min(15)]).collect();
    let started = Instant::now();
    loop {
        let left: Vec<String> = aya::maps::loaded_maps()
            .filter_map(Result::ok)
            .filter_map(|m| m.name_as_str().map(str::to_owned))
            .filter(|name| names.contains(&name.as_str()))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{who}: maps left: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A free port on loopback.
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding a loopback port");
    listener.local_addr().unwrap().port()
}

/// The value of the first sample of `/metrics` on `addr` whose line starts with `series`.
fn metric(addr: SocketAddr, series: &str) -> Option<f64> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let line = response.lines().find(|l| l.starts_with(series))?;
    line.rsplit(' ').next()?.parse().ok()
}

/// The locked memory the kernel charged for a process's BPF maps and programs (`memlock` of
/// their descriptors' fdinfo: their pages, before 5.11).
fn charged_memlock(pid: u32) -> u64 {
    let dir = format!("/proc/{pid}/fdinfo");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path()).ok())
        .filter(|info| info.contains("map_id:") || info.contains("prog_id:"))
        .filter_map(|info| {
            info.lines().find_map(|l| l.strip_prefix("memlock:")).map(|m| m.trim().parse::<u64>())
        })
        .map(|bytes| bytes.expect("a byte count"))
        .sum()
}

/// A size as exitprof writes it (`6.5 MiB`, `412 KiB`), in bytes.
fn size(text: &str) -> f64 {
    let (number, unit) = text.trim().split_once(' ').expect("a number and a unit");
    let number: f64 = number.parse().expect("a number");
    number * if unit.starts_with("MiB") { 1_048_576.0 } else { 1024.0 }
}

/// `exitprof serve` with the unit's arguments (on a port of its own), confined as the unit runs
/// it: either serving every exit, or refused as [`clearly_refused`] says.
fn serve_as_the_unit(confinement: &Confinement, expect_refusal: bool) {
    let who = format!(
        "serve under {:x} and a memlock limit of {}",
        confinement.mask(),
        confinement.memlock
    );
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
    let mut args = Unit::read().args;
    let listen = args.iter().position(|a| a == "--listen").expect("the unit gives --listen");
    args[listen + 1] = addr.to_string();
    let mut command = exitprof();
    command.args(&args).arg("-v").stdin(Stdio::null()).stdout(Stdio::null());
    let stderr_path = std::env::temp_dir().join(format!("serve-{}.stderr", addr.port()));
    command.stderr(std::fs::File::create(&stderr_path).unwrap());
    confinement.apply(&mut command);
    let mut served = KilledOnDrop::new(command.spawn().expect("exitprof starts"));
    assert_eq!(effective_capabilities(served.id()), confinement.mask(), "the confinement failed");
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    let started = Instant::now();
    while metric(addr, "exitprof_exits_recorded_total").is_none() {
        if let Some(status) = served.child().try_wait().unwrap() {
            let out = Output { status, stdout: Vec::new(), stderr: stderr().into_bytes() };
            assert!(expect_refusal, "{who} ended ({status}):\n{}", stderr());
            return clearly_refused(&out, &who);
        }
        assert!(started.elapsed() < Duration::from_secs(120), "{who}: no /metrics:\n{}", stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!expect_refusal, "{who} serves, where the kernel charges BPF memory to its limit");
    if bpf_charged_to_memlock() {
        // What exitprof planned for against what the kernel charged it.
        let line = stderr();
        let line = locked_memory_line(&line);
        let need: f64 = line
            .split("need ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .map(size)
            .expect("the maps' need")
            + line
                .split("about ")
                .nth(1)
                .and_then(|rest| rest.split(';').next())
                .map(size)
                .expect("the programs' need");
        let charged = charged_memlock(served.id()) as f64;
        eprintln!("{who}: {line}; the kernel charged {:.0} KiB", charged / 1024.0);
        assert!(
            (need - charged).abs() <= charged * 0.1,
            "{who}: planned {need} bytes, the kernel charged {charged}"
        );
    }
    let before = metric(addr, "exitprof_exits_recorded_total").unwrap();
    for _ in 0..20 {
        let status = Command::new("/bin/true").status().expect("/bin/true runs");
        assert!(status.success());
    }
    loop {
        let recorded = metric(addr, "exitprof_exits_recorded_total").unwrap_or(0.0);
        if recorded >= before + 20.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "{who}: {recorded} exits recorded, {before} before 20 more:\n{}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(metric(addr, "exitprof_exits_lost_total"), Some(0.0), "{who}:\n{}", stderr());
    // SAFETY: our own child, not reaped yet.
    assert_eq!(unsafe { libc::kill(served.id() as i32, libc::SIGTERM) }, 0);
    let status = served.take().wait().unwrap();
    assert!(status.success(), "{who} ended with {status}:\n{}", stderr());
    eprintln!("{who}: served every exit");
}

/// The unit's capabilities and limits, as systemd gives them: a storm records every exit, and
/// `serve` (the unit's ExecStart) serves every exit, with the 4 MiB exit ring buffer.
#[test]
fn the_units_privileges_and_limits_record_every_exit() {
    require_root();
    let unit = Unit::read();
    let confinement = unit.confinement(true);
    every_exit_recorded(&confined_run(&confinement, &storm()), "a storm under the unit's limits");
    serve_as_the_unit(&confinement, false);
}

/// Without the unit's LimitMEMLOCK (systemd's default of 64 KiB): where the kernel charges BPF
/// memory to that limit, exitprof cannot raise it without CAP_SYS_RESOURCE and refuses at start,
/// saying why and what to do, with nothing loaded; where it does not (5.11 and later), it runs.
#[test]
fn without_the_units_memlock_limit_exitprof_refuses_where_the_kernel_charges_it() {
    require_root();
    let charged = bpf_charged_to_memlock();
    let confinement = Unit::read().confinement(false);
    let out = confined_run(&confinement, &storm());
    if charged {
        clearly_refused(&out, "a storm under 64 KiB");
    } else {
        every_exit_recorded(&out, "a storm under 64 KiB, BPF memory charged to the memory cgroup");
    }
    serve_as_the_unit(&confinement, charged);
}

/// The DaemonSet's capabilities under a container runtime's default locked-memory limit (64 KiB
/// before Linux 5.16: containers inherit containerd's or dockerd's, which their systemd units do
/// not raise): SYS_RESOURCE lets exitprof raise it where the kernel charges BPF memory to it.
/// Where perf events need CAP_SYS_ADMIN, asking for CPU samples is refused saying so.
#[test]
fn the_daemonsets_capabilities_suffice_under_a_runtimes_memlock_limit() {
    require_root();
    let confinement = daemonset_confinement(&daemonset_capabilities());
    let out = confined_run(&confinement, &storm());
    every_exit_recorded(&out, "a storm with the DaemonSet's capabilities under 64 KiB");
    if perf_events_need_sys_admin() {
        let out = confined_run(&confinement, &storm_sampled(true));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "CPU samples without CAP_SYS_ADMIN: {stderr}");
        for says in ["perf_event_paranoid", "CAP_SYS_ADMIN", "--no-cpu-stacks"] {
            assert!(stderr.contains(says), "the refusal of CPU samples lacks {says:?}: {stderr}");
        }
        eprintln!("CPU samples refused: {}", stderr.lines().last().unwrap_or_default());
    }
}

/// A threads storm with on-CPU samples, for `exitprof` under `command`'s confinement: its JSON
/// document, or the failure's stderr.
fn storm_under(mut command: Command) -> Result<Value, String> {
    let out = command
        .args(["--json", "--workload", "threads", "--threads", "300", "--reps", "2"])
        .args(["--stagger-us", "0", "--sample-hz", "4999"])
        .output()
        .expect("exitprof starts");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).expect("a JSON document"))
}

/// exitprof as uid 0 with `caps` only, as the DaemonSet runs it.
fn as_root_with(caps: &[String]) -> Command {
    let mut command = exitprof();
    daemonset_confinement(caps).apply(&mut command);
    command
}

/// exitprof as the user nobody with `caps` as ambient capabilities (setpriv, on the host).
fn as_nobody_with(caps: &[String]) -> Command {
    let list = ["-all".to_owned()]
        .into_iter()
        .chain(caps.iter().map(|c| format!("+{}", c.to_lowercase())))
        .collect::<Vec<_>>()
        .join(",");
    let mut command = Command::new("setpriv");
    command
        .arg(format!("--bounding-set={list}"))
        .arg(format!("--inh-caps={list}"))
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(format!("--ambient-caps={list}"))
        .arg(exitprof_path());
    command
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

/// The DaemonSet's capabilities, as uid 0 under a runtime's 64 KiB locked-memory limit and as
/// nobody (with the host's: `setpriv` is the host's), record every exit with named stacks; each
/// capability is needed: without it exitprof fails, names no frame, or (SYS_RESOURCE) cannot
/// raise the limit where the kernel charges BPF memory to it, and is not needed where it does
/// not. Host only: `setpriv`.
#[test]
fn the_deployed_capabilities_suffice_and_each_is_needed() {
    require_root();
    let caps = daemonset_capabilities();
    // A user other than root also needs to read root's tracefs: CAP_DAC_READ_SEARCH. (setpriv
    // cannot give what this test process lacks, as the confinement leaves it out.)
    let as_nobody: Vec<String> = [caps.clone(), vec!["DAC_READ_SEARCH".to_owned()]]
        .concat()
        .into_iter()
        .filter(|cap| can_grant(capability(cap)))
        .collect();
    for (who, command) in [("uid 0", as_root_with(&caps)), ("nobody", as_nobody_with(&as_nobody))] {
        let doc = storm_under(command)
            .unwrap_or_else(|e| panic!("as {who} with {caps:?}, exitprof failed:\n{e}"));
        let (expected, recorded, lost) =
            (num(&doc, "exits_expected"), num(&doc, "exits_recorded"), num(&doc, "lost"));
        assert!(
            recorded > 0.0 && recorded + lost == expected,
            "as {who}: {recorded} recorded + {lost} lost of {expected}"
        );
        let (stacks, unnamed) = stacks(&doc);
        eprintln!(
            "as {who} with {caps:?}: {recorded} of {expected} exits, {stacks} stacks, {unnamed} unnamed"
        );
        // A stack can be empty with names too (a sample right at do_exit, whose callers are
        // cut): one named stack shows that the kernel's addresses were readable.
        assert!(unnamed < stacks, "as {who}: none of {stacks} stacks has a named frame");
    }
    let charged = bpf_charged_to_memlock();
    for left_out in &caps {
        let fewer: Vec<String> = caps.iter().filter(|c| *c != left_out).cloned().collect();
        let degraded = match (storm_under(as_root_with(&fewer)), left_out.as_str()) {
            (Err(stderr), "SYS_RESOURCE") => {
                assert!(charged && stderr.contains("RLIMIT_MEMLOCK"), "{stderr}");
                format!("it is refused: {}", stderr.trim())
            }
            (Ok(_), "SYS_RESOURCE") if !charged => {
                "needed only where BPF memory is charged to RLIMIT_MEMLOCK (before 5.11); this \
                 kernel charges the memory cgroup"
                    .to_owned()
            }
            (Err(stderr), _) => format!("it fails: {}", stderr.trim()),
            (Ok(doc), _) => match stacks(&doc) {
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
