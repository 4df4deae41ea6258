//! Host tests of the software 82599, driven by raw register writes (no driver).

use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::{Duration, Instant};

use super::testkit::*;
use super::{Mode, SimConfig, SimPort, Source};
use crate::device::MacAddr;
use crate::platform::bus::Bus;
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe as r;

fn mac_of(p: &SimPort) -> [u8; 6] {
    p.mac().0
}

#[test]
fn reset_restores_defaults_and_self_clears() {
    let p = SimPort::pair(SimConfig {
        mac: Some(MacAddr([0x02, 1, 2, 3, 4, 5])),
        ..SimConfig::default()
    })
    .0;
    let m = p.regs();
    m.write(r::DMATXCTL, 1);
    m.write(r::VLNCTRL, 0x4000_88a8);
    m.write(r::RXDCTL.at(3), r::rxdctl::ENABLE.bit());
    m.write(r::RAL.at(0), 0);
    m.write(r::VFTA.at(2), 0x10);
    m.write(r::SRRCTL.at(5), 0x7);
    m.write(r::CTRL, r::ctrl::RST.bit());
    assert_eq!(m.read(r::CTRL), 0, "RST self-clears");
    assert_eq!(m.read(r::RAL.at(0)), 0x0302_0102);
    assert_eq!(m.read(r::RAH.at(0)), 0x8000_0504);
    assert_eq!(m.read(r::EEC) & 0x300, 0x300);
    assert_eq!(m.read(r::RDRXCTL) & 0x8, 0x8);
    assert_eq!(m.read(r::DMATXCTL), 0x8100_0000);
    assert_eq!(m.read(r::VLNCTRL), 0x8100);
    assert_eq!(m.read(r::EXVET), 0x8100_0000);
    assert_eq!(m.read(r::RXDCTL.at(3)), 0);
    assert_eq!(m.read(r::SRRCTL.at(5)), 0x402);
    assert_eq!(m.read(r::LINKS), 0, "link down after reset");
    assert_eq!(m.read(r::MAXFRS), 1518 << 16);
    assert_eq!(m.read(r::VFTA.at(2)), 0x10, "VFTA is not cleared by reset");
    assert_eq!(r::status::LAN_ID.get(m.read(r::STATUS)), 0);
    // EERD reads the MAC words.
    m.write(r::EERD, r::eerd::START.bit() | r::eerd::ADDR.val(2));
    let v = m.read(r::EERD);
    assert!(r::eerd::DONE.is_set(v));
    assert_eq!(r::eerd::DATA.get(v), 0x0504);
    // SRRCTL answers at both addresses.
    m.write(r::SRRCTL.at(1), 0x403);
    assert_eq!(m.read32(0x1014 + 0x40), 0x403);
}

#[test]
fn the_model_notices_the_82599_errata_sequences() {
    let p = SimPort::pair(SimConfig::default()).0;
    let m = p.regs();
    let rxen = r::rxctrl::RXEN.bit();
    // Receive enabled the ixy way (a plain RXCTRL write): the erratum's hang on the part.
    m.write(r::RXCTRL, rxen);
    assert_eq!(p.counters().errata, 1);
    // The workaround: RX_DIS, SECRX_RDY, RXCTRL, RX_DIS cleared.
    let dis = r::secrxctrl::RX_DIS.bit();
    assert_eq!(m.read(r::SECRXSTAT), 0, "busy while RX_DIS is clear");
    m.write(r::SECRXCTRL, dis);
    assert_eq!(m.read(r::SECRXSTAT), r::secrxstat::SECRX_RDY.bit());
    m.write(r::RXCTRL, 0);
    m.write(r::RXCTRL, rxen);
    m.write(r::SECRXCTRL, 0);
    assert_eq!(p.counters().errata, 1);
    // Transmit enabled with the threshold above the buffer (ixy's 40 KB with the reset
    // threshold of 150 KB).
    assert_eq!(m.read(r::TXPBTHRESH.at(0)), 150, "reset value");
    m.write(r::TXPBSIZE.at(0), 0xA000);
    m.write(r::DMATXCTL, r::dmatxctl::TE.bit());
    assert_eq!(p.counters().errata, 2);
    m.write(r::DMATXCTL, 0);
    m.write(r::TXPBTHRESH.at(0), 30);
    m.write(r::DMATXCTL, r::dmatxctl::TE.bit());
    assert_eq!(p.counters().errata, 2, "40 KB - 10 fits");
    // AUTOC without the MAC CSR semaphore, then with it (SWSM.SMBI is taken by a read).
    m.write(r::AUTOC, r::autoc::AN_RESTART.bit());
    assert_eq!(p.counters().errata, 3);
    assert_eq!(
        m.read(r::SWSM) & r::swsm::SMBI.bit(),
        0,
        "free: this read takes it"
    );
    assert_ne!(m.read(r::SWSM) & r::swsm::SMBI.bit(), 0, "taken");
    m.write(r::SW_FW_SYNC, r::sw_fw_sync::SW_MAC_CSR_SM.bit());
    m.write(r::AUTOC, r::autoc::AN_RESTART.bit());
    assert_eq!(p.counters().errata, 3);
}

