//! The `taskstats-listener` condition: exitprof registers a taskstats listener for every CPU and
//! drains it on a thread of its own, reading and counting but writing nothing, as `exit_recv -w`
//! did in the 2006 taskstats thread. With a listener registered, every exit makes the kernel
//! build and send a message (Documentation/accounting/taskstats.rst): that is the cost compared.

mod protocol;

use std::{
    collections::BTreeMap,
    fs, io,
    os::fd::AsRawFd as _,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use netlink_packet_core::{DecodeError, NetlinkPayload};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_GENERIC};
use serde::Serialize;

use self::protocol::{CpumaskOp, ExitEvent};

/// The CPUs the kernel may ever run tasks on, as a cpulist ("0-3"): registering for all of
/// them catches every exit, and the kernel rejects CPUs outside this set.
const POSSIBLE_CPUS: &str = "/sys/devices/system/cpu/possible";
const RMEM_MAX: &str = "/proc/sys/net/core/rmem_max";

/// How long one blocking read waits before the drain thread checks whether it should stop.
const RECV_TIMEOUT: Duration = Duration::from_millis(100);
/// How long to wait for the kernel to answer a request.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Room for any one datagram: a taskstats message is under 1 KiB.
const DATAGRAM_BYTES: usize = 32 << 10;

const FAMILY_SEQ: u32 = 1;
const REGISTER_SEQ: u32 = 2;
const DEREGISTER_SEQ: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum ListenerError {
    #[error("{what}: {error}")]
    Io { what: &'static str, error: io::Error },
    #[error("this kernel has no taskstats generic netlink family (is CONFIG_TASKSTATS on?): {0}")]
    NoFamily(io::Error),
    #[error(
        "the kernel refused to {op} the taskstats listener for CPUs {cpumask}: {error} (it \
         needs CAP_NET_ADMIN)"
    )]
    Refused { op: &'static str, cpumask: String, error: io::Error },
    #[error(
        "--rcvbuf {requested} is above net.core.rmem_max ({rmem_max}) and SO_RCVBUFFORCE was \
         refused: {error} (it needs CAP_NET_ADMIN; or raise net.core.rmem_max)"
    )]
    RcvbufAboveMax { requested: u32, rmem_max: u64, error: io::Error },
    #[error("an undecodable reply from the kernel to the taskstats {what}: {error}")]
    Undecodable { what: &'static str, error: DecodeError },
    #[error("no answer from the kernel to the taskstats {0} within {REPLY_TIMEOUT:?}")]
    NoReply(&'static str),
    #[error("the taskstats drain thread panicked")]
    DrainPanicked,
}

fn io_error(what: &'static str) -> impl FnOnce(io::Error) -> ListenerError {
    move |error| ListenerError::Io { what, error }
}

/// What the listener received, from registration to deregistration.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ListenerCounts {
    /// Messages: one per exiting task, each carrying the task's record (TASKSTATS_TYPE_AGGR_PID).
    pub messages: u64,
    /// Thread-group records among them (TASKSTATS_TYPE_AGGR_TGID): the kernel adds one to the
    /// message of the last task of a multi-threaded process.
    pub group_records: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Reads that failed with ENOBUFS: the socket's receive buffer was full and the kernel
    /// dropped messages. One report covers every drop since the previous read, so this counts
    /// overflows, not lost messages (compare `by_tgid` with the exits a workload made for that).
    pub enobufs: u64,
    /// Undecodable messages and error replies from the kernel; each is logged as a warning.
    pub errors: u64,
    /// The receive buffer the kernel granted, in bytes (SO_RCVBUF read back: the kernel doubles
    /// what was asked, for its bookkeeping).
    pub rcvbuf: usize,
    /// Per thread group (`ac_tgid`, kernels with struct taskstats v12 or later).
    pub by_tgid: BTreeMap<u32, GroupCounts>,
}

/// The messages about one thread group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GroupCounts {
    /// Its tasks' exit messages (every thread, the main one included).
    pub tasks: u64,
    /// Its thread-group records.
    pub group_records: u64,
}

/// A registered listener and the thread draining it.
pub struct Listener {
    socket: Arc<Socket>,
    family: u16,
    cpumask: String,
    stop: Arc<AtomicBool>,
    drain: JoinHandle<Result<ListenerCounts, ListenerError>>,
}

