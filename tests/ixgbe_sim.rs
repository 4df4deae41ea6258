//! The ixgbe driver against the software 82599 (`vfio_nic::devices::sim`), inline mode: every TDT write
//! delivers the frames to the peer's ring before it returns, so the tests are deterministic.

use std::time::Duration;

use proptest::prelude::*;
use vfio_nic::device::{MacAddr, Port, QueueError, RxQueue, TxQueue};
use vfio_nic::devices::ixgbe::{IxgbeConfig, IxgbePort, IxgbeRx, IxgbeTx};
use vfio_nic::devices::sim::{SimConfig, SimPort, Source};
use vfio_nic::platform::bus::Bus;
use vfio_nic::platform::dma::{Meta, Packet, Pool, PoolConfig};
use vfio_nic::platform::mmio::Mmio;
use vfio_nic::platform::regs::ixgbe as r;

const RING: usize = 64;

fn cfg() -> IxgbeConfig {
    IxgbeConfig {
        rx_ring: RING,
        tx_ring: RING,
        pool: PoolConfig {
            buffers: 4 * RING,
            ..PoolConfig::default()
        },
        link_timeout: Duration::from_millis(200),
        reg_timeout: Duration::from_millis(200),
        ..IxgbeConfig::default()
    }
}

type Queues = (IxgbeRx<SimPort>, IxgbeTx<SimPort>);

fn open(sim: &SimPort, cfg: IxgbeConfig) -> (IxgbePort<SimPort>, Queues) {
    let mut port = IxgbePort::open(sim.clone(), cfg).unwrap();
    let (mut rx, mut tx) = port.take_queues().unwrap();
    (port, (rx.remove(0), tx.remove(0)))
}

/// A test frame: to `dst`, ethertype 0x88b5 (local experimental), sequence number, pattern.
fn frame(dst: MacAddr, seq: u32, len: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x99]);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend((f.len()..len).map(|i| (i as u32 ^ seq) as u8));
    f
}

/// The sequence number, behind a tag if the frame still carries one.
fn seq_of(p: &Packet) -> u32 {
    let at = if p.data()[12..14] == [0x81, 0x00] {
        18
    } else {
        14
    };
    u32::from_be_bytes(p.data()[at..at + 4].try_into().unwrap())
}

fn packets(pool: &Pool, frames: impl IntoIterator<Item = Vec<u8>>) -> Vec<Packet> {
    frames
        .into_iter()
        .map(|f| {
            let mut p = pool.alloc().expect("test pool has room");
            assert!(p.set_data(&f));
            p
        })
        .collect()
}

fn tx_pool(sim: &SimPort) -> Pool {
    Pool::new(
        PoolConfig {
            buffers: 1024,
            ..PoolConfig::default()
        },
        sim.dma_mapper(),
    )
    .unwrap()
}

/// Receives until `n` packets are in `out` or a few empty bursts in a row.
fn receive(rx: &mut IxgbeRx<SimPort>, out: &mut Vec<Packet>, n: usize) {
    let mut idle = 0;
    while out.len() < n && idle < 4 {
        if rx.rx_burst(out, 32).unwrap() == 0 {
            idle += 1;
        } else {
            idle = 0;
        }
    }
}

