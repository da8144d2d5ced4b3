//! tracefs: mounted on demand, since many machines boot without it.

use std::{io, path::Path};

/// Where exitprof mounts tracefs when no one has.
const TRACEFS: &str = "/sys/kernel/tracing";
/// The older location, under debugfs.
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// The tracefs root; mounts tracefs at `/sys/kernel/tracing` when it is not mounted anywhere.
pub fn ensure_mounted() -> io::Result<&'static Path> {
    for root in [TRACEFS, DEBUGFS_TRACING] {
        if Path::new(root).join("events").is_dir() {
            return Ok(Path::new(root));
        }
    }
    let target = c"/sys/kernel/tracing";
    // SAFETY: NUL-terminated constant strings; no mount data.
    let rc = unsafe {
        libc::mount(c"nodev".as_ptr(), target.as_ptr(), c"tracefs".as_ptr(), 0, std::ptr::null())
    };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("tracefs is not mounted and mounting it at {TRACEFS} failed: {err}"),
        ));
    }
    log::debug!("mounted tracefs at {TRACEFS}");
    Ok(Path::new(TRACEFS))
}