impl Listener {
    /// Registers a listener for every possible CPU and starts draining it. `rcvbuf` sets the
    /// socket's receive buffer (SO_RCVBUF, or SO_RCVBUFFORCE above net.core.rmem_max).
    pub fn start(rcvbuf: Option<u32>) -> Result<Self, ListenerError> {
        let mut socket =
            Socket::new(NETLINK_GENERIC).map_err(io_error("creating a generic netlink socket"))?;
        socket.bind_auto().map_err(io_error("binding the netlink socket"))?;
        socket.connect(&SocketAddr::new(0, 0)).map_err(io_error("connecting to the kernel"))?;
        if let Some(bytes) = rcvbuf {
            set_rcvbuf(&socket, bytes)?;
        }
        set_recv_timeout(&socket, RECV_TIMEOUT)
            .map_err(io_error("setting the netlink socket's receive timeout"))?;
        let mut counts = ListenerCounts {
            rcvbuf: socket.get_rx_buf_sz().map_err(io_error("reading SO_RCVBUF"))?,
            ..ListenerCounts::default()
        };
        let family = resolve_family(&socket)?;
        let cpumask = fs::read_to_string(POSSIBLE_CPUS)
            .map_err(io_error("reading the possible CPUs (/sys/devices/system/cpu/possible)"))?
            .trim()
            .to_owned();

        let request =
            protocol::cpumask_request(family, CpumaskOp::Register, &cpumask, REGISTER_SEQ);
        socket.send(&request, 0).map_err(io_error("sending the taskstats registration"))?;
        await_registration(&socket, family, &mut counts)?.map_err(|error| {
            ListenerError::Refused { op: "register", cpumask: cpumask.clone(), error }
        })?;

        let socket = Arc::new(socket);
        let stop = Arc::new(AtomicBool::new(false));
        let drain = std::thread::Builder::new()
            .name("taskstats-drain".into())
            .spawn({
                let (socket, stop) = (Arc::clone(&socket), Arc::clone(&stop));
                move || drain(&socket, family, &stop, counts)
            })
            .map_err(io_error("starting the taskstats drain thread"))?;
        Ok(Listener { socket, family, cpumask, stop, drain })
    }

    /// Deregisters the listener, reads what is still queued, stops the drain thread, and
    /// returns everything it counted.
    pub fn stop(self) -> Result<ListenerCounts, ListenerError> {
        let request = protocol::cpumask_request(
            self.family,
            CpumaskOp::Deregister,
            &self.cpumask,
            DEREGISTER_SEQ,
        );
        // The kernel deregisters within send(): every message sent to us is queued when it
        // returns, and the drain thread reads the queue empty before it ends.
        let deregistered = self.socket.send(&request, 0);
        self.stop.store(true, Ordering::Release);
        let counts = self.drain.join().map_err(|_| ListenerError::DrainPanicked)??;
        deregistered.map_err(io_error("sending the taskstats deregistration"))?;
        Ok(counts)
    }
}

/// Looks up the id the kernel gave the TASKSTATS family.
fn resolve_family(socket: &Socket) -> Result<u16, ListenerError> {
    socket
        .send(&protocol::family_request(FAMILY_SEQ), 0)
        .map_err(io_error("asking nlctrl for the TASKSTATS family"))?;
    let mut buf = Vec::with_capacity(DATAGRAM_BYTES);
    let deadline = Instant::now() + REPLY_TIMEOUT;
    while Instant::now() < deadline {
        if read(socket, &mut buf, 0).map_err(io_error("reading the nlctrl reply"))?.is_some() {
            return protocol::family_reply(&buf)
                .map_err(|error| ListenerError::Undecodable { what: "family lookup", error })?
                .map_err(ListenerError::NoFamily);
        }
    }
    Err(ListenerError::NoReply("family lookup"))
}

