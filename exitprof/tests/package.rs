//! The Debian package `cargo xtask dist` builds, as a user without Rust gets it: installed with
//! `dpkg -i`, exitprof run from PATH, the service installed but not enabled, then removed.

use std::{path::PathBuf, process::Command};

use crate::support::{num, require_root};

/// Where dpkg puts the unit; `systemctl enable` would link it from a `*.wants` folder here.
const UNIT: &str = "/usr/lib/systemd/system/exitprof.service";
const ENABLED_LINKS: &str = "/etc/systemd/system";
/// PATH of a root shell on Debian: what `sudo exitprof` searches.
const ROOT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The package is removed when this is dropped, whether the test passed or not.
struct Installed;

impl Installed {
    fn install(deb: &PathBuf) -> Self {
        assert!(
            !dpkg_query_installed(),
            "the package exitprof is already installed on this machine; this test would remove \
             it afterwards: remove it first (`dpkg -r exitprof`)"
        );
        let out = Command::new("dpkg").arg("-i").arg(deb).output().expect("dpkg starts");
        // From here on, a partly installed package is removed too.
        let installed = Self;
        assert!(
            out.status.success(),
            "dpkg -i {} failed ({}):\n{}{}",
            deb.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        installed
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        match Command::new("dpkg").args(["-r", "exitprof"]).output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "dpkg -r exitprof failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => eprintln!("dpkg -r exitprof did not start: {e}"),
        }
    }
}

fn dpkg_query_installed() -> bool {
    Command::new("dpkg-query")
        .args(["--show", "--showformat=${Status}", "exitprof"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout) == "install ok installed")
}

#[test]
fn the_debian_package_installs_a_working_exitprof_and_a_disabled_service() {
    require_root();
    let deb = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/dist")
        .join(format!("exitprof_{}_amd64.deb", env!("CARGO_PKG_VERSION")));
    assert!(deb.is_file(), "{} is missing: build it with `cargo xtask dist`", deb.display());

    let installed = Installed::install(&deb);
    assert!(dpkg_query_installed(), "dpkg -i succeeded, but dpkg-query does not list exitprof");

    let out = Command::new("exitprof")
        .args(["--workload", "threads", "--threads", "100", "--reps", "2", "--json"])
        .env("PATH", ROOT_PATH)
        .output()
        .expect("exitprof is on PATH after dpkg -i");
    assert!(
        out.status.success(),
        "the installed exitprof failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        let stdout = String::from_utf8_lossy(&out.stdout);
        panic!("the installed exitprof printed no JSON document ({e}):\n{stdout}")
    });
    let (expected, recorded, lost) =
        (num(&doc, "exits_expected"), num(&doc, "exits_recorded"), num(&doc, "lost"));
    eprintln!("installed exitprof: {recorded} recorded of {expected} expected, {lost} lost");
    assert_eq!(expected, 200.0, "100 threads x 2 reps");
    assert_eq!(recorded + lost, expected, "recorded {recorded} + lost {lost} != {expected}");
    assert!(recorded > 0.0, "the installed exitprof recorded no exit");

    let unit = std::fs::read_to_string(UNIT)
        .unwrap_or_else(|e| panic!("the package installed no unit at {UNIT}: {e}"));
    assert!(
        unit.contains("ExecStart=/usr/bin/exitprof serve"),
        "{UNIT} does not run serve:\n{unit}"
    );
    let links: Vec<PathBuf> = std::fs::read_dir(ENABLED_LINKS)
        .into_iter()
        .flatten()
        .filter_map(|dir| Some(dir.ok()?.path().join("exitprof.service")))
        .filter(|link| link.symlink_metadata().is_ok())
        .collect();
    assert!(links.is_empty(), "installing the package enabled the service: {links:?}");
    drop(installed);
    assert!(!dpkg_query_installed(), "dpkg -r left exitprof installed");
    assert!(!std::path::Path::new("/usr/bin/exitprof").exists(), "dpkg -r left /usr/bin/exitprof");
}
