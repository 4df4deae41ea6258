//! Host tests of the software 82599's transmit offloads (`tx_offload.rs`): checksum insertion
//! and TSO, driven by context and data descriptors written by hand, the frames checked at the
//! peer's receive ring with a checksum verifier of the test's own.

use super::testkit::*;
use super::{SimConfig, SimPort};
use crate::platform::bus::Bus;
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe as r;

const IXSM: u32 = 1 << 8;
const TXSM: u32 = 1 << 9;
const TSE: u32 = 1 << 31;
const L4T_UDP: u32 = 0;
const L4T_TCP: u32 = 1;
const SRC4: [u8; 4] = [10, 0, 0, 1];
const DST4: [u8; 4] = [10, 0, 0, 2];
const SRC6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const DST6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
/// TCP flags of the frames handed over: CWR, ACK, PSH, FIN.
const FLAGS: u8 = 0x80 | 0x10 | 0x08 | 0x01;

/// The test's own ones'-complement sum: 16-bit big-endian words one by one (RFC 1071).
fn sum16(mut acc: u32, bytes: &[u8]) -> u32 {
    for c in bytes.chunks(2) {
        acc += u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0));
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The pseudo-header sum of an L3 header at `l3` (IPv4 or IPv6) for `len` bytes of `proto`.
fn pseudo(f: &[u8], l3: usize, v6: bool, proto: u8, len: usize) -> u32 {
    let addrs = if v6 {
        &f[l3 + 8..l3 + 40]
    } else {
        &f[l3 + 12..l3 + 20]
    };
    sum16(u32::from(proto) + len as u32, addrs)
}

/// Whether the IPv4 header at 14 and the L4 checksum (TCP or UDP) of `f` verify.
fn verify(f: &[u8], v6: bool) -> bool {
    let (l3, l4) = (14, if v6 { 54 } else { 34 });
    let proto = f[if v6 { l3 + 6 } else { l3 + 9 }];
    if !v6 && fold(sum16(0, &f[l3..l4])) != 0xffff {
        return false;
    }
    let end = if v6 {
        l4 + usize::from(u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]))
    } else {
        l3 + usize::from(u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]))
    };
    fold(sum16(pseudo(f, l3, v6, proto, end - l4), &f[l4..end])) == 0xffff
}

