//! Programs attached in the background while a benchmark's workload runs: exitprof (watching
//! another target, or only an empty program) and a minimal bpftrace probe. Each is ready once a
//! line it prints says so, and stops as Ctrl-C stops it.

use std::{
    io::{self, BufRead as _, BufReader, Read},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc::{self, Sender},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

/// How long a program may take to attach before the benchmark gives up on it.
const ATTACH_TIMEOUT: Duration = Duration::from_secs(60);

/// A program attached in the background; dropping it stops the program.
pub struct Background {
    child: Option<Child>,
    /// Its stdout, but for the line that said it was ready.
    stdout: Option<JoinHandle<io::Result<String>>>,
}

impl Background {
    /// Starts `cmd` and waits until a line of its stdout or stderr starts with `ready`. Its
    /// stderr goes on to the benchmark's.
    pub fn start(cmd: &mut Command, ready: &'static str) -> anyhow::Result<Self> {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {cmd:?}"))?;
        let (said, attached) = mpsc::channel();
        let stdout = child.stdout.take().context("its stdout")?;
        let stderr = child.stderr.take().context("its stderr")?;
        let stdout = Some(read_lines(stdout, ready, said.clone(), |out, line| {
            out.push_str(line);
            out.push('\n');
        }));
        read_lines(stderr, ready, said, |_, line| eprintln!("{line}"));
        let mut background = Self { child: Some(child), stdout };
        if attached.recv_timeout(ATTACH_TIMEOUT).is_err() {
            let status = background.kill();
            bail!("{cmd:?} did not attach within {ATTACH_TIMEOUT:?} ({status})");
        }
        Ok(background)
    }

    /// The program's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Suspends the program (SIGSTOP), or resumes it (SIGCONT); its probes stay attached.
    pub fn suspend(&self, suspended: bool) {
        if let Some(child) = &self.child {
            signal(child, if suspended { libc::SIGSTOP } else { libc::SIGCONT });
        }
    }

    /// Stops the program as Ctrl-C does (it detaches, and reports) and returns its stdout.
    pub fn stop(mut self) -> anyhow::Result<String> {
        let mut child = self.child.take().context("already stopped")?;
        // Ctrl-C again while it runs on: bpftrace at times lets the first one pass.
        let mut status = None;
        for _ in 0..STOP_TRIES {
            signal(&child, libc::SIGINT);
            status = exit_within(&mut child, STOP_PATIENCE)?;
            if status.is_some() {
                break;
            }
        }
        let Some(status) = status else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("a program attached in the background did not stop on SIGINT: killed");
        };
        let stdout = self.stdout.take().context("its stdout")?;
        let stdout = stdout.join().expect("the stdout reader does not panic")?;
        if !status.success() {
            bail!("a program attached in the background failed: {status}");
        }
        Ok(stdout)
    }

    /// Kills the program; says how it ended.
    fn kill(&mut self) -> String {
        let Some(mut child) = self.child.take() else { return "stopped".to_owned() };
        let _ = child.kill();
        child.wait().map_or_else(|e| e.to_string(), |s| s.to_string())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGCONT);
            signal(&child, libc::SIGINT);
            let _ = child.wait();
        }
    }
}

/// How long a background program may take to stop after a SIGINT, and how many it gets.
const STOP_PATIENCE: Duration = Duration::from_secs(2);
const STOP_TRIES: u32 = 5;

/// The child's exit status once it exits, within `patience`.
fn exit_within(child: &mut Child, patience: Duration) -> anyhow::Result<Option<ExitStatus>> {
    let asked = Instant::now();
    while asked.elapsed() < patience {
        if let Some(status) = child.try_wait().context("waiting for a background program")? {
            return Ok(Some(status));
        }
        thread::sleep(Duration::from_millis(10));
    }
    Ok(None)
}

/// Reads `pipe` line by line in a thread: says on `said` when a line starts with `ready`, hands
/// every other line to `each`, and returns what `each` gathered.
fn read_lines(
    pipe: impl Read + Send + 'static,
    ready: &'static str,
    said: Sender<()>,
    each: impl Fn(&mut String, &str) + Send + 'static,
) -> JoinHandle<io::Result<String>> {
    thread::spawn(move || {
        let mut gathered = String::new();
        for line in BufReader::new(pipe).lines() {
            let line = line?;
            if line.starts_with(ready) {
                let _ = said.send(());
            } else {
                each(&mut gathered, &line);
            }
        }
        Ok(gathered)
    })
}

/// Sends `signal` to our child.
fn signal(child: &Child, signal: i32) {
    // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
    unsafe { libc::kill(child.id() as i32, signal) };
}
