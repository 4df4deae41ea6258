//! Typed views of the few protocol headers the tools build and answer: Ethernet, ARP, IPv4, ICMP
//! and UDP, and the Internet checksum.
//!
//! # Why views and not structs
//! A received frame is already in a DMA buffer; copying it into a parsed struct and back costs
//! more than the answer. So, as in smoltcp, a header is a *view* over any byte container
//! (`T: AsRef<[u8]>` to read, `+ AsMut<[u8]>` to write): [`Ipv4Packet::new_checked`] checks the
//! lengths once, and the accessors after it cannot index out of bounds. The same views build
//! frames (the traffic generator) and parse them (the responder, the tests), so what `gen` sends
//! is what `respond` and the tests understand.
//!
//! # Why valid headers matter
//! QEMU's emulated NICs (and some real ones, for checksum offload and RSS) parse the L3 header of
//! every frame and drop what they cannot parse, so generated frames carry correct IPv4 and UDP
//! checksums ([`build_udp_frame`]).

use std::net::Ipv4Addr;

pub use crate::platform::checksum::{checksum, checksum_add, checksum_finish};

use crate::device::MacAddr;
use crate::platform::dma::TxOffload;

/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// IP protocol number of ICMP.
pub const IPPROTO_ICMP: u8 = 1;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;
/// Length of an Ethernet header (no tag).
pub const ETH_HEADER: usize = 14;
/// Smallest Ethernet frame without FCS; shorter frames are padded with zeros.
pub const ETH_MIN_FRAME: usize = 60;

/// Why a header view could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer is shorter than the header (or than the length the header claims).
    #[error("{layer} truncated: need {need} bytes, have {have}")]
    Truncated {
        /// The protocol.
        layer: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes there.
        have: usize,
    },
    /// A field holds a value the view cannot work with.
    #[error("{layer}: {what}")]
    Malformed {
        /// The protocol.
        layer: &'static str,
        /// What is wrong.
        what: &'static str,
    },
}

fn need(layer: &'static str, have: usize, need: usize) -> Result<(), WireError> {
    if have < need {
        Err(WireError::Truncated { layer, need, have })
    } else {
        Ok(())
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn mac_at(b: &[u8], at: usize) -> MacAddr {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[at..at + 6]);
    MacAddr(m)
}

fn ip_at(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

/// An untagged Ethernet II frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// A view, checking that the header fits.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        need("Ethernet", buffer.as_ref().len(), ETH_HEADER)?;
        Ok(EthernetFrame { buffer })
    }
    /// Destination address.
    pub fn dst(&self) -> MacAddr {
        mac_at(self.buffer.as_ref(), 0)
    }
    /// Source address.
    pub fn src(&self) -> MacAddr {
        mac_at(self.buffer.as_ref(), 6)
    }
    /// Ethertype.
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), 12)
    }
    /// Everything after the header (padding included).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[ETH_HEADER..]
    }
    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    pub fn set_dst(&mut self, m: MacAddr) {
        self.buffer.as_mut()[0..6].copy_from_slice(&m.0);
    }
    /// Sets the source address.
    pub fn set_src(&mut self, m: MacAddr) {
        self.buffer.as_mut()[6..12].copy_from_slice(&m.0);
    }
    /// Sets the ethertype.
    pub fn set_ethertype(&mut self, t: u16) {
        put16(self.buffer.as_mut(), 12, t);
    }
    /// Everything after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[ETH_HEADER..]
    }
}

/// ARP operation: request.
pub const ARP_REQUEST: u16 = 1;
/// ARP operation: reply.
pub const ARP_REPLY: u16 = 2;
/// Length of an Ethernet/IPv4 ARP packet.
pub const ARP_LEN: usize = 28;

