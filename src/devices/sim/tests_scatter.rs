//! Host tests of receive scatter (`rx_scatter.rs`): frames longer than one receive buffer,
//! the size limit that admits them, and rings without room for a whole frame.

use std::sync::atomic::Ordering::Acquire;
use std::time::{Duration, Instant};

use super::testkit::*;
use super::{Mode, SimConfig, SimPort};
use crate::platform::bus::Bus;
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe as r;

/// Lets `p` take frames up to `mfs` bytes (FCS included): HLREG0.JUMBOEN and MAXFRS.MFS.
fn jumbo(p: &SimPort, mfs: u32) {
    p.regs().modify(r::HLREG0, 0, r::hlreg0::JUMBOEN.bit());
    p.regs().write(r::MAXFRS, r::maxfrs::MFS.val(mfs));
}

/// Whether descriptor `i` of `rx` has been written back (DD).
fn written(rx: &Rx, i: usize) -> bool {
    rx.desc.load_u32(i * 16 + 8, Acquire) & 1 != 0
}

#[test]
fn a_9000_byte_frame_lands_in_five_2k_buffers() {
    let mut rig = pair_rig(SimConfig::default());
    jumbo(&rig.b, 9018);
    let f = udp(rig.b.mac().0, 7, 9000);
    rig.a_tx.send(&rig.a, &f, None);
    let got = rig.b_rx.recv(&rig.b).expect("delivered");
    assert_eq!(got.data, f);
    let lens: Vec<u16> = got.descs.iter().map(|d| d.len).collect();
    assert_eq!(lens, [2048, 2048, 2048, 2048, 808]);
    for d in &got.descs[..4] {
        assert_eq!(d.status & 3, 1, "DD, no EOP before the last");
        assert_eq!(d.lo, 0, "packet type and RSS only on the last");
    }
    let last = got.last();
    assert_eq!(last.status & 3, 3, "DD and EOP");
    // The frame's status and packet type are on the EOP descriptor: IPCS, L4CS, UDPCS, no
    // errors; IPv4 (b4) and UDP (b9).
    assert_eq!(last.status & 0x70, 0x70);
    assert_eq!(last.status >> 29, 0);
    assert_eq!(last.lo & 0xffff, 1 << 4 | 1 << 9);
    assert_eq!(rig.b.regs().read(r::GPRC), 1);
    assert_eq!(rig.b.regs().read(r::RDH.at(0)), 5);
}

#[test]
fn a_jumbo_frame_is_oversize_without_jumboen_or_over_mfs() {
    let mut rig = pair_rig(SimConfig::default());
    let f = udp(rig.b.mac().0, 7, 9000);
    rig.a_tx.send(&rig.a, &f, None);
    assert!(rig.b_rx.recv(&rig.b).is_none(), "1518 without JUMBOEN");
    assert_eq!(rig.b.regs().read(r::ROC), 1);
    // MFS counts the FCS: 9000 bytes + 4 do not fit 9000.
    jumbo(&rig.b, 9000);
    rig.a_tx.send(&rig.a, &f, None);
    assert!(rig.b_rx.recv(&rig.b).is_none(), "over MAXFRS.MFS");
    assert_eq!(rig.b.regs().read(r::ROC), 1);
    assert_eq!(rig.b.counters().rx_errors, 2);
    assert!(!written(&rig.b_rx, 0), "no descriptor touched");
    jumbo(&rig.b, 9004);
    rig.a_tx.send(&rig.a, &f, None);
    assert_eq!(rig.b_rx.recv(&rig.b).unwrap().data, f, "9000 + FCS = MFS");
}

#[test]
fn a_frame_that_does_not_fit_the_free_descriptors_is_never_half_written() {
    let (a, b) = SimPort::pair(SimConfig::default());
    init(&a);
    init(&b);
    jumbo(&b, 9018);
    let mut tx = Tx::new(&a, 0, 64);
    let mut rx = Rx::new(&b, 0, 8, 2048); // 7 descriptors posted
    let f = udp(b.mac().0, 7, 9000);
    tx.send(&a, &f, None);
    tx.send(&a, &f, None); // needs 5, finds 2: dropped (inline mode)
    assert!((0..5).all(|i| written(&rx, i)));
    assert!(
        !written(&rx, 5) && !written(&rx, 6),
        "nothing of the second frame"
    );
    assert_eq!(b.regs().read(r::RDH.at(0)), 5);
    assert_eq!(b.counters().rx_no_descriptor, 1);
    assert_eq!(b.regs().read(r::MPC.at(0)), 1);
    assert_eq!(b.regs().read(r::RNBC.at(0)), 1);
    assert_eq!(rx.recv(&b).unwrap().data, f);
    // With SRRCTL.DROP_EN the drop counts in QPRDC instead.
    b.regs()
        .modify(r::SRRCTL.at(0), 0, r::srrctl::DROP_EN.bit());
    tx.send(&a, &f, None); // 7 free again: placed at 5, 6, 7, 0, 1
    tx.send(&a, &f, None); // 2 free: dropped
    assert_eq!(b.regs().read(r::QPRDC.at(0)), 1);
    assert!(!written(&rx, 2) && !written(&rx, 3));
    let got = rx.drain(&b);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].data, f, "a frame across the ring's end");
}

#[test]
fn threaded_a_frame_waits_in_the_packet_buffer_until_the_ring_has_room() {
    let (a, b) = SimPort::pair(SimConfig {
        mode: Mode::Threaded,
        ..SimConfig::default()
    });
    init(&a);
    init(&b);
    jumbo(&b, 9018);
    let mut tx = Tx::new(&a, 0, 64);
    let mut rx = Rx::new(&b, 0, 8, 2048);
    let f = udp(b.mac().0, 7, 9000);
    tx.send(&a, &f, None);
    tx.send(&a, &f, None);
    let start = Instant::now();
    while b.regs().read(r::RDH.at(0)) != 5 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // The second frame needs 5 descriptors and has 2: it waits, none of it written.
    std::thread::sleep(Duration::from_millis(20));
    assert!(!written(&rx, 5) && !written(&rx, 6));
    assert_eq!(b.counters().rx_no_descriptor, 0, "waiting, not dropped");
    // Taking the first frame posts its descriptors again: the second follows whole.
    let got = rx.wait(&b, 2);
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|g| g.data == f && g.descs.len() == 5));
}