#[test]
fn link_comes_up_after_an_restart_and_faults_drop_it() {
    let (p, _q) = SimPort::pair(SimConfig {
        link_up_after_reads: 2,
        ..SimConfig::default()
    });
    let m = p.regs();
    assert_eq!(m.read(r::LINKS), 0);
    m.read(r::EICR);
    m.write(r::AUTOC, r::autoc::LMS.val(3) | r::autoc::AN_RESTART.bit());
    assert_eq!(
        m.read(r::AUTOC),
        r::autoc::LMS.val(3),
        "AN_RESTART self-clears"
    );
    assert_eq!(m.read(r::LINKS), 0);
    assert_eq!(m.read(r::LINKS), 0);
    let l = m.read(r::LINKS);
    assert!(r::links::UP.is_set(l));
    assert_eq!(r::links::LINK_SPEED.get(l), 3, "10G");
    assert!(r::eicr::LSC.is_set(m.read(r::EICR)));
    assert_eq!(m.read(r::EICR), 0, "EICR is read-to-clear");
    p.link_down();
    assert_eq!(m.read(r::LINKS), 0);
    p.link_restore();
    assert!(r::links::UP.is_set(m.read(r::LINKS)));
    m.write(r::AUTOC, r::autoc::LMS.val(0) | r::autoc::FLU.bit());
    assert_eq!((m.read(r::LINKS), m.read(r::LINKS)), (0, 0), "retrained");
    assert_eq!(r::links::LINK_SPEED.get(m.read(r::LINKS)), 2, "1G");
}

#[test]
fn a_zero_length_data_descriptor_hangs_the_queue() {
    let mut rig = pair_rig(SimConfig::default());
    let f = udp(mac_of(&rig.b), 7, 100);
    // A zero-length data descriptor, then a good frame behind it.
    let a = rig.a_tx.stage(&f);
    rig.a_tx.put(a, DATA | EOP | RS, 0);
    let good = rig.a_tx.send(&rig.a, &f, None);
    assert_eq!(rig.a.counters().tx_hangs, 1);
    assert_eq!(rig.a.regs().read(r::TDH.at(0)), 0, "TDH stays on it");
    assert!(!rig.a_tx.done(good) && rig.b_rx.drain(&rig.b).is_empty());
    // Hung for good: another doorbell sends nothing.
    rig.a_tx.kick(&rig.a);
    assert_eq!(rig.a.counters().tx_frames, 0);
    // Disabling the queue clears it (the ring is then set up again from scratch).
    let m = rig.a.regs();
    m.modify(r::TXDCTL.at(0), r::txdctl::ENABLE.bit(), 0);
    let mut tx = Tx::new(&rig.a, 0, 64);
    let slot = tx.send(&rig.a, &f, None);
    assert!(tx.done(slot));
    assert_eq!(rig.a.counters().tx_frames, 1);
}

#[test]
fn frame_crosses_the_pair_byte_identical() {
    let mut rig = pair_rig(SimConfig::default());
    let f = udp(mac_of(&rig.b), 7, 200);
    let slot = rig.a_tx.send(&rig.a, &f, None);
    assert!(
        rig.a_tx.done(slot),
        "inline: DD written back before TDT write returns"
    );
    assert_eq!(rig.a.regs().read(r::TDH.at(0)), 1);
    let got = rig.b_rx.recv(&rig.b).expect("frame delivered");
    assert_eq!(got.data, f);
    let wb = got.last();
    assert_eq!(got.descs.len(), 1);
    assert_eq!(wb.status & 0xf, 0x3, "DD|EOP, no VP");
    assert_eq!(wb.status & (0x7 << 4), 0x7 << 4, "IPCS|L4CS|UDPCS");
    assert_eq!(wb.status >> 20, 0, "no errors");
    assert_eq!(wb.len, 200);
    assert_eq!(wb.lo & 0xffff, (1 << 4) | (1 << 9), "IPv4, UDP");
    assert_eq!(rig.b.regs().read(r::RDH.at(0)), 1);
    let (a, b) = (rig.a.regs(), rig.b.regs());
    assert_eq!(a.read(r::GPTC), 1);
    assert_eq!((a.read(r::GOTCL), a.read(r::GOTCH)), (204, 0));
    assert_eq!(b.read(r::GPRC), 1);
    assert_eq!(b.read(r::GPRC), 0, "read-to-clear");
    assert_eq!((b.read(r::GORCL), b.read(r::GORCH)), (204, 0));
    assert_eq!((b.read(r::GORCL), b.read(r::GORCH)), (0, 0));
    assert_eq!(b.read(r::QPRC.at(0)), 1);
    assert_eq!(b.read(r::PRC255), 1);
    assert_eq!(rig.a.counters().tx_frames, 1);
    assert_eq!(rig.b.counters().rx_frames, 1);
    // Short frames are padded to 60 on transmit.
    rig.a_tx.send(&rig.a, &f[..42], None);
    assert_eq!(rig.b_rx.recv(&rig.b).unwrap().data.len(), 60);
}