/// Reads until the kernel answers the registration; returns its answer. Exits on other CPUs
/// may be queued ahead of it: they are counted.
fn await_registration(
    socket: &Socket,
    family: u16,
    counts: &mut ListenerCounts,
) -> Result<io::Result<()>, ListenerError> {
    let mut buf = Vec::with_capacity(DATAGRAM_BYTES);
    let deadline = Instant::now() + REPLY_TIMEOUT;
    while Instant::now() < deadline {
        match read(socket, &mut buf, 0) {
            Ok(Some(_)) => {
                if let Some(ack) = counts.take(&buf, family)
                    && ack.seq == REGISTER_SEQ
                {
                    return Ok(ack.result);
                }
            }
            Ok(None) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => counts.enobufs += 1,
            Err(error) => {
                return Err(ListenerError::Io { what: "reading from the listener", error });
            }
        }
    }
    Err(ListenerError::NoReply("registration"))
}

/// The drain thread: reads and counts until told to stop, then reads the queue empty.
fn drain(
    socket: &Socket,
    family: u16,
    stop: &AtomicBool,
    mut counts: ListenerCounts,
) -> Result<ListenerCounts, ListenerError> {
    let mut buf = Vec::with_capacity(DATAGRAM_BYTES);
    loop {
        let stopping = stop.load(Ordering::Acquire);
        match read(socket, &mut buf, if stopping { libc::MSG_DONTWAIT } else { 0 }) {
            Ok(Some(_)) => {
                if let Some(Ack { seq, result: Err(e) }) = counts.take(&buf, family) {
                    counts.errors += 1;
                    log::warn!("taskstats: the kernel answered request {seq} with an error: {e}");
                }
            }
            Ok(None) if stopping => return Ok(counts),
            Ok(None) => {}
            // The kernel dropped messages for want of buffer space; the socket goes on.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => counts.enobufs += 1,
            Err(error) => {
                return Err(ListenerError::Io { what: "reading from the listener", error });
            }
        }
    }
}