/// An ARP packet for Ethernet and IPv4 (the only kind [`ArpPacket::new_checked`] accepts).
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// A view, checking the length and that it is Ethernet (htype 1, hlen 6) over IPv4
    /// (ptype 0x0800, plen 4).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        need("ARP", b.len(), ARP_LEN)?;
        if be16(b, 0) != 1 || be16(b, 2) != ETHERTYPE_IPV4 || b[4] != 6 || b[5] != 4 {
            return Err(WireError::Malformed {
                layer: "ARP",
                what: "not Ethernet/IPv4 ARP",
            });
        }
        Ok(ArpPacket { buffer })
    }
    /// Operation ([`ARP_REQUEST`], [`ARP_REPLY`]).
    pub fn operation(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }
    /// Sender hardware address.
    pub fn sender_mac(&self) -> MacAddr {
        mac_at(self.buffer.as_ref(), 8)
    }
    /// Sender protocol address.
    pub fn sender_ip(&self) -> Ipv4Addr {
        ip_at(self.buffer.as_ref(), 14)
    }
    /// Target hardware address.
    pub fn target_mac(&self) -> MacAddr {
        mac_at(self.buffer.as_ref(), 18)
    }
    /// Target protocol address.
    pub fn target_ip(&self) -> Ipv4Addr {
        ip_at(self.buffer.as_ref(), 24)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Writes the fixed Ethernet/IPv4 fields and `op`; the addresses are set separately.
    pub fn init(buffer: T, op: u16) -> Result<Self, WireError> {
        let mut buffer = buffer;
        let b = buffer.as_mut();
        need("ARP", b.len(), ARP_LEN)?;
        put16(b, 0, 1);
        put16(b, 2, ETHERTYPE_IPV4);
        b[4] = 6;
        b[5] = 4;
        put16(b, 6, op);
        Ok(ArpPacket { buffer })
    }
    /// Sets the sender's addresses.
    pub fn set_sender(&mut self, mac: MacAddr, ip: Ipv4Addr) {
        let b = self.buffer.as_mut();
        b[8..14].copy_from_slice(&mac.0);
        b[14..18].copy_from_slice(&ip.octets());
    }
    /// Sets the target's addresses.
    pub fn set_target(&mut self, mac: MacAddr, ip: Ipv4Addr) {
        let b = self.buffer.as_mut();
        b[18..24].copy_from_slice(&mac.0);
        b[24..28].copy_from_slice(&ip.octets());
    }
}

/// An IPv4 packet (header and payload, bounded by the header's total length).
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// A view, checking version 4, a header length of at least 20 bytes, and that the buffer
    /// holds the total length the header claims (trailing Ethernet padding is allowed).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        need("IPv4", b.len(), 20)?;
        if b[0] >> 4 != 4 {
            return Err(WireError::Malformed {
                layer: "IPv4",
                what: "version is not 4",
            });
        }
        let hl = usize::from(b[0] & 0xf) * 4;
        let total = usize::from(be16(b, 2));
        if hl < 20 || total < hl {
            return Err(WireError::Malformed {
                layer: "IPv4",
                what: "header length below 20 or above the total length",
            });
        }
        need("IPv4", b.len(), total)?;
        Ok(Ipv4Packet { buffer })
    }
    /// Header length in bytes.
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[0] & 0xf) * 4
    }
    /// Total length (header and payload).
    pub fn total_len(&self) -> usize {
        usize::from(be16(self.buffer.as_ref(), 2))
    }
    /// Whether this is a fragment (MF set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        be16(self.buffer.as_ref(), 6) & 0x3fff != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }
    /// Protocol number.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[9]
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        ip_at(self.buffer.as_ref(), 12)
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        ip_at(self.buffer.as_ref(), 16)
    }
    /// Whether the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum(&self.buffer.as_ref()[..self.header_len()]) == 0
    }
    /// The payload (up to the total length; Ethernet padding excluded).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Writes a 20-byte header without options (DF set, identification 0) for `payload_len`
    /// bytes of payload, with its checksum.
    pub fn init(
        buffer: T,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        protocol: u8,
        payload_len: usize,
    ) -> Result<Self, WireError> {
        let mut buffer = buffer;
        let b = buffer.as_mut();
        let total = 20 + payload_len;
        need("IPv4", b.len(), total)?;
        let total16 = u16::try_from(total).map_err(|_| WireError::Malformed {
            layer: "IPv4",
            what: "total length above 65535",
        })?;
        b[0] = 0x45;
        b[1] = 0;
        put16(b, 2, total16);
        put16(b, 4, 0);
        put16(b, 6, 0x4000);
        b[8] = 64;
        b[9] = protocol;
        b[12..16].copy_from_slice(&src.octets());
        b[16..20].copy_from_slice(&dst.octets());
        let mut p = Ipv4Packet { buffer };
        p.fill_checksum();
        Ok(p)
    }
    /// Sets the source address (checksum not updated).
    pub fn set_src(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[12..16].copy_from_slice(&a.octets());
    }
    /// Sets the destination address (checksum not updated).
    pub fn set_dst(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[16..20].copy_from_slice(&a.octets());
    }
    /// Sets the time to live (checksum not updated).
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[8] = ttl;
    }
    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        put16(b, 10, 0);
        let c = checksum(&b[..hl]);
        put16(b, 10, c);
    }
    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, total) = (self.header_len(), self.total_len());
        &mut self.buffer.as_mut()[hl..total]
    }
}

