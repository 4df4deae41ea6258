//! Host tests of the offload requests and their software fallback, with frames built and
//! checked here independently of the code under test (a byte-by-byte RFC 1071 sum).

use super::soft::{fill_checksums, resolve, segment, SoftError};
use super::{OffloadError, Request, TxCaps};
use crate::platform::dma::{IdentityMapper, Packet, Pool, PoolConfig, TxOffload};
use proptest::prelude::*;
use std::sync::Arc;

pub(crate) fn pool(buffers: usize) -> Pool {
    Pool::new(
        PoolConfig {
            buffers,
            ..PoolConfig::default()
        },
        Arc::new(IdentityMapper),
    )
    .unwrap()
}

/// The RFC 1071 sum, one big-endian word at a time (the definition).
fn sum16(data: &[u8]) -> u32 {
    data.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// What kind of frame [`frame`] builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Tcp4,
    Udp4,
    Tcp6,
}

/// An Ethernet frame (with `tag` VLAN tags of 4 bytes) carrying `payload` over `kind`, with
/// TCP options making a `tcp_hdr`-byte TCP header and `flags` TCP flags; checksum fields hold
/// garbage (0xdead), as an application that asks for offloads may leave them.
pub(crate) fn frame(kind: Kind, tags: usize, tcp_hdr: usize, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2];
    for _ in 0..tags {
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x64]);
    }
    let l4_len = match kind {
        Kind::Udp4 => 8 + payload.len(),
        _ => tcp_hdr + payload.len(),
    };
    let proto = if kind == Kind::Udp4 { 17 } else { 6 };
    if kind == Kind::Tcp6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[proto, 64]);
        f.extend((0..32u8).map(|i| 0x20 + i));
    } else {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, proto, 0xde, 0xad]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    }
    if kind == Kind::Udp4 {
        f.extend_from_slice(&[0x30, 0x39, 0x00, 0x35]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[0xde, 0xad]);
    } else {
        f.extend_from_slice(&[0x30, 0x39, 0x00, 0x50, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0]);
        f.push(((tcp_hdr / 4) << 4) as u8);
        f.extend_from_slice(&[flags, 0xff, 0xff, 0xde, 0xad, 0, 0]);
        f.extend(std::iter::repeat_n(1u8, tcp_hdr - 20));
    }
    f.extend_from_slice(payload);
    f
}

/// The offload request of a frame built by [`frame`]: `flags` and the lengths.
pub(crate) fn request(kind: Kind, tags: usize, tcp_hdr: usize, flags: u16, mss: u16) -> TxOffload {
    TxOffload {
        flags,
        l2_len: (14 + 4 * tags) as u8,
        l3_len: if kind == Kind::Tcp6 { 40 } else { 20 },
        l4_len: if kind == Kind::Udp4 { 8 } else { tcp_hdr as u8 },
        tso_mss: mss,
    }
}

/// Every offload a frame of `kind` can ask for: its checksums, or TSO when `tso` and it is TCP.
pub(crate) fn every_offload(kind: Kind, tso: bool) -> u16 {
    match (kind, tso) {
        (Kind::Tcp4 | Kind::Tcp6, true) => TxOffload::TSO,
        (Kind::Udp4, _) => TxOffload::UDP_CSUM | TxOffload::IP_CSUM,
        (Kind::Tcp4, _) => TxOffload::TCP_CSUM | TxOffload::IP_CSUM,
        (Kind::Tcp6, _) => TxOffload::TCP_CSUM,
    }
}

/// Asks `p` for the request `r` ([`request`]).
pub(crate) fn ask(p: &mut Packet, r: TxOffload) {
    p.set_tx_offload(r);
}

