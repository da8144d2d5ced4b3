//! What a record file can carry that a run of this exitprof never wrote, read back by `exitprof
//! report`: an exit's hit in the future and an off-CPU time gone below zero, counters at their
//! largest, records of stacks and deferred work that do not decode, a header whose version
//! does not match the body. Each is reported as what it is, or refused with a clear error: a
//! share of the exit above 100 %, a panic or "0 recorded, 8 lost" never.

use std::{
    io::{Read as _, Write as _},
    mem::{offset_of, size_of},
    path::Path,
    process::Output,
};

use exitprof_common::record::{ExitRecord, Hit};
use flate2::{Compression, read::GzDecoder, write::GzEncoder};
use serde_json::Value;

use crate::support::{exitprof, num, require_root};

const MAGIC_LEN: usize = 16;

/// Frame kinds of the format (docs/reference/exports.md).
const DEFERRED: u8 = 3;
const STACK: u8 = 4;
const EXIT: u8 = 2;
const CLOSING: u8 = 5;

/// A record file's header version and its frames, as (kind, payload).
fn read_record(path: &Path) -> (u32, Vec<(u8, Vec<u8>)>) {
    let bytes = std::fs::read(path).unwrap();
    let version = u32::from_le_bytes(bytes[MAGIC_LEN..MAGIC_LEN + 4].try_into().unwrap());
    let mut body = Vec::new();
    GzDecoder::new(&bytes[MAGIC_LEN + 4..]).read_to_end(&mut body).unwrap();
    let mut frames = Vec::new();
    let mut at = 0;
    while at < body.len() {
        let len = u32::from_le_bytes(body[at + 1..at + 5].try_into().unwrap()) as usize;
        frames.push((body[at], body[at + 5..at + 5 + len].to_vec()));
        at += 5 + len;
    }
    (version, frames)
}

/// A record of a storm of 8 threads, in this exitprof's format: its header's version and its
/// frames.
fn recorded() -> (u32, Vec<(u8, Vec<u8>)>) {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threads-8.rec");
    let out = exitprof()
        .args(["record", "-o"])
        .arg(&path)
        .args(["--threads", "8", "--reps", "1", "--json"])
        .output()
        .expect("exitprof starts");
    let doc = document(&out);
    assert_eq!((num(&doc, "exits_recorded"), num(&doc, "lost")), (8.0, 0.0), "{}", doc["losses"]);
    read_record(&path)
}

/// Writes a record file of `frames`, its header saying `version`.
fn write_record(path: &Path, version: u32, frames: &[(u8, Vec<u8>)]) {
    let mut file = b"exitprof record\n".to_vec();
    file.extend_from_slice(&version.to_le_bytes());
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    for (kind, payload) in frames {
        gz.write_all(&[*kind]).unwrap();
        gz.write_all(&u32::try_from(payload.len()).unwrap().to_le_bytes()).unwrap();
        gz.write_all(payload).unwrap();
    }
    file.extend(gz.finish().unwrap());
    std::fs::write(path, file).unwrap();
}

/// `exitprof report --json` of the record `frames` make (with `version` in its header).
fn report(version: u32, frames: &[(u8, Vec<u8>)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("changed.rec");
    write_record(&path, version, frames);
    exitprof().args(["report", "--json"]).arg(&path).output().expect("exitprof starts")
}

fn document(out: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "status {}; stderr:\n{stderr}", out.status);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("no JSON ({e}):\n{stderr}"))
}

/// Sets a `u64` of a raw exit record.
fn set_u64(record: &mut [u8], at: usize, value: u64) {
    record[at..at + 8].copy_from_slice(&value.to_ne_bytes());
}

