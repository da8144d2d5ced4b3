//! Processes exitprof did not start (`--pid`): whether they exist, and their descendants.

use std::{collections::HashMap, fs, io};

/// Whether a process with this pid exists (whoever owns it).
pub fn process_exists(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The thread group (process) `pid` belongs to, from `/proc/PID/status`: `pid` itself for a
/// process, its leader's pid for another thread. `None` when it cannot be read.
pub fn thread_group_of(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|t| t.trim().parse().ok())
}

/// The processes below `pid` in the process tree now, parents before their children.
pub fn descendants(pid: u32) -> io::Result<Vec<u32>> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(child) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        // A process can end while we read: skip it.
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else { continue };
        if let Some(parent) = parse_ppid(&stat) {
            children.entry(parent).or_default().push(child);
        }
    }
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            found.push(c);
            next.push(c);
        }
    }
    Ok(found)
}

/// The parent pid in a `/proc/PID/stat` line: the second field after the name, which sits in
/// parentheses and may itself hold spaces and parentheses.
fn parse_ppid(stat: &str) -> Option<u32> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    #[test]
    fn ppid_survives_odd_names() {
        assert_eq!(parse_ppid("42 (sh) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parse_ppid("42 (a) b (c) R 9 42 42 0"), Some(9));
        assert_eq!(parse_ppid("42 (x"), None);
    }

    #[test]
    fn finds_children_and_grandchildren() {
        // sh -> sh -> sleep: both below the outer sh.
        let mut outer = Command::new("sh")
            .args(["-c", "sh -c 'sleep 5; exit 0' & wait; exit 0"])
            .spawn()
            .unwrap();
        let pid = outer.id();
        let mut found = Vec::new();
        for _ in 0..200 {
            found = descendants(pid).unwrap();
            if found.len() >= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        outer.kill().unwrap();
        for &p in &found {
            // SAFETY: plain kill of the test's own descendants.
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
        }
        outer.wait().unwrap();
        assert_eq!(found.len(), 2, "descendants of {pid}: {found:?}");
        assert!(process_exists(std::process::id()));
    }
}
