//! What runs inside the guest and what it reports back.
//!
//! The guest's `/init` runs each scenario and writes its report to the second serial line (see
//! [`super::qemu`]), which the host captures to a file of its own: the kernel's console stays on
//! the first, so no kernel message can land in the middle of a JSON document. Each report line that is not
//! a scenario's output starts with [`MARKER`]. A file a scenario writes (a record, binary) comes
//! back in base64 after the scenario's end, with its size to tell a file cut short.

use super::{
    scenarios::Scenario,
    suite::{GuestTests, PROGRAMS, TEST_BINARY},
};

/// Starts every line of the report that is not a scenario's own output.
const MARKER: &str = "@@exitprof-vm";

/// Busybox applets `/init` uses, linked into `/bin`.
pub const APPLETS: &[&str] =
    &["sh", "mount", "cat", "uname", "poweroff", "true", "base64", "wc", "ip", "insmod"];

/// Where the guest finds the kernel's modules it loads (`veth`, for the network namespace
/// tests).
pub const MODULES: &str = "/lib/modules";

/// The guest's `/init`: mounts what exitprof needs, runs every scenario, then the integration
/// tests, writing the report to `report_tty`, and powers off.
pub fn init_script(report_tty: &str, scenarios: &[Scenario], tests: &[GuestTests]) -> String {
    let mut script = format!(
        r#"#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tracefs tracefs /sys/kernel/tracing
# kprobes/blacklist, which exitprof reads to plan kprobes.
mount -t debugfs debugfs /sys/kernel/debug
# The unit's serve groups exits by cgroup (v2), and listens on loopback.
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
exec 3>{report_tty}
report() {{ echo; echo "{MARKER} $*"; }} >&3
reported() {{
  name=$1
  shift
  report begin "$name"
  "$@" >/tmp/stdout 2>/tmp/stderr
  status=$?
  cat /tmp/stdout >&3
  report stderr "$name"
  cat /tmp/stderr >&3
  report end "$name" "$status"
}}
scenario() {{
  name=$1
  shift
  reported "$name" /bin/exitprof "$@"
}}
sent() {{
  report file "$1" "$(wc -c <"$2")"
  base64 "$2" >&3
  report end-file "$1"
}}
export EXITPROF_TEST_BINARY=/bin/exitprof EXITPROF_TEST_PROGRAMS={PROGRAMS} EXITPROF_TEST_EMULATED=1
tests() {{
  name=$1
  export EXITPROF_TEST_ATTACH=$2
  shift 2
  reported "$name" {TEST_BINARY} --test-threads=1 --nocapture "$@"
}}
report kernel "$(uname -r)"
for module in {MODULES}/*.ko; do
  insmod "$module" || report module-not-loaded "$module"
done
"#
    );
    for s in scenarios {
        script.push_str(&shell_line(&["scenario", s.name], s.args));
        if let Some(file) = s.sends {
            script.push_str(&shell_line(&["sent", s.name], &[file]));
        }
    }
    for t in tests {
        script.push_str(&shell_line(&["tests", t.name, t.attach], t.args));
    }
    script.push_str("report done\npoweroff -f\n");
    script
}

/// `words` (safe as they are) and `args`, quoted, as one line of the script.
fn shell_line(words: &[&str], args: &[&str]) -> String {
    let mut line = words.join(" ");
    for arg in args {
        line.push(' ');
        line.push_str(&shell_quote(arg));
    }
    line.push('\n');
    line
}

fn shell_quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

/// What the guest reported.
#[derive(Debug, Default, PartialEq)]
pub struct Report {
    /// `uname -r` in the guest; empty if `/init` never got that far.
    pub kernel: String,
    pub runs: Vec<Run>,
    pub files: Vec<SentFile>,
    /// `/init` ran to its end (the guest did not die or hang on the way).
    pub done: bool,
}

/// One scenario's exitprof run.
#[derive(Debug, Default, PartialEq)]
pub struct Run {
    pub name: String,
    pub stdout: String,
    pub stderr: String,
    /// exitprof's exit status; `None` when the guest stopped before exitprof did.
    pub status: Option<i32>,
}

/// A file a scenario wrote, as the guest sent it.
#[derive(Debug, Default, PartialEq)]
pub struct SentFile {
    /// The scenario's name.
    pub run: String,
    /// Its size in the guest; `None` when the guest could not read it.
    pub size: Option<usize>,
    pub base64: String,
}

impl SentFile {
    /// The file's bytes, or why they did not all arrive.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        use base64::Engine as _;
        let size = self.size.ok_or("the guest could not read the file (was it written?)")?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.base64)
            .map_err(|e| format!("the file's base64 is damaged: {e}"))?;
        if bytes.len() != size {
            return Err(format!("the file has {size} bytes in the guest, {} arrived", bytes.len()));
        }
        Ok(bytes)
    }
}

impl Report {
    /// Parses the report channel's text.
    pub fn parse(text: &str) -> Self {
        #[derive(Clone, Copy)]
        enum Section {
            Nothing,
            Stdout,
            Stderr,
            File,
        }
        let mut report = Self::default();
        let mut current: Option<Run> = None;
        let mut file: Option<SentFile> = None;
        let mut section = Section::Nothing;
        // The guest's tty turns every "\n" into "\r\n".
        for line in text.lines().map(|l| l.trim_end_matches('\r')) {
            let Some(rest) = line.strip_prefix(MARKER).and_then(|r| r.strip_prefix(' ')) else {
                let run = current.as_mut();
                match (section, run, file.as_mut()) {
                    (Section::Stdout, Some(run), _) => push_line(&mut run.stdout, line),
                    (Section::Stderr, Some(run), _) => push_line(&mut run.stderr, line),
                    (Section::File, _, Some(file)) => file.base64.push_str(line.trim()),
                    _ => {}
                }
                continue;
            };
            let mut words = rest.split(' ');
            match (words.next(), words.next(), words.next()) {
                (Some("kernel"), Some(release), _) => release.clone_into(&mut report.kernel),
                (Some("begin"), Some(name), _) => {
                    report.runs.extend(current.take());
                    current = Some(Run { name: name.to_owned(), ..Run::default() });
                    section = Section::Stdout;
                }
                (Some("stderr"), Some(_), _) => section = Section::Stderr,
                (Some("end"), Some(_), status) => {
                    if let Some(mut run) = current.take() {
                        run.status = status.and_then(|s| s.parse().ok());
                        report.runs.push(run);
                    }
                    section = Section::Nothing;
                }
                (Some("file"), Some(run), size) => {
                    let size = size.and_then(|s| s.trim().parse().ok());
                    file = Some(SentFile { run: run.to_owned(), size, base64: String::new() });
                    section = Section::File;
                }
                (Some("end-file"), ..) => {
                    report.files.extend(file.take());
                    section = Section::Nothing;
                }
                (Some("done"), ..) => report.done = true,
                _ => {}
            }
        }
        report.runs.extend(current);
        report.files.extend(file);
        for run in &mut report.runs {
            for text in [&mut run.stdout, &mut run.stderr] {
                *text = text.trim().to_owned();
            }
        }
        report
    }
}

fn push_line(text: &mut String, line: &str) {
    text.push_str(line);
    text.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_the_shell() {
        assert_eq!(shell_quote("--threads"), "'--threads'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn a_report_is_read_back() {
        let text = "\r\n@@exitprof-vm kernel 6.1.0-57-amd64\r\n\r\n@@exitprof-vm begin storm\r\n\
                    {\r\n  \"lost\": 0\r\n}\r\n\r\n@@exitprof-vm stderr storm\r\n\
                    warning: x\r\n\r\n@@exitprof-vm end storm 0\r\n\
                    \r\n@@exitprof-vm begin second\r\n{\r\n";
        let report = Report::parse(text);
        assert_eq!(report.kernel, "6.1.0-57-amd64");
        assert!(!report.done, "no done line");
        assert_eq!(
            report.runs,
            [
                Run {
                    name: "storm".into(),
                    stdout: "{\n  \"lost\": 0\n}".into(),
                    stderr: "warning: x".into(),
                    status: Some(0),
                },
                // The guest died while the second scenario ran.
                Run {
                    name: "second".into(),
                    stdout: "{".into(),
                    stderr: String::new(),
                    status: None
                },
            ]
        );
    }

    #[test]
    fn a_file_sent_in_base64_is_read_back_whole_or_refused() {
        // "exit\0\xff" in base64, split over lines as busybox's base64 wraps them.
        let text = "\r\n@@exitprof-vm file rec 6\r\nZXhp\r\ndAD/\r\n\
                    \r\n@@exitprof-vm end-file rec\r\n\
                    \r\n@@exitprof-vm file cut 9\r\nZXhp\r\n";
        let report = Report::parse(text);
        assert_eq!(report.files[0].bytes(), Ok(b"exit\0\xff".to_vec()));
        // The guest died before the end of the second.
        assert_eq!(report.files[1].run, "cut");
        let cut = report.files[1].bytes();
        assert_eq!(cut, Err("the file has 9 bytes in the guest, 3 arrived".to_owned()));
        let unread = SentFile { run: "x".into(), size: None, base64: String::new() };
        assert!(unread.bytes().unwrap_err().contains("could not read"));
    }

    #[test]
    fn the_init_script_runs_every_scenario_and_test() {
        let scenarios =
            [Scenario { name: "a", args: &["--x", "1"], check: |_, _| {}, sends: Some("/tmp/a") }];
        let tests = [GuestTests { name: "b", attach: "fentry", args: &["m::"] }];
        let script = init_script("/dev/ttyS1", &scenarios, &tests);
        assert!(
            script.contains("\nscenario a '--x' '1'\nsent a '/tmp/a'\ntests b fentry 'm::'\n"),
            "{script}"
        );
        assert!(script.ends_with("report done\npoweroff -f\n"), "{script}");
        assert!(script.contains("\nexec 3>/dev/ttyS1\n"), "{script}");
    }

    #[test]
    fn names_are_safe_in_the_guest_shell() {
        let scenarios = super::super::scenarios::SCENARIOS.iter().map(|s| s.name);
        let tests = super::super::suite::GUEST_TESTS.iter().flat_map(|t| [t.name, t.attach]);
        for name in scenarios.chain(tests) {
            assert!(
                !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
                "{name:?}"
            );
        }
    }
}