/// ICMP type: echo reply.
pub const ICMP_ECHO_REPLY: u8 = 0;
/// ICMP type: echo request.
pub const ICMP_ECHO_REQUEST: u8 = 8;

/// An ICMP message (the whole IPv4 payload: the checksum covers all of it).
#[derive(Debug, Clone)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// A view, checking the 8-byte header fits.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        need("ICMP", buffer.as_ref().len(), 8)?;
        Ok(IcmpPacket { buffer })
    }
    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }
    /// The checksum field.
    pub fn checksum_field(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
    /// Echo identifier.
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }
    /// Echo sequence number.
    pub fn echo_seq(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }
    /// Whether the checksum over the whole message is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum(self.buffer.as_ref()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpPacket<T> {
    /// Sets the type.
    pub fn set_msg_type(&mut self, t: u8) {
        self.buffer.as_mut()[0] = t;
    }
    /// Sets the code.
    pub fn set_code(&mut self, c: u8) {
        self.buffer.as_mut()[1] = c;
    }
    /// Sets the echo identifier and sequence number.
    pub fn set_echo(&mut self, ident: u16, seq: u16) {
        let b = self.buffer.as_mut();
        put16(b, 4, ident);
        put16(b, 6, seq);
    }
    /// Recomputes the checksum over the whole message.
    pub fn fill_checksum(&mut self) {
        let b = self.buffer.as_mut();
        put16(b, 2, 0);
        let c = checksum(b);
        put16(b, 2, c);
    }
}

/// A UDP datagram (the whole IPv4 payload).
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// A view, checking the header fits and the length field is within the buffer.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let b = buffer.as_ref();
        need("UDP", b.len(), 8)?;
        let len = usize::from(be16(b, 4));
        if len < 8 {
            return Err(WireError::Malformed {
                layer: "UDP",
                what: "length below 8",
            });
        }
        need("UDP", b.len(), len)?;
        Ok(UdpPacket { buffer })
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }
    /// The payload (bounded by the length field).
    pub fn payload(&self) -> &[u8] {
        let len = usize::from(be16(self.buffer.as_ref(), 4));
        &self.buffer.as_ref()[8..len]
    }
    /// Whether the checksum (over the pseudo-header of `src`, `dst`) is correct or absent (0).
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.buffer.as_ref();
        let len = usize::from(be16(b, 4));
        be16(b, 6) == 0 || checksum_finish(udp_pseudo(src, dst, len, &b[..len])) == 0
    }
}

fn udp_pseudo(src: Ipv4Addr, dst: Ipv4Addr, len: usize, datagram: &[u8]) -> u32 {
    let mut sum = checksum_add(0, &src.octets());
    sum = checksum_add(sum, &dst.octets());
    sum += u32::from(IPPROTO_UDP) + len as u32;
    checksum_add(sum, datagram)
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Writes the header for `payload_len` bytes of payload (checksum 0 until
    /// [`fill_checksum`](Self::fill_checksum)).
    pub fn init(
        buffer: T,
        src_port: u16,
        dst_port: u16,
        payload_len: usize,
    ) -> Result<Self, WireError> {
        let mut buffer = buffer;
        let b = buffer.as_mut();
        let len = 8 + payload_len;
        need("UDP", b.len(), len)?;
        put16(b, 0, src_port);
        put16(b, 2, dst_port);
        put16(b, 4, len as u16);
        put16(b, 6, 0);
        Ok(UdpPacket { buffer })
    }
    /// The payload, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(be16(self.buffer.as_ref(), 4));
        &mut self.buffer.as_mut()[8..len]
    }
    /// Computes the checksum with the pseudo-header (0 is sent as 0xffff, RFC 768).
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        let len = usize::from(be16(self.buffer.as_ref(), 4));
        let b = self.buffer.as_mut();
        put16(b, 6, 0);
        let c = match checksum_finish(udp_pseudo(src, dst, len, &b[..len])) {
            0 => 0xffff,
            c => c,
        };
        put16(b, 6, c);
    }
}

/// What a generated frame looks like (everything but the sequence number).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpFlow {
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// Source MAC.
    pub src_mac: MacAddr,
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// Source UDP port.
    pub src_port: u16,
    /// Destination UDP port.
    pub dst_port: u16,
    /// Frame length without FCS and without any VLAN tag ([`MIN_UDP_FRAME`]..=[`MAX_UDP_FRAME`]).
    pub size: usize,
}

