//! What the software 82599 needs to know about a frame: its VLAN tags, its L3/L4 headers (for
//! RSS and checksum status), the Toeplitz hash and the Ethernet FCS.
//!
//! Everything here reads bytes the driver handed to the "wire", so every access is bounds
//! checked: a frame too short for the header its ethertype promises is simply "not that kind of
//! frame" (untagged, no L3), never a panic.

use crate::platform::checksum::{checksum, checksum_add, checksum_finish};

/// Big-endian 16-bit word at `off`, if the frame is long enough.
pub(super) fn be16(f: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*f.get(off)?, *f.get(off + 1)?]))
}

/// How the receive path sees a frame's VLAN tags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct VlanView {
    /// A tag the filter and strip logic act on was recognised.
    pub tagged: bool,
    /// Byte offset of that tag's TPID (12, or 16 in extended mode).
    pub tag_off: usize,
    /// Its TCI.
    pub tci: u16,
    /// Recognised tags (each allows 4 more bytes of frame).
    pub tags: usize,
}

/// Classifies a received frame's tags.
///
/// Normal mode: tagged iff the ethertype at 12 equals `vet` (VLNCTRL.VET). Extended (double VLAN)
/// mode (`outer = Some(EXVET.VET_EXT)`): the outer tag at 12 must carry `outer`; the tag filter
/// and strip act on the inner tag at 16, which must carry `vet`. A frame whose outer TPID does
/// not match is untagged to the model (the real part assumes an outer tag on every frame in
/// this mode; what it does with frames that have none is not documented in our sources).
pub(super) fn vlan_view(f: &[u8], vet: u16, outer: Option<u16>) -> VlanView {
    match outer {
        None => match (be16(f, 12), be16(f, 14), f.len() >= 18) {
            (Some(t), Some(tci), true) if t == vet => VlanView {
                tagged: true,
                tag_off: 12,
                tci,
                tags: 1,
            },
            _ => VlanView::default(),
        },
        Some(o) => {
            if be16(f, 12) != Some(o) || f.len() < 18 {
                return VlanView::default();
            }
            match (be16(f, 16), be16(f, 18), f.len() >= 22) {
                (Some(t), Some(tci), true) if t == vet => VlanView {
                    tagged: true,
                    tag_off: 16,
                    tci,
                    tags: 2,
                },
                _ => VlanView {
                    tags: 1,
                    ..VlanView::default()
                },
            }
        }
    }
}

/// L4 protocol of a parsed frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum L4 {
    Tcp,
    Udp,
    Other,
}

/// The L3/L4 headers of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Headers {
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// Offset of the IP header.
    pub l3: usize,
    /// Offset of the L4 header.
    pub l4_off: usize,
    /// L4 protocol (only when not a fragment).
    pub l4: L4,
    /// End of the IP datagram (from its length field), within the frame.
    pub end: usize,
}

/// Finds the IP header behind up to two tags with any of the usual TPIDs (or `extra`).
/// IPv6 extension headers are not walked: the next header must be TCP or UDP directly.
pub(super) fn headers(f: &[u8], extra: [u16; 2]) -> Option<Headers> {
    let mut off = 12;
    let mut et = be16(f, off)?;
    for _ in 0..2 {
        if matches!(et, 0x8100 | 0x88a8 | 0x9100) || extra.contains(&et) {
            off += 4;
            et = be16(f, off)?;
        }
    }
    let l3 = off + 2;
    match et {
        0x0800 => {
            let vihl = *f.get(l3)?;
            let ihl = usize::from(vihl & 0xf) * 4;
            if vihl >> 4 != 4 || ihl < 20 {
                return None;
            }
            let total = usize::from(be16(f, l3 + 2)?);
            let end = l3 + total;
            if total < ihl || end > f.len() {
                return None;
            }
            let frag = be16(f, l3 + 6)? & 0x3fff != 0;
            let l4 = match (frag, f[l3 + 9]) {
                (false, 6) => L4::Tcp,
                (false, 17) => L4::Udp,
                _ => L4::Other,
            };
            Some(Headers {
                v6: false,
                l3,
                l4_off: l3 + ihl,
                l4,
                end,
            })
        }
        0x86dd => {
            if *f.get(l3)? >> 4 != 6 {
                return None;
            }
            let end = l3 + 40 + usize::from(be16(f, l3 + 4)?);
            if end > f.len() {
                return None;
            }
            let l4 = match f[l3 + 6] {
                6 => L4::Tcp,
                17 => L4::Udp,
                _ => L4::Other,
            };
            Some(Headers {
                v6: true,
                l3,
                l4_off: l3 + 40,
                l4,
                end,
            })
        }
        _ => None,
    }
}