/// Checks every checksum of an IP frame with L2 header `l2`: the IPv4 header's (if IPv4) and
/// the TCP or UDP one with its pseudo-header. Panics with what is wrong.
pub(crate) fn verify(f: &[u8], l2: usize) {
    // A frame padded to the 60-byte minimum on the wire ends where its IP header says.
    let ipv4 = f[l2] >> 4 == 4;
    let end = if ipv4 {
        l2 + usize::from(u16::from_be_bytes([f[l2 + 2], f[l2 + 3]]))
    } else {
        l2 + 40 + usize::from(u16::from_be_bytes([f[l2 + 4], f[l2 + 5]]))
    };
    assert!(
        end == f.len() || (f.len() == 60 && end < 60 && f[end..].iter().all(|&b| b == 0)),
        "IP length {end} against a {}-byte frame",
        f.len()
    );
    let f = &f[..end];
    let (l3, proto, addrs, l4_len) = if ipv4 {
        let ihl = usize::from(f[l2] & 0xf) * 4;
        assert_eq!(
            fold(sum16(&f[l2..l2 + ihl])),
            0xffff,
            "IPv4 header checksum"
        );
        let total = usize::from(u16::from_be_bytes([f[l2 + 2], f[l2 + 3]]));
        (ihl, f[l2 + 9], &f[l2 + 12..l2 + 20], total - ihl)
    } else {
        let plen = usize::from(u16::from_be_bytes([f[l2 + 4], f[l2 + 5]]));
        (40, f[l2 + 6], &f[l2 + 8..l2 + 40], plen)
    };
    let l4 = &f[l2 + l3..];
    let pseudo = sum16(addrs) + u32::from(proto) + l4_len as u32;
    assert_eq!(
        fold(pseudo + sum16(l4)),
        0xffff,
        "L4 checksum (protocol {proto})"
    );
    if proto == 17 {
        assert_ne!(&l4[6..8], &[0, 0], "a UDP checksum of 0 is sent as 0xffff");
    }
}

/// `bytes` cut at `a`, then every `b` bytes, as a chain of `pool`'s buffers.
pub(crate) fn cut_every(pool: &Pool, bytes: &[u8], a: usize, b: usize) -> Packet {
    let cuts: Vec<usize> = (0..)
        .map(|i| a + i * b)
        .take_while(|&c| c < bytes.len())
        .collect();
    chained(pool, bytes, &cuts)
}

/// `bytes` cut at the offsets `cut`, as a chain of `pool`'s buffers.
fn chained(pool: &Pool, bytes: &[u8], cut: &[usize]) -> Packet {
    let mut head: Option<Packet> = None;
    let mut at = 0;
    for &end in cut.iter().chain([bytes.len()].iter()) {
        let mut p = pool.alloc().unwrap();
        assert!(p.set_data(&bytes[at..end]));
        match &mut head {
            Some(h) => h.push_segment(p),
            None => head = Some(p),
        }
        at = end;
    }
    head.unwrap()
}

#[test]
fn checksums_over_a_chain_cut_at_odd_places_verify() {
    let pool = pool(16);
    for kind in [Kind::Tcp4, Kind::Udp4, Kind::Tcp6] {
        let payload: Vec<u8> = (0..3001u32).map(|i| (i * 13) as u8).collect();
        let f = frame(kind, 1, 32, 0x18, &payload);
        let mut p = chained(&pool, &f, &[101, 1000, 1001, 2999]);
        let l4 = if kind == Kind::Udp4 {
            TxOffload::UDP_CSUM
        } else {
            TxOffload::TCP_CSUM
        };
        let ip = if kind == Kind::Tcp6 {
            0
        } else {
            TxOffload::IP_CSUM
        };
        ask(&mut p, request(kind, 1, 32, l4 | ip, 0));
        let r = Request::of(&p).unwrap().unwrap();
        fill_checksums(&mut p, &r);
        verify(&p.to_vec(), 18);
    }
}

#[test]
fn tso_cuts_the_payload_into_segments_with_their_own_headers() {
    let pool = pool(64);
    let payload: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
    // FIN | PSH | ACK | CWR.
    let f = frame(Kind::Tcp4, 0, 32, 0x99, &payload);
    let mut p = pool.packet_from(&f).unwrap();
    ask(&mut p, request(Kind::Tcp4, 0, 32, TxOffload::TSO, 1448));
    let r = Request::of(&p).unwrap().unwrap();
    let segs = segment(&p, &r, 1448).unwrap();
    assert_eq!(segs.len(), 14);
    let mut stream = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        let b = s.to_vec();
        verify(&b, 14);
        let want = if i < 13 { 1448 } else { 20_000 - 13 * 1448 };
        assert_eq!(b.len(), 14 + 20 + 32 + want);
        assert_eq!(
            u16::from_be_bytes([b[18], b[19]]),
            0x1234 + i as u16,
            "IP id"
        );
        let seq = u32::from_be_bytes(b[38..42].try_into().unwrap());
        assert_eq!(seq, 0x1122_3344 + (i * 1448) as u32);
        let flags = b[47];
        assert_eq!(
            flags,
            if i == 13 { 0x19 } else { 0x90 },
            "FIN and PSH on the last only, CWR not on the last"
        );
        assert_eq!(s.tx_offload(), TxOffload::default());
        stream.extend_from_slice(&b[66..]);
    }
    assert_eq!(stream, payload);
    drop(segs);
    drop(p);
    assert_eq!(pool.stats().in_use, 0);
}

