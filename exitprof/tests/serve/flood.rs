//! serve under a connection flood: 300 connections that idle and 50 that trickle a request head
//! a byte every 3 s, each reconnecting as soon as serve drops it, for a minute, from addresses of
//! their own on loopback; Debian's Prometheus, started once the flood is on, scrapes serve
//! every 2 s with a 2 s timeout through it, and must get every scrape. Trickled heads must be dropped (not kept alive by each
//! byte), and serve's memory must stay bounded.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use tokio::{net::TcpSocket, sync::watch, task::JoinSet};

use super::{
    prometheus::Prometheus,
    served::{Served, get},
    task_name,
};
use crate::support::require_root;

/// Connections that idle, from [`IDLE_PEERS`] addresses (75 each: over serve's 64 a peer).
const IDLE: usize = 300;
const IDLE_PEERS: usize = 4;
/// Connections that trickle a request head, from [`SLOW_PEERS`] addresses.
const SLOW: usize = 50;
const SLOW_PEERS: usize = 2;
/// How often a slow client sends a byte of its head.
const TRICKLE: Duration = Duration::from_secs(3);
/// How long a dropped client waits before it connects again.
const RECONNECT_AFTER: Duration = Duration::from_millis(500);
/// How long the flood runs before Prometheus starts, and how long it scrapes through it.
const FLOOD_FILLS: Duration = Duration::from_secs(3);
const FLOOD_FOR: Duration = Duration::from_secs(60);
/// Prometheus's scrape interval and timeout.
const SCRAPE_EVERY: Duration = Duration::from_secs(2);
/// How long serve may take over an exchange (`EXCHANGE_TIMEOUT` in serve/http.rs), and the
/// slack a trickling client's drop is allowed beyond it on a busy machine.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
const DROP_SLACK: Duration = Duration::from_secs(3);
/// How much serve's resident memory may grow under the flood: 256 connections of a few KiB
/// each (a read buffer of 8 to 16 KiB at most, the task and hyper's state) and the render of
/// the scrapes.
const RSS_GROWTH: u64 = 16 << 20;

