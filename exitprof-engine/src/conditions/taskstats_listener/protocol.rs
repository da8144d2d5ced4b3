//! The taskstats generic-netlink protocol (include/uapi/linux/taskstats.h, kernel/taskstats.c):
//! the requests exitprof sends and the exit messages the kernel sends back. Framing and the
//! `nlctrl` family lookup come from the netlink-packet crates; this is the taskstats part.

use netlink_packet_core::{
    DecodeError, DefaultNla, Emitable, NLM_F_ACK, NLM_F_REQUEST, NetlinkBuffer, NetlinkMessage,
    NetlinkPayload, NlasIterator, ParseableParametrized, parse_u32,
};
use netlink_packet_generic::{
    GenlFamily, GenlHeader, GenlMessage,
    ctrl::{GenlCtrl, GenlCtrlCmd, nlas::GenlCtrlAttrs},
};

const FAMILY_NAME: &str = "TASKSTATS";
const GENL_VERSION: u8 = 1;

const CMD_GET: u8 = 1;
/// Every message the kernel sends a listener.
const CMD_NEW: u8 = 2;

const TYPE_PID: u16 = 1;
const TYPE_TGID: u16 = 2;
const TYPE_STATS: u16 = 3;
const TYPE_AGGR_PID: u16 = 4;
const TYPE_AGGR_TGID: u16 = 5;

/// `struct taskstats`: `version` is its first field; `ac_tgid` exists since version 12, at
/// byte 368 (fields are only ever appended).
const STATS_TGID_SINCE_VERSION: u16 = 12;
const STATS_TGID_OFFSET: usize = 368;

/// The two requests a listener sends: register its socket for exit messages from a set of
/// CPUs, and deregister it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpumaskOp {
    Register,
    Deregister,
}

impl CpumaskOp {
    /// TASKSTATS_CMD_ATTR_REGISTER_CPUMASK and TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK.
    fn attribute(self) -> u16 {
        match self {
            CpumaskOp::Register => 3,
            CpumaskOp::Deregister => 4,
        }
    }
}

/// A TASKSTATS_CMD_GET request carrying one cpumask attribute.
#[derive(Debug)]
struct CpumaskRequest(DefaultNla);

impl GenlFamily for CpumaskRequest {
    fn family_name() -> &'static str {
        FAMILY_NAME
    }

    fn command(&self) -> u8 {
        CMD_GET
    }

    fn version(&self) -> u8 {
        GENL_VERSION
    }
}

impl Emitable for CpumaskRequest {
    fn buffer_len(&self) -> usize {
        self.0.buffer_len()
    }

    fn emit(&self, buffer: &mut [u8]) {
        self.0.emit(buffer);
    }
}

/// The `nlctrl` request that looks up the TASKSTATS family id.
pub fn family_request(seq: u32) -> Vec<u8> {
    let ctrl = GenlCtrl {
        cmd: GenlCtrlCmd::GetFamily,
        nlas: vec![GenlCtrlAttrs::FamilyName(FAMILY_NAME.to_owned())],
    };
    serialize(GenlMessage::from_payload(ctrl), NLM_F_REQUEST, seq)
}

/// The family id in the reply to [`family_request`], or what the kernel answered instead.
pub fn family_reply(bytes: &[u8]) -> Result<Result<u16, std::io::Error>, DecodeError> {
    let msg = NetlinkMessage::<GenlMessage<GenlCtrl>>::deserialize(bytes)?;
    match msg.payload {
        NetlinkPayload::InnerMessage(genl) => genl
            .payload
            .nlas
            .iter()
            .find_map(|nla| match nla {
                GenlCtrlAttrs::FamilyId(id) => Some(Ok(*id)),
                _ => None,
            })
            .ok_or_else(|| "the nlctrl reply names no family id".into()),
        NetlinkPayload::Error(e) => Ok(Err(e.to_io())),
        other => Err(format!("unexpected reply to the family lookup: {other:?}").into()),
    }
}