#[test]
fn init_leaves_the_registers_the_datasheet_requires() {
    let (a, _b) = SimPort::pair(SimConfig::default());
    let port = IxgbePort::open(a.clone(), cfg()).unwrap();
    let m = a.regs();
    assert!(a.bus_master_enabled());
    assert!(r::rxctrl::RXEN.is_set(m.read(r::RXCTRL)));
    assert!(r::hlreg0::RXCRCSTRP.is_set(m.read(r::HLREG0)));
    assert!(r::hlreg0::TXCRCEN.is_set(m.read(r::HLREG0)));
    assert!(r::hlreg0::TXPADEN.is_set(m.read(r::HLREG0)));
    assert!(r::rdrxctl::CRCSTRIP.is_set(m.read(r::RDRXCTL)));
    let fctrl = m.read(r::FCTRL);
    assert!(r::fctrl::BAM.is_set(fctrl) && r::fctrl::UPE.is_set(fctrl));
    let srrctl = m.read(r::SRRCTL.at(0));
    assert_eq!(r::srrctl::DESCTYPE.get(srrctl), 1);
    assert_eq!(r::srrctl::BSIZEPKT.get(srrctl), 2);
    assert!(r::srrctl::DROP_EN.is_set(srrctl));
    assert!(r::rxdctl::ENABLE.is_set(m.read(r::RXDCTL.at(0))));
    assert!(r::txdctl::ENABLE.is_set(m.read(r::TXDCTL.at(0))));
    assert!(r::dmatxctl::TE.is_set(m.read(r::DMATXCTL)));
    assert_eq!(m.read(r::RDLEN.at(0)), (RING * 16) as u32);
    assert_eq!(m.read(r::RDT.at(0)), RING as u32 - 1);
    assert_eq!(m.read(r::DCA_RXCTRL.at(0)) & 1 << 12, 0);
    assert!(r::ctrl_ext::NS_DIS.is_set(m.read(r::CTRL_EXT)));
    assert_eq!(m.read(r::RXPBSIZE.at(0)), 0x8_0000);
    assert_eq!(m.read(r::TXPBSIZE.at(0)), 0x2_8000);
    assert_eq!(m.read(r::TXPBTHRESH.at(0)), 150);
    assert!(r::ctrl_ext::DRV_LOAD.is_set(m.read(r::CTRL_EXT)));
    assert_eq!(m.read(r::DTXMXSZRQ), 0xFFFF);
    // Receive was enabled through the erratum workaround and the threshold fits the buffer:
    // the model saw no sequence the real part would hang on.
    assert_eq!(a.counters().errata, 0, "errata sequences during bring-up");
    // Queue q counts into per-queue statistics index q.
    assert_eq!(m.read(r::RQSMR.at(0)), 0x0302_0100);
    assert_eq!(m.read(r::RQSMR.at(3)), 0x0f0e_0d0c);
    assert_eq!(port.mac(), a.mac());
    let l = port.link().unwrap();
    assert!(l.up && l.speed_mbps == 10_000);

    drop(port);
    assert!(!a.bus_master_enabled(), "Drop releases bus mastering");
    assert!(!r::rxdctl::ENABLE.is_set(m.read(r::RXDCTL.at(0))));
    assert!(!r::rxctrl::RXEN.is_set(m.read(r::RXCTRL)));
    assert_eq!(a.counters().errata, 0, "errata sequences during shutdown");
}

#[test]
fn short_frames_leave_padded_and_never_as_a_zero_length_descriptor() {
    // A zero-length data descriptor hangs the 82599's transmit DMA (the model hangs the queue
    // on one): a fresh packet (length 0) and a 5-byte one must leave as 60 zero-padded bytes.
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (_rxa, mut txa)) = open(&a, cfg());
    let (_pb, (mut rxb, _txb)) = open(&b, cfg());
    let pool = tx_pool(&a);
    let empty = pool.alloc().unwrap();
    assert_eq!(empty.len(), 0);
    let mut five = pool.alloc().unwrap();
    assert!(five.set_data(&[0xff, 0xff, 0xff, 0xff, 0xff]));
    let mut batch = vec![empty, five];
    batch.extend(packets(&pool, [frame(b.mac(), 1, 100)]));
    assert_eq!(txa.tx_burst(&mut batch).unwrap(), 3);
    assert_eq!(a.counters().tx_hangs, 0, "the queue hung");
    let mut got = Vec::new();
    receive(&mut rxb, &mut got, 3);
    let lens: Vec<usize> = got.iter().map(|p| p.len()).collect();
    assert_eq!(lens, [60, 60, 100]);
    assert!(got[0].data().iter().all(|&b| b == 0));
    assert_eq!(&got[1].data()[..5], &[0xff; 5]);
    assert!(got[1].data()[5..].iter().all(|&b| b == 0));
    // A frame cut down from the front to 8 bytes at the very end of its buffer (no room for
    // 60 bytes behind it): moved back and padded, not retried for ever.
    let mut cut = pool.alloc().unwrap();
    let room = cut.capacity();
    assert!(cut.set_len(room));
    cut.data_mut()[room - 8..].copy_from_slice(&[7; 8]);
    assert!(cut.pull_front(room - 8));
    assert!(cut.capacity() < 60);
    let mut batch = vec![cut];
    assert_eq!(txa.tx_burst(&mut batch).unwrap(), 1);
    let mut got = Vec::new();
    receive(&mut rxb, &mut got, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].data()[..8], &[7; 8]);
    assert!(got[0].len() == 60 && got[0].data()[8..].iter().all(|&b| b == 0));
}

