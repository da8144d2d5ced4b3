//! One `exitprof serve` of the soak: started in the background, scraped, its maps and counters
//! read from outside.

use std::{net::TcpListener, path::Path, process::Command};

use anyhow::Context as _;
use exitprof_common::counters;
use serde::Serialize;

use super::{
    bpf_maps::{self, Map, Occupancy},
    metrics::{self, Scrape},
};
use crate::overhead::background::Background;

/// The line serve prints once it collects.
const SERVING: &str = "exitprof: serving metrics";

/// A serve running for the soak.
pub struct Instance {
    /// `all` or `comm`.
    pub name: &'static str,
    pub args: Vec<String>,
    pub addr: String,
    pub pid: u32,
    counters: Map,
    serve: Background,
}

impl Instance {
    /// Starts `exitprof serve ARGS --listen` on a free loopback port; with `compat`, the compat
    /// eBPF object forced (its marks and slot owners are hashes, whose entries the soak counts).
    pub fn start(
        binary: &Path,
        name: &'static str,
        args: &[&str],
        compat: bool,
    ) -> anyhow::Result<Self> {
        let addr = free_loopback_addr()?;
        let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        args.extend(["--listen".to_owned(), addr.clone()]);
        let mut cmd = Command::new(binary);
        cmd.arg("serve").args(&args);
        if compat {
            cmd.env("EXITPROF_COMPAT", "1");
            args.insert(0, "EXITPROF_COMPAT=1".to_owned());
        } else {
            cmd.env_remove("EXITPROF_COMPAT");
        }
        let serve = Background::start(&mut cmd, SERVING)?;
        let pid = serve.pid().context("serve's pid")?;
        let counters = bpf_maps::map_ids(pid)?
            .into_iter()
            .map(Map::open)
            .find(|m| m.as_ref().is_ok_and(|m| m.name() == "COUNTERS"))
            .context("serve holds no COUNTERS map")??;
        Ok(Self { name, args, addr, pid, counters, serve })
    }

    /// The kernel side's counts now.
    pub fn kernel_counts(&self) -> anyhow::Result<KernelCounts> {
        Ok(KernelCounts::of(&self.counters.per_cpu_sums(bpf_maps::possible_cpus()?)))
    }

    pub fn occupancy(&self) -> anyhow::Result<Occupancy> {
        bpf_maps::occupancy(self.pid)
    }

    pub fn scrape(&self) -> anyhow::Result<Scrape> {
        metrics::scrape(&self.addr).with_context(|| format!("scraping the {} serve", self.name))
    }

    /// Stops serve as SIGINT does; fails unless it detached and ended with status 0.
    pub fn stop(self) -> anyhow::Result<()> {
        self.serve.stop().map(drop).with_context(|| format!("stopping the {} serve", self.name))
    }
}

/// A loopback address with a port nothing listens on now.
fn free_loopback_addr() -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.to_string())
}

/// What the kernel side counted, from its per-CPU counters.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct KernelCounts {
    /// Exits opened (`EXITS_OPENED`).
    pub opened: u64,
    /// Exits ended, sent or dropped (`EXITS_ENDED`).
    pub ended: u64,
    /// Exits refused at their first point, each counted lost once: no slot (`STATE_FULL`), or
    /// following undecided (`FOLLOW_UNKNOWN`).
    pub refused: u64,
    pub stale_refusals: u64,
    pub stray_ends: u64,
    pub refusals_forgotten: u64,
}

impl KernelCounts {
    fn of(sums: &[u64]) -> Self {
        let at = |i: u32| sums.get(i as usize).copied().unwrap_or(0);
        Self {
            opened: at(counters::EXITS_OPENED),
            ended: at(counters::EXITS_ENDED),
            refused: at(counters::STATE_FULL) + at(counters::FOLLOW_UNKNOWN),
            stale_refusals: at(counters::STALE_REFUSALS),
            stray_ends: at(counters::STRAY_ENDS),
            refusals_forgotten: at(counters::REFUSALS_FORGOTTEN),
        }
    }

    /// Exits that began, as the kernel side counted them: opened, or refused at their start.
    pub fn began(&self) -> u64 {
        self.opened + self.refused
    }

    /// Exits whose account is closed: ended (recorded or lost), or refused.
    pub fn accounted(&self) -> u64 {
        self.ended + self.refused
    }

    /// Exits opened and not ended.
    pub fn in_progress(&self) -> u64 {
        self.opened.saturating_sub(self.ended)
    }
}