#[test]
fn wide_counters_latch_the_high_half() {
    let p = SimPort::pair(SimConfig::default()).0;
    let d = regs(&p);
    d.bump_wide(super::layout::W_GORC, 0x1_2345_6789);
    assert_eq!(p.regs().read(r::GORCL), 0x2345_6789);
    assert_eq!(p.regs().read(r::GORCH), 1);
    assert_eq!(p.regs().read(r::GORCH), 0);
}

#[test]
fn fcs_is_delivered_when_not_stripped() {
    let mut rig = pair_rig(SimConfig::default());
    rig.b
        .regs()
        .modify(r::HLREG0, r::hlreg0::RXCRCSTRP.bit(), 0);
    let f = udp(mac_of(&rig.b), 1, 100);
    rig.a_tx.send(&rig.a, &f, None);
    let got = rig.b_rx.recv(&rig.b).unwrap();
    assert_eq!(got.data.len(), 104);
    assert_eq!(got.data[100..], super::frame::fcs(&f));
    // A sender without TXCRCEN sends no FCS: the receiver counts a CRC error.
    rig.a.regs().modify(r::HLREG0, r::hlreg0::TXCRCEN.bit(), 0);
    rig.a_tx.send(&rig.a, &f, None);
    assert!(rig.b_rx.recv(&rig.b).is_none());
    assert_eq!(rig.b.regs().read(r::CRCERRS), 1);
}

#[test]
fn big_frames_span_descriptors_and_split_can_be_injected() {
    let (a, b) = SimPort::pair(SimConfig::default());
    init(&a);
    init(&b);
    b.regs().modify(r::HLREG0, 0, r::hlreg0::JUMBOEN.bit());
    b.regs().write(r::MAXFRS, r::maxfrs::MFS.val(9018));
    let mut tx = Tx::new(&a, 0, 64);
    let mut rx = Rx::new(&b, 0, 32, 1024);
    let f = udp(mac_of(&b), 3, 3000);
    tx.send(&a, &f, None);
    let got = rx.recv(&b).unwrap();
    assert_eq!(got.data, f);
    assert_eq!(got.descs.len(), 3);
    assert!(
        got.descs[..2].iter().all(|d| d.status & 3 == 1),
        "no EOP before the last"
    );
    assert_eq!(got.last().status & 3, 3);
    assert_eq!(
        got.descs.iter().map(|d| d.len).collect::<Vec<_>>(),
        [1024, 1024, 952]
    );
    b.split_rx(1, 16);
    let small = udp(mac_of(&b), 3, 64);
    tx.send(&a, &small, None);
    tx.send(&a, &small, None);
    let got = rx.recv(&b).unwrap();
    assert_eq!((got.descs.len(), got.data.clone()), (4, small.clone()));
    assert_eq!(
        rx.recv(&b).unwrap().descs.len(),
        1,
        "only one frame was split"
    );
}

#[test]
fn full_ring_drops_and_counts() {
    let (a, b) = SimPort::pair(SimConfig::default());
    init(&a);
    init(&b);
    let mut tx = Tx::new(&a, 0, 64);
    let mut rx = Rx::new(&b, 0, 8, 2048);
    let f = udp(mac_of(&b), 3, 64);
    for _ in 0..10 {
        tx.send(&a, &f, None);
    }
    assert_eq!(rx.drain(&b).len(), 7, "N-1 descriptors were posted");
    assert_eq!(b.counters().rx_no_descriptor, 3);
    assert_eq!(b.regs().read(r::MPC.at(0)), 3);
    assert_eq!(b.regs().read(r::RNBC.at(0)), 3);
    b.regs()
        .modify(r::SRRCTL.at(0), 0, r::srrctl::DROP_EN.bit());
    for _ in 0..10 {
        tx.send(&a, &f, None);
    }
    assert_eq!(rx.drain(&b).len(), 7);
    assert_eq!(b.regs().read(r::QPRDC.at(0)), 3);
    assert_eq!(b.regs().read(r::MPC.at(0)), 0);
}