#[test]
fn udp_checksum_errors_are_not_believed_on_the_82599() {
    // The 82599 can flag L4E on a UDP frame whose checksum field is 0 ("no checksum"); the
    // model always does. Like Linux and DPDK the driver reports the L4 checksum of any UDP
    // frame with L4E as not verified (neither OK nor BAD), never as bad.
    use std::net::Ipv4Addr;
    use vfio_nic::app::wire::{build_udp_frame, UdpFlow};
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (_rxa, mut txa)) = open(&a, cfg());
    let (_pb, (mut rxb, _txb)) = open(&b, cfg());
    let pool = tx_pool(&a);
    let flow = UdpFlow {
        dst_mac: b.mac(),
        src_mac: a.mac(),
        src_ip: Ipv4Addr::new(192, 0, 2, 1),
        dst_ip: Ipv4Addr::new(192, 0, 2, 2),
        src_port: 1000,
        dst_port: 2000,
        size: 100,
    };
    let mut good = Vec::new();
    assert!(build_udp_frame(&flow, 1, &mut good));
    let mut zero = good.clone();
    zero[40..42].copy_from_slice(&[0, 0]);
    let mut wrong = good.clone();
    wrong[40] ^= 0x55;
    let mut batch = packets(&pool, [good, zero, wrong]);
    assert_eq!(txa.tx_burst(&mut batch).unwrap(), 3);
    let mut got = Vec::new();
    receive(&mut rxb, &mut got, 3);
    assert_eq!(got.len(), 3);
    let l4 = |p: &Packet| {
        (
            p.meta.has(Meta::RX_L4_CSUM_OK),
            p.meta.has(Meta::RX_L4_CSUM_BAD),
            p.meta.has(Meta::RX_IP_CSUM_OK),
        )
    };
    assert_eq!(l4(&got[0]), (true, false, true), "valid checksum: OK");
    assert_eq!(
        l4(&got[1]),
        (false, false, true),
        "checksum 0: not verified"
    );
    assert_eq!(
        l4(&got[2]),
        (false, false, true),
        "L4E on UDP: not believed"
    );
}

#[test]
fn packets_the_device_cannot_reach_are_copied_never_handed_over() {
    // A pool mapped only for the host (a null port's identity mapping) is another DMA domain
    // than the sim ports' software IOMMU, just as host addresses are for a VFIO device: its
    // buffers must never reach a descriptor. They are copied into the ring's bounce pool.
    use std::sync::Arc;
    use vfio_nic::platform::dma::IdentityMapper;
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (_rxa, mut txa)) = open(&a, cfg());
    let (_pb, (mut rxb, _txb)) = open(&b, cfg());
    let host = Pool::new(
        PoolConfig {
            buffers: 256,
            ..PoolConfig::default()
        },
        Arc::new(IdentityMapper),
    )
    .unwrap();
    let same = tx_pool(&a);
    // Mixed: host, device-reachable, host again.
    let mut batch = packets(&host, (0..40).map(|s| frame(b.mac(), s, 80)));
    batch.extend(packets(&same, (40..50).map(|s| frame(b.mac(), s, 80))));
    batch.extend(packets(&host, (50..60).map(|s| frame(b.mac(), s, 80))));
    let mut sent = 0;
    while !batch.is_empty() {
        sent += txa.tx_burst(&mut batch).unwrap();
    }
    assert_eq!(sent, 60);
    assert_eq!(
        a.counters().dma_faults,
        0,
        "a host address reached the device"
    );
    assert_eq!(txa.stats().copied, 50);
    let mut got = Vec::new();
    receive(&mut rxb, &mut got, 60);
    let seqs: Vec<u32> = got.iter().map(seq_of).collect();
    assert_eq!(seqs, (0..60).collect::<Vec<u32>>());
    // The originals went home at once; the copies come home when the device is done.
    drop(got);
    assert_eq!(host.stats().in_use, 0);
}

