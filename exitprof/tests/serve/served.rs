//! A running `exitprof serve`, killed with the test if the test fails, its HTTP client, and the
//! storms it watches.

use std::{
    fs::File,
    io::{Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use crate::support::{KilledOnDrop, exitprof, exitprof_path};

/// A free port on loopback (bound, then released for the server under test to take).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding a loopback port");
    listener.local_addr().unwrap().port()
}

/// exitprof serving on a loopback port of its own. Dropped, it is killed.
pub struct Served {
    child: KilledOnDrop,
    pub addr: SocketAddr,
    stderr: PathBuf,
}

impl Served {
    /// Starts `exitprof serve ARGS --listen 127.0.0.1:PORT` and waits (60 s at most) until
    /// /healthz answers. Its stderr goes to a file in `dir`.
    pub fn start(dir: &Path, args: &[&str]) -> Self {
        Self::start_until(dir, args, |addr| {
            get(addr, "/healthz", None).is_ok_and(|r| r.status == 200)
        })
    }

    /// Starts `exitprof serve ARGS --listen 127.0.0.1:PORT` and waits (60 s at most) until
    /// `ready` holds of its address.
    pub fn start_until(dir: &Path, args: &[&str], ready: impl Fn(SocketAddr) -> bool) -> Self {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
        let stderr = dir.join(format!("serve-{}.stderr", addr.port()));
        let child = exitprof()
            .arg("serve")
            .args(args)
            .args(["--listen", &addr.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).unwrap())
            .spawn()
            .expect("exitprof starts");
        let mut served = Self { child: KilledOnDrop::new(child), addr, stderr };
        let started = Instant::now();
        loop {
            if ready(addr) {
                return served;
            }
            if let Some(status) = served.child.child().try_wait().unwrap() {
                panic!("exitprof serve {args:?} ended ({status}):\n{}", served.stderr());
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "exitprof serve {args:?} did not answer /healthz within 60 s:\n{}",
                served.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// `GET path` with an `Accept` header; fails the test on a transport error.
    pub fn get(&self, path: &str, accept: Option<&str>) -> Response {
        get(self.addr, path, accept).unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    /// A figure of /metrics (text format): the value of the first sample line starting with
    /// `series`.
    pub fn figure(&self, series: &str) -> f64 {
        let body = self.get("/metrics", None).body;
        let line = body
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("no {series} in /metrics:\n{body}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    }

    /// Its resident memory (VmRSS), in bytes.
    pub fn rss_bytes(&self) -> u64 {
        self.status_bytes("VmRSS:")
    }

    /// The most resident memory it has had (VmHWM), in bytes.
    pub fn peak_rss_bytes(&self) -> u64 {
        self.status_bytes("VmHWM:")
    }

    fn status_bytes(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let kib = status.lines().find_map(|l| l.strip_prefix(field)).expect(field);
        kib.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() << 10
    }

    /// Its CPU time so far (user + system), in seconds.
    pub fn cpu_s(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th.
        let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        // SAFETY: sysconf has no preconditions.
        ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: our own child, not reaped before `finish`.
        assert_eq!(unsafe { libc::kill(self.pid() as i32, signal) }, 0);
    }

    /// Waits (30 s at most) for it to end.
    pub fn finish(mut self) -> (ExitStatus, String) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.child().try_wait().unwrap() {
                return (status, self.stderr());
            }
            // Still running, it is killed as the failed test drops it.
            assert!(
                started.elapsed() <= Duration::from_secs(30),
                "exitprof serve still running 30 s after its signal:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// An HTTP response, read whole.
pub struct Response {
    pub status: u16,
    pub content_type: String,
    pub body: String,
    pub elapsed: Duration,
}

/// `GET path` over a connection of its own (`Connection: close`), read to its end.
pub fn get(addr: SocketAddr, path: &str, accept: Option<&str>) -> std::io::Result<Response> {
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n");
    let started = Instant::now();
    let raw = exchange(addr, request.as_bytes())?;
    parse_response(raw, started.elapsed())
}

/// A whole HTTP response, as read from its connection in `elapsed`.
pub fn parse_response(raw: Vec<u8>, elapsed: Duration) -> std::io::Result<Response> {
    let text = String::from_utf8(raw).map_err(std::io::Error::other)?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other(format!("no complete response head: {text:?}")))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status in {head:?}")))?;
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)))
            .map(|(_, v)| v.trim().to_owned())
    };
    if let Some(length) = header("content-length") {
        let length: usize = length.parse().map_err(std::io::Error::other)?;
        if body.len() != length {
            return Err(std::io::Error::other(format!(
                "a body of {} bytes for a Content-Length of {length}",
                body.len()
            )));
        }
    }
    let content_type = header("content-type").unwrap_or_default();
    // Prometheus sends a large answer in chunks.
    let body = if header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        dechunk(body.as_bytes())?
    } else {
        body.to_owned()
    };
    Ok(Response { status, content_type, body, elapsed })
}

/// The body of a chunked transfer: its chunks, each after its hex size line, up to a size 0.
fn dechunk(mut chunked: &[u8]) -> std::io::Result<String> {
    let malformed = |what: &str| std::io::Error::other(format!("a malformed chunked body: {what}"));
    let mut body = Vec::new();
    loop {
        let line_end =
            chunked.windows(2).position(|w| w == b"\r\n").ok_or_else(|| malformed("no size"))?;
        let line = String::from_utf8_lossy(&chunked[..line_end]);
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| malformed("a size not in hex"))?;
        chunked = &chunked[line_end + 2..];
        if size == 0 {
            break;
        }
        let chunk = chunked.get(..size).ok_or_else(|| malformed("a chunk cut short"))?;
        body.extend_from_slice(chunk);
        chunked = chunked.get(size + 2..).ok_or_else(|| malformed("a chunk without its end"))?;
    }
    String::from_utf8(body).map_err(std::io::Error::other)
}

/// Sends `request` on a new connection and reads until the server closes it (30 s at most).
pub fn exchange(addr: SocketAddr, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    stream.write_all(request)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    Ok(raw)
}

/// A command whose tasks are named `name`: the exitprof binary under that name, running a
/// storm driver directly (no probes of its own), in `dir`.
pub fn named_storm(dir: &Path, name: &str, args: &[&str]) -> Command {
    let program = dir.join(name);
    if !program.exists() {
        std::os::unix::fs::symlink(exitprof_path(), &program).unwrap();
    }
    let mut command = Command::new(program);
    command.arg("__workload").args(args).stdout(Stdio::null());
    command
}

/// Polls `done` every 200 ms until it holds or `within` has passed (serve publishes its figures
/// once a second): whether it held.
pub fn poll_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