/// RSS hash types (write-back pkt_info bits 3:0) and the MRQC field bit enabling each.
const RSS_TCP_V4: (u16, u32) = (1, 1 << 16);
const RSS_V4: (u16, u32) = (2, 1 << 17);
const RSS_TCP_V6: (u16, u32) = (3, 1 << 21);
const RSS_V6: (u16, u32) = (5, 1 << 20);
const RSS_UDP_V4: (u16, u32) = (7, 1 << 22);
const RSS_UDP_V6: (u16, u32) = (8, 1 << 23);

/// The RSS hash of a frame: `(rss type, hash)`, or `None` when MRQC enables no field that fits.
pub(super) fn rss(f: &[u8], h: Option<Headers>, mrqc: u32, key: &[u8; 40]) -> Option<(u16, u32)> {
    let h = h?;
    let (alen, ports_ok) = (if h.v6 { 16 } else { 4 }, h.l4_off + 4 <= h.end);
    let (l4_type, l3_type) = match (h.v6, h.l4) {
        (false, L4::Tcp) => (Some(RSS_TCP_V4), RSS_V4),
        (false, L4::Udp) => (Some(RSS_UDP_V4), RSS_V4),
        (false, L4::Other) => (None, RSS_V4),
        (true, L4::Tcp) => (Some(RSS_TCP_V6), RSS_V6),
        (true, L4::Udp) => (Some(RSS_UDP_V6), RSS_V6),
        (true, L4::Other) => (None, RSS_V6),
    };
    let src = if h.v6 { h.l3 + 8 } else { h.l3 + 12 };
    let mut input = [0u8; 36];
    input[..2 * alen].copy_from_slice(&f[src..src + 2 * alen]);
    if let Some((t, _)) = l4_type.filter(|&(_, bit)| mrqc & bit != 0 && ports_ok) {
        input[2 * alen..2 * alen + 4].copy_from_slice(&f[h.l4_off..h.l4_off + 4]);
        return Some((t, toeplitz(key, &input[..2 * alen + 4])));
    }
    (mrqc & l3_type.1 != 0).then(|| (l3_type.0, toeplitz(key, &input[..2 * alen])))
}

/// The Toeplitz hash of `input` under the 40-byte `key` (Microsoft RSS specification).
pub(super) fn toeplitz(key: &[u8; 40], input: &[u8]) -> u32 {
    let bit = |i: usize| -> u32 {
        key.get(i / 8)
            .map_or(0, |b| u32::from(b >> (7 - (i % 8)) & 1))
    };
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    let mut hash = 0;
    for (i, byte) in input.iter().enumerate() {
        for b in 0..8 {
            if byte & (0x80 >> b) != 0 {
                hash ^= window;
            }
            window = (window << 1) | bit(32 + i * 8 + b);
        }
    }
    hash
}

/// Checksum status of a received frame, as write-back status/error bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Csum {
    /// Status bits (IPCS b6, L4CS b5, UDPCS b4).
    pub status: u32,
    /// Error bits (IPE b31, TCPE b30).
    pub errors: u32,
}

/// Verifies the IPv4 header checksum and the TCP/UDP checksum, as the 82599 always does.
pub(super) fn checksums(f: &[u8], h: Option<Headers>) -> Csum {
    let Some(h) = h else {
        return Csum::default();
    };
    let mut c = Csum::default();
    if !h.v6 {
        c.status |= 1 << 6;
        if checksum_finish(checksum_add(0, &f[h.l3..h.l4_off])) != 0 {
            c.errors |= 1 << 31;
        }
    }
    if h.l4 == L4::Other || h.l4_off > h.end {
        return c;
    }
    let seg = &f[h.l4_off..h.end];
    let proto: u32 = if h.l4 == L4::Tcp { 6 } else { 17 };
    if h.l4 == L4::Udp {
        if seg.len() < 8 {
            return c;
        }
        if !h.v6 && be16(seg, 6) == Some(0) {
            // No UDP checksum to verify, but the 82599 erratum: such a frame can come with
            // L4CS and TCPE set (Linux's __IXGBE_RX_CSUM_UDP_ZERO_ERR, DPDK's
            // rx_udp_csum_zero_err: both ignore TCPE for UDP on the 82599). The model always
            // does it, so a driver that believes the error is caught.
            c.status |= 1 << 5;
            c.errors |= 1 << 30;
            return c;
        }
        c.status |= 1 << 4;
    } else if seg.len() < 20 {
        return c;
    }
    c.status |= 1 << 5;
    let pseudo = if h.v6 {
        checksum_add(proto + seg.len() as u32, &f[h.l3 + 8..h.l3 + 40])
    } else {
        checksum_add(proto + seg.len() as u32, &f[h.l3 + 12..h.l3 + 20])
    };
    if checksum_finish(checksum_add(pseudo, seg)) != 0 {
        c.errors |= 1 << 30;
    }
    c
}