#[test]
fn frames_cross_a_wired_pair_byte_identical_and_in_order() {
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (_rxa, mut txa)) = open(&a, cfg());
    let (_pb, (mut rxb, _txb)) = open(&b, cfg());
    let pool = tx_pool(&a);
    let sizes = [60usize, 61, 64, 127, 128, 500, 1000, 1514];
    let frames: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| frame(b.mac(), i as u32, n))
        .collect();
    let mut batch = packets(&pool, frames.clone());
    assert_eq!(txa.tx_burst(&mut batch).unwrap(), sizes.len());
    let mut got = Vec::new();
    receive(&mut rxb, &mut got, sizes.len());
    assert_eq!(got.len(), sizes.len());
    for (p, f) in got.iter().zip(&frames) {
        assert_eq!(p.data(), &f[..]);
        assert!(p.is_from(rxb.pool()));
    }
    assert_eq!(rxb.stats().packets, sizes.len() as u64);
    assert_eq!(txa.stats().packets, sizes.len() as u64);
}

#[test]
fn hardware_vlan_insertion_matches_a_software_tag() {
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (_rxa, mut txa)) = open(&a, cfg());
    let (_pb, (mut rxb, _txb)) = open(&b, cfg());
    let pool = tx_pool(&a);
    let mut batch = Vec::new();
    for (i, tci) in [0x0064u16, 0xe064, 0x0001, 0x0001, 0x2ffe]
        .into_iter()
        .enumerate()
    {
        let mut p = packets(&pool, [frame(b.mac(), i as u32, 100)])
            .pop()
            .unwrap();
        p.meta.vlan_tci = tci;
        p.meta.flags |= Meta::TX_VLAN;
        batch.push(p);
    }
    assert_eq!(txa.tx_burst(&mut batch).unwrap(), 5);
    let mut got = Vec::new();
    receive(&mut rxb, &mut got, 5);
    assert_eq!(got.len(), 5);
    for (i, (p, tci)) in got
        .iter()
        .zip([0x0064u16, 0xe064, 1, 1, 0x2ffe])
        .enumerate()
    {
        let mut want = frame(b.mac(), i as u32, 100);
        want.splice(12..12, [0x81, 0x00, (tci >> 8) as u8, tci as u8]);
        assert_eq!(p.data(), &want[..], "frame {i}");
        // Strip is off: the 82599 still sets VP, which must not be reported as stripped.
        assert!(!p.meta.has(Meta::VLAN_STRIPPED));
        assert!(p.meta.has(Meta::RX_VLAN_SEEN));
    }
}

#[test]
fn rings_wrap_around_many_times() {
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (_rxa, mut txa)) = open(&a, cfg());
    let (_pb, (mut rxb, _txb)) = open(&b, cfg());
    let pool = tx_pool(&a);
    let total = 100 * RING as u32;
    let mut next = 0u32;
    let mut expect = 0u32;
    let mut got = Vec::new();
    while expect < total {
        let n = (total - next).min(24);
        let mut batch = packets(
            &pool,
            (next..next + n).map(|s| frame(b.mac(), s, 60 + s as usize % 200)),
        );
        let sent = txa.tx_burst(&mut batch).unwrap();
        next += sent as u32;
        drop(batch);
        rxb.rx_burst(&mut got, 32).unwrap();
        for p in got.drain(..) {
            assert_eq!(seq_of(&p), expect);
            assert_eq!(p.len(), 60 + expect as usize % 200);
            expect += 1;
        }
    }
    assert_eq!(b.counters().rx_no_descriptor, 0);
    txa.reclaim().unwrap();
    assert_eq!(pool.stats().in_use, 0, "transmit buffers all came back");
}