/// Reads one datagram into `buf`; `None` when nothing came within the receive timeout (or,
/// with MSG_DONTWAIT, nothing is queued).
fn read(socket: &Socket, buf: &mut Vec<u8>, flags: libc::c_int) -> io::Result<Option<usize>> {
    loop {
        buf.clear();
        match socket.recv(buf, flags | libc::MSG_TRUNC) {
            // With MSG_TRUNC, recv returns the datagram's real length even when it was cut.
            Ok(len) if len > buf.capacity() => {
                return Err(io::Error::other(format!("a {len}-byte datagram did not fit")));
            }
            Ok(len) => return Ok(Some(len)),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// The kernel's answer to one of our requests.
struct Ack {
    seq: u32,
    result: io::Result<()>,
}

impl ListenerCounts {
    /// Counts one datagram's messages. Returns the acknowledgement it carried, if any: the
    /// kernel sends each in a datagram of its own.
    fn take(&mut self, datagram: &[u8], family: u16) -> Option<Ack> {
        self.bytes += datagram.len() as u64;
        let mut ack = None;
        for msg in protocol::messages(datagram) {
            let msg = match msg {
                Ok(msg) => msg,
                Err(e) => {
                    self.errors += 1;
                    log::warn!("taskstats: an undecodable message: {e}");
                    continue;
                }
            };
            let seq = msg.header.sequence_number;
            match msg.payload {
                NetlinkPayload::InnerMessage(genl) if genl.resolved_family_id() == family => {
                    self.count(genl.payload);
                }
                NetlinkPayload::Error(e) => {
                    let result = if e.code.is_some() { Err(e.to_io()) } else { Ok(()) };
                    ack = Some(Ack { seq, result });
                }
                other => {
                    self.errors += 1;
                    log::warn!("taskstats: an unexpected message: {other:?}");
                }
            }
        }
        ack
    }

    fn count(&mut self, exit: ExitEvent) {
        self.messages += 1;
        if let Some(tgid) = exit.tgid {
            self.by_tgid.entry(tgid).or_default().tasks += 1;
        }
        if let Some(group) = exit.group {
            self.group_records += 1;
            self.by_tgid.entry(group).or_default().group_records += 1;
        }
    }
}

/// Sets the receive buffer; above net.core.rmem_max only SO_RCVBUFFORCE (CAP_NET_ADMIN) can.
fn set_rcvbuf(socket: &Socket, bytes: u32) -> Result<(), ListenerError> {
    let rmem_max: u64 = fs::read_to_string(RMEM_MAX)
        .map_err(io_error("reading net.core.rmem_max"))?
        .trim()
        .parse()
        .map_err(|e| ListenerError::Io {
            what: "parsing net.core.rmem_max",
            error: io::Error::other(e),
        })?;
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if u64::from(bytes) <= rmem_max {
        return setsockopt(socket, libc::SO_RCVBUF, &value).map_err(io_error("setting SO_RCVBUF"));
    }
    setsockopt(socket, libc::SO_RCVBUFFORCE, &value)
        .map_err(|error| ListenerError::RcvbufAboveMax { requested: bytes, rmem_max, error })
}

fn set_recv_timeout(socket: &Socket, timeout: Duration) -> io::Result<()> {
    // The fields' types are libc's (musl's are deprecated aliases that will change width).
    let tv =
        libc::timeval { tv_sec: timeout.as_secs() as _, tv_usec: timeout.subsec_micros().into() };
    setsockopt(socket, libc::SO_RCVTIMEO, &tv)
}

fn setsockopt<T>(socket: &Socket, option: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live T and the length passed is its size; the socket is open.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            std::ptr::from_ref::<T>(value).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use proptest::{collection::vec, prelude::*};

    use super::{protocol::tests::*, *};

    /// An NLMSG_ERROR message: an acknowledgement when `errno` is 0.
    fn ack(seq: u32, errno: i32) -> Vec<u8> {
        let mut msg = Vec::new();
        msg.extend(36u32.to_ne_bytes()); // length: header, error code, the request's header
        msg.extend(2u16.to_ne_bytes()); // NLMSG_ERROR
        msg.extend(0u16.to_ne_bytes());
        msg.extend(seq.to_ne_bytes());
        msg.extend(4242u32.to_ne_bytes());
        msg.extend((-errno).to_ne_bytes());
        msg.extend([0; 16]);
        msg
    }

    #[test]
    fn counts_exits_by_thread_group() {
        let mut counts = ListenerCounts::default();
        let family = captured_family();
        assert!(counts.take(EXIT_OF_A_THREAD, family).is_none());
        assert!(counts.take(EXIT_ENDING_A_GROUP, family).is_none());
        assert_eq!((counts.messages, counts.group_records, counts.errors), (2, 1, 0));
        assert_eq!(counts.bytes, (EXIT_OF_A_THREAD.len() + EXIT_ENDING_A_GROUP.len()) as u64);
        assert_eq!(counts.by_tgid[&5292], GroupCounts { tasks: 2, group_records: 1 });
        assert_eq!(counts.by_tgid.len(), 1);
    }

    #[test]
    fn acknowledgements_are_returned_not_counted() {
        let mut counts = ListenerCounts::default();
        let ok = counts.take(&ack(2, 0), 31).expect("an acknowledgement");
        assert_eq!(ok.seq, 2);
        assert!(ok.result.is_ok());
        let refused = counts.take(&ack(3, libc::EPERM), 31).expect("an error reply");
        assert_eq!(refused.result.unwrap_err().raw_os_error(), Some(libc::EPERM));
        assert_eq!((counts.messages, counts.errors), (0, 0));
    }

    #[test]
    fn messages_of_another_family_or_cut_short_are_errors() {
        let mut counts = ListenerCounts::default();
        counts.take(EXIT_OF_A_THREAD, captured_family() + 1);
        counts.take(&EXIT_ENDING_A_GROUP[..100], captured_family());
        assert_eq!((counts.messages, counts.errors), (0, 2));
    }

    proptest! {
        /// Whatever a datagram holds, it is counted (its bytes, and each message as an exit, an
        /// acknowledgement or an error), never a panic.
        #[test]
        fn any_datagram_is_counted(
            datagram in prop_oneof![damaged_exit_message(), vec(any::<u8>(), 0..1200)]
        ) {
            let mut counts = ListenerCounts::default();
            let _ = counts.take(&datagram, captured_family());
            prop_assert_eq!(counts.bytes, datagram.len() as u64);
            let by_tgid: u64 = counts.by_tgid.values().map(|g| g.tasks).sum();
            prop_assert!(by_tgid <= counts.messages);
        }
    }
}