#[test]
fn one_run_hands_the_frames_the_quick_path_cannot_take_to_the_whole_path() {
    // Six frames from one transmit run reach the receive engine together (`rx_quick.rs`):
    // good, filtered, good, good, then two whose descriptor points nowhere.
    let mut rig = pair_rig(SimConfig::default());
    let (good, stranger) = (mac_of(&rig.b), [0x02, 9, 9, 9, 9, 9]);
    let frames = [
        udp(good, 1, 64),
        udp(stranger, 2, 64),
        udp(good, 3, 200),
        udp(good, 4, 64),
        udp(good, 5, 64),
        udp(good, 6, 64),
    ];
    rig.b_rx.desc.store_u64(3 * 16, 0x1000, Relaxed);
    for f in &frames {
        let a = rig.a_tx.stage(f);
        let len = f.len() as u32;
        rig.a_tx.put(a, DATA | EOP | RS | len, len << 14);
    }
    rig.a_tx.kick(&rig.a);
    let got = rig.b_rx.drain(&rig.b);
    let data: Vec<_> = got.iter().map(|g| g.data.clone()).collect();
    assert_eq!(
        data,
        [&frames[0], &frames[2], &frames[3]].map(|f| f.clone())
    );
    assert_eq!(rig.b.counters().rx_filtered, 1);
    assert_eq!(
        rig.b.counters().dma_faults,
        2,
        "both frames meet the bad descriptor"
    );
    assert_eq!(rig.b.counters().rx_frames, 3);
    let b = rig.b.regs();
    assert_eq!(b.read(r::GPRC), 3);
    assert_eq!(b.read(r::TPR), 6, "every frame's fate is final");
    assert_eq!(b.read(r::QPRC.at(0)), 3);
    // The descriptor repaired, the next run goes on from it.
    let good_buf = rig.b_rx.bufs.iova() + (3 * rig.b_rx.buf) as u64;
    rig.b_rx.desc.store_u64(3 * 16, good_buf, Relaxed);
    rig.a_tx.send(&rig.a, &frames[5], None);
    let got = rig.b_rx.drain(&rig.b);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].data, frames[5]);
}

#[test]
fn rss_spreads_flows_deterministically() {
    let (a, b) = SimPort::pair(SimConfig::default());
    init(&a);
    init(&b);
    let m = b.regs();
    let key: [u8; 40] = std::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
    for i in 0..10 {
        let k = u32::from_le_bytes(key[4 * i..4 * i + 4].try_into().unwrap());
        m.write(r::RSSRK.at(i as u32), k);
    }
    for i in 0..32u32 {
        let e = |j: u32| (4 * i + j) % 4;
        m.write(r::RETA.at(i), e(0) | e(1) << 8 | e(2) << 16 | e(3) << 24);
    }
    m.write(r::RXCSUM, r::rxcsum::PCSD.bit());
    m.write(
        r::MRQC,
        r::mrqc::MRQE.val(1) | r::mrqc::RSS_FIELD_IPV4.bit() | r::mrqc::RSS_FIELD_IPV4_UDP.bit(),
    );
    let mut tx = Tx::new(&a, 0, 256);
    let mut rxs: Vec<Rx> = (0..4).map(|q| Rx::new(&b, q, 128, 2048)).collect();
    let mut hits = [0usize; 4];
    for sport in 0..64u16 {
        let f = udp(mac_of(&b), 1000 + sport, 80);
        let mut input = [0u8; 12];
        input[..8].copy_from_slice(&f[26..34]);
        input[8..12].copy_from_slice(&f[34..38]);
        let hash = super::frame::toeplitz(&key, &input);
        let want = ((hash & 0x7f) % 4) as usize;
        tx.send(&a, &f, None);
        let (q, got) = rxs
            .iter_mut()
            .enumerate()
            .find_map(|(q, rx)| rx.recv(&b).map(|g| (q, g)))
            .expect("delivered to some queue");
        assert_eq!(q, want, "flow {sport}");
        assert_eq!((got.last().lo >> 32) as u32, hash, "hash written back");
        assert_eq!(got.last().lo & 0xf, 7, "RSS type UDP/IPv4");
        hits[q] += 1;
    }
    assert!(hits.iter().all(|&h| h > 0), "{hits:?}");
    // Per-queue counters go to counter 0 unless RQSMR maps them.
    assert_eq!(m.read(r::QPRC.at(0)), 64);
}