/// Packet-type bits of write-back pkt_info (IPv4 b4, IPv6 b6, TCP b8, UDP b9).
pub(super) fn packet_type(h: Option<Headers>) -> u16 {
    let Some(h) = h else { return 0 };
    let l3 = if h.v6 { 1 << 6 } else { 1 << 4 };
    l3 | match h.l4 {
        L4::Tcp => 1 << 8,
        L4::Udp => 1 << 9,
        L4::Other => 0,
    }
}

/// An IPv4/UDP frame of `size` bytes (at least 60) with valid checksums.
pub(super) fn udp_frame(dst: [u8; 6], src: [u8; 6], ports: (u16, u16), size: usize) -> Vec<u8> {
    let size = size.clamp(60, 9000);
    let mut f = vec![0u8; size];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&src);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (size - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let c = checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp_len = ip_len - 20;
    f[34..36].copy_from_slice(&ports.0.to_be_bytes());
    f[36..38].copy_from_slice(&ports.1.to_be_bytes());
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let end = 34 + usize::from(udp_len);
    let pseudo = checksum_add(17 + u32::from(udp_len), &f[26..34]);
    let c = match checksum_finish(checksum_add(pseudo, &f[34..end])) {
        0 => 0xffff,
        c => c,
    };
    f[40..42].copy_from_slice(&c.to_be_bytes());
    f
}

const fn crc_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static CRC_TABLE: [u32; 256] = crc_table();

/// The Ethernet FCS (CRC-32) of a frame, in wire (little-endian) byte order.
pub(super) fn fcs(f: &[u8]) -> [u8; 4] {
    let mut c = u32::MAX;
    for &b in f {
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    (!c).to_le_bytes()
}

/// Inserts a tag (TPID, TCI) after the two MAC addresses. Frames shorter than 12 bytes get the
/// tag appended (they are malformed anyway).
pub(super) fn insert_tag(f: &mut Vec<u8>, tpid: u16, tci: u16) {
    let at = f.len().min(12);
    let [a, b] = tpid.to_be_bytes();
    let [c, d] = tci.to_be_bytes();
    // Grow by four bytes, move the rest up, write the tag (`splice` did the same with its
    // iterator machinery, several times slower per frame).
    let len = f.len();
    f.extend_from_slice(&[0; 4]);
    f.copy_within(at..len, at + 4);
    f[at..at + 4].copy_from_slice(&[a, b, c, d]);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS_KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f,
        0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
    ];

    #[test]
    fn toeplitz_matches_the_microsoft_verification_vectors() {
        // Source 66.9.149.187:2794, destination 161.142.100.80:1766.
        let input = [66, 9, 149, 187, 161, 142, 100, 80, 0x0a, 0xea, 0x06, 0xe6];
        assert_eq!(toeplitz(&MS_KEY, &input[..8]), 0x323e_8fc2);
        assert_eq!(toeplitz(&MS_KEY, &input), 0x51cc_c178);
        // Source 199.92.111.2:14230, destination 65.69.140.83:4739.
        let input = [199, 92, 111, 2, 65, 69, 140, 83, 0x37, 0x96, 0x12, 0x83];
        assert_eq!(toeplitz(&MS_KEY, &input[..8]), 0xd718_262a);
        assert_eq!(toeplitz(&MS_KEY, &input), 0xc626_b0ea);
    }

    #[test]
    fn fcs_of_the_check_string() {
        assert_eq!(u32::from_le_bytes(fcs(b"123456789")), 0xcbf4_3926);
    }

    #[test]
    fn short_frames_are_untagged_and_headerless() {
        let f = [0u8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 0x81, 0x00, 0x00];
        assert_eq!(vlan_view(&f, 0x8100, None), VlanView::default());
        assert_eq!(vlan_view(&f, 0x8100, Some(0x8100)), VlanView::default());
        assert!(headers(&f, [0, 0]).is_none());
        assert_eq!(checksums(&f, None), Csum::default());
    }
}
