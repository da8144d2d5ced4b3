//! Booting a kernel with the test initramfs in qemu, by software emulation (TCG): the
//! developers' machines are VMs whose KVM hangs a nested guest, and an arm64 kernel has no
//! other way to run on them. Every guest has two serial lines: the kernel's console, and the
//! guest's report, which no kernel message can land in.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::guest::Report;
use crate::arch::Arch;

/// The machine qemu emulates for `arch`: its program, the arguments that make the machine, the
/// kernel's console and the second serial line that carries the report.
struct Machine {
    qemu: &'static str,
    package: &'static str,
    args: &'static [&'static str],
    console: &'static str,
}

fn machine(arch: Arch) -> Machine {
    match arch {
        // The PC's two serial ports: ttyS0 for the console, ttyS1 for the report.
        Arch::X86_64 => Machine {
            qemu: "qemu-system-x86_64",
            package: "qemu-system-x86",
            args: &["-cpu", "max"],
            console: "ttyS0",
        },
        // The virt board has one serial port (PL011, ttyAMA0), the console; the report goes to
        // a 16550 on PCI, which Debian's arm64 kernels drive built in (8250_pci), as ttyS0.
        // Pointer authentication is emulated with qemu's cheap algorithm: the architected one
        // (QARMA) costs TCG dearly on every function's entry and return, and the kernel signs
        // its return addresses.
        Arch::Aarch64 => Machine {
            qemu: "qemu-system-aarch64",
            package: "qemu-system-arm",
            args: &["-machine", "virt", "-cpu", "max,pauth-impdef=on"],
            console: "ttyAMA0",
        },
    }
}

/// The device the guest writes its report to.
pub fn report_tty(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "/dev/ttyS1",
        Arch::Aarch64 => "/dev/ttyS0",
    }
}

/// One finished boot: what the guest reported, and where its console log is.
pub struct Boot {
    pub report: Report,
    pub console: PathBuf,
    pub elapsed: Duration,
}

/// Boots `arch`'s `vmlinuz` with `initramfs` until the guest powers off, or fails after
/// `timeout`. The logs go to `dir`: `console.log` (the kernel console), `report.log` (the
/// guest's report) and `qemu.log` (qemu's own messages).
pub fn boot(
    arch: Arch,
    vmlinuz: &Path,
    initramfs: &Path,
    dir: &Path,
    timeout: Duration,
) -> anyhow::Result<Boot> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let console = dir.join("console.log");
    let report = dir.join("report.log");
    let qemu_log = dir.join("qemu.log");
    let qemu_out = fs::File::create(&qemu_log)?;
    let started = Instant::now();
    let machine = machine(arch);
    let report_line = match arch {
        Arch::X86_64 => vec!["-serial".to_owned(), format!("file:{}", report.display())],
        Arch::Aarch64 => vec![
            "-device".to_owned(),
            "pci-serial,chardev=report".to_owned(),
            "-chardev".to_owned(),
            format!("file,id=report,path={}", report.display()),
        ],
    };
    // Both vCPUs on one host thread: with multi-threaded TCG, a vCPU sometimes kept trapping on
    // a breakpoint the guest had already patched away (6.1 patching the sched_switch static
    // call in __schedule as a tracepoint was detached), and the guest locked up. Both guests
    // run at once, so each still has a host CPU.
    let mut qemu = Command::new(machine.qemu)
        .args(machine.args)
        .args(["-accel", "tcg,thread=single", "-m", "2048", "-smp", "2"])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initramfs)
        // A soft lockup panics (and so ends the boot at once) with the stuck CPU's registers and
        // stack on the console: warnings (level 4) are shown, boot notices are not.
        .arg("-append")
        .arg(format!("console={} loglevel=5 panic=-1 softlockup_panic=1", machine.console))
        .args(["-nographic", "-no-reboot", "-monitor", "none"])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .args(report_line)
        .stdin(Stdio::null())
        .stdout(qemu_out.try_clone()?)
        .stderr(qemu_out)
        .spawn()
        .with_context(|| format!("starting {} (package {})", machine.qemu, machine.package))?;
    let status = loop {
        if let Some(status) = qemu.try_wait()? {
            break status;
        }
        if started.elapsed() > timeout {
            qemu.kill().context("stopping qemu")?;
            qemu.wait()?;
            bail!(
                "the guest did not power off within {} s; console tail ({}):\n{}",
                timeout.as_secs(),
                console.display(),
                tail(&console)
            );
        }
        thread::sleep(Duration::from_millis(100));
    };
    if !status.success() {
        bail!("qemu failed ({status}):\n{}", tail(&qemu_log));
    }
    let text = fs::read(&report).with_context(|| format!("reading {}", report.display()))?;
    Ok(Boot {
        report: Report::parse(&String::from_utf8_lossy(&text)),
        console,
        elapsed: started.elapsed(),
    })
}

/// The last lines of a log, to show why a guest failed.
pub fn tail(path: &Path) -> String {
    const LINES: usize = 40;
    let Ok(bytes) = fs::read(path) else { return format!("({} is unreadable)", path.display()) };
    let text = without_escapes(&String::from_utf8_lossy(&bytes));
    let lines: Vec<&str> = text.lines().map(str::trim_end).filter(|l| !l.is_empty()).collect();
    lines[lines.len().saturating_sub(LINES)..].join("\n")
}

/// `text` without the terminal control sequences the firmware writes to the console
/// (`ESC c`, `ESC [ ... letter`).
fn without_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
        } else if chars.next() == Some('[') {
            chars.by_ref().find(char::is_ascii_alphabetic);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_sequences_are_dropped() {
        let console =
            "\x1bc\x1b[?7l\x1b[2J\x1b[0mSeaBIOS (version 1.16.2)\r\n[   11.1] reboot: Power down";
        assert_eq!(
            without_escapes(console),
            "SeaBIOS (version 1.16.2)\r\n[   11.1] reboot: Power down"
        );
    }
}