#[test]
fn bad_dma_addresses_fault_instead_of_crashing() {
    let mut rig = pair_rig(SimConfig::default());
    // Receive buffer address nobody mapped.
    rig.b_rx
        .desc
        .store_u64(0, 0x1000, std::sync::atomic::Ordering::Relaxed);
    let f = udp(mac_of(&rig.b), 1, 64);
    rig.a_tx.send(&rig.a, &f, None);
    assert_eq!(rig.b.counters().dma_faults, 1);
    assert_eq!(rig.b.regs().read(r::RDH.at(0)), 0, "no descriptor consumed");
    assert!(rig.b_rx.recv(&rig.b).is_none());
    // Transmit buffer address nobody mapped: frame lost, descriptor still completed.
    let slot = rig.a_tx.put(0x2000, DATA | EOP | RS | 64, 64 << 14);
    rig.a_tx.kick(&rig.a);
    assert!(rig.a_tx.done(slot));
    assert_eq!(rig.a.counters().dma_faults, 1);
    assert_eq!(rig.a.counters().tx_dropped, 1);
    // A transmit ring at an unmapped address: nothing moves, the fault is counted.
    let m = rig.a.regs();
    m.write(r::TDBAL.at(1), 0x4000);
    m.write(r::TDLEN.at(1), 1024);
    m.write(r::TXDCTL.at(1), r::txdctl::ENABLE.bit());
    m.write(r::TDT.at(1), 5);
    assert_eq!(m.read(r::TDH.at(1)), 0);
    assert_eq!(rig.a.counters().dma_faults, 2);
}

#[test]
fn frames_into_the_void_are_counted_as_frames_to_a_peer() {
    // Port a has a peer: its frames are gathered whole and delivered. Port v has none: its
    // frames are only counted (`tx.rs`, `void_frame`). The same frames give the same counts.
    let mut rig = pair_rig(SimConfig::default());
    let v = SimPort::with_source(
        SimConfig::default(),
        Source::udp(MacAddr([0x02, 0, 0, 0, 0, 1]), 64).with_count(0),
    );
    assert!(v.peer().is_none());
    init(&v);
    let mut v_tx = Tx::new(&v, 0, 64);
    let bcast = udp([0xff; 6], 1, 100);
    let mcast = udp([0x01, 0, 0x5e, 0, 0, 1], 2, 300);
    let short = udp(mac_of(&rig.b), 3, 42);
    for (port, tx) in [(&rig.a, &mut rig.a_tx), (&v, &mut v_tx)] {
        tx.context(100, 0);
        tx.send(port, &bcast, None);
        tx.send(port, &mcast, None);
        tx.send(port, &short, None); // padded to 60
        tx.send(port, &short, Some(0)); // tagged, then padded
        tx.send(port, &mcast, Some(0)); // tagged: 4 bytes more
    }
    let mut regs = vec![r::GPTC, r::TPT, r::BPTC, r::MPTC, r::GOTCL, r::QPTC.at(0)];
    regs.extend(super::layout::TX_BUCKETS);
    let counts = |p: &SimPort| {
        regs.iter()
            .map(|&reg| p.regs().read(reg))
            .collect::<Vec<_>>()
    };
    let (a, vc) = (counts(&rig.a), counts(&v));
    assert_eq!(a, vc, "{regs:?}");
    assert_eq!(&a[..4], [5, 5, 1, 2], "GPTC, TPT, BPTC, MPTC");
    assert_eq!(v.counters().tx_frames, 5);
    assert_eq!(v.counters().tx_bytes, rig.a.counters().tx_bytes);
    // A buffer nobody mapped: the frame is dropped and counted, its descriptor completes.
    let slot = v_tx.put(0x2000, DATA | EOP | RS | 64, 64 << 14);
    v_tx.kick(&v);
    assert!(v_tx.done(slot));
    assert_eq!(v.counters().dma_faults, 1);
    assert_eq!(v.counters().tx_dropped, 1);
    assert_eq!(v.regs().read(r::GPTC), 0);
}