/// A register or deregister request for the CPUs in `cpumask` (a cpulist such as "0-3"),
/// asking for an acknowledgement.
pub fn cpumask_request(family: u16, op: CpumaskOp, cpumask: &str, seq: u32) -> Vec<u8> {
    let mut value = cpumask.as_bytes().to_vec();
    value.push(0); // NLA_STRING: the kernel copies it with nla_strscpy
    let mut genl =
        GenlMessage::from_payload(CpumaskRequest(DefaultNla::new(op.attribute(), value)));
    genl.set_resolved_family_id(family);
    serialize(genl, NLM_F_REQUEST | NLM_F_ACK, seq)
}

fn serialize<F>(genl: GenlMessage<F>, flags: u16, seq: u32) -> Vec<u8>
where
    F: GenlFamily + Emitable + std::fmt::Debug,
{
    let mut msg = NetlinkMessage::from(genl);
    msg.header.flags = flags;
    msg.header.sequence_number = seq;
    msg.finalize();
    let mut bytes = vec![0; msg.buffer_len()];
    msg.serialize(&mut bytes);
    bytes
}

/// What one exiting task's taskstats message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitEvent {
    /// The exiting task (TASKSTATS_TYPE_AGGR_PID), as the init pid namespace numbers it.
    pub pid: u32,
    /// Its thread group, from `struct taskstats` version 12 or later (`ac_tgid`).
    pub tgid: Option<u32>,
    /// The thread group whose own record (TASKSTATS_TYPE_AGGR_TGID) came along: the kernel
    /// adds it to the message of the last task of a multi-threaded process.
    pub group: Option<u32>,
}

impl ParseableParametrized<[u8], GenlHeader> for ExitEvent {
    fn parse_with_param(buf: &[u8], header: GenlHeader) -> Result<Self, DecodeError> {
        if header.cmd != CMD_NEW {
            return Err(format!("taskstats command {} is not TASKSTATS_CMD_NEW", header.cmd).into());
        }
        let (mut task, mut group) = (None, None);
        for nla in NlasIterator::new(buf) {
            let nla = nla?;
            match nla.kind() {
                TYPE_AGGR_PID => task = Some(Aggregate::parse(nla.value(), TYPE_PID)?),
                TYPE_AGGR_TGID => group = Some(Aggregate::parse(nla.value(), TYPE_TGID)?.id),
                // TASKSTATS_TYPE_NULL pads the message on some architectures.
                _ => {}
            }
        }
        let task = task.ok_or("no per-task record (TASKSTATS_TYPE_AGGR_PID)")?;
        Ok(ExitEvent { pid: task.id, tgid: task.tgid, group })
    }
}

/// An aggregate attribute: the pid or tgid it is about, and its `struct taskstats`'s tgid.
struct Aggregate {
    id: u32,
    tgid: Option<u32>,
}

impl Aggregate {
    fn parse(nested: &[u8], id_kind: u16) -> Result<Self, DecodeError> {
        let (mut id, mut tgid, mut has_stats) = (None, None, false);
        for nla in NlasIterator::new(nested) {
            let nla = nla?;
            match nla.kind() {
                kind if kind == id_kind => id = Some(parse_u32(nla.value())?),
                TYPE_STATS => {
                    has_stats = true;
                    tgid = stats_tgid(nla.value());
                }
                _ => {}
            }
        }
        if !has_stats {
            return Err("an aggregate record without its struct taskstats".into());
        }
        Ok(Aggregate { id: id.ok_or("an aggregate record without its id")?, tgid })
    }
}

fn stats_tgid(stats: &[u8]) -> Option<u32> {
    let version = u16::from_ne_bytes(stats.get(..2)?.try_into().ok()?);
    let tgid = stats.get(STATS_TGID_OFFSET..STATS_TGID_OFFSET + 4)?;
    (version >= STATS_TGID_SINCE_VERSION).then(|| u32::from_ne_bytes(tgid.try_into().unwrap()))
}