/// Magic at the start of a generated UDP payload, before the 8-byte sequence number.
pub const SEQ_MAGIC: [u8; 4] = *b"vfnc";
/// Smallest generated frame: Ethernet, IPv4 and UDP headers, magic and sequence number, padded
/// to the Ethernet minimum.
pub const MIN_UDP_FRAME: usize = ETH_MIN_FRAME;
/// Largest generated frame at MTU 1500.
pub const MAX_UDP_FRAME: usize = 9014;
/// Largest TCP frame [`build_tcp_frame`] makes: an IPv4 packet of 65,535 bytes, the most a TSO
/// request can be (sent as segments of its MSS).
pub const MAX_TCP_FRAME: usize = ETH_HEADER + 65_535;
/// Bytes of the headers [`build_tcp_frame`] writes: Ethernet, IPv4 and TCP without options.
pub const TCP_FRAME_HEADERS: usize = ETH_HEADER + 40;

/// The offload request for a frame [`build_tcp_frame`] made (Ethernet, IPv4 and TCP without
/// options): its IPv4 and TCP checksums, and TSO with MSS `tso` when given.
pub fn tcp_frame_offload(tso: Option<u16>) -> TxOffload {
    let mut flags = TxOffload::IP_CSUM | TxOffload::TCP_CSUM;
    if tso.is_some() {
        flags |= TxOffload::TSO;
    }
    TxOffload {
        flags,
        l2_len: ETH_HEADER as u8,
        l3_len: 20,
        l4_len: 20,
        tso_mss: tso.unwrap_or(0),
    }
}

/// Writes an untagged IPv4/UDP frame of `flow.size` bytes into `out` (cleared first): valid IPv4
/// and UDP checksums, a payload of [`SEQ_MAGIC`], `seq` (big endian) and a byte pattern.
/// Returns false (and leaves `out` empty) when the size is outside
/// [`MIN_UDP_FRAME`]..=[`MAX_UDP_FRAME`].
pub fn build_udp_frame(flow: &UdpFlow, seq: u64, out: &mut Vec<u8>) -> bool {
    out.clear();
    if !(MIN_UDP_FRAME..=MAX_UDP_FRAME).contains(&flow.size) {
        return false;
    }
    out.resize(flow.size, 0);
    let payload_len = flow.size - ETH_HEADER - 20 - 8;
    let mut eth = EthernetFrame {
        buffer: &mut out[..],
    };
    eth.set_dst(flow.dst_mac);
    eth.set_src(flow.src_mac);
    eth.set_ethertype(ETHERTYPE_IPV4);
    let Ok(mut ip) = Ipv4Packet::init(
        eth.payload_mut(),
        flow.src_ip,
        flow.dst_ip,
        IPPROTO_UDP,
        8 + payload_len,
    ) else {
        out.clear();
        return false;
    };
    let Ok(mut udp) = UdpPacket::init(ip.payload_mut(), flow.src_port, flow.dst_port, payload_len)
    else {
        out.clear();
        return false;
    };
    let p = udp.payload_mut();
    p[..4].copy_from_slice(&SEQ_MAGIC);
    p[4..12].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in p[12..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_add(seq as u8);
    }
    udp.fill_checksum(flow.src_ip, flow.dst_ip);
    true
}