#[test]
fn one_void_walk_hands_what_it_cannot_count_to_the_whole_walk() {
    // One doorbell for a run that mixes what the void path counts itself (`tx_void.rs`) with
    // what it leaves to the whole walk: a frame of two buffers, a context descriptor and a
    // tagged frame, a TSO request naming a context with no MSS (malformed: dropped, counted),
    // a buffer nobody mapped. Port a (a peer: every frame is gathered) and port v (no peer)
    // must count the run identically.
    let mut rig = pair_rig(SimConfig::default());
    let v = SimPort::with_source(
        SimConfig::default(),
        Source::udp(MacAddr([0x02, 0, 0, 0, 0, 1]), 64).with_count(0),
    );
    init(&v);
    let mut v_tx = Tx::new(&v, 0, 64);
    let bcast = udp([0xff; 6], 1, 100);
    let mcast = udp([0x01, 0, 0x5e, 0, 0, 1], 2, 300);
    let short = udp(mac_of(&rig.b), 3, 42);
    let mut last = Vec::new();
    for (port, tx) in [(&rig.a, &mut rig.a_tx), (&v, &mut v_tx)] {
        let len = |f: &[u8]| f.len() as u32;
        let a = tx.stage(&bcast);
        tx.put(a, DATA | EOP | len(&bcast), len(&bcast) << 14);
        let (head, rest) = mcast.split_at(30);
        let (a1, a2) = (tx.stage(head), tx.stage(rest));
        tx.put(a1, DATA | 30, len(&mcast) << 14);
        tx.put(a2, DATA | EOP | len(rest), 0);
        tx.context(200, 1);
        let a = tx.stage(&mcast);
        tx.put(
            a,
            DATA | EOP | VLE | len(&mcast),
            len(&mcast) << 14 | 1 << 4,
        );
        let a = tx.stage(&bcast);
        tx.put(a, DATA | EOP | (1 << 31) | len(&bcast), len(&bcast) << 14);
        tx.put(0x2000, DATA | EOP | 64, 64 << 14);
        let a = tx.stage(&short);
        last.push(tx.put(a, DATA | EOP | RS | len(&short), len(&short) << 14));
        tx.kick(port);
    }
    assert!(rig.a_tx.done(last[0]) && v_tx.done(last[1]));
    let mut regs = vec![r::GPTC, r::TPT, r::BPTC, r::MPTC, r::GOTCL, r::QPTC.at(0)];
    regs.extend(super::layout::TX_BUCKETS);
    let counts = |p: &SimPort| {
        let c = p.counters();
        let own = [
            c.tx_frames,
            c.tx_bytes,
            c.tx_malformed,
            c.tx_dropped,
            c.dma_faults,
        ];
        let regs = regs.iter().map(|&reg| u64::from(p.regs().read(reg)));
        regs.chain(own).collect::<Vec<_>>()
    };
    let (a, vc) = (counts(&rig.a), counts(&v));
    assert_eq!(
        a, vc,
        "{regs:?}, tx_frames, tx_bytes, tx_malformed, tx_dropped, dma_faults"
    );
    assert_eq!(&a[..4], [4, 4, 1, 2], "GPTC, TPT, BPTC, MPTC");
    assert_eq!(
        &a[a.len() - 3..],
        [1, 1, 1],
        "the TSO request: malformed; the unmapped buffer: dropped, faulted"
    );
}

#[test]
fn injected_faults_behave_as_documented() {
    let mut rig = pair_rig(SimConfig::default());
    let f = udp(mac_of(&rig.b), 1, 64);
    rig.b.inject_rx_errors(2);
    for _ in 0..3 {
        rig.a_tx.send(&rig.a, &f, None);
    }
    let got = rig.b_rx.drain(&rig.b);
    let rxe: Vec<bool> = got
        .iter()
        .map(|g| g.last().status & (1 << 29) != 0)
        .collect();
    assert_eq!(rxe, [true, true, false]);
    assert_eq!(rig.b.counters().injected_rx_errors, 2);

    rig.b.link_down();
    assert_eq!(rig.b.regs().read(r::LINKS), 0);
    rig.a_tx.send(&rig.a, &f, None);
    assert!(rig.b_rx.recv(&rig.b).is_none());
    assert_eq!(rig.b.counters().rx_not_ready, 1);
    rig.b.link_restore();
    rig.a.link_down();
    rig.a_tx.send(&rig.a, &f, None);
    assert_eq!(rig.a.counters().tx_dropped, 1);
    rig.a.link_restore();
    rig.a_tx.send(&rig.a, &f, None);
    assert!(rig.b_rx.recv(&rig.b).is_some());

    rig.b.disable_bus_master().unwrap();
    rig.a_tx.send(&rig.a, &f, None);
    assert!(
        rig.b_rx.recv(&rig.b).is_none(),
        "no DMA without bus mastering"
    );
    rig.b.enable_bus_master().unwrap();

    rig.b.surprise_remove();
    assert_eq!(rig.b.regs().read(r::CTRL), u32::MAX);
    assert_eq!(rig.b.regs().read(r::RDH.at(0)), u32::MAX);
    rig.a_tx.send(&rig.a, &f, None);
    assert!(rig.b_rx.recv(&rig.b).is_none(), "no DMA after removal");
}

