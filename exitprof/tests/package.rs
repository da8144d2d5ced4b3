//! The Debian packages `cargo xtask dist` builds, as a user without Rust gets them: this
//! machine's installed with `dpkg -i`, exitprof run from PATH, its manual pages and completions
//! where Debian looks for them, the service installed but not enabled, then removed; and both
//! architectures' checked by lintian, Debian's own package checker.

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

/// Debian's names of the architectures `cargo xtask dist` builds a package for.
const ARCHITECTURES: [&str; 2] = ["amd64", "arm64"];

/// The package of Debian's architecture `arch`, which `cargo xtask dist` built.
fn package(arch: &str) -> PathBuf {
    let deb = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/dist")
        .join(format!("exitprof_{}_{arch}.deb", env!("CARGO_PKG_VERSION")));
    assert!(deb.is_file(), "{} is missing: build it with `cargo xtask dist`", deb.display());
    deb
}

/// Debian's name of this machine's architecture.
fn this_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("exitprof has no package for {other}"),
    }
}

/// Where Debian finds a command's manual pages and its completions in each shell.
const MANUALS: [&str; 5] = [
    "/usr/share/man/man1/exitprof.1.gz",
    "/usr/share/man/man1/exitprof-record.1.gz",
    "/usr/share/bash-completion/completions/exitprof",
    "/usr/share/zsh/vendor-completions/_exitprof",
    "/usr/share/fish/vendor_completions.d/exitprof.fish",
];

#[test]
fn the_debian_package_installs_a_working_exitprof_and_a_disabled_service() {
    require_root();
    let deb = package(this_architecture());

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
    for file in MANUALS {
        assert!(std::path::Path::new(file).is_file(), "the package installed no {file}");
    }
    // man reads the page of a subcommand as a user asks for it.
    let man = Command::new("man")
        .args(["--warnings", "-P", "cat", "exitprof-record"])
        .env("MANWIDTH", "100")
        .output()
        .expect("man starts (package man-db)");
    let page = String::from_utf8_lossy(&man.stdout);
    assert!(
        man.status.success() && page.contains("--output") && man.stderr.is_empty(),
        "man exitprof-record ({}):\n{page}{}",
        man.status,
        String::from_utf8_lossy(&man.stderr)
    );
    // bash completes a subcommand from the installed completions.
    let completed = Command::new("bash")
        .args([
            "-c",
            "source /usr/share/bash-completion/completions/exitprof; \
                COMP_WORDS=(exitprof rec); COMP_CWORD=1; _exitprof exitprof rec exitprof; \
                echo \"${COMPREPLY[*]}\"",
        ])
        .output()
        .expect("bash starts");
    let words = String::from_utf8_lossy(&completed.stdout);
    assert_eq!(words.trim(), "record", "bash completed `exitprof rec` to {words:?}");
    drop(installed);
    assert!(!dpkg_query_installed(), "dpkg -r left exitprof installed");
    assert!(!std::path::Path::new("/usr/bin/exitprof").exists(), "dpkg -r left /usr/bin/exitprof");
}

#[test]
fn lintian_finds_no_error_in_either_package() {
    for arch in ARCHITECTURES {
        let deb = package(arch);
        let out = Command::new("lintian")
            .args(["--fail-on", "error", "--display-info"])
            .arg(&deb)
            .output()
            .expect("lintian starts (package lintian)");
        let said = String::from_utf8_lossy(&out.stdout);
        eprintln!("lintian {}:\n{said}", deb.display());
        assert!(
            out.status.success() && !said.lines().any(|l| l.starts_with("E:")),
            "lintian finds errors in {} ({}):\n{said}{}",
            deb.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
