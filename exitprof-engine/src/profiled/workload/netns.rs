//! What a child of the `netns` storm does before it exits: it unshares its network namespace and
//! makes veth pairs in it through rtnetlink, so that its exit leaves a namespace with devices to
//! tear down in `cleanup_net` (each pair is two devices the teardown unregisters). The requests
//! are made once, before any fork (`netlink-packet-route` builds them); the forked child only
//! sends them and reads the kernel's acknowledgements, with system calls alone (it may not
//! allocate: a fork copies one thread of a process that may have others).

use std::{io, os::fd::AsRawFd as _};

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, NLMSG_ERROR, NetlinkHeader, NetlinkMessage,
    NetlinkPayload,
};
use netlink_packet_route::{
    RouteNetlinkMessage,
    link::{InfoData, InfoKind, InfoVeth, LinkAttribute, LinkInfo, LinkMessage},
};

/// The `RTM_NEWLINK` requests that make a namespace's veth pairs, one after the other in one
/// buffer.
pub struct Requests {
    bytes: Vec<u8>,
    /// Where each request ends in `bytes`.
    ends: Vec<usize>,
}

impl Requests {
    /// The requests for `pairs` veth pairs, named `v<i>` and their peers `p<i>`.
    pub fn veth_pairs(pairs: u32) -> Self {
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for i in 0..pairs {
            let mut peer = LinkMessage::default();
            peer.attributes.push(LinkAttribute::IfName(format!("p{i}")));
            let mut link = LinkMessage::default();
            link.attributes.push(LinkAttribute::IfName(format!("v{i}")));
            link.attributes.push(LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Veth),
                LinkInfo::Data(InfoData::Veth(InfoVeth::Peer(peer))),
            ]));
            let mut header = NetlinkHeader::default();
            header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
            header.sequence_number = i + 1;
            let mut message = NetlinkMessage::new(
                header,
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)),
            );
            message.finalize();
            let at = bytes.len();
            bytes.resize(at + message.buffer_len(), 0);
            message.serialize(&mut bytes[at..]);
            ends.push(bytes.len());
        }
        Self { bytes, ends }
    }

    fn each(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(start, &end)| &self.bytes[start..end])
    }
}

/// Where making a namespace's devices failed, with the errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Stage {
    Unshare = 1,
    Socket = 2,
    Send = 3,
    Receive = 4,
    /// The kernel refused a request (its acknowledgement carried an error).
    Refused = 5,
}

/// A failure of the forked child: where, and the errno, as it writes it to its parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    pub stage: Stage,
    pub errno: i32,
}

impl Failure {
    /// Its 8 bytes on the pipe to the parent.
    pub fn to_bytes(self) -> [u8; 8] {
        let mut bytes = [0; 8];
        bytes[..4].copy_from_slice(&(self.stage as u32).to_ne_bytes());
        bytes[4..].copy_from_slice(&self.errno.to_ne_bytes());
        bytes
    }

    pub fn from_bytes(bytes: [u8; 8]) -> Option<Self> {
        let stage = match u32::from_ne_bytes(bytes[..4].try_into().ok()?) {
            1 => Stage::Unshare,
            2 => Stage::Socket,
            3 => Stage::Send,
            4 => Stage::Receive,
            5 => Stage::Refused,
            _ => return None,
        };
        Some(Self { stage, errno: i32::from_ne_bytes(bytes[4..].try_into().ok()?) })
    }

    /// What went wrong, and what to do.
    pub fn describe(self) -> String {
        let errno = io::Error::from_raw_os_error(self.errno);
        match (self.stage, self.errno) {
            (Stage::Unshare, _) => format!(
                "unshare(CLONE_NEWNET) failed in a forked child: {errno} (it needs \
                 CAP_SYS_ADMIN, and a kernel with CONFIG_NET_NS)"
            ),
            (Stage::Refused, libc::EOPNOTSUPP) => format!(
                "the kernel cannot make veth devices ({errno}): load its veth module \
                 (`modprobe veth`), or run with --veth-pairs 0"
            ),
            (stage, _) => format!(
                "making veth pairs in a forked child's network namespace failed ({}: {errno})",
                match stage {
                    Stage::Socket => "rtnetlink socket",
                    Stage::Send => "sending a request",
                    Stage::Receive => "reading the kernel's answer",
                    Stage::Refused | Stage::Unshare => "the kernel refused a request",
                }
            ),
        }
    }
}

