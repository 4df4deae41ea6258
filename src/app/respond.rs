//! A minimal IPv4 host: answers ARP requests and ICMP echo requests for one address, optionally
//! on one VLAN only.
//!
//! # Why
//! The quickest end-to-end check of a port is `ping` from another machine: it needs the link, both
//! rings, the MAC filter, VLAN handling in both directions and correct checksums. `vfio-nic
//! respond` runs this responder on a port; nothing else about IP is implemented (no routing, no
//! fragments, no ARP cache: replies go back to the MAC the request came from).
//!
//! # Rules
//! - With a VLAN configured, only frames tagged with that VID are answered, and replies carry
//!   the request's tag (same PCP and DEI). Without one, only untagged and priority-tagged (VID 0)
//!   frames are answered, and replies are untagged.
//! - ARP: a request (op 1) whose target is our address gets a reply from our MAC, whatever the
//!   sender's address (Linux answers the same way by default).
//! - ICMP: an echo request (type 8, code 0) to our MAC and our address, with correct IPv4 and
//!   ICMP checksums and not a fragment, gets an echo reply with the same identifier, sequence
//!   number and data, TTL 64.
//! - The prefix length of the address is kept for display; it does not restrict who may ask.
//!
//! The responder works on untagged frame bytes and a separately reported tag (what
//! [`take_vlan`](crate::vlan::PacketVlan::take_vlan) gives in every receive mode), so it is
//! independent of where the tag is removed.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use crate::app::wire::{
    ArpPacket, EthernetFrame, IcmpPacket, Ipv4Packet, ARP_LEN, ARP_REPLY, ARP_REQUEST,
    ETHERTYPE_ARP, ETHERTYPE_IPV4, ETH_HEADER, ETH_MIN_FRAME, ICMP_ECHO_REPLY, ICMP_ECHO_REQUEST,
    IPPROTO_ICMP,
};
use crate::device::MacAddr;
use crate::error::{Error, Result};
use crate::vlan::{Tci, Vid};

/// An IPv4 address with a prefix length (`192.0.2.1/24`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Cidr {
    /// The address.
    pub addr: Ipv4Addr,
    /// The prefix length (0..=32).
    pub prefix: u8,
}

impl FromStr for Ipv4Cidr {
    type Err = Error;
    fn from_str(s: &str) -> Result<Ipv4Cidr> {
        let bad = |why: &str| {
            Error::InvalidConfig(format!(
                "'{s}' is not an IPv4 address with prefix ({why}); write it as 192.0.2.1/24"
            ))
        };
        let (a, p) = s.split_once('/').ok_or_else(|| bad("no /PREFIX"))?;
        let addr: Ipv4Addr = a.parse().map_err(|_| bad("bad address"))?;
        let prefix: u8 = p.parse().map_err(|_| bad("bad prefix length"))?;
        if prefix > 32 {
            return Err(bad("prefix longer than 32"));
        }
        if addr.is_unspecified() || addr.is_broadcast() || addr.is_multicast() {
            return Err(bad("not a unicast address"));
        }
        Ok(Ipv4Cidr { addr, prefix })
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// What the responder answers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponderConfig {
    /// The port's MAC: the source of replies, the destination echo requests must have.
    pub mac: MacAddr,
    /// The address answered for.
    pub ip: Ipv4Cidr,
    /// Answer only on this VLAN (and only there); `None`: untagged and VID 0 only.
    pub vlan: Option<Vid>,
}

/// What a reply answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// An ARP reply.
    Arp,
    /// An ICMP echo reply.
    Echo,
}

/// A reply written by [`Responder::handle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// What it answers.
    pub kind: ReplyKind,
    /// The tag to send it with (the request's), `None` for untagged.
    pub tci: Option<Tci>,
}