#[test]
fn a_connection_flood_does_not_starve_prometheus() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    // serve runs with the file limit it was given (1024 here, as systemd gives a service).
    let served = Served::start(dir.path(), &["--comm", &task_name("f")]);
    let rss_before = served.rss_bytes();
    // The flood's 350 sockets and more, in this process.
    raise_file_limit(4096);
    // The flood first: each of Prometheus's connections must be let in through it.
    let flood = Flood::start(served.addr);
    std::thread::sleep(FLOOD_FILLS);
    let every = format!("{}s", SCRAPE_EVERY.as_secs());
    let prometheus = Prometheus::scraping(
        dir.path(),
        &format!(
            "global:\n  scrape_interval: {every}\n  scrape_timeout: {every}\n\
             scrape_configs:\n  - job_name: exitprof\n    static_configs:\n      \
             - targets: ['{}']\n",
            served.addr
        ),
    );
    // From its first scrape (Prometheus syncs its targets some seconds after it is ready).
    prometheus.wait_for(r#"up{job="exitprof"}"#, |_| true);
    // Meanwhile a scraper of the test's own makes a new connection for each scrape, as a
    // Prometheus whose interval is longer than serve's idle timeout does.
    let started = Instant::now();
    let mut rss_most = rss_before;
    let mut fresh = Vec::new();
    while started.elapsed() < FLOOD_FOR {
        std::thread::sleep(Duration::from_secs(1));
        let scraped = Instant::now();
        let answer = get(served.addr, "/metrics", None);
        fresh.push((answer.map(|r| r.status).ok(), scraped.elapsed()));
        rss_most = rss_most.max(served.rss_bytes());
    }
    let seen = flood.stop();
    let window = format!("{}s", FLOOD_FOR.as_secs());
    let over_flood = |f: &str, series: &str| {
        prometheus
            .query(&format!("{f}({series}{{job=\"exitprof\"}}[{window}])"))
            .unwrap_or_else(|| panic!("no {f} of {series} from prometheus"))
    };
    let scrapes = over_flood("count_over_time", "up");
    let answered = over_flood("sum_over_time", "up");
    let slowest = over_flood("max_over_time", "scrape_duration_seconds");
    let median = prometheus
        .query(&format!(
            "quantile_over_time(0.5, scrape_duration_seconds{{job=\"exitprof\"}}[{window}])"
        ))
        .unwrap();
    let mut fresh_times: Vec<Duration> = fresh.iter().map(|(_, t)| *t).collect();
    fresh_times.sort();
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    eprintln!(
        "{window} of flood: {} connections made, {} idle ones and {} trickling ones dropped by \
         serve (a trickling one after {:.1} s at most); Prometheus: {answered} of {scrapes} \
         scrapes answered, median {:.1} ms, slowest {:.1} ms; {} scrapes on new connections, \
         median {:?}, slowest {:?}; serve's RSS {:.1} MiB before, {:.1} MiB at most",
        seen.connects,
        seen.idle_dropped,
        seen.slow_dropped,
        seen.slow_longest.as_secs_f64(),
        median * 1e3,
        slowest * 1e3,
        fresh.len(),
        fresh_times[fresh_times.len() / 2],
        fresh_times.last().unwrap(),
        mib(rss_before),
        mib(rss_most),
    );
    // The flood was one: every client connected, and serve had more than it keeps.
    assert!(seen.connects > (IDLE + SLOW) as u64, "{} connections made", seen.connects);
    assert!(seen.idle_dropped > 0, "no idle connection was shed");
    assert!(seen.slow_dropped >= SLOW as u64, "{} trickling heads dropped", seen.slow_dropped);
    assert!(
        seen.slow_longest <= EXCHANGE_TIMEOUT + DROP_SLACK,
        "a trickled head kept its connection for {:?}",
        seen.slow_longest
    );
    let expected = FLOOD_FOR.as_secs_f64() / SCRAPE_EVERY.as_secs_f64();
    assert!(scrapes >= expected - 2.0, "{scrapes} scrapes in {window}, expected {expected}");
    assert_eq!(answered, scrapes, "scrapes that failed or timed out under the flood");
    let late: Vec<_> = fresh
        .iter()
        .filter(|(status, took)| *status != Some(200) || *took > SCRAPE_EVERY)
        .collect();
    assert!(late.is_empty(), "scrapes on new connections failed or late: {late:?}");
    assert!(
        rss_most <= rss_before + RSS_GROWTH,
        "serve's memory grew from {:.1} to {:.1} MiB under the flood",
        mib(rss_before),
        mib(rss_most)
    );
    served.signal(libc::SIGTERM);
    let (status, stderr) = served.finish();
    assert!(status.success(), "serve ended {status}:\n{stderr}");
}

/// Raises this process's soft limit on open files to `wanted` (or its hard limit).
fn raise_file_limit(wanted: u64) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: a valid resource and a pointer to an rlimit to fill.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) }, 0);
    limit.rlim_cur = limit.rlim_cur.max(wanted.min(limit.rlim_max));
    // SAFETY: as above, with the limit to set.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit) }, 0);
}

/// What the flood's clients saw.
#[derive(Default)]
struct Seen {
    connects: u64,
    idle_dropped: u64,
    slow_dropped: u64,
    /// The longest a trickling connection was kept.
    slow_longest: Duration,
}

#[derive(Default)]
struct Counts {
    connects: AtomicU64,
    idle_dropped: AtomicU64,
    slow_dropped: AtomicU64,
    slow_longest_ms: AtomicU64,
}

/// The flood's clients, on a runtime of their own in a thread.
struct Flood {
    stop: watch::Sender<bool>,
    thread: JoinHandle<()>,
    counts: Arc<Counts>,
}

