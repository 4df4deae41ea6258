//! Interrupt mode of the ixgbe driver on the software 82599 (`devices/sim/irq.rs` models MSI-X,
//! IVAR, EIAC and EITR): a sleeping queue wakes on a frame, a frame that lands between the last
//! empty poll and the arming is never slept on, the throttle interval bounds the interrupt
//! rate, and a queue dropped while armed leaves nothing behind.

use std::time::{Duration, Instant};

use vfio_nic::device::{MacAddr, RxQueue, TxQueue};
use vfio_nic::devices::intel::IrqConfig;
use vfio_nic::devices::ixgbe::{IxgbeConfig, IxgbePort, IxgbeRx};
use vfio_nic::devices::sim::{Mode, SimConfig, SimPort, Source};
use vfio_nic::platform::bus::Bus;
use vfio_nic::platform::dma::{Packet, Pool, PoolConfig};
use vfio_nic::platform::mmio::Mmio;
use vfio_nic::platform::regs::ixgbe as r;

use super::{frame, open, packets};

/// The module's port settings ([`super::cfg`]) in interrupt mode or not, with the longer
/// timeouts a threaded device thread may need on a loaded machine.
fn cfg(interrupts: Option<IrqConfig>) -> IxgbeConfig {
    IxgbeConfig {
        link_timeout: Duration::from_secs(2),
        reg_timeout: Duration::from_millis(500),
        interrupts,
        ..super::cfg()
    }
}

/// `n` 64-byte test frames to `dst`, in buffers of `pool`.
fn frames(pool: &Pool, dst: MacAddr, n: u32) -> Vec<Packet> {
    packets(pool, (0..n).map(|seq| frame(dst, seq, 64)))
}

/// Arms the queue, sets its cause by hand (EICS) and waits for the message; disarms again.
fn eics_wakes(rx: &mut IxgbeRx<SimPort>) -> bool {
    assert!(!rx.arm_interrupt().unwrap(), "frames were waiting");
    rx.trigger_interrupt().unwrap();
    let woke = rx
        .interrupt()
        .unwrap()
        .wait(Duration::from_secs(10))
        .unwrap();
    rx.disarm_interrupt();
    woke
}

fn drain(rx: &mut impl RxQueue) -> usize {
    let mut batch = Vec::new();
    let mut n = 0;
    while rx.rx_burst(&mut batch, 64).unwrap() > 0 {
        n += batch.len();
        batch.clear();
    }
    n
}

#[test]
fn a_sleeping_queue_wakes_on_a_frame_and_on_eics() {
    let threaded = SimConfig {
        mode: Mode::Threaded,
        ..SimConfig::default()
    };
    let (a, b) = SimPort::pair(threaded);
    let (pa, (mut rxa, _txa)) = open(&a, cfg(Some(IrqConfig::default())));
    let (_pb, (_rxb, mut txb)) = open(&b, cfg(None));
    assert_eq!(pa.interrupts().len(), 1);
    assert!(rxa.interrupt().is_some());
    drain(&mut rxa);
    // Nothing sent: the wait times out.
    assert!(!rxa.wait(Duration::from_millis(50)).unwrap());
    // EICS on the armed vector.
    let before = a.counters().interrupts;
    assert!(eics_wakes(&mut rxa));
    assert_eq!(a.counters().interrupts, before + 1);
    // Frames sent while the queue sleeps wake it.
    let pool = rxa.pool().clone();
    let mut batch = frames(&pool, a.mac(), 8);
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        while !batch.is_empty() {
            txb.tx_burst(&mut batch).unwrap();
        }
        txb
    });
    let t = Instant::now();
    assert!(rxa.wait(Duration::from_secs(20)).unwrap(), "not woken");
    assert!(
        t.elapsed() >= Duration::from_millis(90),
        "woke before the send"
    );
    let _txb = sender.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got < 8 && Instant::now() < deadline {
        got += drain(&mut rxa);
    }
    assert_eq!(got, 8);
}