#[test]
fn a_full_transmit_ring_leaves_the_rest_in_the_batch() {
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (_rxa, mut txa)) = open(&a, cfg());
    let (_pb, (_rxb, _txb)) = open(&b, cfg());
    // Nobody receives on b; a's ring still drains in the model, but one burst can only fill
    // the ring once (one slot stays empty).
    let pool = tx_pool(&a);
    let mut batch = packets(&pool, (0..200).map(|s| frame(b.mac(), s, 60)));
    let sent = txa.tx_burst(&mut batch).unwrap();
    assert_eq!(sent, RING - 1);
    assert_eq!(batch.len(), 200 - sent);
    assert_eq!(
        seq_of(&batch[0]),
        sent as u32,
        "the rest, in order, from the first unsent"
    );
    assert_eq!(txa.stats().no_room, (200 - sent) as u64);
    // The model finished them: the next bursts get room again.
    let sent2 = txa.tx_burst(&mut batch).unwrap();
    assert!(sent2 > 0);
}

#[test]
fn pool_exhaustion_receives_fewer_counts_and_recovers() {
    let sim = SimPort::with_source(SimConfig::default(), Source::udp(MacAddr::BROADCAST, 64));
    let c = IxgbeConfig {
        pool: PoolConfig {
            buffers: RING + 32,
            ..PoolConfig::default()
        },
        ..cfg()
    };
    let (_port, (mut rx, _tx)) = open(&sim, c);
    let mut held = Vec::new();
    assert_eq!(rx.rx_burst(&mut held, 32).unwrap(), 32);
    // The pool's 32 spare buffers now sit in the ring; the next burst finds no buffer.
    assert_eq!(rx.pool().stats().free, 0);
    let before = rx.stats().no_room;
    let mut more = Vec::new();
    assert_eq!(rx.rx_burst(&mut more, 32).unwrap(), 0);
    assert!(rx.stats().no_room > before, "counted");
    drop(held);
    assert_eq!(rx.rx_burst(&mut more, 32).unwrap(), 32, "recovered");
    assert!(more.iter().all(|p| p.len() == 64));
}

#[test]
fn error_frames_are_dropped_and_multi_descriptor_frames_arrive_whole_without_leaking() {
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (_rxa, mut txa)) = open(&a, cfg());
    let (_pb, (mut rxb, _txb)) = open(&b, cfg());
    let pool = tx_pool(&a);
    let mut send = |range: std::ops::Range<u32>, len: usize| {
        let mut batch = packets(&pool, range.map(|s| frame(b.mac(), s, len)));
        let n = batch.len();
        assert_eq!(txa.tx_burst(&mut batch).unwrap(), n);
    };
    send(0..4, 300);
    b.inject_rx_errors(3);
    send(4..8, 300);
    b.split_rx(2, 128);
    send(8..12, 300);
    let mut got = Vec::new();
    receive(&mut rxb, &mut got, 12);
    let seqs: Vec<u32> = got.iter().map(seq_of).collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 7, 8, 9, 10, 11]);
    assert_eq!(rxb.stats().dropped, 3);
    // The two frames the device wrote in 128-byte pieces arrive as chains, byte for byte.
    for p in &got[5..7] {
        assert_eq!(p.segment_count(), 3, "300 bytes in 128-byte pieces");
        assert_eq!(p.to_vec(), frame(b.mac(), seq_of(p), 300));
    }
    drop(got);
    // Every buffer is in the ring, in its small reserve, or free; once the queue is gone, all
    // are free: nothing leaked with the dropped frames.
    let s = rxb.pool().stats();
    assert!(
        (RING..=RING + vfio_nic::platform::dma::slots::RX_RESERVE).contains(&s.in_use),
        "{s:?}"
    );
    let pool_b = rxb.pool().clone();
    drop(rxb);
    assert_eq!(pool_b.stats().in_use, 0, "{:?}", pool_b.stats());
}

