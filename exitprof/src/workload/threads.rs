//! The 2006 taskstats thread's storm: N threads x reps; thread i sleeps `(N-i)*stagger` us, then
//! exits; every rep creates all its threads, then joins them all. Raw pthreads, as the seed.

use std::{io, ptr};

use crate::cli::ThreadsParams;

extern "C" fn sleep_then_exit(sleep_us: *mut libc::c_void) -> *mut libc::c_void {
    let sleep_us = sleep_us as usize;
    if sleep_us > 0 {
        // SAFETY: plain libc call. A u32 product never overflows useconds_t on 64-bit targets
        // because the CLI bounds both factors to u32.
        unsafe { libc::usleep(sleep_us as libc::useconds_t) };
    }
    ptr::null_mut()
}

/// Runs the storm in the calling process; returns the number of threads that exited.
pub fn run(params: ThreadsParams) -> io::Result<u64> {
    let ThreadsParams { threads, reps, stagger_us } = params;
    let n = threads as usize;
    let mut handles: Vec<libc::pthread_t> = Vec::with_capacity(n);
    let mut exited = 0;
    for _ in 0..reps {
        handles.clear();
        let mut create_error = None;
        for i in 0..n {
            let sleep_us = (n - i) * stagger_us as usize;
            let mut handle: libc::pthread_t = 0;
            // SAFETY: `sleep_then_exit` takes its argument by value (an integer in a pointer)
            // and the default attributes are used.
            let rc = unsafe {
                libc::pthread_create(&mut handle, ptr::null(), sleep_then_exit, sleep_us as *mut _)
            };
            if rc != 0 {
                create_error = Some(io::Error::from_raw_os_error(rc));
                break;
            }
            handles.push(handle);
        }
        for &handle in &handles {
            // SAFETY: every handle comes from a successful pthread_create and is joined once.
            let rc = unsafe { libc::pthread_join(handle, ptr::null_mut()) };
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            exited += 1;
        }
        if let Some(err) = create_error {
            return Err(io::Error::new(
                err.kind(),
                format!("pthread_create failed after {} threads of this rep: {err}", handles.len()),
            ));
        }
    }
    Ok(exited)
}
