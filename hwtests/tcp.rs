//! A minimal TCP client over raw frames, for the offload tests against Linux's stack
//! (hwtests/offload_tests.rs, driven over our port by hwtests/ip_port.rs), and the IPv4/UDP
//! frame builder they share.
//!
//! What it does and no more: one connection from our port to a Linux listener, built from
//! frames we write ourselves. [`Flow::syn`] opens it (MSS and window-scale options),
//! [`Flow::on_syn_ack`] takes Linux's answer, [`Flow::segment`] builds the ACK and data segments
//! (and the one TSO frame), [`Flow::rst`] ends it. No retransmission, no congestion control, no
//! receive side: the tests send into a window Linux advertised and check what Linux's socket
//! reads. Every frame leaves with 0xdead in its checksum fields: the device writes them
//! ([`offload`] says which), and Linux drops whatever arrives with a bad one.

use std::net::Ipv4Addr;

use vfio_nic::device::MacAddr;
use vfio_nic::platform::dma::TxOffload;

/// What the frames put in every checksum field, for the device to overwrite.
pub const BAD_CSUM: u16 = 0xdead;
/// Ethernet + IPv4 (no options).
const L2: usize = 14;
const L3: usize = 20;

/// TCP flag bits.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

/// One end of the connection.
#[derive(Clone, Copy, Debug)]
pub struct End {
    pub mac: MacAddr,
    pub ip: Ipv4Addr,
    pub port: u16,
}

/// Ethernet + IPv4 header for `payload_len` bytes behind it, protocol `proto`, with a bad
/// header checksum (for the device to write).
fn eth_ipv4(src: &End, dst: &End, proto: u8, id: u16, payload_len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(L2 + L3 + payload_len);
    f.extend_from_slice(&dst.mac.0);
    f.extend_from_slice(&src.mac.0);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (L3 + payload_len) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(&0x4000u16.to_be_bytes()); // DF
    f.extend_from_slice(&[64, proto]);
    f.extend_from_slice(&BAD_CSUM.to_be_bytes());
    f.extend_from_slice(&src.ip.octets());
    f.extend_from_slice(&dst.ip.octets());
    f
}