#[test]
fn a_million_packets_and_every_buffer_comes_home() {
    const N: u64 = 1_000_000;
    let sim = SimPort::with_source(
        SimConfig::default(),
        Source::udp(MacAddr::BROADCAST, 60).with_count(N),
    );
    let c = IxgbeConfig {
        rx_ring: 512,
        pool: PoolConfig {
            buffers: 1024,
            ..PoolConfig::default()
        },
        ..cfg()
    };
    let (port, (mut rx, tx)) = open(&sim, c);
    let pool = rx.pool().clone();
    let mut batch = Vec::with_capacity(64);
    let mut n = 0u64;
    while n < N {
        let got = rx.rx_burst(&mut batch, 64).unwrap();
        assert!(got > 0, "source stalled after {n} packets");
        n += got as u64;
        Pool::free_bulk(batch.drain(..));
    }
    assert_eq!(n, N);
    assert_eq!(rx.stats().packets, N);
    // Only the ring and its reserve hold buffers: the batches gave every packet back.
    let in_use = pool.stats().in_use;
    assert!(
        (512..=512 + vfio_nic::platform::dma::slots::RX_RESERVE).contains(&in_use),
        "{in_use} buffers out"
    );
    drop((rx, tx, port));
    assert_eq!(pool.stats().in_use, 0, "every buffer is back in its pool");
}