#[test]
fn a_frame_between_the_last_empty_poll_and_the_arming_is_not_slept_on() {
    // Inline: the peer's TDT write puts the frame in A's ring before it returns, while A's
    // vector is masked (polling). Arming clears that stale cause, so no message will come:
    // only the look at the ring after arming finds the frame. Without it, this sleeps 30 s.
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (mut rxa, _txa)) = open(&a, cfg(Some(IrqConfig::default())));
    let (_pb, (_rxb, mut txb)) = open(&b, cfg(None));
    assert_eq!(drain(&mut rxa), 0, "the last empty poll");
    let pool = rxa.pool().clone();
    let mut batch = frames(&pool, a.mac(), 1);
    assert_eq!(txb.tx_burst(&mut batch).unwrap(), 1);
    let t = Instant::now();
    assert!(rxa.wait(Duration::from_secs(30)).unwrap());
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "slept {:?} on a frame that was already in the ring",
        t.elapsed()
    );
    assert_eq!(drain(&mut rxa), 1);
}

#[test]
fn the_throttle_interval_bounds_the_interrupt_rate() {
    // A source fills A's ring as fast as the loop frees it; the loop sleeps after every drain,
    // so without a throttle each frame could wake it. With EITR at 1000 us, the model sends at
    // most one message per 1000 us: over the window, at most window / interval + 1, and one
    // more at each end for a send recorded just outside the counter's reads.
    const INTERVAL_US: u16 = 1000;
    let threaded = SimConfig {
        mode: Mode::Threaded,
        ..SimConfig::default()
    };
    let a = SimPort::with_source(threaded, Source::udp(MacAddr([2, 0, 0, 0, 0, 1]), 64));
    let (_pa, (mut rxa, _txa)) = open(
        &a,
        cfg(Some(IrqConfig {
            throttle_us: INTERVAL_US,
        })),
    );
    let window = Duration::from_millis(300);
    let (c0, t0) = (a.counters().interrupts, Instant::now());
    let mut wakes = 0u64;
    let mut frames = 0;
    while t0.elapsed() < window {
        frames += drain(&mut rxa);
        if rxa.wait(Duration::from_millis(50)).unwrap() {
            wakes += 1;
        }
    }
    let (sent, elapsed) = (a.counters().interrupts - c0, t0.elapsed());
    let bound = elapsed.as_micros() as u64 / u64::from(INTERVAL_US) + 3;
    assert!(frames > 0, "the source delivered nothing");
    assert!(sent >= 1, "no interrupt in {elapsed:?}");
    assert!(
        sent <= bound,
        "{sent} interrupts in {elapsed:?} with a {INTERVAL_US} us throttle (at most {bound})"
    );
    assert!(wakes >= 1);
}

#[test]
fn a_queue_dropped_while_armed_leaves_no_routing_and_reopens() {
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pb, (_rxb, mut txb)) = open(&b, cfg(None));
    let kept = {
        let (pa, (mut rxa, txa)) = open(&a, cfg(Some(IrqConfig::default())));
        assert!(!rxa.arm_interrupt().unwrap());
        let kept = rxa.interrupt().unwrap().clone();
        drop((rxa, txa, pa)); // armed
        kept
    };
    // The routing went with the port: the closing reset cleared GPIE, IVAR and EIMS, so set
    // them again by hand and raise the cause (EICS), as a stray write would: with the routing
    // still there, that would signal the old eventfd.
    let before = a.counters().interrupts;
    let m = a.regs();
    m.write(r::GPIE, r::gpie::MSIX_MODE.bit());
    m.write(r::IVAR.at(0), r::ivar::RX_EVEN_VALID.bit());
    m.write(r::EIMS, 1);
    m.write(r::EICS, 1);
    let pool = Pool::new(PoolConfig::default(), b.dma_mapper()).unwrap();
    let mut batch = frames(&pool, a.mac(), 4);
    let _ = txb.tx_burst(&mut batch);
    assert_eq!(a.counters().interrupts, before);
    assert_eq!(kept.take().unwrap(), 0);
    // Reopened in interrupt mode, it wakes again.
    let (_pa, (mut rxa, _txa)) = open(&a, cfg(Some(IrqConfig::default())));
    drain(&mut rxa);
    assert!(eics_wakes(&mut rxa));
}

#[test]
fn a_throttle_beyond_eitr_is_refused_and_every_queue_gets_a_vector() {
    let (a, _b) = SimPort::pair(SimConfig::default());
    let mut c = cfg(Some(IrqConfig { throttle_us: 2000 }));
    let e = IxgbePort::open(a.clone(), c.clone())
        .err()
        .expect("refused");
    assert!(e.to_string().contains("0 to 1022 us"), "{e}");
    c.interrupts = Some(IrqConfig::default());
    c.rx_queues = 4;
    c.tx_queues = 4;
    let p = IxgbePort::open(a, c).unwrap();
    assert_eq!(p.interrupts().len(), 4);
}

