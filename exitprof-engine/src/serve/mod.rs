//! `exitprof serve`: a Prometheus exporter of exit latencies. It watches exits as a run does
//! (`run::start`: the request checked, the plan, the programs attached), folds them for as long
//! as it runs into per-stage histograms of a fixed size (`collect`), publishes snapshots of them,
//! and serves each scrape from the latest snapshot (`metrics`) over HTTP (`http`), within the
//! bounds of `admission`, over TLS and behind basic auth where a web configuration
//! (`web_config`, `basic_auth`) asks for them.
//!
//! Nothing in it grows with the exits or the pids it sees: no on-CPU sampling, no block stacks,
//! no deferred-work joins; only histograms (one per stage and kind of exit) and counters.
//!
//! Must not import `cli` (`main.rs` hands it a [`ServeRequest`]).

mod admission;
mod basic_auth;
mod collect;
mod http;
mod metrics;
mod read_errors;
mod web_config;

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use anyhow::Context as _;
use exitprof_core::analysis::{
    groups::{GroupOptions, Groups},
    profile::Profile,
};
use tokio::{net::TcpListener, sync::watch};

use self::{
    collect::Ended,
    metrics::{Labels, Snapshot, TeardownSnapshot},
    read_errors::ReadErrors,
};
use crate::{
    base::{
        UsageError,
        signals::{Signals, signal_name},
    },
    probes::{ProbeOptions, load::LoadOptions, prog_stats::enable_bpf_stats},
    profiled::Target,
    run::{
        Losses, RunRequest,
        start::{Attached, load_options, plan_for, preflight, prepare, start},
    },
};

/// Where `serve` listens unless told: loopback, on a port that Prometheus's list of default
/// port allocations leaves free.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:19100";

/// What `exitprof serve` is asked to do, read from the command line.
pub struct ServeRequest {
    /// `--all`, `--comm` or `--pid`.
    pub target: Target,
    pub probes: ProbeOptions,
    pub listen: SocketAddr,
    /// Size of the exit-record ring buffer; `None`: as for watching.
    pub ringbuf_bytes: Option<u32>,
    /// Split the exits by workload, each group a label of the series.
    pub groups: Option<GroupOptions>,
    /// Count exitprof's programs' runs and run time, and export them.
    pub bpf_stats: bool,
    /// TLS and basic auth (`--web.config.file`).
    pub web_config: Option<PathBuf>,
}

/// How long a group of exits keeps its series without an exit, by default.
pub const GROUP_TTL: Duration = Duration::from_secs(600);

/// Serves until SIGINT or SIGTERM (or, with `--pid`, until the process exits), then detaches.
pub fn serve(request: ServeRequest) -> anyhow::Result<()> {
    // One worker for the HTTP side; collection runs on this thread, so a burst of scrapes does
    // not take its CPU time from collection, nor the other way round.
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    runtime.block_on(run(request))
}

async fn run(request: ServeRequest) -> anyhow::Result<()> {
    // First, as in a run: a signal while loading ends serve by the normal path.
    let mut signals = Signals::new()?;
    let ServeRequest { target, probes, listen, ringbuf_bytes, groups, bpf_stats, web_config } =
        request;
    let run = RunRequest {
        target,
        // Sampling and block stacks feed tables that grow with the stacks seen: not in serve.
        probes: ProbeOptions { block_stacks: false, sample_hz: 0, ..probes },
        duration: None,
        json: false,
        ringbuf_bytes,
        exit_slots: None,
        bpf_stats: false,
        record: None,
        groups,
        slower_than: None,
    };
    let (prepared, _) = prepare(&run.target)?;
    preflight()?;
    // Before anything is loaded: a bad web configuration is a bad request.
    let web = web_config::watched(web_config).map_err(|e| UsageError(format!("{e:#}")))?;
    // Before anything is loaded: an address in use is the first thing a second instance meets.
    let listener =
        TcpListener::bind(listen).await.with_context(|| format!("listening on {listen}"))?;
    let (facts, mut plan) = plan_for(&run.target, run.probes)?;
    // Deferred work is not served: no free is awaited for a report nobody reads.
    let options = LoadOptions { await_frees: false, ..load_options(&prepared, &run) };
    let mut attached = Attached::new(&plan, &facts, options)?;
    // The compat object, where the kernel rejected the default one.
    plan.object = attached.probes.object.clone();
    // Held until serve ends (or dies: the kernel turns the statistics off with the descriptor).
    let _stats = bpf_stats.then(enable_bpf_stats).transpose()?;
    let labels = Arc::new(Labels { kernel: plan.kernel.clone(), attach: plan.mode.to_string() });
    // The whole exit's series, at zero, from the first scrape on: a rate over a window that
    // starts before the first exit then counts every exit. Where exits are grouped, no group
    // has series before its first exit, and the groups' counters start at zero.
    let no_groups = groups.map(Groups::series_only);
    let empty = Snapshot::take(
        &Profile::new(&plan),
        no_groups.as_ref(),
        Losses::default(),
        Vec::new(),
        ReadErrors::default(),
        &TeardownSnapshot::default(),
    );
    let (publish, snapshots) = watch::channel(Arc::new(empty));
    // Serve is one run, for as long as it serves.
    attached.begin_run()?;
    let started = start(prepared, &run.target, None, true, Some(&mut attached.probes.ebpf))?;
    // Served once the target is watched: an answer from /healthz means collecting.
    let scheme = if web.borrow().tls.is_some() { "https" } else { "http" };
    let router = http::router(snapshots, labels, web.clone());
    let server = tokio::spawn(http::serve(listener, router, web));
    eprintln!("exitprof: serving metrics on {scheme}://{listen}/metrics");

    let ended = collect::collect(
        &mut attached,
        &plan,
        groups,
        bpf_stats,
        started.stop,
        &mut signals,
        &publish,
    )
    .await;
    server.abort();
    attached.detach();
    match ended? {
        Ended::Signal(signal) => eprintln!("exitprof: {}: detached", signal_name(signal)),
        Ended::TargetExited => eprintln!("exitprof: the watched process exited: detached"),
    }
    Ok(())
}