/// Why a frame got no reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ignored {
    /// Tagged with another VLAN, or untagged while a VLAN is configured (or tagged while none is).
    WrongVlan,
    /// Neither ARP nor IPv4/ICMP echo request.
    NotHandled,
    /// ARP or echo request for another address (or echo to another MAC).
    NotForUs,
    /// Truncated or malformed headers.
    Malformed,
    /// A bad IPv4 or ICMP checksum.
    BadChecksum,
}

/// Counters of a responder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResponderStats {
    /// ARP replies written.
    pub arp_replies: u64,
    /// Echo replies written.
    pub echo_replies: u64,
    /// Frames on another VLAN.
    pub wrong_vlan: u64,
    /// Frames for another address, or of another protocol.
    pub not_for_us: u64,
    /// Malformed frames and bad checksums.
    pub bad: u64,
}

/// The ARP/ICMP responder.
#[derive(Clone, Debug)]
pub struct Responder {
    cfg: ResponderConfig,
    stats: ResponderStats,
}

impl Responder {
    /// A responder for `cfg`.
    pub fn new(cfg: ResponderConfig) -> Responder {
        Responder {
            cfg,
            stats: ResponderStats::default(),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &ResponderConfig {
        &self.cfg
    }

    /// Its counters.
    pub fn stats(&self) -> ResponderStats {
        self.stats
    }

    /// Looks at one received frame (`frame` without its tag, `tci` the tag it had) and, if it
    /// deserves an answer, writes the untagged reply into `out` (cleared first; padded to 60
    /// bytes) and says which tag to send it with.
    pub fn handle(
        &mut self,
        frame: &[u8],
        tci: Option<Tci>,
        out: &mut Vec<u8>,
    ) -> Result<Reply, Ignored> {
        out.clear();
        let r = self.decide(frame, tci, out);
        match r {
            Ok(Reply {
                kind: ReplyKind::Arp,
                ..
            }) => self.stats.arp_replies += 1,
            Ok(Reply {
                kind: ReplyKind::Echo,
                ..
            }) => self.stats.echo_replies += 1,
            Err(Ignored::WrongVlan) => self.stats.wrong_vlan += 1,
            Err(Ignored::NotForUs | Ignored::NotHandled) => self.stats.not_for_us += 1,
            Err(Ignored::Malformed | Ignored::BadChecksum) => self.stats.bad += 1,
        }
        if r.is_err() {
            out.clear();
        } else if out.len() < ETH_MIN_FRAME {
            out.resize(ETH_MIN_FRAME, 0);
        }
        r
    }

    fn decide(&self, frame: &[u8], tci: Option<Tci>, out: &mut Vec<u8>) -> Result<Reply, Ignored> {
        let vid = tci.map(|t| t.vid()).unwrap_or(0);
        match self.cfg.vlan {
            Some(v) if tci.is_none() || vid != v.get() => return Err(Ignored::WrongVlan),
            None if vid != 0 => return Err(Ignored::WrongVlan),
            _ => {}
        }
        let eth = EthernetFrame::new_checked(frame).map_err(|_| Ignored::Malformed)?;
        let kind = match eth.ethertype() {
            ETHERTYPE_ARP => self.arp(&eth, out)?,
            ETHERTYPE_IPV4 => self.icmp(&eth, out)?,
            _ => return Err(Ignored::NotHandled),
        };
        Ok(Reply { kind, tci })
    }

    fn arp(&self, eth: &EthernetFrame<&[u8]>, out: &mut Vec<u8>) -> Result<ReplyKind, Ignored> {
        let req = ArpPacket::new_checked(eth.payload()).map_err(|_| Ignored::Malformed)?;
        if req.operation() != ARP_REQUEST {
            return Err(Ignored::NotHandled);
        }
        if req.target_ip() != self.cfg.ip.addr {
            return Err(Ignored::NotForUs);
        }
        out.resize(ETH_HEADER + ARP_LEN, 0);
        let mut reply = EthernetFrame::new_checked(&mut out[..]).map_err(|_| Ignored::Malformed)?;
        reply.set_dst(eth.src());
        reply.set_src(self.cfg.mac);
        reply.set_ethertype(ETHERTYPE_ARP);
        let mut arp =
            ArpPacket::init(reply.payload_mut(), ARP_REPLY).map_err(|_| Ignored::Malformed)?;
        arp.set_sender(self.cfg.mac, self.cfg.ip.addr);
        arp.set_target(req.sender_mac(), req.sender_ip());
        Ok(ReplyKind::Arp)
    }

    fn icmp(&self, eth: &EthernetFrame<&[u8]>, out: &mut Vec<u8>) -> Result<ReplyKind, Ignored> {
        let ip = Ipv4Packet::new_checked(eth.payload()).map_err(|_| Ignored::Malformed)?;
        if ip.protocol() != IPPROTO_ICMP {
            return Err(Ignored::NotHandled);
        }
        if ip.dst() != self.cfg.ip.addr || eth.dst() != self.cfg.mac {
            return Err(Ignored::NotForUs);
        }
        if !ip.verify_checksum() {
            return Err(Ignored::BadChecksum);
        }
        if ip.is_fragment() {
            return Err(Ignored::NotHandled);
        }
        let icmp = IcmpPacket::new_checked(ip.payload()).map_err(|_| Ignored::Malformed)?;
        if icmp.msg_type() != ICMP_ECHO_REQUEST || icmp.code() != 0 {
            return Err(Ignored::NotHandled);
        }
        if !icmp.verify_checksum() {
            return Err(Ignored::BadChecksum);
        }
        // The reply is the request with addresses swapped: copy up to the IP total length
        // (dropping Ethernet padding), then edit in place.
        let len = ETH_HEADER + ip.total_len();
        out.extend_from_slice(&eth.clone().into_inner()[..len]);
        let mut reply = EthernetFrame::new_checked(&mut out[..]).map_err(|_| Ignored::Malformed)?;
        reply.set_dst(eth.src());
        reply.set_src(self.cfg.mac);
        let mut rip =
            Ipv4Packet::new_checked(reply.payload_mut()).map_err(|_| Ignored::Malformed)?;
        rip.set_src(self.cfg.ip.addr);
        rip.set_dst(ip.src());
        rip.set_ttl(64);
        rip.fill_checksum();
        let mut ricmp =
            IcmpPacket::new_checked(rip.payload_mut()).map_err(|_| Ignored::Malformed)?;
        ricmp.set_msg_type(ICMP_ECHO_REPLY);
        ricmp.fill_checksum();
        Ok(ReplyKind::Echo)
    }
}

/// Builds an ARP request from `src_mac`/`src_ip` for `target` (broadcast, padded to 60 bytes):
/// what a host sends before its first ping. For tests and `respond --probe`.
pub fn arp_request(src_mac: MacAddr, src_ip: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = vec![0u8; ETH_MIN_FRAME];
    let mut eth = EthernetFrame::new_checked(&mut f[..]).expect("60 bytes hold a header");
    eth.set_dst(MacAddr::BROADCAST);
    eth.set_src(src_mac);
    eth.set_ethertype(ETHERTYPE_ARP);
    let mut arp = ArpPacket::init(eth.payload_mut(), ARP_REQUEST).expect("46 bytes hold ARP");
    arp.set_sender(src_mac, src_ip);
    arp.set_target(MacAddr::default(), target);
    f
}

/// Builds an ICMP echo request with `data` (what `ping` sends), with valid checksums.
pub fn echo_request(
    src_mac: MacAddr,
    dst_mac: MacAddr,
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    ident: u16,
    seq: u16,
    data: &[u8],
) -> Vec<u8> {
    let icmp_len = 8 + data.len();
    let mut f = vec![0u8; (ETH_HEADER + 20 + icmp_len).max(ETH_MIN_FRAME)];
    let mut eth = EthernetFrame::new_checked(&mut f[..]).expect("room for a header");
    eth.set_dst(dst_mac);
    eth.set_src(src_mac);
    eth.set_ethertype(ETHERTYPE_IPV4);
    let mut ip = Ipv4Packet::init(eth.payload_mut(), src_ip, dst_ip, IPPROTO_ICMP, icmp_len)
        .expect("sized above");
    let mut icmp = IcmpPacket::new_checked(ip.payload_mut()).expect("sized above");
    icmp.set_msg_type(ICMP_ECHO_REQUEST);
    icmp.set_code(0);
    icmp.set_echo(ident, seq);
    ip.payload_mut()[8..].copy_from_slice(data);
    let mut icmp = IcmpPacket::new_checked(ip.payload_mut()).expect("sized above");
    icmp.fill_checksum();
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::wire::checksum;

    const US: MacAddr = MacAddr([0x02, 0x53, 0x49, 0x4d, 0, 1]);
    const PEER: MacAddr = MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x56]);
    const OUR_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
    const PEER_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 99);

    fn responder(vlan: Option<u16>) -> Responder {
        Responder::new(ResponderConfig {
            mac: US,
            ip: "192.0.2.1/24".parse().unwrap(),
            vlan: vlan.map(|v| Vid::new(v).unwrap()),
        })
    }

    fn ping(seq: u16) -> Vec<u8> {
        echo_request(
            PEER,
            US,
            PEER_IP,
            OUR_IP,
            0x1234,
            seq,
            b"abcdefghijklmnopqrstuvwxyz012345",
        )
    }

    #[test]
    fn arp_request_gets_a_reply_with_swapped_addresses() {
        let mut r = responder(None);
        let mut out = Vec::new();
        let req = arp_request(PEER, PEER_IP, OUR_IP);
        let reply = r.handle(&req, None, &mut out).unwrap();
        assert_eq!(
            reply,
            Reply {
                kind: ReplyKind::Arp,
                tci: None
            }
        );
        assert_eq!(out.len(), 60);
        let eth = EthernetFrame::new_checked(&out[..]).unwrap();
        assert_eq!(
            (eth.dst(), eth.src(), eth.ethertype()),
            (PEER, US, ETHERTYPE_ARP)
        );
        let arp = ArpPacket::new_checked(eth.payload()).unwrap();
        assert_eq!(arp.operation(), ARP_REPLY);
        assert_eq!((arp.sender_mac(), arp.sender_ip()), (US, OUR_IP));
        assert_eq!((arp.target_mac(), arp.target_ip()), (PEER, PEER_IP));
        assert_eq!(r.stats().arp_replies, 1);
    }

    #[test]
    fn echo_request_gets_a_reply_with_a_correct_checksum() {
        let mut r = responder(None);
        let mut out = Vec::new();
        let req = ping(7);
        assert_eq!(
            r.handle(&req, None, &mut out).unwrap().kind,
            ReplyKind::Echo
        );
        let eth = EthernetFrame::new_checked(&out[..]).unwrap();
        assert_eq!((eth.dst(), eth.src()), (PEER, US));
        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!((ip.src(), ip.dst(), ip.ttl()), (OUR_IP, PEER_IP, 64));
        let icmp = IcmpPacket::new_checked(ip.payload()).unwrap();
        assert_eq!(icmp.msg_type(), ICMP_ECHO_REPLY);
        assert_eq!(checksum(ip.payload()), 0, "ICMP checksum");
        assert_eq!((icmp.echo_ident(), icmp.echo_seq()), (0x1234, 7));
        // Same data; the checksum differs from the request's by exactly the type change (8 << 8).
        let req_ip = Ipv4Packet::new_checked(&req[14..]).unwrap();
        assert_eq!(&ip.payload()[8..], &req_ip.payload()[8..]);
        let req_icmp = IcmpPacket::new_checked(req_ip.payload()).unwrap();
        let expect = checksum_finish_add(!req_icmp.checksum_field(), 0x0800);
        assert_eq!(icmp.checksum_field(), expect);
    }

    /// RFC 1624 incremental update: HC' = ~(~HC + ~m + m'), here for the type word 0x0800 -> 0.
    fn checksum_finish_add(not_hc: u16, old_word: u16) -> u16 {
        let mut s = u32::from(not_hc) + u32::from(!old_word);
        while s >> 16 != 0 {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }

    #[test]
    fn vlan_rules_hold_both_ways() {
        let tci = |vid: u16| Some(Tci::new(Vid::new(vid).unwrap(), 5, false).unwrap());
        let mut out = Vec::new();
        let mut r = responder(Some(100));
        // Right VLAN: answered with the same tag (PCP kept).
        let reply = r.handle(&ping(1), tci(100), &mut out).unwrap();
        assert_eq!(reply.tci, tci(100));
        // Wrong VLAN, untagged, priority-tagged: silence.
        for t in [tci(101), None, tci(0)] {
            assert_eq!(r.handle(&ping(1), t, &mut out), Err(Ignored::WrongVlan));
            assert!(out.is_empty());
        }
        let arp = arp_request(PEER, PEER_IP, OUR_IP);
        assert_eq!(r.handle(&arp, tci(7), &mut out), Err(Ignored::WrongVlan));
        assert_eq!(r.stats().wrong_vlan, 4);
        // No VLAN configured: untagged and VID 0 answered, tagged frames not.
        let mut r = responder(None);
        assert!(r.handle(&arp, None, &mut out).is_ok());
        assert_eq!(r.handle(&arp, tci(0), &mut out).unwrap().tci, tci(0));
        assert_eq!(r.handle(&arp, tci(100), &mut out), Err(Ignored::WrongVlan));
    }

    #[test]
    fn wrong_address_bad_checksum_and_junk_get_no_reply() {
        let mut r = responder(None);
        let mut out = Vec::new();
        let other = Ipv4Addr::new(192, 0, 2, 2);
        assert_eq!(
            r.handle(&arp_request(PEER, PEER_IP, other), None, &mut out),
            Err(Ignored::NotForUs)
        );
        let to_other = echo_request(PEER, US, PEER_IP, other, 1, 1, b"x");
        assert_eq!(r.handle(&to_other, None, &mut out), Err(Ignored::NotForUs));
        let to_other_mac = echo_request(PEER, PEER, PEER_IP, OUR_IP, 1, 1, b"x");
        assert_eq!(
            r.handle(&to_other_mac, None, &mut out),
            Err(Ignored::NotForUs)
        );
        let mut bad = ping(3);
        *bad.last_mut().unwrap() ^= 0xff;
        // The last byte of a 32-byte ping payload is inside the ICMP message.
        assert_eq!(r.handle(&bad, None, &mut out), Err(Ignored::BadChecksum));
        let mut bad_ip = ping(3);
        bad_ip[14 + 8] ^= 1; // TTL
        assert_eq!(r.handle(&bad_ip, None, &mut out), Err(Ignored::BadChecksum));
        assert_eq!(
            r.handle(&ping(3)[..30], None, &mut out),
            Err(Ignored::Malformed)
        );
        assert_eq!(
            r.handle(&[0u8; 10], None, &mut out),
            Err(Ignored::Malformed)
        );
        assert!(out.is_empty());
        assert_eq!(r.stats().echo_replies, 0);
    }

    #[test]
    fn addresses_parse_with_a_one_line_error() {
        let c: Ipv4Cidr = "10.1.2.3/16".parse().unwrap();
        assert_eq!(c.to_string(), "10.1.2.3/16");
        for bad in [
            "10.1.2.3",
            "10.1.2/24",
            "10.1.2.3/33",
            "0.0.0.0/0",
            "224.0.0.1/4",
        ] {
            let e = bad.parse::<Ipv4Cidr>().unwrap_err().to_string();
            assert!(e.contains(bad) && !e.contains('\n'), "{e}");
        }
    }
}
