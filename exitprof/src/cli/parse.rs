//! The parsers of the options' values clap has none for.

use std::{fmt::Display, time::Duration};

use clap::error::ErrorKind;

/// A value the command line cannot take, as a usage error; `main.rs` formats it with the
/// command line's usage (`clap::Error::format`), as `Cli::command().error` would.
pub(super) fn usage(why: impl Display) -> clap::Error {
    clap::Error::raw(ErrorKind::ValueValidation, why)
}

pub(super) fn parse_ringbuf_size(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if n < 4096 || !n.is_power_of_two() {
        return Err(format!("{n} is not a power of two of at least 4096"));
    }
    Ok(n)
}

pub(super) fn parse_exit_slots(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|e| format!("{e}"))?;
    if !n.is_power_of_two() || n > 1 << 20 {
        return Err(format!("{n} is not a power of two of at most 2^20"));
    }
    Ok(n)
}

/// Permissions in octal (`600`, `0640`, `0o644`).
pub(super) fn parse_file_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    u32::from_str_radix(digits, 8)
        .ok()
        .filter(|&mode| mode <= 0o777)
        .ok_or_else(|| format!("{s} is not a file mode in octal, from 0 to 777 (e.g. 600, 644)"))
}

pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(format!("{s} is not a positive number of seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{e}"))
}

/// A time with its unit (`ns`, `us`, `ms`, `s`, `m`, `h`), or a number of seconds.
pub(super) fn parse_time(s: &str) -> Result<Duration, String> {
    let units = [
        ("ns", 1e-9),
        ("us", 1e-6),
        ("µs", 1e-6),
        ("ms", 0.001),
        ("s", 1.0),
        ("m", 60.0),
        ("h", 3600.0),
    ];
    let (number, unit_s) = units
        .iter()
        .find_map(|&(unit, unit_s)| s.strip_suffix(unit).map(|n| (n, unit_s)))
        .unwrap_or((s, 1.0));
    let n: f64 = number.parse().map_err(|_| {
        format!("{s} is not a time: seconds, or a number with its unit (50ms, 90s, 10m, 1h)")
    })?;
    let secs = n * unit_s;
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(format!("{s} is not a positive time"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{e}"))
}

/// The kernel keeps 15 bytes of a task's name (TASK_COMM_LEN is 16 with the NUL).
pub const COMM_MAX: usize = 15;

pub(super) fn parse_comm(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > COMM_MAX || s.contains('\0') {
        return Err(format!(
            "{s:?} cannot be a task name: the kernel keeps 1 to {COMM_MAX} bytes without NUL"
        ));
    }
    Ok(s.to_owned())
}