#[test]
fn surprise_removal_is_an_error_not_a_hang() {
    let (a, b) = SimPort::pair(SimConfig::default());
    let (mut pa, (mut rxa, mut txa)) = open(&a, cfg());
    let (_pb, (_rxb, mut txb)) = open(&b, cfg());
    // Traffic first, then the device disappears mid-stream.
    let b_pool = tx_pool(&b);
    let mut sent = packets(&b_pool, (0..8).map(|s| frame(a.mac(), s, 60)));
    txb.tx_burst(&mut sent).unwrap();
    let mut batch = Vec::new();
    receive(&mut rxa, &mut batch, 8);
    assert_eq!(batch.len(), 8);
    batch.clear();
    a.surprise_remove();
    assert!(pa.link().is_err());
    assert!(pa.stats().is_err());
    // The very next burst reports it (the first empty poll after traffic reads the head).
    assert_eq!(rxa.rx_burst(&mut batch, 32), Err(QueueError::DeviceGone));
    // A queue that stays idle keeps checking, once per 1024 empty polls.
    let mut err = None;
    for i in 0..5000 {
        if let Err(e) = rxa.rx_burst(&mut batch, 32) {
            err = Some((i, e));
            break;
        }
    }
    let (i, e) = err.expect("receive reported the removal again");
    assert_eq!(e, QueueError::DeviceGone);
    assert!(i <= 1024, "{i}");
    // Transmit notices as soon as the ring is full (the device no longer completes anything).
    let pool = tx_pool(&a);
    let mut err = None;
    for _ in 0..4 {
        let mut batch = packets(&pool, (0..40).map(|s| frame(b.mac(), s, 60)));
        if let Err(e) = txa.tx_burst(&mut batch) {
            err = Some(e);
            break;
        }
    }
    assert_eq!(err, Some(QueueError::DeviceGone));
    // Dropping everything returns at once.
    let t = std::time::Instant::now();
    drop((rxa, txa, pa));
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn mac_loopback_sends_frames_back_to_the_same_port() {
    let (a, _b) = SimPort::pair(SimConfig::default());
    let (_p, (mut rx, mut tx)) = open(
        &a,
        IxgbeConfig {
            loopback: true,
            ..cfg()
        },
    );
    let pool = tx_pool(&a);
    let mut batch = packets(&pool, (0..10).map(|s| frame(a.mac(), s, 80)));
    assert_eq!(tx.tx_burst(&mut batch).unwrap(), 10);
    let mut got = Vec::new();
    receive(&mut rx, &mut got, 10);
    assert_eq!(
        got.iter().map(seq_of).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
}

#[test]
fn strip_switch_under_traffic_never_misreports_a_frame() {
    let tci = 0x6123u16;
    let sim = SimPort::with_source(
        SimConfig::default(),
        Source::udp(MacAddr::BROADCAST, 64).with_vlan(0x8100, tci),
    );
    let (mut port, (mut rx, _tx)) = open(&sim, cfg());
    let mut batch = Vec::new();
    let check = |p: &Packet| {
        let d = p.data();
        if p.meta.has(Meta::VLAN_STRIPPED) {
            assert_eq!(p.meta.vlan_tci, tci);
            assert_eq!(p.len(), 64);
            assert_ne!(&d[12..14], &[0x81, 0x00]);
        } else {
            assert_eq!(p.len(), 68);
            assert_eq!(&d[12..16], &[0x81, 0x00, (tci >> 8) as u8, tci as u8]);
            assert!(p.meta.has(Meta::RX_VLAN_SEEN));
        }
    };
    let (mut stripped, mut tagged) = (0, 0);
    for round in 0..20 {
        let on = round % 2 == 0;
        port.set_rx_strip(0, on).unwrap();
        for _ in 0..8 {
            rx.rx_burst(&mut batch, 16).unwrap();
        }
        assert!(!port.rx_strip_pending(0), "switch done within the bursts");
        assert_eq!(port.rx_strip(0), Some(on));
        for p in batch.drain(..) {
            check(&p);
            if p.meta.has(Meta::VLAN_STRIPPED) {
                stripped += 1;
            } else {
                tagged += 1;
            }
        }
    }
    assert!(stripped > 100 && tagged > 100, "{stripped} {tagged}");
    // The owner can switch synchronously too.
    let n = rx.set_vlan_strip(false, &mut batch).unwrap();
    assert_eq!(n, batch.len());
    batch.iter().for_each(check);
    assert!(!rx.vlan_strip());
}

#[test]
fn vlan_filter_lets_only_listed_vids_through() {
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (_rxa, mut txa)) = open(&a, cfg());
    let (mut pb, (mut rxb, _txb)) = open(&b, cfg());
    pb.set_vlan_filter(true).unwrap();
    pb.add_vlan(100).unwrap();
    let pool = tx_pool(&a);
    let mut batch = Vec::new();
    for (i, vid) in [100u16, 200, 0, 100].into_iter().enumerate() {
        let mut p = packets(&pool, [frame(b.mac(), i as u32, 100)])
            .pop()
            .unwrap();
        p.meta.vlan_tci = vid;
        p.meta.flags |= Meta::TX_VLAN;
        batch.push(p);
    }
    batch.extend(packets(&pool, [frame(b.mac(), 4, 100)]));
    assert_eq!(txa.tx_burst(&mut batch).unwrap(), 5);
    let mut got = Vec::new();
    receive(&mut rxb, &mut got, 5);
    assert_eq!(got.iter().map(seq_of).collect::<Vec<_>>(), vec![0, 2, 3, 4]);
    assert!(pb.add_vlan(4095).is_err());
}

#[test]
fn rss_spreads_flows_over_queues() {
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (_rxa, mut txa)) = open(&a, cfg());
    let mut pb = IxgbePort::open(
        b.clone(),
        IxgbeConfig {
            rx_queues: 4,
            ..cfg()
        },
    )
    .unwrap();
    let (mut rxs, _txs) = pb.take_queues().unwrap();
    let pool = tx_pool(&a);
    // IPv4/UDP frames with different source ports.
    let mut batch = Vec::new();
    for port in 0..60u16 {
        let mut f = frame(b.mac(), 0, 60);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = [
            0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        f[14..34].copy_from_slice(&ip);
        let c = ipv4_checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f[34..36].copy_from_slice(&(1000 + port).to_be_bytes());
        f[36..38].copy_from_slice(&53u16.to_be_bytes());
        f[38..40].copy_from_slice(&26u16.to_be_bytes());
        f[40..42].copy_from_slice(&[0, 0]);
        batch.extend(packets(&pool, [f]));
    }
    assert_eq!(txa.tx_burst(&mut batch).unwrap(), 60);
    let mut per_queue = Vec::new();
    for q in &mut rxs {
        let mut got = Vec::new();
        receive(q, &mut got, 60);
        assert!(got
            .iter()
            .all(|p| p.meta.has(Meta::RX_L4_CSUM_OK) || p.meta.has(Meta::RX_IP_CSUM_OK)));
        per_queue.push(got.len());
    }
    assert_eq!(per_queue.iter().sum::<usize>(), 60, "{per_queue:?}");
    assert!(
        per_queue.iter().filter(|&&n| n > 0).count() >= 3,
        "{per_queue:?}"
    );
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut s: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random bursts through a wired pair: every frame sent is received or counted as dropped
    /// by the receiver for lack of descriptors, and what arrives arrives in order, intact.
    #[test]
    fn random_bursts_conserve_and_keep_order(
        steps in prop::collection::vec((0usize..80, 0usize..48, 60usize..400), 1..40)
    ) {
        let (a, b) = SimPort::pair(SimConfig::default());
        let (_pa, (_rxa, mut txa)) = open(&a, cfg());
        let (_pb, (mut rxb, _txb)) = open(&b, cfg());
        let pool = tx_pool(&a);
        let mut next = 0u32;
        let mut received = Vec::new();
        let mut got = Vec::new();
        for (send, recv, len) in steps {
            let mut batch = packets(&pool, (next..next + send as u32).map(|s| frame(b.mac(), s, len)));
            let sent = txa.tx_burst(&mut batch).unwrap();
            next += sent as u32;
            prop_assert_eq!(batch.len(), send - sent);
            drop(batch);
            rxb.rx_burst(&mut got, recv).unwrap();
            prop_assert!(got.len() <= recv);
            for p in got.drain(..) {
                let s = seq_of(&p);
                prop_assert_eq!(p.data(), &frame(b.mac(), s, p.len())[..]);
                received.push(s);
            }
        }
        // Drain what is left.
        loop {
            if rxb.rx_burst(&mut got, 64).unwrap() == 0 { break; }
            received.extend(got.drain(..).map(|p| seq_of(&p)));
        }
        prop_assert!(received.windows(2).all(|w| w[0] < w[1]), "order");
        let dropped = b.counters().rx_no_descriptor;
        prop_assert_eq!(received.len() as u64 + dropped, u64::from(next));
        txa.reclaim().unwrap();
        prop_assert_eq!(pool.stats().in_use, 0);
    }
}

#[test]
fn per_queue_drop_counters_count_their_own_queue() {
    use vfio_nic::app::wire::{build_udp_frame, UdpFlow};
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (_rxa, mut txa)) = open(&a, cfg());
    let mut pb = IxgbePort::open(
        b.clone(),
        IxgbeConfig {
            rx_queues: 2,
            ..cfg()
        },
    )
    .unwrap();
    let (_rxb, _txb) = pb.take_queues().unwrap();
    // Many UDP flows: RSS spreads them over both queues, and nobody receives, so both rings
    // fill and the device drops (SRRCTL.DROP_EN) into each queue's own QPRDC.
    let pool = tx_pool(&a);
    let mut frame = Vec::new();
    let mut sent = 0;
    for port in 0..8u16 {
        let flow = UdpFlow {
            dst_mac: b.mac(),
            src_mac: a.mac(),
            src_ip: [198, 18, 0, 1].into(),
            dst_ip: [198, 18, 0, 2].into(),
            src_port: 2000 + port * 17,
            dst_port: 7,
            size: 64,
        };
        let mut batch = Vec::new();
        for seq in 0..60 {
            assert!(build_udp_frame(&flow, seq, &mut frame));
            let mut p = pool.alloc().unwrap();
            assert!(p.set_data(&frame));
            batch.push(p);
        }
        while !batch.is_empty() {
            sent += txa.tx_burst(&mut batch).unwrap();
        }
    }
    let st = pb.stats().unwrap();
    let (d0, d1) = (st.get("QPRDC0").unwrap(), st.get("QPRDC1").unwrap());
    assert!(d0 > 0 && d1 > 0, "drops per queue: {d0}, {d1}");
    // Each ring holds RING - 1 frames; everything else was dropped, and counted once.
    assert_eq!(d0 + d1, sent as u64 - 2 * (RING as u64 - 1), "{d0} + {d1}");
}

/// Interrupt mode on the software 82599 (some of its tests run the model threaded).
#[path = "ixgbe_sim_irq.rs"]
mod irq;
