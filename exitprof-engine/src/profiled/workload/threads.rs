//! The storm of the 2006 LKML benchmark of taskstats' cost per exit: N threads x reps; thread i
//! sleeps `(N-i)*stagger`, then exits; every rep creates all its threads, then joins them all.
//! Raw pthreads with glibc's default attributes, as that benchmark's program, whichever libc
//! this binary has (see [`default_stack`](super::default_stack)): `std::thread` costs more per thread (an alternate signal
//! stack mapped for every thread, and its bookkeeping), which would be charged to the storm.

use std::{
    io,
    mem::MaybeUninit,
    ptr,
    time::{Duration, Instant},
};

use super::{DriverReport, default_stack::DefaultStackAttributes, pacer::Pacer};
use crate::profiled::ThreadsParams;

extern "C" fn sleep_then_exit(sleep_ns: *mut libc::c_void) -> *mut libc::c_void {
    let ns = sleep_ns as u64;
    let ts = libc::timespec {
        // time_t's width is libc's (musl's alias is deprecated: it will change).
        tv_sec: (ns / 1_000_000_000) as _,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: a valid timespec; no remainder wanted. Like the benchmark's usleep, it sleeps even for
    // zero (usleep(0) is a nanosleep system call too) and ignores interruptions.
    unsafe { libc::nanosleep(&raw const ts, ptr::null_mut()) };
    ptr::null_mut()
}

/// Runs the storm in the calling process.
pub fn run(params: ThreadsParams) -> io::Result<DriverReport> {
    let ThreadsParams { threads, reps, stagger_us, rate } = params;
    let mut report = DriverReport::default();
    let mut handles = Vec::with_capacity(threads as usize);
    let attributes = DefaultStackAttributes::new()?;
    let Some(rate) = rate else {
        let stagger_ns = u64::from(stagger_us) * 1000;
        for _ in 0..reps {
            rep(threads, stagger_ns, &attributes, &mut handles, &mut report)?;
        }
        return Ok(report);
    };
    let mut pacer = Pacer::new(threads, reps, rate);
    for _ in 0..reps {
        let stagger_ns = pacer.next_stagger_ns();
        let started = Instant::now();
        rep(threads, stagger_ns, &attributes, &mut handles, &mut report)?;
        pacer.rep_done(stagger_ns, started.elapsed());
        report.staggers_ns.push(stagger_ns);
    }
    Ok(report)
}

/// How fast this machine runs one rep of `threads` threads with no sleep: the ceiling of any
/// `--rate` (without probes; probes only lower it). Exits per second.
pub fn burst_rate(threads: u32) -> io::Result<f64> {
    let mut handles = Vec::with_capacity(threads as usize);
    let started = Instant::now();
    rep(threads, 0, &DefaultStackAttributes::new()?, &mut handles, &mut DriverReport::default())?;
    Ok(f64::from(threads) / started.elapsed().max(Duration::from_nanos(1)).as_secs_f64())
}

/// One rep: creates every thread, then joins them all.
fn rep(
    threads: u32,
    stagger_ns: u64,
    attributes: &DefaultStackAttributes,
    handles: &mut Vec<libc::pthread_t>,
    report: &mut DriverReport,
) -> io::Result<()> {
    handles.clear();
    let mut create_error = None;
    for i in 0..threads {
        let sleep_ns = u64::from(threads - i).saturating_mul(stagger_ns);
        // An integer with glibc, a pointer with musl: written by pthread_create.
        let mut handle = MaybeUninit::<libc::pthread_t>::uninit();
        // SAFETY: `sleep_then_exit` takes its argument by value (an integer in a pointer) and
        // the attributes are initialised.
        let rc = unsafe {
            libc::pthread_create(
                handle.as_mut_ptr(),
                attributes.as_ptr(),
                sleep_then_exit,
                sleep_ns as *mut _,
            )
        };
        if rc != 0 {
            create_error = Some(io::Error::from_raw_os_error(rc));
            break;
        }
        // SAFETY: pthread_create succeeded, so it wrote the handle.
        handles.push(unsafe { handle.assume_init() });
        report.created += 1;
    }
    for &handle in handles.iter() {
        // SAFETY: every handle comes from a successful pthread_create and is joined once.
        let rc = unsafe { libc::pthread_join(handle, ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        report.exited += 1;
    }
    match create_error {
        Some(err) => Err(io::Error::new(
            err.kind(),
            format!("pthread_create failed after {} threads of this rep: {err}", handles.len()),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_thread_is_created_and_joined() {
        let params = ThreadsParams { threads: 20, reps: 3, stagger_us: 1, rate: None };
        let report = run(params).unwrap();
        assert_eq!((report.created, report.exited), (60, 60));
        assert!(report.staggers_ns.is_empty());
    }

    #[test]
    fn a_paced_storm_records_its_staggers() {
        let params = ThreadsParams { threads: 10, reps: 3, stagger_us: 0, rate: Some(10_000) };
        let report = run(params).unwrap();
        assert_eq!(report.exited, 30);
        assert_eq!(report.staggers_ns.len(), 3);
        assert_eq!(report.staggers_ns[0], 100_000, "first rep: 1/rate per thread");
    }
}