/// One message from a listener socket.
pub type Incoming = NetlinkMessage<GenlMessage<ExitEvent>>;

/// The netlink messages of one datagram, in order; stops at the first one that cannot be
/// decoded (the rest of the datagram cannot be framed either).
pub fn messages(datagram: &[u8]) -> impl Iterator<Item = Result<Incoming, DecodeError>> + '_ {
    let mut rest = datagram;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let parsed = NetlinkBuffer::new_checked(rest)
            .and_then(|buf| Ok((buf.length() as usize, Incoming::deserialize(rest)?)));
        match parsed {
            Ok((len, msg)) => {
                // Messages are 4-byte aligned within a datagram (NLMSG_ALIGN).
                rest = rest.get(len.next_multiple_of(4)..).unwrap_or_default();
                Some(Ok(msg))
            }
            Err(e) => {
                rest = &[];
                Some(Err(e))
            }
        }
    })
}

#[cfg(test)]
pub mod tests {
    use proptest::{collection::vec, prelude::*};

    use super::*;

    /// Exit messages captured from a listener on Linux 6.18 (struct taskstats version 16), for
    /// a Python process (tgid 5292) with one extra thread: the thread's exit (pid 5293), then
    /// the main thread's, the last of its group, which carries the group's record too.
    pub const EXIT_OF_A_THREAD: &[u8] = include_bytes!("testdata/exit-of-a-thread.bin");
    pub const EXIT_ENDING_A_GROUP: &[u8] = include_bytes!("testdata/exit-ending-a-group.bin");

    /// The family id the kernel had given TASKSTATS when the messages were captured.
    pub fn captured_family() -> u16 {
        u16::from_ne_bytes(EXIT_OF_A_THREAD[4..6].try_into().unwrap())
    }

    fn exit_event(datagram: &[u8]) -> ExitEvent {
        let mut messages: Vec<_> = messages(datagram).collect::<Result<_, _>>().unwrap();
        assert_eq!(messages.len(), 1, "{messages:?}");
        match messages.remove(0).payload {
            NetlinkPayload::InnerMessage(genl) => {
                assert_eq!(genl.resolved_family_id(), captured_family());
                genl.payload
            }
            other => panic!("not an exit message: {other:?}"),
        }
    }

    #[test]
    fn a_threads_exit_names_its_thread_group() {
        let event = exit_event(EXIT_OF_A_THREAD);
        assert_eq!(event, ExitEvent { pid: 5293, tgid: Some(5292), group: None });
    }

    #[test]
    fn the_last_exit_of_a_group_carries_the_groups_record() {
        let event = exit_event(EXIT_ENDING_A_GROUP);
        assert_eq!(event, ExitEvent { pid: 5292, tgid: Some(5292), group: Some(5292) });
    }

    #[test]
    fn struct_taskstats_before_version_12_has_no_tgid() {
        let mut old = EXIT_OF_A_THREAD.to_vec();
        // The struct starts after the netlink (16), genetlink (4), aggregate (4) and pid (8)
        // headers and its own attribute header (4).
        let version_at = 16 + 4 + 4 + 8 + 4;
        assert_eq!(u16::from_ne_bytes([old[version_at], old[version_at + 1]]), 16);
        old[version_at..version_at + 2].copy_from_slice(&11u16.to_ne_bytes());
        assert_eq!(exit_event(&old), ExitEvent { pid: 5293, tgid: None, group: None });
    }

    #[test]
    fn a_datagram_may_hold_several_messages() {
        let both = [EXIT_OF_A_THREAD, EXIT_ENDING_A_GROUP].concat();
        let pids: Vec<u32> = messages(&both)
            .map(|m| match m.unwrap().payload {
                NetlinkPayload::InnerMessage(genl) => genl.payload.pid,
                other => panic!("not an exit message: {other:?}"),
            })
            .collect();
        assert_eq!(pids, [5293, 5292]);
    }