/// An Ethernet frame to `dst` with an IPv4 (20 bytes) or IPv6 (40 bytes) header for `proto`,
/// an L4 header of `l4len` bytes and `payload`; lengths filled, checksums zero.
fn frame(dst: [u8; 6], v6: bool, proto: u8, l4len: usize, payload: &[u8]) -> Vec<u8> {
    let iplen = if v6 { 40 } else { 20 };
    let mut f = vec![0u8; 14 + iplen + l4len];
    f[..6].copy_from_slice(&dst);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 9]);
    let l4_bytes = l4len + payload.len();
    let et: u16 = if v6 { 0x86dd } else { 0x0800 };
    f[12..14].copy_from_slice(&et.to_be_bytes());
    let ip = &mut f[14..14 + iplen];
    if v6 {
        ip[0] = 0x60;
        ip[4..6].copy_from_slice(&(l4_bytes as u16).to_be_bytes());
        ip[6] = proto;
        ip[7] = 64;
        ip[8..24].copy_from_slice(&SRC6);
        ip[24..40].copy_from_slice(&DST6);
    } else {
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((20 + l4_bytes) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&0xfffau16.to_be_bytes()); // the ID wraps during TSO
        ip[8] = 64;
        ip[9] = proto;
        ip[12..16].copy_from_slice(&SRC4);
        ip[16..20].copy_from_slice(&DST4);
    }
    let l4 = &mut f[14 + iplen..];
    l4[..4].copy_from_slice(&[0x30, 0x39, 0x00, 0x50]); // ports 12345 -> 80
    if proto == 6 {
        l4[4..8].copy_from_slice(&0xffff_f000u32.to_be_bytes()); // the sequence wraps too
        l4[12] = ((l4len / 4) as u8) << 4;
        l4[13] = FLAGS;
        l4[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    } else {
        l4[4..6].copy_from_slice(&(l4_bytes as u16).to_be_bytes());
    }
    f.extend_from_slice(payload);
    f
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Writes the pseudo-header sum into the L4 checksum field as Linux hands a CHECKSUM_PARTIAL
/// frame over (folded, not complemented), with the L4 length or (`with_len` false, as
/// `ixgbe_tso` leaves it) without.
fn seed_l4(f: &mut [u8], v6: bool, with_len: bool) {
    let (l3, l4) = (14, if v6 { 54 } else { 34 });
    let proto = f[if v6 { l3 + 6 } else { l3 + 9 }];
    let at = l4 + if proto == 6 { 16 } else { 6 };
    let len = if with_len { f.len() - l4 } else { 0 };
    let s = fold(pseudo(f, l3, v6, proto, len));
    f[at..at + 2].copy_from_slice(&s.to_be_bytes());
}

/// A context descriptor into slot `idx`.
fn context(tx: &mut Tx, (vlan, v6, l4t): (u16, bool, u32), l4len: u32, mss: u32, idx: u32) {
    let iplen: u64 = if v6 { 40 } else { 20 };
    let ipv4 = if v6 { 0 } else { 1 << 10 };
    let cmd = (0x2 << 20) | (1 << 29) | ipv4 | l4t << 11;
    tx.put(
        u64::from(vlan) << 16 | 14 << 9 | iplen,
        cmd,
        mss << 16 | l4len << 8 | idx << 4,
    );
}

/// Data descriptors for `parts` (one frame): `cmd` and `olinfo` on the first (PAYLEN in
/// `olinfo`), EOP and RS on the last.
fn data(tx: &mut Tx, parts: &[&[u8]], cmd: u32, olinfo: u32) {
    for (i, p) in parts.iter().enumerate() {
        let a = tx.stage(p);
        let last = if i + 1 == parts.len() { EOP | RS } else { 0 };
        let (c, o) = if i == 0 { (cmd, olinfo) } else { (0, 0) };
        tx.put(a, DATA | c | last | p.len() as u32, o);
    }
}

fn rig() -> (PairRig, [u8; 6]) {
    let rig = pair_rig(SimConfig::default());
    let mac = rig.b.mac().0;
    (rig, mac)
}

/// The receive status of a frame with verified checksums: L4CS (b5) without TCPE (b30), and
/// for IPv4 IPCS (b6) without IPE (b31).
fn csum_ok(status: u32, v6: bool) -> bool {
    status & (1 << 5) != 0 && status & (1 << 30) == 0 && (v6 || status & (3 << 30) == 0)
}

#[test]
fn checksum_insertion_fills_ipv4_tcp_udp_and_ipv6_tcp() {
    let (mut rig, mac) = rig();
    let cases = [
        (false, 6u8, L4T_TCP, 20usize, 500usize, IXSM | TXSM),
        (false, 17, L4T_UDP, 8, 333, IXSM | TXSM),
        (true, 6, L4T_TCP, 32, 1000, TXSM),
        (true, 17, L4T_UDP, 8, 1, TXSM),
    ];
    for (k, &(v6, proto, l4t, l4len, n, popts)) in cases.iter().enumerate() {
        let mut f = frame(mac, v6, proto, l4len, &payload(n));
        seed_l4(&mut f, v6, true);
        assert!(!verify(&f, v6), "case {k}: not valid before the device");
        let idx = (k % 2) as u32;
        context(&mut rig.a_tx, (0, v6, l4t), l4len as u32, 0, idx);
        // Two buffers: the checksum covers what was gathered, not one buffer.
        let (h, p) = f.split_at(40);
        data(
            &mut rig.a_tx,
            &[h, p],
            0,
            (f.len() as u32) << 14 | popts | idx << 4,
        );
        rig.a_tx.kick(&rig.a);
        let got = rig.b_rx.recv(&rig.b).expect("frame arrives");
        assert_eq!(got.data.len(), f.len(), "case {k}");
        assert!(verify(&got.data, v6), "case {k}: checksums verify");
        assert!(
            csum_ok(got.last().status, v6),
            "case {k}: the receiver agrees"
        );
        let at = if v6 { 54 } else { 34 } + if proto == 6 { 16 } else { 6 };
        let mut same = got.data.clone();
        same[at..at + 2].copy_from_slice(&f[at..at + 2]);
        if !v6 {
            same[24..26].copy_from_slice(&f[24..26]);
        }
        assert_eq!(same, f, "case {k}: only the checksum fields change");
    }
    assert_eq!(rig.a.counters().tx_malformed, 0);
}

#[test]
fn a_udp_checksum_that_computes_to_zero_is_sent_as_ffff() {
    let (mut rig, mac) = rig();
    let mut f = frame(mac, false, 17, 8, &[0, 0, 1, 2, 3, 4]);
    seed_l4(&mut f, false, true);
    // Two payload bytes chosen so that the sum the device makes is 0xFFFF (complement 0).
    let s = fold(sum16(0, &f[34..]));
    f[42..44].copy_from_slice(&(0xffff - s).to_be_bytes());
    context(&mut rig.a_tx, (0, false, L4T_UDP), 8, 0, 0);
    data(
        &mut rig.a_tx,
        &[&f],
        0,
        (f.len() as u32) << 14 | IXSM | TXSM,
    );
    rig.a_tx.kick(&rig.a);
    let got = rig.b_rx.recv(&rig.b).unwrap();
    assert_eq!(
        &got.data[40..42],
        &[0xff, 0xff],
        "0 means no checksum in UDP"
    );
    assert!(verify(&got.data, false));
}

/// Sends one TSO frame of `n` payload bytes in segments of 1448 bytes (IPv4) or 1428 (IPv6,
/// whose header is 20 bytes longer: 1514-byte frames either way), the header in the first
/// buffer and the payload in three more, and returns what arrived.
fn tso(rig: &mut PairRig, mac: [u8; 6], v6: bool, n: usize, vlan: Option<u16>) -> Vec<Got> {
    let mut f = frame(mac, v6, 6, 20, &payload(n));
    if v6 {
        f[18..20].fill(0); // ixgbe_tso: payload_len = 0
    } else {
        f[16..18].fill(0); // ixgbe_tso: tot_len = 0, check = 0
    }
    seed_l4(&mut f, v6, false);
    let hdr = if v6 { 74 } else { 54 };
    let (h, p) = f.split_at(hdr);
    let (p1, rest) = p.split_at(n / 4);
    let (p2, p3) = rest.split_at(n / 3);
    let mss = if v6 { 1428 } else { 1448 };
    context(&mut rig.a_tx, (vlan.unwrap_or(0), v6, L4T_TCP), 20, mss, 1);
    let vle = if vlan.is_some() { VLE } else { 0 };
    let popts = if v6 { TXSM } else { IXSM | TXSM };
    data(
        &mut rig.a_tx,
        &[h, p1, p2, p3],
        TSE | vle,
        (n as u32) << 14 | popts | 1 << 4,
    );
    rig.a_tx.kick(&rig.a);
    rig.b_rx.drain(&rig.b)
}

#[test]
fn tso_cuts_20000_bytes_into_14_segments_that_verify() {
    let (mut rig, mac) = rig();
    let m = rig.a.regs().clone();
    for c in [r::GPTC, r::GOTCL, r::GOTCH] {
        m.read(c);
    }
    let got = tso(&mut rig, mac, false, 20_000, Some(0x0123));
    assert_eq!(got.len(), 14, "ceil(20000 / 1448)");
    let mut sent = Vec::new();
    for (i, g) in got.iter().enumerate() {
        let tagged = &g.data;
        assert_eq!(
            &tagged[12..16],
            &[0x81, 0x00, 0x01, 0x23],
            "segment {i} tagged"
        );
        let f: Vec<u8> = [&tagged[..12], &tagged[16..]].concat();
        let seg = if i == 13 { 20_000 - 13 * 1448 } else { 1448 };
        assert_eq!(f.len(), 54 + seg, "segment {i}");
        assert_eq!(u16::from_be_bytes([f[16], f[17]]) as usize, 40 + seg);
        let id = u16::from_be_bytes([f[18], f[19]]);
        assert_eq!(id, 0xfffau16.wrapping_add(i as u16), "IP ID +1, wrapping");
        let seq = u32::from_be_bytes(f[38..42].try_into().unwrap());
        assert_eq!(seq, 0xffff_f000u32.wrapping_add((i * 1448) as u32));
        let flags = f[47];
        let want = match i {
            0..=12 => FLAGS & 0xf6, // FIN and PSH cleared
            _ => FLAGS & 0x7f,      // CWR cleared
        };
        assert_eq!(flags, want, "segment {i} flags");
        assert!(verify(&f, false), "segment {i} checksums");
        assert!(
            csum_ok(g.last().status, false),
            "segment {i}: the receiver agrees"
        );
        sent.extend_from_slice(&f[54..]);
    }
    assert_eq!(sent, payload(20_000), "the payload, in order");
    assert_eq!(m.read(r::GPTC), 14, "one frame per segment");
    let octets: usize = got.iter().map(|g| g.data.len() + 4).sum();
    assert_eq!(m.read(r::GOTCL) as usize, octets);
    assert_eq!(rig.a.counters().tx_frames, 14);
}

#[test]
fn tso_over_ipv6_sets_each_payload_length() {
    let (mut rig, mac) = rig();
    let got = tso(&mut rig, mac, true, 3000, None);
    assert_eq!(got.len(), 3);
    for (i, g) in got.iter().enumerate() {
        let seg = [1428, 1428, 144][i];
        assert_eq!(
            u16::from_be_bytes([g.data[18], g.data[19]]) as usize,
            20 + seg
        );
        assert!(verify(&g.data, true), "segment {i}");
        assert!(csum_ok(g.last().status, true));
    }
}

#[test]
fn tso_flag_masks_follow_dtxtcpflgl_and_h() {
    let (mut rig, mac) = rig();
    let m = rig.a.regs().clone();
    assert_eq!(m.read(r::DTXTCPFLGL), 0x0ff6_0ff6, "reset value");
    assert_eq!(m.read(r::DTXTCPFLGH), 0x0f7f, "reset value");
    m.write(r::DTXTCPFLGL, 0x0fff_0fef); // middle keep all, first clear ACK
    m.write(r::DTXTCPFLGH, 0x0ffe); // last clear FIN
    let got = tso(&mut rig, mac, false, 4000, None);
    let flags: Vec<u8> = got.iter().map(|g| g.data[47]).collect();
    assert_eq!(flags, [FLAGS & 0xef, FLAGS, FLAGS & 0xfe]);
}

#[test]
fn malformed_tso_requests_are_dropped_and_counted() {
    let (mut rig, mac) = rig();
    let f = frame(mac, false, 6, 20, &payload(3000));
    let (h, p) = f.split_at(54);
    // MSS 0.
    context(&mut rig.a_tx, (0, false, L4T_TCP), 20, 0, 0);
    data(&mut rig.a_tx, &[h, p], TSE, 3000 << 14 | TXSM);
    // L4LEN 32 for a 20-byte TCP header.
    context(&mut rig.a_tx, (0, false, L4T_TCP), 32, 1448, 0);
    data(&mut rig.a_tx, &[h, p], TSE, 2988 << 14 | TXSM);
    // PAYLEN larger than what the buffers hold.
    context(&mut rig.a_tx, (0, false, L4T_TCP), 20, 1448, 0);
    data(&mut rig.a_tx, &[h, p], TSE, 3001 << 14 | TXSM);
    // Then a good frame still goes.
    let good = udp(mac, 1, 100);
    data(&mut rig.a_tx, &[&good], 0, (good.len() as u32) << 14);
    rig.a_tx.kick(&rig.a);
    let got = rig.b_rx.drain(&rig.b);
    assert_eq!(got.len(), 1, "only the good frame");
    assert_eq!(got[0].data, good);
    assert_eq!(rig.a.counters().tx_malformed, 3);
    assert_eq!(
        rig.a.regs().read(r::TDH.at(0)) as usize,
        rig.a_tx.tail,
        "all done"
    );
}

#[test]
fn tso_into_the_void_counts_every_segment() {
    let a = SimPort::pair(SimConfig::default()).0;
    init(&a);
    let mut tx = Tx::new(&a, 0, 64);
    let f = frame([0x02, 1, 1, 1, 1, 1], false, 6, 20, &payload(10_000));
    let (h, p) = f.split_at(54);
    context(&mut tx, (0, false, L4T_TCP), 20, 1000, 0);
    data(&mut tx, &[h, p], TSE, 10_000 << 14 | IXSM | TXSM);
    tx.kick(&a);
    assert_eq!(a.counters().tx_frames, 10);
    assert_eq!(a.counters().tx_bytes, 10 * 1054);
}