/// In the forked child: moves into a network namespace of its own and makes the devices
/// `requests` ask for. Only system calls, and no allocation.
pub fn unshare_and_fill(requests: &Requests) -> Result<(), Failure> {
    let fail =
        |stage| Failure { stage, errno: io::Error::last_os_error().raw_os_error().unwrap_or(0) };
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(fail(Stage::Unshare));
    }
    if requests.ends.is_empty() {
        return Ok(());
    }
    // SAFETY: socket takes plain integers; the descriptor is closed with the child's exit.
    let fd = unsafe {
        libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE)
    };
    if fd < 0 {
        return Err(fail(Stage::Socket));
    }
    // An acknowledgement: the netlink header, then the error (0: done) and the request's header.
    let mut answer = [0u8; 256];
    for request in requests.each() {
        // SAFETY: `request` is a valid buffer of the length given; the kernel is the
        // destination (a netlink socket's default).
        if unsafe { libc::send(fd, request.as_ptr().cast(), request.len(), 0) } < 0 {
            return Err(fail(Stage::Send));
        }
        // SAFETY: `answer` is a valid buffer of the length given.
        let got = unsafe { libc::recv(fd, answer.as_mut_ptr().cast(), answer.len(), 0) };
        if got < 20 {
            return Err(fail(Stage::Receive));
        }
        let kind = u16::from_ne_bytes([answer[4], answer[5]]);
        let error = i32::from_ne_bytes([answer[16], answer[17], answer[18], answer[19]]);
        if kind == NLMSG_ERROR && error != 0 {
            return Err(Failure { stage: Stage::Refused, errno: -error });
        }
    }
    Ok(())
}

/// The pipe a child reports its failure on: read by the parent, written by the child.
pub struct FailurePipe {
    read: std::os::fd::OwnedFd,
    write: std::os::fd::OwnedFd,
}

impl FailurePipe {
    pub fn new() -> io::Result<Self> {
        let (read, write) = io::pipe()?;
        Ok(Self { read: read.into(), write: write.into() })
    }

    /// In the child: reports `failure` (a write of 8 bytes, which a pipe takes whole).
    pub fn report(&self, failure: Failure) {
        let bytes = failure.to_bytes();
        // SAFETY: a valid buffer of the length given, to our own pipe.
        let _ = unsafe { libc::write(self.write.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    }

    /// In the parent, once the child has ended: what it reported, if anything.
    pub fn take(&self) -> Option<Failure> {
        let mut bytes = [0u8; 8];
        let mut poll = libc::pollfd { fd: self.read.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; no wait.
        if unsafe { libc::poll(&raw mut poll, 1, 0) } <= 0 {
            return None;
        }
        // SAFETY: a valid buffer of the length given.
        let got = unsafe { libc::read(self.read.as_raw_fd(), bytes.as_mut_ptr().cast(), 8) };
        (got == 8).then(|| Failure::from_bytes(bytes)).flatten()
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::NetlinkMessage;

    use super::*;

    /// Each request is a whole `RTM_NEWLINK` asking for a veth pair, read back as such.
    #[test]
    fn each_request_asks_for_one_named_veth_pair() {
        let requests = Requests::veth_pairs(3);
        let names: Vec<String> = requests
            .each()
            .map(|bytes| {
                let message = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes).unwrap();
                assert_eq!(message.header.length as usize, bytes.len());
                let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)) =
                    message.payload
                else {
                    panic!("not a new link: {:?}", message.payload)
                };
                let info = link.attributes.iter().find_map(|a| match a {
                    LinkAttribute::LinkInfo(info) => Some(info),
                    _ => None,
                });
                assert!(info.unwrap().contains(&LinkInfo::Kind(InfoKind::Veth)));
                link.attributes
                    .iter()
                    .find_map(|a| match a {
                        LinkAttribute::IfName(name) => Some(name.clone()),
                        _ => None,
                    })
                    .unwrap()
            })
            .collect();
        assert_eq!(names, ["v0", "v1", "v2"]);
        assert_eq!(Requests::veth_pairs(0).each().count(), 0);
    }

    #[test]
    fn failures_travel_whole() {
        let f = Failure { stage: Stage::Refused, errno: libc::EOPNOTSUPP };
        assert_eq!(Failure::from_bytes(f.to_bytes()), Some(f));
        assert!(f.describe().contains("modprobe veth"), "{}", f.describe());
        assert_eq!(Failure::from_bytes([9; 8]), None);
    }
}
