//! The HTML report (`--export NAME.html`) of a run, of a record and of a diff, opened in
//! headless Chromium as a person would: it renders its tables and figures, fetches nothing,
//! and its console stays silent.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use crate::support::{exitprof, require_root};

/// Chromium as the tests run it: headless, with a profile of its own, nothing fetched in the
/// background; its console's messages on stderr (`CONSOLE` lines).
fn chromium(profile: &Path, args: &[&str], page: &Path) -> (String, String) {
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap_or_else(|e| {
            panic!("chromium must be installed (cargo xtask test installs it): {e}")
        });
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "chromium {args:?} {}: {stderr}", page.display());
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// Opens `page` in Chromium: its DOM once rendered and a screenshot of it (`shot`); fails on
/// any message of its console, and on anything it would fetch.
fn open(dir: &Path, page: &Path, shot: &Path) -> String {
    let html = std::fs::read_to_string(page).unwrap();
    let sources = regex::Regex::new(r#"(?:src|href)="([^"]*)""#).unwrap();
    for source in sources.captures_iter(&html) {
        assert!(source[1].starts_with("data:"), "{} fetches {}", page.display(), &source[1]);
    }
    assert!(!html.contains("<link") && !html.contains("<script src"), "{}", page.display());
    let profile = dir.join("chromium-profile");
    let (dom, stderr) = chromium(&profile, &["--dump-dom"], page);
    let shot_arg = format!("--screenshot={}", shot.display());
    let (_, shot_stderr) = chromium(&profile, &["--window-size=1280,2400", &shot_arg], page);
    let console: Vec<&str> =
        stderr.lines().chain(shot_stderr.lines()).filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "{}: the console says:\n{}", page.display(), console.join("\n"));
    let size = std::fs::metadata(shot).map_or(0, |m| m.len());
    assert!(size > 20_000, "{}: a screenshot of {size} bytes", page.display());
    dom
}

/// How many times `needle` is in `haystack`.
fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn the_html_reports_of_a_run_a_record_and_a_diff_render_offline() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| -> PathBuf { dir.path().join(name) };
    let storm = ["--threads", "200", "--reps", "2"];
    let (rec_a, rec_b) = (path("a.rec"), path("b.rec"));
    for (rec, html) in [(&rec_a, Some(path("run.html"))), (&rec_b, None)] {
        let mut command = exitprof();
        command.args(["record", "-o"]).arg(rec).args(storm);
        if let Some(html) = &html {
            command.arg("--export").arg(html);
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "record: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out =
        exitprof().arg("report").arg(&rec_a).arg("--export").arg(path("report.html")).output();
    assert!(out.unwrap().status.success());
    let out = exitprof()
        .arg("diff")
        .args([&rec_a, &rec_b])
        .arg("--export")
        .arg(path("diff.html"))
        .output()
        .unwrap();
    assert!(out.status.success(), "diff: {}", String::from_utf8_lossy(&out.stderr));

    for page in ["run.html", "report.html"] {
        let dom = open(dir.path(), &path(page), &path(&format!("{page}.png")));
        // The stage table (the whole exit and its stages), the figure, the flame graph.
        assert!(dom.contains("<td>exit</td>") && count(&dom, "<tr>") >= 4, "{page}: {dom}");
        assert!(dom.contains("verdict:"), "{page}");
        assert_eq!((count(&dom, "<img"), count(&dom, "<iframe")), (1, 1), "{page}");
    }
    let dom = open(dir.path(), &path("diff.html"), &path("diff.png"));
    assert!(dom.contains("<td>exit</td>") && dom.contains("verdict:"), "{dom}");
    assert_eq!((count(&dom, "<img"), count(&dom, "<iframe")), (1, 1), "{dom}");
    // The same report from the run and from its record: the same verdict.
    let verdict = |page: &str| -> String {
        let html = std::fs::read_to_string(path(page)).unwrap();
        let at = html.find("<p class=\"verdict\">").expect("a verdict");
        html[at..at + html[at..].find("</p>").unwrap()].to_owned()
    };
    assert_eq!(verdict("run.html"), verdict("report.html"));
}
