//! `exitprof serve`: exit latencies for Prometheus, for as long as it runs.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Args;
use exitprof_engine::{
    probes::{ProbeOptions, kprobe_events, plan::PointSet},
    profiled::Target,
    serve::{self, ServeRequest},
};

use super::{
    parse::{parse_comm, parse_ringbuf_size, parse_time},
    run::GroupArgs,
    values::{AttachArg, Switch},
};

/// `exitprof serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub target: ServeTargetArgs,
    /// Address to serve on. The default port, 19100, is in no allocation of Prometheus's list
    /// of default exporter ports (9435 is ebpf_exporter's, 9464 OpenTelemetry's); the address
    /// is loopback unless another is given here.
    #[arg(long, value_name = "ADDR", default_value = serve::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Attach mode: per point the best available (auto), or force one mode and fail where the
    /// kernel cannot do it.
    #[arg(long, value_enum, default_value_t = AttachArg::Auto)]
    pub attach: AttachArg,
    /// Use the exit syscalls' tracepoints to time exits from their start where `do_exit`
    /// cannot be probed (tracepoint mode). They make every syscall of the machine take the
    /// kernel's slower traced path, so they are off unless asked for.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = Switch::Off)]
    pub syscall_tracepoints: Switch,
    /// Size of the kernel-to-userspace ring buffer for exit records (a power of two) [default:
    /// 4 MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_ringbuf_size)]
    pub ringbuf_bytes: Option<u32>,
    #[command(flatten)]
    pub groups: GroupArgs,
    /// With --group-by: a group with no exit for this long is dropped, its series with it:
    /// seconds, or a number with its unit (90s, 10m, 1h) [default: 10m].
    #[arg(long, value_name = "TIME", value_parser = parse_time, requires = "group_by")]
    pub group_ttl: Option<Duration>,
    /// Have the kernel count each of exitprof's eBPF programs' runs and run time while serve
    /// runs, exported as exitprof_bpf_program_runs_total and
    /// exitprof_bpf_program_run_seconds_total: what exitprof costs the node in the kernel. The
    /// counting adds two clock reads to every run of every BPF program on the machine.
    #[arg(long)]
    pub bpf_stats: bool,
    /// Serve over TLS and/or behind basic auth, as this file says, in the web configuration
    /// format Prometheus's exporters share (tls_server_config: cert_file, key_file, optional
    /// client_ca_file and client_auth_type, min_version; basic_auth_users: bcrypt hashes by
    /// user). Read again when it or a file it names changes, or on SIGHUP.
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config: Option<PathBuf>,
}

/// Whose exits `serve` watches: at most one of these (every exit when none is given).
#[derive(Debug, Args)]
#[group(id = "serve_target", multiple = false)]
pub struct ServeTargetArgs {
    /// Watch every exit on the machine (exitprof's own excepted) [the default].
    #[arg(long)]
    pub all: bool,
    /// Watch every task whose name (comm, at most 15 bytes) is NAME.
    #[arg(long, value_name = "NAME", value_parser = parse_comm)]
    pub comm: Option<String>,
    /// Watch every task in the cgroup at PATH of the cgroup v2 hierarchy, and below it.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Watch an existing process and its descendants; serve ends when it exits.
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(u32).range(1..=i32::MAX as i64))]
    pub pid: Option<u32>,
}

impl ServeArgs {
    /// What `serve` is asked to do.
    pub fn request(&self) -> ServeRequest {
        let t = &self.target;
        let target = match (t.pid, &t.comm, &t.cgroup) {
            (Some(pid), _, _) => Target::Pid(pid),
            (None, Some(comm), _) => Target::Comm(comm.clone()),
            (None, None, Some(path)) => Target::Cgroup(path.clone()),
            (None, None, None) => Target::All,
        };
        ServeRequest {
            target,
            probes: ProbeOptions {
                attach: self.attach.into(),
                kretprobe_maxactive: kprobe_events::MAX_ACTIVE,
                syscall_tracepoints: self.syscall_tracepoints.choice(),
                block_stacks: false,
                sample_hz: 0,
                // Stage histograms need every point of the exit; serve joins no deferred work.
                points: PointSet::Stages,
                cgroup_paths: self.groups.by_cgroup(),
            },
            groups: self.groups.options(Some(self.group_ttl.unwrap_or(serve::GROUP_TTL))),
            listen: self.listen,
            ringbuf_bytes: self.ringbuf_bytes,
            bpf_stats: self.bpf_stats,
            web_config: self.web_config.clone(),
        }
    }
}