/// An exit whose middle hit lies far past its end, and whose off-CPU time at its end went
/// below zero (2^64 ns less a few, as an interval's end read behind its start on another CPU
/// once made it): no stage holds more than the exit, nor is off its CPU longer than it lasted.
#[test]
fn a_hit_in_the_future_and_a_wrapped_off_cpu_time_hold_no_more_than_the_exit() {
    let (version, mut frames) = recorded();
    let (_, exit) = frames.iter_mut().find(|(kind, _)| *kind == EXIT).expect("an exit record");
    let n_hits = u32::from_ne_bytes(exit[offset_of!(ExitRecord, n_hits)..][..4].try_into().unwrap())
        as usize;
    assert!(n_hits >= 3, "{n_hits} hits");
    let hit = |i: usize| offset_of!(ExitRecord, hits) + i * size_of::<Hit>();
    let end = u64::from_ne_bytes(exit[hit(n_hits - 1)..][..8].try_into().unwrap());
    set_u64(exit, hit(n_hits / 2) + offset_of!(Hit, ts_ns), end + 600_000_000_000_000);
    set_u64(exit, hit(n_hits - 1) + offset_of!(Hit, off_cpu_ns), u64::MAX - 3);
    let doc = document(&report(version, &frames));
    let stages = doc["stages"].as_array().unwrap();
    let whole = num(&stages[0], "total_ns");
    let parts: f64 = stages[1..].iter().map(|s| num(s, "total_ns")).sum();
    assert_eq!(parts, whole, "the stages do not sum to the exit");
    for stage in stages {
        let (share, off) = (num(stage, "share_of_exit"), num(stage, "off_cpu_share"));
        assert!(
            share <= 1.0 && off <= 1.0,
            "{}: {share} of the exit, {off} off-CPU",
            stage["name"]
        );
    }
    // The verdict's shares ("... holds 58% of the exit time ...").
    let verdict = doc["verdict"].as_str().unwrap();
    for part in verdict.split('%').filter(|p| p.ends_with(|c: char| c.is_ascii_digit())) {
        let digits = part.rsplit(|c: char| !c.is_ascii_digit()).next().unwrap();
        assert!(digits.parse::<u64>().unwrap() <= 100, "{verdict}");
    }
    assert_eq!(num(&doc["diagnostics"], "clamped_exits"), 1.0, "{}", doc["diagnostics"]);
}

/// Counters at their largest: the sum of the exits lost is at its largest too, not a wrap (a
/// panic in a debug build).
#[test]
fn counters_at_their_largest_do_not_wrap_the_exits_lost() {
    let (version, mut frames) = recorded();
    let (_, closing) = frames.iter_mut().find(|(kind, _)| *kind == CLOSING).unwrap();
    let mut json: Value = serde_json::from_slice(closing).unwrap();
    for cause in ["ringbuf_full", "state_map_full"] {
        json["kernel_losses"][cause] = Value::from(u64::MAX);
    }
    *closing = serde_json::to_vec(&json).unwrap();
    let doc = document(&report(version, &frames));
    assert_eq!(doc["lost"].as_u64(), Some(u64::MAX), "{}", doc["losses"]);
}

/// A kernel stack and a deferred-work record that do not decode are parts lost, counted apart:
/// no exit is lost for them.
#[test]
fn undecodable_stacks_and_deferred_work_lose_no_exit() {
    let (version, mut frames) = recorded();
    let before = document(&report(version, &frames));
    assert_eq!(num(&before, "lost"), 0.0);
    let closing = frames.pop().unwrap();
    frames.push((STACK, vec![7; 7]));
    frames.push((DEFERRED, vec![3; 5]));
    frames.push(closing);
    let doc = document(&report(version, &frames));
    let losses = &doc["losses"];
    assert_eq!(num(&doc, "lost"), 0.0, "{losses}");
    assert_eq!(num(&doc, "exits_recorded"), num(&before, "exits_recorded"));
    assert_eq!(
        (num(losses, "undecodable_stacks"), num(losses, "undecodable_deferred")),
        (1.0, 1.0)
    );
}

/// The version field lies outside the compressed stream's checksum: changed, the body is read
/// in another format, and its exit records do not decode. Refused, with what is wrong.
#[test]
fn a_header_version_that_does_not_match_the_body_is_refused() {
    let (version, frames) = recorded();
    assert_eq!(version, 3);
    let out = report(1, &frames);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("8 of its 8 exit records do not decode as record format 1"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "a report was printed");
}