/// Auto-mask (GPIE.EIAME, EIAM_EX): a vector that fires is masked by the device itself, so
/// frames that keep coming before the queue re-arms send no further interrupt, even with the
/// least throttle. Without it, every frame after the first would interrupt again (EIAC clears
/// the cause, and the vector stays unmasked until the driver's EIMC).
#[test]
fn a_vector_masks_itself_when_it_fires() {
    let (a, b) = SimPort::pair(SimConfig::default());
    let (_pa, (mut rxa, _txa)) = open(&a, cfg(Some(IrqConfig { throttle_us: 0 })));
    let (_pb, (_rxb, mut txb)) = open(&b, cfg(None));
    assert_eq!(drain(&mut rxa), 0);
    assert!(!rxa.arm_interrupt().unwrap(), "nothing waiting");
    let before = a.counters().interrupts;
    let pool = rxa.pool().clone();
    for seq in 0..4 {
        let mut batch = frames(&pool, a.mac(), 1);
        batch[0].set_data(&frame(a.mac(), seq, 64));
        assert_eq!(txb.tx_burst(&mut batch).unwrap(), 1);
    }
    assert_eq!(
        a.counters().interrupts - before,
        1,
        "one interrupt for four frames: the vector masked itself"
    );
    assert_eq!(a.regs().read(r::EIMS) & 1, 0, "masked by the device");
    assert!(rxa.interrupt().unwrap().take().unwrap() > 0);
    rxa.disarm_interrupt();
    assert_eq!(drain(&mut rxa), 4);
}

/// Four receive queues, each on its own vector (queue q on vector q: IVAR[q >> 1], the odd
/// queues in byte 2): a flow that RSS steers to queue 1, then one steered to queue 3, wakes
/// exactly that queue's eventfd. The flows are found by sending them polled first and seeing
/// where they land (the steering is the device's: RSS over the UDP ports).
#[test]
fn a_frame_steered_to_an_odd_queue_wakes_exactly_that_queues_eventfd() {
    use vfio_nic::app::wire::{build_udp_frame, UdpFlow};
    use vfio_nic::device::Port;
    let (a, b) = SimPort::pair(SimConfig::default());
    let mut c = cfg(Some(IrqConfig::default()));
    c.rx_queues = 4;
    c.tx_queues = 4;
    let mut pa = IxgbePort::open(a.clone(), c).unwrap();
    let (mut rxs, _txs) = pa.take_queues().unwrap();
    let (_pb, (_rxb, mut txb)) = open(&b, cfg(None));
    let pool = rxs[0].pool().clone();
    let flow = |sport: u16| {
        let f = UdpFlow {
            dst_mac: a.mac(),
            src_mac: MacAddr([2, 0, 0, 0, 0, 0x99]),
            src_ip: [10, 0, 0, 1].into(),
            dst_ip: [10, 0, 0, 2].into(),
            src_port: sport,
            dst_port: 9,
            size: 64,
        };
        let mut out = Vec::new();
        assert!(build_udp_frame(&f, u64::from(sport), &mut out));
        out
    };
    let mut send = |f: &[u8]| {
        let mut batch = packets(&pool, [f.to_vec()]);
        assert_eq!(txb.tx_burst(&mut batch).unwrap(), 1);
    };
    // Where each flow lands, polled (every vector masked).
    let mut landing = std::collections::HashMap::new();
    for sport in 1000..1064u16 {
        send(&flow(sport));
        let q = (0..4)
            .find(|&q| drain(&mut rxs[q]) == 1)
            .expect("the frame reached a queue");
        landing.entry(q).or_insert(sport);
    }
    for target in [1usize, 3] {
        let sport = landing[&target];
        for rx in rxs.iter_mut() {
            assert_eq!(drain(rx), 0);
            assert!(!rx.arm_interrupt().unwrap(), "nothing waiting");
        }
        send(&flow(sport));
        for (q, rx) in rxs.iter_mut().enumerate() {
            let signals = rx.interrupt().unwrap().take().unwrap();
            rx.disarm_interrupt();
            assert_eq!(
                signals > 0,
                q == target,
                "queue {q}'s eventfd after a frame steered to queue {target}"
            );
        }
        assert_eq!(drain(&mut rxs[target]), 1);
    }
}