    #[test]
    fn a_cut_message_is_an_error_not_a_panic() {
        for len in [3, 16, 40, 100, EXIT_OF_A_THREAD.len() - 1] {
            let results: Vec<_> = messages(&EXIT_OF_A_THREAD[..len]).collect();
            assert!(matches!(results[..], [Err(_)]), "{len} bytes: {results:?}");
        }
    }

    #[test]
    fn a_register_request_carries_the_cpulist() {
        let bytes = cpumask_request(31, CpumaskOp::Register, "0-3", 7);
        let header = NetlinkBuffer::new_checked(&bytes[..]).unwrap();
        assert_eq!(header.length() as usize, bytes.len());
        assert_eq!(header.message_type(), 31);
        assert_eq!(header.flags(), NLM_F_REQUEST | NLM_F_ACK);
        assert_eq!(header.sequence_number(), 7);
        let payload = header.payload();
        assert_eq!(payload[..2], [CMD_GET, GENL_VERSION], "genetlink command and version");
        let attrs: Vec<_> = NlasIterator::new(&payload[4..]).map(Result::unwrap).collect();
        assert_eq!(attrs.len(), 1);
        assert_eq!(attrs[0].kind(), 3, "TASKSTATS_CMD_ATTR_REGISTER_CPUMASK");
        assert_eq!(attrs[0].value(), b"0-3\0");

        let bytes = cpumask_request(31, CpumaskOp::Deregister, "0-3", 8);
        let attrs = NetlinkBuffer::new_checked(&bytes[..]).unwrap().payload()[4..].to_vec();
        assert_eq!(NlasIterator::new(&attrs).next().unwrap().unwrap().kind(), 4);
    }

    /// A captured exit message with some bytes changed and maybe cut short.
    pub fn damaged_exit_message() -> impl Strategy<Value = Vec<u8>> {
        (any::<bool>(), vec((any::<usize>(), any::<u8>()), 1..8), any::<Option<usize>>()).prop_map(
            |(last, changes, cut)| {
                let mut bytes = if last { EXIT_ENDING_A_GROUP } else { EXIT_OF_A_THREAD }.to_vec();
                for (at, byte) in changes {
                    let len = bytes.len();
                    bytes[at % len] = byte;
                }
                if let Some(cut) = cut {
                    bytes.truncate(cut % (bytes.len() + 1));
                }
                bytes
            },
        )
    }

    proptest! {
        /// Any datagram is framed into messages or refused, never a panic, and framing ends:
        /// every message takes at least a header's 16 bytes.
        #[test]
        fn any_datagram_is_read_without_panicking(
            bytes in prop_oneof![damaged_exit_message(), vec(any::<u8>(), 0..1200)]
        ) {
            let framed = messages(&bytes).take(bytes.len() + 1).count();
            prop_assert!(framed <= bytes.len() / 16 + 1, "{} messages in {} bytes", framed, bytes.len());
            let _ = family_reply(&bytes);
        }

        #[test]
        fn a_cpumask_request_carries_any_cpulist(
            cpulist in vec(proptest::sample::select(b"0123456789,-".to_vec()), 1..64),
            family in any::<u16>(),
            seq in any::<u32>(),
            register in any::<bool>(),
        ) {
            let cpulist = String::from_utf8(cpulist).unwrap();
            let op = if register { CpumaskOp::Register } else { CpumaskOp::Deregister };
            let bytes = cpumask_request(family, op, &cpulist, seq);
            let header = NetlinkBuffer::new_checked(&bytes[..]).unwrap();
            prop_assert_eq!(header.length() as usize, bytes.len());
            prop_assert_eq!((header.message_type(), header.sequence_number()), (family, seq));
            let attrs: Vec<_> =
                NlasIterator::new(&header.payload()[4..]).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(attrs.len(), 1);
            prop_assert_eq!(attrs[0].kind(), op.attribute());
            let value = format!("{cpulist}\0");
            prop_assert_eq!(attrs[0].value(), value.as_bytes());
        }
    }
}