#[test]
fn address_filters_and_size_limits() {
    let mut rig = pair_rig(SimConfig::default());
    let (b, m) = (rig.b.clone(), rig.b.regs().clone());
    let other = [0x02, 9, 9, 9, 9, 9];
    let mcast = [0x01, 0x00, 0x5e, 0x00, 0x00, 0x42];
    let bcast = [0xff; 6];
    let mut send = |dst: [u8; 6], size: usize| {
        rig.a_tx.send(&rig.a, &udp(dst, 1, size), None);
        rig.b_rx.drain(&b).len()
    };
    assert_eq!(send(other, 64), 0, "other unicast filtered");
    assert_eq!(
        send(other, 64),
        0,
        "again: its verdict, kept with the same bytes"
    );
    assert_eq!(send(mcast, 64), 0, "multicast without MPE/MTA filtered");
    // Each register write below ends the kept verdicts: the same bytes are judged afresh.
    assert_eq!(send(bcast, 64), 1, "broadcast with BAM");
    m.write(r::MTA.at(0x420 >> 5), 1 << (0x420 & 31));
    assert_eq!(send(mcast, 64), 1, "MTA hash hit");
    m.write(r::RAL.at(5), u32::from_le_bytes([2, 9, 9, 9]));
    m.write(r::RAH.at(5), 0x0909 | r::rah::AV.bit());
    assert_eq!(send(other, 64), 1, "second receive address");
    assert_eq!(send(mac_of(&b), 1514), 1, "1514 + FCS = 1518");
    assert_eq!(send(mac_of(&b), 1515), 0, "oversize");
    assert_eq!(m.read(r::ROC), 1);
    m.modify(r::FCTRL, 0, r::fctrl::UPE.bit());
    assert_eq!(send([0x02, 7, 7, 7, 7, 7], 64), 1, "unicast promiscuous");
    assert_eq!(b.counters().rx_filtered, 3);
}

#[test]
fn mac_loopback_and_head_write_back() {
    let (a, _b) = SimPort::pair(SimConfig::default());
    init(&a);
    a.regs().modify(r::HLREG0, 0, r::hlreg0::LPBK.bit());
    let mut tx = Tx::new(&a, 0, 64);
    let mut rx = Rx::new(&a, 0, 64, 2048);
    let wb = DmaMemoryHead::new(&a);
    a.regs().write(r::TDWBAL.at(0), wb.mem.iova() as u32 | 1);
    a.regs()
        .write(r::TDWBAH.at(0), (wb.mem.iova() >> 32) as u32);
    let f = udp(mac_of(&a), 5, 128);
    let slot = tx.send(&a, &f, None);
    assert_eq!(rx.recv(&a).unwrap().data, f, "looped back");
    assert!(
        !tx.done(slot),
        "no descriptor write-back with head write-back"
    );
    assert_eq!(wb.mem.load_u32(0, std::sync::atomic::Ordering::Acquire), 1);
}

struct DmaMemoryHead {
    mem: crate::platform::dma::DmaMemory,
}

impl DmaMemoryHead {
    fn new(p: &SimPort) -> Self {
        DmaMemoryHead {
            mem: crate::platform::dma::DmaMemory::allocate(4096, p.dma_mapper()).unwrap(),
        }
    }
}

#[test]
fn traffic_source_fills_posted_descriptors() {
    let src = Source::udp(MacAddr::BROADCAST, 64).with_count(5);
    let p = SimPort::with_source(SimConfig::default(), src);
    init(&p);
    let mut rx = Rx::new(&p, 0, 16, 2048);
    let got = rx.drain(&p);
    assert_eq!(got.len(), 5);
    assert_eq!(got[0].data, Source::udp(MacAddr::BROADCAST, 64).frame());
    assert_eq!(p.counters().source_frames, 5);
    p.set_source(Some(Source::udp(MacAddr::BROADCAST, 64)));
    assert!(
        rx.recv(&p).is_none(),
        "nothing until the driver posts buffers"
    );
    p.regs().write(r::RDT.at(0), 4);
    let ready = (0..16).filter(|&i| rx.desc.load_u32(i * 16 + 8, Acquire) & 1 != 0);
    assert_eq!(ready.count(), 15, "full speed fills every free descriptor");
    p.set_source(None);
}

#[test]
fn a_new_source_frame_is_judged_afresh() {
    // The source's verdict is kept with its frame's analysis from run to run (`source.rs`);
    // a replaced source's frame must get its own, though no register was written.
    let p = SimPort::with_source(
        SimConfig::default(),
        Source::udp(MacAddr::BROADCAST, 64).with_count(3),
    );
    init(&p);
    let mut rx = Rx::new(&p, 0, 16, 2048);
    assert_eq!(rx.drain(&p).len(), 3);
    // Unicast to a stranger: the address filter drops it.
    let stranger = MacAddr([0x02, 9, 9, 9, 9, 9]);
    p.set_source(Some(Source::udp(stranger, 64).with_count(1)));
    p.regs().write(r::RDT.at(0), 2);
    assert!(rx.recv(&p).is_none());
    assert_eq!(p.counters().rx_filtered, 1);
    p.set_source(Some(Source::udp(p.mac(), 64).with_count(4)));
    p.regs().write(r::RDT.at(0), 2);
    let got = rx.drain(&p);
    assert_eq!(got.len(), 4);
    assert_eq!(got[0].data, Source::udp(p.mac(), 64).frame());
}