impl Flood {
    fn start(target: SocketAddr) -> Self {
        let (stop, stopped) = watch::channel(false);
        let counts = Arc::new(Counts::default());
        let thread = {
            let counts = counts.clone();
            std::thread::spawn(move || {
                let runtime =
                    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async move {
                    let mut clients = JoinSet::new();
                    for i in 0..IDLE {
                        let source = loopback(2 + i % IDLE_PEERS);
                        let client = Client { source, target, counts: counts.clone() };
                        clients.spawn(client.idle(stopped.clone()));
                    }
                    for i in 0..SLOW {
                        let source = loopback(2 + IDLE_PEERS + i % SLOW_PEERS);
                        let client = Client { source, target, counts: counts.clone() };
                        clients.spawn(client.trickle(stopped.clone()));
                    }
                    clients.join_all().await;
                });
            })
        };
        Self { stop, thread, counts }
    }

    fn stop(self) -> Seen {
        self.stop.send_replace(true);
        self.thread.join().unwrap();
        let c = &self.counts;
        Seen {
            connects: c.connects.load(Ordering::Relaxed),
            idle_dropped: c.idle_dropped.load(Ordering::Relaxed),
            slow_dropped: c.slow_dropped.load(Ordering::Relaxed),
            slow_longest: Duration::from_millis(c.slow_longest_ms.load(Ordering::Relaxed)),
        }
    }
}

/// 127.0.0.`n`: every address of 127.0.0.0/8 is the loopback interface's on Linux.
fn loopback(n: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, u8::try_from(n).unwrap()))
}

struct Client {
    source: IpAddr,
    target: SocketAddr,
    counts: Arc<Counts>,
}

impl Client {
    async fn connect(&self) -> Option<tokio::net::TcpStream> {
        let socket = TcpSocket::new_v4().ok()?;
        socket.bind(SocketAddr::new(self.source, 0)).ok()?;
        let stream = tokio::time::timeout(Duration::from_secs(5), socket.connect(self.target))
            .await
            .ok()?
            .ok()?;
        self.counts.connects.fetch_add(1, Ordering::Relaxed);
        Some(stream)
    }

    /// Connects and sends nothing, again each time serve drops it.
    async fn idle(self, mut stopped: watch::Receiver<bool>) {
        while !*stopped.borrow() {
            if let Some(stream) = self.connect().await {
                tokio::select! {
                    () = closed(&stream) => {
                        self.counts.idle_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    _ = stopped.changed() => return,
                }
            }
            tokio::time::sleep(RECONNECT_AFTER).await;
        }
    }

    /// Connects and sends a request head a byte every [`TRICKLE`], never ending it; again
    /// each time serve drops it.
    async fn trickle(self, mut stopped: watch::Receiver<bool>) {
        let head =
            b"GET /metrics HTTP/1.1\r\nHost: exitprof\r\nX-Trickle: aaaaaaaaaaaaaaaaaaaaaaaa";
        while !*stopped.borrow() {
            if let Some(stream) = self.connect().await {
                let opened = Instant::now();
                let trickled = async {
                    for byte in head.iter().cycle() {
                        tokio::time::sleep(TRICKLE).await;
                        if stream.writable().await.is_err()
                            || stream.try_write(std::slice::from_ref(byte)).is_err()
                        {
                            return;
                        }
                    }
                };
                tokio::select! {
                    () = trickled => {}
                    () = closed(&stream) => {}
                    _ = stopped.changed() => return,
                }
                let kept_ms = opened.elapsed().as_millis() as u64;
                self.counts.slow_dropped.fetch_add(1, Ordering::Relaxed);
                self.counts.slow_longest_ms.fetch_max(kept_ms, Ordering::Relaxed);
            }
            tokio::time::sleep(RECONNECT_AFTER).await;
        }
    }
}

/// Resolves when the peer has closed `stream` (what it sent before is read and dropped).
async fn closed(stream: &tokio::net::TcpStream) {
    let mut buffer = [0u8; 1024];
    loop {
        if stream.readable().await.is_err() {
            return;
        }
        match stream.try_read(&mut buffer) {
            Ok(n) if n > 0 => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // Closed (0 bytes), or reset.
            _ => return,
        }
    }
}