#[test]
fn requests_that_cannot_be_honoured_are_refused_with_their_reason() {
    let pool = pool(8);
    let f = frame(Kind::Tcp4, 0, 20, 0x10, &[7; 100]);
    let mut p = pool.packet_from(&f).unwrap();
    let check = |p: &mut Packet, m: TxOffload| {
        ask(p, m);
        Request::of(p)
    };
    assert_eq!(
        check(&mut p, request(Kind::Tcp4, 0, 20, TxOffload::TSO, 0)),
        Err(OffloadError::MssZero)
    );
    assert!(matches!(
        check(&mut p, request(Kind::Tcp4, 0, 20, TxOffload::UDP_CSUM, 0)),
        Err(OffloadError::WrongProtocol { found: 6, .. })
    ));
    assert_eq!(
        check(
            &mut p,
            request(
                Kind::Tcp4,
                0,
                20,
                TxOffload::UDP_CSUM | TxOffload::TCP_CSUM,
                0
            )
        ),
        Err(OffloadError::BothL4)
    );
    assert!(matches!(
        check(&mut p, request(Kind::Tcp4, 0, 24, TxOffload::TSO, 1000)),
        Err(OffloadError::BadLengths { .. })
    ));
    assert!(matches!(
        check(&mut p, request(Kind::Tcp6, 0, 20, TxOffload::TCP_CSUM, 0)),
        Err(OffloadError::BadLengths { .. })
    ));
    // Headers cut by the first segment.
    let mut q = chained(&pool, &f, &[40]);
    assert!(matches!(
        check(&mut q, request(Kind::Tcp4, 0, 20, TxOffload::TSO, 1000)),
        Err(OffloadError::HeaderBeyondFirstSegment { first: 40, .. })
    ));
    // The software path drops them, counted, and keeps the order of the rest.
    let mut batch = vec![
        pool.packet_from(&f).unwrap(),
        q,
        pool.packet_from(&f).unwrap(),
    ];
    let r = resolve(&mut batch, TxCaps::CHAINS);
    assert_eq!(r.dropped, 1);
    assert!(matches!(
        r.first_error,
        Some(SoftError::Offload(
            OffloadError::HeaderBeyondFirstSegment { .. }
        ))
    ));
    assert_eq!(batch.len(), 2);
}

#[test]
fn a_device_without_gather_gets_chains_linearized_or_refused() {
    let pool = pool(16);
    let small = chained(&pool, &[5u8; 1500], &[700]);
    let big = pool.packet_from(&[6u8; 5000]).unwrap();
    let mut batch = vec![small, big];
    let r = resolve(&mut batch, TxCaps::NONE);
    assert_eq!(r.dropped, 1);
    assert!(matches!(r.first_error, Some(SoftError::NoGather(_))));
    assert_eq!(batch.len(), 1);
    assert!(!batch[0].is_chained());
    assert_eq!(batch[0].data(), &[5u8; 1500][..]);
    drop(batch);
    assert_eq!(pool.stats().in_use, 0);
}

proptest! {
    /// Whatever the cuts, the software result is a valid frame whose bytes do not depend on
    /// where the segments were cut.
    #[test]
    fn software_offloads_do_not_depend_on_the_cuts(
        len in 0usize..6000,
        // The headers (at most 74 bytes here) in the first segment, as every device needs.
        a in 80usize..2048,
        b in 200usize..2048,
        kind in prop_oneof![Just(Kind::Tcp4), Just(Kind::Udp4), Just(Kind::Tcp6)],
        mss in 64u16..3000,
        tso in any::<bool>(),
    ) {
        let pool = pool(512);
        let payload: Vec<u8> = (0..len).map(|i| (i * 31 + 1) as u8).collect();
        let f = frame(kind, 0, 20, 0x19, &payload);
        let flags = every_offload(kind, tso);
        let mut one = pool.packet_from(&f).unwrap();
        let mut cut = cut_every(&pool, &f, a, b);
        ask(&mut one, request(kind, 0, 20, flags, mss));
        ask(&mut cut, request(kind, 0, 20, flags, mss));
        let mut x = vec![one];
        let mut y = vec![cut];
        prop_assert_eq!(resolve(&mut x, TxCaps::CHAINS).dropped, 0);
        prop_assert_eq!(resolve(&mut y, TxCaps::CHAINS).dropped, 0);
        prop_assert_eq!(x.len(), y.len());
        for (p, q) in x.iter().zip(&y) {
            let (p, q) = (p.to_vec(), q.to_vec());
            verify(&p, 14);
            prop_assert_eq!(p, q);
        }
    }
}