/// A UDP/IPv4 datagram from `src` to `dst`, both checksum fields 0xdead.
pub fn udp_frame(src: &End, dst: &End, id: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = eth_ipv4(src, dst, 17, id, 8 + payload.len());
    f.extend_from_slice(&src.port.to_be_bytes());
    f.extend_from_slice(&dst.port.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&BAD_CSUM.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The offload request for a frame these builders made: IPv4 header checksum and the L4
/// checksum (UDP or TCP, from the IP header), and TSO with `tso_mss` when given.
pub fn offload(frame: &[u8], tso_mss: Option<u16>) -> TxOffload {
    let tcp = frame[L2 + 9] == 6;
    let l4_len = if tcp {
        (frame[L2 + L3 + 12] >> 4) * 4
    } else {
        8
    };
    let mut flags = TxOffload::IP_CSUM
        | if tcp {
            TxOffload::TCP_CSUM
        } else {
            TxOffload::UDP_CSUM
        };
    if tso_mss.is_some() {
        flags |= TxOffload::TSO;
    }
    TxOffload {
        flags,
        l2_len: L2 as u8,
        l3_len: L3 as u16,
        l4_len,
        tso_mss: tso_mss.unwrap_or(0),
    }
}

/// The Internet checksum of `bytes` (RFC 1071), with `sum` carried in.
fn csum(bytes: &[u8], mut sum: u32) -> u16 {
    for c in bytes.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Writes correct IPv4 and L4 checksums into a frame of [`udp_frame`] or [`Flow::segment`]
/// (for the control frames that go without offloads).
pub fn fill_checksums(f: &mut [u8]) {
    f[L2 + 10..L2 + 12].fill(0);
    let ip = csum(&f[L2..L2 + L3], 0);
    f[L2 + 10..L2 + 12].copy_from_slice(&ip.to_be_bytes());
    let proto = f[L2 + 9];
    let field = l4_csum_field(f);
    f[field..field + 2].fill(0);
    let l4_len = f.len() - L2 - L3;
    let mut pseudo = Vec::with_capacity(12);
    pseudo.extend_from_slice(&f[L2 + 12..L2 + 20]);
    pseudo.extend_from_slice(&[0, proto]);
    pseudo.extend_from_slice(&(l4_len as u16).to_be_bytes());
    let seed: u32 = pseudo
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    let mut l4 = csum(&f[L2 + L3..], seed);
    if proto == 17 && l4 == 0 {
        l4 = 0xffff;
    }
    f[field..field + 2].copy_from_slice(&l4.to_be_bytes());
}

/// Where the L4 checksum of a frame of [`udp_frame`] or [`Flow::segment`] is.
fn l4_csum_field(f: &[u8]) -> usize {
    L2 + L3 + if f[L2 + 9] == 6 { 16 } else { 6 }
}

/// Makes a frame of [`udp_frame`] or [`Flow::segment`] a control frame Linux must drop for its
/// L4 checksum: correct checksums (for sending without offloads), then a wrong L4 one (0xdead,
/// or 0xbeef where 0xdead happens to be right).
pub fn spoil_l4_checksum(f: &mut [u8]) {
    fill_checksums(f);
    let field = l4_csum_field(f);
    let good = u16::from_be_bytes([f[field], f[field + 1]]);
    let wrong = if good == BAD_CSUM { 0xbeef } else { BAD_CSUM };
    f[field..field + 2].copy_from_slice(&wrong.to_be_bytes());
}

/// A TCP segment Linux sent us, as far as the client cares.
#[derive(Clone, Copy, Debug)]
pub struct Seg {
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    /// The window field as sent (unscaled).
    pub window: u16,
    /// The MSS option, if any.
    pub mss: Option<u16>,
    /// The window-scale option, if any.
    pub wscale: Option<u8>,
}

/// One connection, seen from our side.
pub struct Flow {
    pub ours: End,
    pub peer: End,
    /// The next sequence number we send.
    pub snd_nxt: u32,
    /// The next sequence number we expect from Linux (what we acknowledge).
    pub rcv_nxt: u32,
    /// Linux's window in bytes (scaled), from its latest segment.
    pub peer_window: u32,
    /// Linux's window scale (from its SYN-ACK; 0 without the option).
    pub peer_wscale: u8,
    /// The window scale we offer in the SYN.
    pub our_wscale: u8,
    ip_id: u16,
}

impl Flow {
    pub fn new(ours: End, peer: End, isn: u32) -> Flow {
        Flow {
            ours,
            peer,
            snd_nxt: isn,
            rcv_nxt: 0,
            peer_window: 0,
            peer_wscale: 0,
            our_wscale: 7,
            ip_id: 1,
        }
    }

    /// A segment from us with `flags`, TCP `options` (a multiple of 4 bytes) and `payload`; it
    /// carries our `snd_nxt` and, with ACK, our `rcv_nxt`. Advances `snd_nxt` past the payload
    /// (and past a SYN or FIN). Checksum fields hold 0xdead.
    pub fn segment(&mut self, flags: u8, options: &[u8], payload: &[u8]) -> Vec<u8> {
        let hlen = 20 + options.len();
        let mut f = eth_ipv4(&self.ours, &self.peer, 6, self.ip_id, hlen + payload.len());
        self.ip_id = self.ip_id.wrapping_add(1);
        let ack = if flags & ACK != 0 { self.rcv_nxt } else { 0 };
        f.extend_from_slice(&self.ours.port.to_be_bytes());
        f.extend_from_slice(&self.peer.port.to_be_bytes());
        f.extend_from_slice(&self.snd_nxt.to_be_bytes());
        f.extend_from_slice(&ack.to_be_bytes());
        f.push(((hlen / 4) as u8) << 4);
        f.push(flags);
        // Our receive window: we read nothing, so any size will do; 64 KiB << our scale.
        f.extend_from_slice(&0xffffu16.to_be_bytes());
        f.extend_from_slice(&BAD_CSUM.to_be_bytes());
        f.extend_from_slice(&[0, 0]); // urgent pointer
        f.extend_from_slice(options);
        f.extend_from_slice(payload);
        let phantom = u32::from(flags & (SYN | FIN) != 0);
        self.snd_nxt = self
            .snd_nxt
            .wrapping_add(payload.len() as u32)
            .wrapping_add(phantom);
        f
    }

    /// The SYN: MSS 1460 and our window scale (options of 8 bytes, so l4_len 28).
    pub fn syn(&mut self) -> Vec<u8> {
        let opts = [2, 4, 0x05, 0xb4, 1, 3, 3, self.our_wscale];
        self.segment(SYN, &opts, &[])
    }

    /// The RST that ends the connection (Linux forgets it at once, so it sends nothing more).
    pub fn rst(&mut self) -> Vec<u8> {
        self.segment(RST | ACK, &[], &[])
    }

    /// `frame`'s TCP segment if it goes from the peer to us on this connection.
    pub fn parse(&self, frame: &[u8]) -> Option<Seg> {
        if frame.len() < L2 + L3 + 20
            || frame[12..14] != [0x08, 0x00]
            || frame[L2] >> 4 != 4
            || frame[L2 + 9] != 6
        {
            return None;
        }
        let ihl = usize::from(frame[L2] & 0xf) * 4;
        let ip = &frame[L2..];
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if ip[12..16] != self.peer.ip.octets() || ip[16..20] != self.ours.ip.octets() {
            return None;
        }
        let t = ip.get(ihl..total.min(ip.len()))?;
        let be16 = |at: usize| u16::from_be_bytes([t[at], t[at + 1]]);
        let be32 = |at: usize| u32::from_be_bytes([t[at], t[at + 1], t[at + 2], t[at + 3]]);
        if t.len() < 20 || be16(0) != self.peer.port || be16(2) != self.ours.port {
            return None;
        }
        let doff = usize::from(t[12] >> 4) * 4;
        let mut seg = Seg {
            seq: be32(4),
            ack: be32(8),
            flags: t[13],
            window: be16(14),
            mss: None,
            wscale: None,
        };
        // Options: kind, length, value (NOP and END are one byte).
        let mut o = t.get(20..doff)?;
        while let Some(&kind) = o.first() {
            match kind {
                0 => break,
                1 => o = &o[1..],
                _ => {
                    let len = usize::from(*o.get(1)?);
                    if len < 2 || len > o.len() {
                        break;
                    }
                    match (kind, len) {
                        (2, 4) => seg.mss = Some(u16::from_be_bytes([o[2], o[3]])),
                        (3, 3) => seg.wscale = Some(o[2]),
                        _ => {}
                    }
                    o = &o[len..];
                }
            }
        }
        Some(seg)
    }

    /// Takes Linux's SYN-ACK: its sequence number, window and window scale. An error when
    /// `seg` is not the answer to our SYN.
    pub fn on_syn_ack(&mut self, seg: &Seg) -> Result<(), String> {
        if seg.flags & (SYN | ACK) != SYN | ACK || seg.ack != self.snd_nxt {
            return Err(format!(
                "expected a SYN-ACK acknowledging {}, got flags {:#04x} ack {}",
                self.snd_nxt, seg.flags, seg.ack
            ));
        }
        self.rcv_nxt = seg.seq.wrapping_add(1);
        self.peer_wscale = seg.wscale.unwrap_or(0);
        // The window of a SYN-ACK is never scaled (RFC 7323 2.2).
        self.peer_window = u32::from(seg.window);
        Ok(())
    }

    /// Takes a later segment's window (scaled).
    pub fn on_segment(&mut self, seg: &Seg) {
        if seg.flags & SYN == 0 && seg.flags & ACK != 0 {
            self.peer_window = u32::from(seg.window) << self.peer_wscale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ends() -> (End, End) {
        let a = End {
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            ip: Ipv4Addr::new(10, 98, 0, 2),
            port: 40000,
        };
        let b = End {
            mac: MacAddr([2, 0, 0, 0, 0, 2]),
            ip: Ipv4Addr::new(10, 98, 0, 1),
            port: 7002,
        };
        (a, b)
    }

    #[test]
    fn a_syn_ack_built_by_the_peer_parses_back() {
        let (a, b) = ends();
        let mut us = Flow::new(a, b, 1000);
        let syn = us.syn();
        assert_eq!(offload(&syn, None).l4_len, 28);
        assert_eq!(us.snd_nxt, 1001);
        // The peer's view: its SYN-ACK to our SYN.
        let mut them = Flow::new(b, a, 5000);
        them.rcv_nxt = 1001;
        let opts = [2, 4, 0x05, 0xb4, 1, 3, 3, 7];
        let mut sa = them.segment(SYN | ACK, &opts, &[]);
        fill_checksums(&mut sa);
        let seg = us.parse(&sa).expect("parsed");
        assert_eq!((seg.mss, seg.wscale, seg.ack), (Some(1460), Some(7), 1001));
        us.on_syn_ack(&seg).unwrap();
        assert_eq!((us.rcv_nxt, us.peer_wscale), (5001, 7));
        assert!(
            us.parse(&syn).is_none(),
            "our own segment is not the peer's"
        );
    }

    #[test]
    fn checksums_verify_to_zero() {
        let (a, b) = ends();
        let mut f = udp_frame(&a, &b, 7, b"hello");
        fill_checksums(&mut f);
        assert_eq!(csum(&f[L2..L2 + L3], 0), 0);
        assert_ne!(&f[L2 + L3 + 6..L2 + L3 + 8], &BAD_CSUM.to_be_bytes());
    }

    #[test]
    fn a_spoiled_frame_differs_from_a_filled_one_in_its_l4_checksum_only() {
        let (a, b) = ends();
        let udp = udp_frame(&a, &b, 7, b"hello");
        let tcp = Flow::new(a, b, 1).segment(PSH | ACK, &[], b"hello");
        for (frame, field) in [(udp, L2 + L3 + 6), (tcp, L2 + L3 + 16)] {
            let (mut good, mut bad) = (frame.clone(), frame);
            fill_checksums(&mut good);
            spoil_l4_checksum(&mut bad);
            assert_ne!(good[field..field + 2], bad[field..field + 2]);
            bad[field..field + 2].copy_from_slice(&good[field..field + 2]);
            assert_eq!(good, bad);
        }
    }
}