#[test]
fn a_source_burst_stops_at_a_bad_buffer_and_counts_its_fault_once() {
    let p = SimPort::with_source(
        SimConfig::default(),
        Source::udp(MacAddr::BROADCAST, 64).with_count(0),
    );
    init(&p);
    let mut rx = Rx::new(&p, 0, 64, 2048);
    // Descriptor 5 names a buffer nobody mapped; the source then offers 20 frames.
    rx.desc.store_u64(5 * 16, 0x1000, Relaxed);
    p.set_source(Some(Source::udp(MacAddr::BROADCAST, 64).with_count(20)));
    p.regs().write(r::RDT.at(0), 63);
    let c = p.counters();
    assert_eq!(c.rx_frames, 5, "the frames before the bad buffer");
    assert_eq!(c.dma_faults, 1, "the bad buffer, once");
    assert_eq!(c.source_frames, 6, "the dropped frame was offered too");
    assert_eq!(
        p.regs().read(r::RDH.at(0)),
        5,
        "its descriptor is not consumed"
    );
    assert_eq!(p.regs().read(r::GPRC), 5);
    assert_eq!(p.regs().read(r::TPR), 6);
    // Repaired, the rest arrives byte-identical.
    rx.desc
        .store_u64(5 * 16, rx.bufs.iova() + 5 * 2048, Relaxed);
    let got = rx.drain(&p);
    assert_eq!(got.len(), 19);
    let want = Source::udp(MacAddr::BROADCAST, 64).frame();
    assert!(got.iter().all(|g| g.data == want && g.descs.len() == 1));
    assert_eq!(p.counters().dma_faults, 1);
    assert_eq!(p.counters().source_frames, 20);
}

#[test]
fn registry_wires_even_and_odd_ports() {
    let a = SimPort::open_named(4000, &SimConfig::default()).unwrap();
    assert!(a.peer().is_none());
    let b = SimPort::open_named(4001, &SimConfig::default()).unwrap();
    assert_eq!(a.peer().unwrap().name(), "sim:4001");
    assert_eq!(b.peer().unwrap().name(), "sim:4000");
    let again = SimPort::open_named(4000, &SimConfig::default()).unwrap();
    assert!(std::sync::Arc::ptr_eq(again.regs(), a.regs()));
    assert_eq!(a.pci_id(), (0x8086, 0x10fb));
    assert_eq!(r::status::LAN_ID.get(b.regs().read(r::STATUS)), 1);
    assert_ne!(a.mac(), b.mac());
    assert!(
        std::sync::Arc::ptr_eq(&a.iommu(), &b.iommu()),
        "one IOMMU for all ports"
    );
}

#[test]
fn threaded_mode_delivers_and_its_threads_end_on_drop() {
    let (a, b) = SimPort::pair(SimConfig {
        mode: Mode::Threaded,
        ..SimConfig::default()
    });
    let watches = (a.worker(), b.worker());
    assert!(watches.0.running() && watches.1.running());
    init(&a);
    init(&b);
    let mut tx = Tx::new(&a, 0, 64);
    let mut rx = Rx::new(&b, 0, 64, 2048);
    let f = udp(mac_of(&b), 1, 300);
    for _ in 0..20 {
        tx.send(&a, &f, None);
    }
    let got = rx.wait(&b, 20);
    assert_eq!(got.len(), 20);
    assert!(got.iter().all(|g| g.data == f));
    drop((tx, rx, a, b));
    let start = Instant::now();
    while (watches.0.running() || watches.1.running()) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        !watches.0.running() && !watches.1.running(),
        "device threads ended"
    );
}

#[test]
fn two_driver_threads_on_an_inline_pair_do_not_deadlock() {
    let (a, b) = SimPort::pair(SimConfig::default());
    init(&a);
    init(&b);
    let run = |me: SimPort, other: MacAddr| {
        std::thread::spawn(move || {
            let mut tx = Tx::new(&me, 0, 64);
            let mut rx = Rx::new(&me, 0, 64, 2048);
            let f = udp(other.0, 1, 64);
            let mut got = 0;
            for _ in 0..2000 {
                tx.send(&me, &f, None);
                got += rx.drain(&me).len();
            }
            (got, rx)
        })
    };
    let ta = run(a.clone(), b.mac());
    let tb = run(b.clone(), a.mac());
    let ((ga, mut ra), (gb, mut rb)) = (ta.join().unwrap(), tb.join().unwrap());
    // Frames the peer sent after this side's last poll are still in the ring.
    let (ga, gb) = (ga + ra.drain(&a).len(), gb + rb.drain(&b).len());
    let lost = |p: &SimPort| p.counters().rx_no_descriptor + p.counters().rx_not_ready;
    assert_eq!(ga as u64 + lost(&a), 2000);
    assert_eq!(gb as u64 + lost(&b), 2000);
}