/// Builds a TCP/IPv4 frame of `flow.size` bytes (60..=[`MAX_TCP_FRAME`]) into `out`: the flow's
/// addresses and ports, TCP sequence number `seq`, ACK and PSH, a payload of the UDP
/// generator's pattern, and checksum fields left 0 for the port's transmit offloads to fill
/// ([`tcp_frame_offload`] asks for them). Returns false (and an empty `out`)
/// for a size outside the range.
pub fn build_tcp_frame(flow: &UdpFlow, seq: u32, out: &mut Vec<u8>) -> bool {
    out.clear();
    let headers = TCP_FRAME_HEADERS;
    if !(ETH_MIN_FRAME..=MAX_TCP_FRAME).contains(&flow.size) {
        return false;
    }
    out.resize(flow.size.max(headers), 0);
    let payload = out.len() - headers;
    out[..6].copy_from_slice(&flow.dst_mac.0);
    out[6..12].copy_from_slice(&flow.src_mac.0);
    out[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let ip = &mut out[ETH_HEADER..];
    ip[..4].copy_from_slice(&[0x45, 0, 0, 0]);
    ip[2..4].copy_from_slice(&((40 + payload) as u16).to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&flow.src_ip.octets());
    ip[16..20].copy_from_slice(&flow.dst_ip.octets());
    let tcp = &mut ip[20..];
    tcp[..2].copy_from_slice(&flow.src_port.to_be_bytes());
    tcp[2..4].copy_from_slice(&flow.dst_port.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x18; // ACK | PSH
    tcp[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    for (i, b) in tcp[20..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_add(seq as u8);
    }
    true
}

/// The sequence number of a frame [`build_udp_frame`] made (untagged), if it is one.
pub fn udp_frame_seq(frame: &[u8]) -> Option<u64> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != ETHERTYPE_IPV4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.protocol() != IPPROTO_UDP {
        return None;
    }
    let udp = UdpPacket::new_checked(ip.payload()).ok()?;
    let p = udp.payload();
    if p.len() < 12 || p[..4] != SEQ_MAGIC {
        return None;
    }
    Some(u64::from_be_bytes(p[4..12].try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(size: usize) -> UdpFlow {
        UdpFlow {
            dst_mac: MacAddr::BROADCAST,
            src_mac: MacAddr([2, 0, 0, 0, 0, 1]),
            src_ip: Ipv4Addr::new(198, 18, 0, 1),
            dst_ip: Ipv4Addr::new(198, 18, 0, 2),
            src_port: 1024,
            dst_port: 9,
            size,
        }
    }

    #[test]
    fn checksum_matches_rfc1071_example() {
        // RFC 1071 section 3: the sum of these words is 0xddf2, so the checksum is !0xddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum(&data), !0xddf2);
        assert_eq!(checksum(&[0xab]), !0xab00);
    }

    #[test]
    fn generated_frames_are_valid_and_carry_their_sequence() {
        let mut f = Vec::new();
        for size in [60, 64, 128, 1514, 9014] {
            assert!(build_udp_frame(&flow(size), 0x0102_0304_0506_0708, &mut f));
            assert_eq!(f.len(), size);
            let eth = EthernetFrame::new_checked(&f[..]).unwrap();
            assert_eq!(eth.ethertype(), ETHERTYPE_IPV4);
            let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
            assert!(ip.verify_checksum());
            assert_eq!(ip.total_len(), size - 14);
            let udp = UdpPacket::new_checked(ip.payload()).unwrap();
            assert!(udp.verify_checksum(ip.src(), ip.dst()));
            assert_eq!(udp_frame_seq(&f), Some(0x0102_0304_0506_0708));
        }
        assert!(!build_udp_frame(&flow(59), 0, &mut f));
        assert!(f.is_empty());
        assert!(!build_udp_frame(&flow(MAX_UDP_FRAME + 1), 0, &mut f));
    }

    #[test]
    fn generated_tcp_frames_take_their_checksums_from_the_offloads() {
        use crate::devices::offload::soft::resolve;
        use crate::devices::offload::TxCaps;
        let pool = crate::devices::offload::tests::pool(64);
        let mut f = Vec::new();
        for (size, mss) in [(60, 0), (1514, 0), (30_000, 1448)] {
            let mut fl = flow(size);
            fl.src_port = 40_000;
            assert!(build_tcp_frame(&fl, 77, &mut f));
            assert_eq!(f.len(), size);
            let mut p = pool.packet_from(&f).unwrap();
            p.set_tx_offload(tcp_frame_offload((mss > 0).then_some(mss)));
            let mut batch = vec![p];
            assert_eq!(resolve(&mut batch, TxCaps::NONE).dropped, 0);
            assert_eq!(batch.len(), if mss > 0 { 21 } else { 1 });
            for q in &batch {
                crate::devices::offload::tests::verify(&q.to_vec(), 14);
            }
        }
        assert!(!build_tcp_frame(&flow(MAX_TCP_FRAME + 1), 0, &mut f));
    }

    #[test]
    fn truncated_and_malformed_headers_are_refused() {
        assert!(EthernetFrame::new_checked(&[0u8; 13][..]).is_err());
        assert!(ArpPacket::new_checked(&[0u8; 28][..]).is_err()); // htype 0
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[3] = 40; // claims 40 bytes, has 20
        assert!(matches!(
            Ipv4Packet::new_checked(&ip[..]),
            Err(WireError::Truncated { .. })
        ));
        ip[0] = 0x65;
        assert!(matches!(
            Ipv4Packet::new_checked(&ip[..]),
            Err(WireError::Malformed { .. })
        ));
    }
}
