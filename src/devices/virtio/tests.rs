//! Host tests of the whole driver against a fake virtio-net device: the common configuration
//! as registers ([`Fake`], an [`Mmio`] that accepts only each field's natural width), and the
//! device's side of the rings played step by step through a software IOMMU (the driver's bus
//! addresses are not pointers, so a driver that hands over the wrong address faults here
//! instead of working by accident). The fake answers the control queue when it is rung, and on
//! a reset reads its rings once more: a driver that freed them first makes that read fault.
//!
//! The fake is ours, not QEMU: what QEMU's device does is proven on the test bed
//! (`hwtests/qemu/run --layout virtio`). It is here for the driver's own logic: bring-up
//! order, refusals of bad devices, the header placement, padding, ring wrap, the protocol
//! violations, the control queue, and the reset before memory goes.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::model::virtqueue::{Desc, DeviceQueue};
use super::transport::{status, Transport, Window};
use super::{feature, VirtioConfig, VirtioPort};
use crate::device::{MacAddr, Port, QueueError, RxQueue, TxQueue};
use crate::error::Error;
use crate::platform::dma::{PoolConfig, SoftIommu};
use crate::platform::irq::{Interrupt, InterruptSet};
use crate::platform::mmio::Mmio;
use crate::vlan::{Vid, VlanHardware};

const COMMON: usize = 0;
const DEVICE: usize = 0x2000;
const NOTIFY: usize = 0x3000;
/// Doorbells are `NOTIFY + 4 * queue` (queue_notify_off = queue, multiplier 4).
const NOTIFY_MULT: u32 = 4;

#[derive(Debug, Default)]
struct State {
    features: u64,
    driver_features: u64,
    dfsel: u32,
    gfsel: u32,
    status: u8,
    /// Whether FEATURES_OK is refused (does not stay set).
    refuse_features: bool,
    sel: u16,
    queues: [DeviceQueue; 3],
    notified: Vec<u16>,
    resets: u32,
    /// The status values written, in order (bring-up order checks).
    status_log: Vec<u8>,
    /// Receive mode and VLAN table as the control queue set them.
    promisc: Option<bool>,
    allmulti: Option<bool>,
    vlans: BTreeSet<u16>,
    /// Control commands answered.
    commands: usize,
    /// Leave the control queue unanswered (a stuck device).
    ignore_ctrl: bool,
    /// The receive queue's interrupt (interrupt mode), signalled when the device returns a
    /// frame while the driver allows interrupts; and how many it sent.
    rx_irq: Option<Interrupt>,
    interrupts_sent: u32,
}

/// The fake device: registers, and the DMA it does through `iommu`.
struct Fake {
    st: Mutex<State>,
    iommu: Arc<SoftIommu>,
}

impl Fake {
    fn new(features: u64, max: [u16; 3]) -> Arc<Fake> {
        let mut s = State {
            features,
            ..State::default()
        };
        for (q, m) in s.queues.iter_mut().zip(max) {
            q.max = m;
        }
        Arc::new(Fake {
            st: Mutex::new(s),
            iommu: Arc::new(SoftIommu::new("virtio test")),
        })
    }
    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.st.lock().unwrap()
    }

    /// The device resets: it reads each ring's used index one last time (a driver that freed
    /// the ring before the reset makes this fault) and forgets its queues and filters.
    fn reset(&self, s: &mut State) {
        for q in s.queues.iter().filter(|q| q.used != 0) {
            let _ = self.iommu.load_u32(q.used, Acquire);
        }
        s.resets += 1;
        let max = s.queues.map(|q| q.max);
        s.queues = Default::default();
        for (q, m) in s.queues.iter_mut().zip(max) {
            q.max = m;
        }
        s.promisc = None;
        s.allmulti = None;
        s.vlans.clear();
    }

    /// Answers every control command the driver published (QEMU's
    /// `virtio_net_handle_ctrl`: class and command, data, a one-byte ack).
    fn serve_ctrl(&self, s: &mut State) {
        while let Some((head, chain)) = s.queues[2].pop(&self.iommu) {
            let mut hdr = [0u8; 2];
            self.iommu.read(chain[0].0, &mut hdr).unwrap();
            let mut data = vec![0u8; chain[1].1 as usize];
            self.iommu.read(chain[1].0, &mut data).unwrap();
            let ok = match (hdr, data.as_slice()) {
                ([0, 0], &[on]) => {
                    s.promisc = Some(on == 1);
                    true
                }
                ([0, 1], &[on]) => {
                    s.allmulti = Some(on == 1);
                    true
                }
                ([2, cmd @ (0 | 1)], &[lo, hi]) => {
                    let vid = u16::from_le_bytes([lo, hi]);
                    if cmd == 0 {
                        s.vlans.insert(vid);
                    } else {
                        s.vlans.remove(&vid);
                    }
                    true
                }
                _ => false,
            };
            assert_eq!(
                chain[2].2,
                super::ring::DESC_F_WRITE,
                "the ack is device-written"
            );
            self.iommu.write(chain[2].0, &[u8::from(!ok)]).unwrap();
            s.queues[2].push(&self.iommu, u32::from(head), 1, true);
            s.commands += 1;
        }
    }

    fn read_field(&self, off: usize, width: usize) -> u32 {
        let s = self.st();
        let q = s
            .queues
            .get(usize::from(s.sel))
            .copied()
            .unwrap_or_default();
        let mac: [u32; 6] = [0x52, 0x54, 0, 0x12, 0x34, 0x5a];
        match (off, width) {
            (0x00, 4) => s.dfsel,
            (0x04, 4) => (s.features >> (32 * s.dfsel.min(1))) as u32,
            (0x08, 4) => s.gfsel,
            (0x0c, 4) => (s.driver_features >> (32 * s.gfsel.min(1))) as u32,
            (0x10, 2) => 0xffff,
            (0x12, 2) => 3,
            (0x14, 1) => u32::from(s.status),
            (0x15, 1) => 0,
            (0x16, 2) => u32::from(s.sel),
            (0x18, 2) => u32::from(if q.size != 0 { q.size } else { q.max }),
            (0x1a, 2) => u32::from(if q.size != 0 || q.enabled {
                q.vector
            } else {
                0xffff
            }),
            (0x1c, 2) => u32::from(q.enabled),
            (0x1e, 2) => u32::from(s.sel),
            (o, 1) if (DEVICE..DEVICE + 6).contains(&o) => mac[o - DEVICE],
            (o, 2) if o == DEVICE + 6 => 1,
            (o, w) => panic!("fake virtio: a {w}-byte read at {o:#x}, not a field of that width"),
        }
    }

    fn write_field(&self, off: usize, width: usize, v: u32) {
        let mut s = self.st();
        let sel = usize::from(s.sel);
        let half = |x: &mut u64, hi: bool| {
            let shift = if hi { 32 } else { 0 };
            *x = *x & !(0xffff_ffffu64 << shift) | u64::from(v) << shift;
        };
        match (off, width) {
            (0x00, 4) => s.dfsel = v,
            (0x08, 4) => s.gfsel = v,
            (0x0c, 4) => {
                let hi = s.gfsel == 1;
                half(&mut s.driver_features, hi);
            }
            (0x10, 2) => assert_eq!(v, 0xffff, "no vector for configuration changes"),
            // One vector (0); anything else cannot be routed and reads back as none.
            (0x1a, 2) => s.queues[sel].vector = if v == 0 { 0 } else { 0xffff },
            (0x14, 1) => {
                let mut st = v as u8;
                s.status_log.push(st);
                if st == 0 {
                    self.reset(&mut s);
                }
                if s.refuse_features {
                    st &= !status::FEATURES_OK;
                }
                s.status = st;
            }
            (0x16, 2) => s.sel = v as u16,
            (0x18, 2) => s.queues[sel].size = v as u16,
            (0x1c, 2) => {
                assert_eq!(
                    s.status & status::DRIVER_OK,
                    0,
                    "queues are enabled before DRIVER_OK"
                );
                s.queues[sel].enabled = v & 1 == 1
            }
            (o @ 0x20..=0x34, 4) => {
                let q = &mut s.queues[sel];
                let hi = o & 4 != 0;
                match o & !7 {
                    0x20 => half(&mut q.desc, hi),
                    0x28 => half(&mut q.avail, hi),
                    _ => half(&mut q.used, hi),
                }
            }
            (o, 2) if o >= NOTIFY => {
                let q = v as u16;
                assert_eq!(
                    o,
                    NOTIFY + NOTIFY_MULT as usize * usize::from(q),
                    "doorbell of queue {q}"
                );
                s.notified.push(q);
                if q == 2 && !s.ignore_ctrl {
                    self.serve_ctrl(&mut s);
                }
            }
            (o, w) => panic!("fake virtio: a {w}-byte write at {o:#x}, not a field of that width"),
        }
    }
}

impl Mmio for Fake {
    fn read32(&self, off: usize) -> u32 {
        self.read_field(off, 4)
    }
    fn write32(&self, off: usize, v: u32) {
        self.write_field(off, 4, v)
    }
    fn read16(&self, off: usize) -> u16 {
        self.read_field(off, 2) as u16
    }
    fn write16(&self, off: usize, v: u16) {
        self.write_field(off, 2, u32::from(v))
    }
    fn read8(&self, off: usize) -> u8 {
        self.read_field(off, 1) as u8
    }
    fn write8(&self, off: usize, v: u8) {
        self.write_field(off, 1, u32::from(v))
    }
    fn len(&self) -> usize {
        0x4000
    }
}

fn transport(fake: &Arc<Fake>) -> Transport<Fake> {
    let w = |base, len| Window::new(fake.clone(), base, len, "test").unwrap();
    Transport::new(
        "fake:0".into(),
        w(COMMON, 0x1000),
        w(NOTIFY, 0x1000),
        NOTIFY_MULT,
        Some(w(DEVICE, 0x100)),
        Duration::from_millis(200),
    )
}

const GOOD: u64 = feature::VERSION_1 | feature::ACCESS_PLATFORM | feature::MAC | feature::STATUS;
const CTRL: u64 = feature::CTRL_VQ | feature::CTRL_RX | feature::CTRL_VLAN;

fn cfg() -> VirtioConfig {
    VirtioConfig {
        rx_ring: 8,
        tx_ring: 8,
        pool: PoolConfig {
            buffers: 64,
            ..PoolConfig::default()
        },
        ..VirtioConfig::default()
    }
}

fn open(fake: &Arc<Fake>) -> crate::Result<VirtioPort<Fake>> {
    VirtioPort::bring_up(transport(fake), None, None, fake.iommu.clone(), None, cfg())
}

fn pop(fake: &Fake, q: usize) -> Option<(u16, Vec<Desc>)> {
    fake.st().queues[q].pop(&fake.iommu)
}

fn push_used(fake: &Fake, q: usize, id: u32, len: u32, publish: bool) {
    fake.st().queues[q].push(&fake.iommu, id, len, publish)
}

/// The device receives `frame`: header and frame into the next receive buffer.
fn deliver(fake: &Fake, frame: &[u8]) {
    let (head, chain) = pop(fake, 0).expect("a receive buffer is posted");
    let (addr, len, flags) = chain[0];
    assert_eq!(chain.len(), 1);
    assert_eq!(flags, super::ring::DESC_F_WRITE);
    assert!(frame.len() + 12 <= len as usize);
    let mut bytes = vec![0u8; 12];
    bytes.extend_from_slice(frame);
    fake.iommu.write(addr, &bytes).unwrap();
    push_used(fake, 0, u32::from(head), bytes.len() as u32, true);
    // Interrupt mode: the device interrupts unless the driver set VIRTQ_AVAIL_F_NO_INTERRUPT.
    let mut s = fake.st();
    let flags = fake.iommu.load_u32(s.queues[0].avail, Acquire).unwrap() & 0xffff;
    if flags & u32::from(super::ring::AVAIL_F_NO_INTERRUPT) == 0 {
        if let Some(irq) = &s.rx_irq {
            irq.trigger().unwrap();
            s.interrupts_sent += 1;
        }
    }
}

/// The device sends what the transmit queue posted: the frames on the wire.
fn wire(fake: &Fake) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some((head, chain)) = pop(fake, 1) {
        assert_eq!(chain.len(), 2, "header + frame");
        let mut hdr = [0xffu8; 12];
        fake.iommu.read(chain[0].0, &mut hdr).unwrap();
        assert_eq!((hdr, chain[0].1), ([0; 12], 12), "a zeroed 12-byte header");
        let mut f = vec![0u8; chain[1].1 as usize];
        fake.iommu.read(chain[1].0, &mut f).unwrap();
        out.push(f);
        push_used(fake, 1, u32::from(head), 0, true);
    }
    out
}

fn frame(n: usize, seq: u8) -> Vec<u8> {
    let mut f = vec![0u8; n];
    f[..6].copy_from_slice(&[0x52, 0x54, 0, 0x12, 0x34, 0x5a]);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    for (i, b) in f.iter_mut().enumerate().skip(14) {
        *b = seq.wrapping_add(i as u8);
    }
    f
}

#[test]
fn bring_up_follows_the_spec_order_and_reads_the_mac() {
    let fake = Fake::new(GOOD | feature::MRG_RXBUF | feature::RING_PACKED, [8, 8, 0]);
    let port = open(&fake).unwrap();
    let s = fake.st();
    assert_eq!(
        s.status,
        status::ACKNOWLEDGE | status::DRIVER | status::FEATURES_OK | status::DRIVER_OK
    );
    // What was not wanted is not taken.
    assert_eq!(s.driver_features, GOOD);
    assert!(s.queues[0].enabled && s.queues[1].enabled && !s.queues[2].enabled);
    assert_eq!((s.queues[0].size, s.queues[1].size), (8, 8));
    // Every receive buffer posted and the doorbell rung once, for queue 0.
    assert_eq!(s.notified, [0]);
    drop(s);
    assert_eq!(
        port.info().mac,
        "52:54:00:12:34:5a".parse::<MacAddr>().unwrap()
    );
    assert!(port.link().unwrap().up);
    assert_eq!(port.info().driver, "virtio");
}

/// `VIRTIO_F_ORDER_PLATFORM` is taken when offered (virtio 1.2, 6.1), and then the rings use
/// the platform's DMA barriers (Linux `__vring_new_virtqueue`: `weak_barriers = false`); a
/// device that does not offer it gets the SMP ones. Frames cross either way.
#[test]
fn order_platform_is_taken_when_offered_and_picks_the_barriers() {
    use crate::platform::barrier::VirtioOrder;
    for (offer, order) in [
        (GOOD | feature::ORDER_PLATFORM, VirtioOrder::Platform),
        (GOOD, VirtioOrder::Smp),
    ] {
        let fake = Fake::new(offer, [8, 8, 0]);
        let mut port = open(&fake).unwrap();
        assert_eq!(fake.st().driver_features, offer);
        assert_eq!(port.shared().transport.order(), order);
        let (mut rx, _tx) = port.take_queues().unwrap();
        deliver(&fake, &frame(60, 7));
        let mut got = Vec::new();
        assert_eq!(rx[0].rx_burst(&mut got, 8).unwrap(), 1, "{order:?}");
        assert_eq!(got[0].data(), &frame(60, 7)[..], "{order:?}");
    }
}

#[test]
fn bad_devices_are_refused_with_typed_errors() {
    let legacy = Fake::new(feature::MAC, [8, 8, 0]);
    let e = open(&legacy).unwrap_err();
    assert!(matches!(e, Error::NotSupported { .. }), "{e}");
    assert!(e.to_string().contains("VERSION_1"), "{e}");
    // A device the negotiation refuses is told so: FAILED, after ACKNOWLEDGE and DRIVER.
    let (a, d, failed) = (status::ACKNOWLEDGE, status::DRIVER, status::FAILED);
    assert_eq!(legacy.st().status_log, [0, a, a | d, a | d | failed]);

    let no_iommu = Fake::new(feature::VERSION_1 | feature::MAC, [8, 8, 0]);
    let e = open(&no_iommu).unwrap_err().to_string();
    assert!(
        e.contains("ACCESS_PLATFORM") && e.contains("iommu_platform=on"),
        "{e}"
    );
    assert_eq!(no_iommu.st().status & failed, failed);

    let refuses = Fake::new(GOOD, [8, 8, 0]);
    refuses.st().refuse_features = true;
    let e = open(&refuses).unwrap_err();
    assert!(matches!(e, Error::DeviceState { .. }), "{e}");
    assert!(e.to_string().contains("FEATURES_OK"), "{e}");
    assert_eq!(refuses.st().status & status::FAILED, status::FAILED);

    for (max, want) in [([0, 8, 0], "size 0"), ([8, 100, 0], "not a power of two")] {
        let f = Fake::new(GOOD, max);
        let e = open(&f).unwrap_err().to_string();
        assert!(e.contains(want), "{max:?}: {e}");
        assert_eq!(
            f.iommu.faults(),
            0,
            "{max:?}: the failed bring-up freed nothing early"
        );
    }
}

#[test]
fn frames_both_ways_through_many_ring_wraps_byte_identical() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let mut port = open(&fake).unwrap();
    let (mut rx, mut tx) = port.take_queues().unwrap();
    let (rx, tx) = (&mut rx[0], &mut tx[0]);
    let mut batch = Vec::new();
    // 200 frames through an 8-descriptor ring: the ring slots wrap 25 times (the 16-bit
    // indices' own wrap is the ring tests' `indices_wrap_at_65536`).
    for i in 0..200u32 {
        let f = frame(60 + (i as usize * 37) % 1400, i as u8);
        deliver(&fake, &f);
        assert_eq!(rx.rx_burst(&mut batch, 32).unwrap(), 1);
        assert_eq!(batch[0].data(), &f[..], "frame {i}");
        assert_eq!(tx.tx_burst(&mut batch).unwrap(), 1);
        assert_eq!(wire(&fake), [f], "frame {i} on the wire");
    }
    assert_eq!(rx.stats().packets, 200);
    assert_eq!(tx.stats().packets, 200);
    let st = port.stats().unwrap();
    assert_eq!(st.get("rx_packets"), Some(200));
    assert_eq!(st.get("tx_packets"), Some(200));
    assert_eq!(fake.iommu.faults(), 0);
}

#[test]
fn short_frames_are_padded_and_a_full_ring_keeps_the_rest() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let mut port = open(&fake).unwrap();
    let (rx, mut tx) = port.take_queues().unwrap();
    let pool = rx[0].pool().clone();
    let mut batch = Vec::new();
    for n in [0usize, 5, 20, 59, 60, 61] {
        let mut p = pool.alloc().unwrap();
        p.set_data(&vec![0xab; n]);
        batch.push(p);
    }
    // 8 descriptors: 4 frames in flight; the other 2 stay in the batch.
    assert_eq!(tx[0].tx_burst(&mut batch).unwrap(), 4);
    assert_eq!(batch.len(), 2);
    let w = wire(&fake);
    let lens: Vec<usize> = w.iter().map(Vec::len).collect();
    assert_eq!(lens, [60, 60, 60, 60]);
    assert!(w[0].iter().all(|&b| b == 0), "an empty frame is 60 zeros");
    assert_eq!(&w[2][..20], &[0xab; 20]);
    assert!(w[2][20..].iter().all(|&b| b == 0));
    assert_eq!(tx[0].tx_burst(&mut batch).unwrap(), 2);
    let lens: Vec<usize> = wire(&fake).iter().map(Vec::len).collect();
    assert_eq!(lens, [60, 61]);
}

/// Completions out of order: buffers go back only when every older one is done.
#[test]
fn transmit_completions_out_of_order() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let mut port = open(&fake).unwrap();
    let (rx, mut tx) = port.take_queues().unwrap();
    let pool = rx[0].pool().clone();
    let free0 = pool.stats().free;
    let mut batch = Vec::new();
    pool.alloc_bulk_len(3, 64, &mut batch);
    assert_eq!(tx[0].tx_burst(&mut batch).unwrap(), 3);
    let chains: Vec<u16> = std::iter::from_fn(|| pop(&fake, 1).map(|c| c.0)).collect();
    // The newest first: nothing can be released yet.
    push_used(&fake, 1, u32::from(chains[2]), 0, true);
    tx[0].tx_burst(&mut batch).unwrap();
    assert_eq!(tx[0].in_flight(), 3);
    push_used(&fake, 1, u32::from(chains[0]), 0, true);
    tx[0].tx_burst(&mut batch).unwrap();
    assert_eq!(
        tx[0].in_flight(),
        2,
        "the oldest went back; the newest waits for the middle"
    );
    push_used(&fake, 1, u32::from(chains[1]), 0, true);
    tx[0].tx_burst(&mut batch).unwrap();
    assert_eq!(tx[0].in_flight(), 0);
    pool.flush_thread_cache();
    assert_eq!(pool.stats().free, free0);
}

/// Receive completions out of order, then in order through many ring wraps: every frame
/// arrives whole, in the order the device returned it. (After the first out of order, the
/// receive runs no longer find the available ring in place and write it.)
#[test]
fn receive_completions_out_of_order_then_in_order() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let mut port = open(&fake).unwrap();
    let (mut rx, _tx) = port.take_queues().unwrap();
    let rx = &mut rx[0];
    let chains: Vec<(u16, Vec<Desc>)> = (0..3).map(|_| pop(&fake, 0).unwrap()).collect();
    for (k, (head, chain)) in chains.iter().enumerate().rev() {
        let mut bytes = vec![0u8; 12];
        bytes.extend_from_slice(&frame(64, k as u8));
        fake.iommu.write(chain[0].0, &bytes).unwrap();
        push_used(&fake, 0, u32::from(*head), bytes.len() as u32, true);
    }
    let mut batch = Vec::new();
    assert_eq!(rx.rx_burst(&mut batch, 32).unwrap(), 3);
    let got: Vec<&[u8]> = batch.iter().map(|p| p.data()).collect();
    assert_eq!(got, [&frame(64, 2)[..], &frame(64, 1), &frame(64, 0)]);
    batch.clear();
    for i in 0..40u32 {
        let f = frame(60 + (i as usize * 13) % 300, i as u8);
        deliver(&fake, &f);
        assert_eq!(rx.rx_burst(&mut batch, 32).unwrap(), 1);
        assert_eq!(batch.pop().unwrap().data(), &f[..], "frame {i}");
    }
    assert_eq!(fake.iommu.faults(), 0);
}

/// A transmit used entry must name a pair the FIFO holds that has not come back: one
/// returned twice, the second descriptor of a pair, or a pair never sent stops the queue.
#[test]
fn transmit_used_entries_naming_no_pair_in_flight_are_refused() {
    for bad in [
        |c: &[u16]| u32::from(c[0]),
        |c: &[u16]| u32::from(c[0]) + 1,
        |_: &[u16]| 6,
    ] {
        let fake = Fake::new(GOOD, [8, 8, 0]);
        let mut port = open(&fake).unwrap();
        let (rx, mut tx) = port.take_queues().unwrap();
        let pool = rx[0].pool().clone();
        let mut batch = Vec::new();
        pool.alloc_bulk_len(2, 64, &mut batch);
        assert_eq!(tx[0].tx_burst(&mut batch).unwrap(), 2);
        let chains: Vec<u16> = std::iter::from_fn(|| pop(&fake, 1).map(|c| c.0)).collect();
        push_used(&fake, 1, u32::from(chains[0]), 0, true);
        tx[0].tx_burst(&mut batch).unwrap();
        assert_eq!(tx[0].in_flight(), 1);
        push_used(&fake, 1, bad(&chains), 0, true);
        let e = tx[0].tx_burst(&mut batch).unwrap_err();
        assert!(matches!(e, QueueError::ProtocolViolation(_)), "{e}");
        assert_eq!(tx[0].in_flight(), 1, "nothing released for the bad entry");
    }
}

#[test]
fn a_used_index_that_jumps_stops_the_queue_without_handing_anything_out() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let mut port = open(&fake).unwrap();
    let (mut rx, _tx) = port.take_queues().unwrap();
    {
        let mut s = fake.st();
        let q = &mut s.queues[0];
        // Nine used entries claimed on an eight-buffer ring.
        q.used_idx = 9;
        fake.iommu.store_u32(q.used, 9 << 16, Release).unwrap();
    }
    let mut batch = Vec::new();
    let e = rx[0].rx_burst(&mut batch, 32).unwrap_err();
    assert!(matches!(e, QueueError::ProtocolViolation(_)), "{e}");
    assert!(batch.is_empty());
    assert!(rx[0].rx_burst(&mut batch, 32).is_err(), "stays stopped");
}

/// A virtio device cannot stop one queue, so a dropped queue leaves its ring and buffers to
/// the port: the device may still write them (it does here), the other queue works on, and
/// the memory goes only after the reset that the last handle's drop makes. At that reset the
/// fake reads every ring through the IOMMU: a ring freed first would fault.
#[test]
fn a_dropped_queue_keeps_its_memory_until_the_port_resets() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let mut port = open(&fake).unwrap();
    let resets = fake.st().resets;
    let (rx, mut tx) = port.take_queues().unwrap();
    let pool = rx[0].pool().clone();
    drop(rx);
    assert_eq!(fake.st().resets, resets, "the device runs on");
    deliver(&fake, &frame(64, 1));
    let mut batch = Vec::new();
    pool.alloc_bulk_len(1, 64, &mut batch);
    assert_eq!(
        tx[0].tx_burst(&mut batch).unwrap(),
        1,
        "the other queue works on"
    );
    assert_eq!(wire(&fake).len(), 1);
    drop(tx);
    assert_eq!(fake.st().resets, resets);
    drop(port);
    assert_eq!(
        fake.st().resets,
        resets + 1,
        "reset once, when the last handle went"
    );
    assert_eq!(
        fake.iommu.faults(),
        0,
        "every ring was still mapped at the reset"
    );
    pool.flush_thread_cache();
    assert_eq!(
        pool.stats().in_use,
        0,
        "and every buffer came back after it"
    );
    // A port whose queues were never taken resets when it closes; queues go out once.
    let mut p2 = open(&fake).unwrap();
    let r2 = fake.st().resets;
    let queues = p2.take_queues().unwrap();
    assert!(p2.take_queues().is_err(), "queues are handed out once");
    drop(p2);
    assert_eq!(fake.st().resets, r2, "the queues still hold the port");
    drop(queues);
    assert_eq!(fake.st().resets, r2 + 1);
    assert_eq!(fake.iommu.faults(), 0);
}

#[test]
fn vlan_hardware_modes_are_refused_with_the_reason() {
    use crate::vlan::Tpid;
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let mut port = open(&fake).unwrap();
    let caps = port.vlan_caps();
    assert!(!caps.rx_strip && !caps.tx_insert);
    assert!(!caps.filter, "no control queue offered: no filter");
    let e = port.set_rx_strip(0, true).unwrap_err().to_string();
    assert!(e.contains("no VLAN strip"), "{e}");
    assert!(port.set_rx_strip(0, false).is_ok());
    assert!(port.set_tpid(Tpid::C_TAG).is_ok());
    assert!(port.set_vlan_filter(true).is_err());
}

#[test]
fn config_sizes_are_checked() {
    for (rx, tx) in [(0u16, 8u16), (8, 6), (8, 1)] {
        let c = VirtioConfig {
            rx_ring: rx,
            tx_ring: tx,
            ..VirtioConfig::default()
        };
        assert!(c.check().is_err(), "{rx} {tx}");
    }
}

#[test]
fn bring_up_writes_the_status_in_the_spec_order() {
    let fake = Fake::new(GOOD | CTRL, [8, 8, 64]);
    let _port = open(&fake).unwrap();
    let s = fake.st();
    let (a, d, f, ok) = (
        status::ACKNOWLEDGE,
        status::DRIVER,
        status::FEATURES_OK,
        status::DRIVER_OK,
    );
    // Reset, ACKNOWLEDGE, DRIVER (two steps), FEATURES_OK, then DRIVER_OK (the fake refuses a
    // queue enabled after DRIVER_OK); the control queue is set up too.
    assert_eq!(s.status_log, [0, a, a | d, a | d | f, a | d | f | ok]);
    assert!(s.queues[2].enabled);
}

/// The control queue: promiscuous and all-multicast at bring-up, VID 0 always in the table,
/// additions and removals mirrored; a device without CTRL_VLAN offers no filter.
#[test]
fn the_control_queue_keeps_the_device_table() {
    let fake = Fake::new(GOOD | CTRL, [8, 8, 64]);
    let c = VirtioConfig {
        vlan_filter: true,
        ..cfg()
    };
    let mut port =
        VirtioPort::bring_up(transport(&fake), None, None, fake.iommu.clone(), None, c).unwrap();
    {
        let s = fake.st();
        assert_eq!((s.promisc, s.allmulti), (Some(true), Some(true)));
        assert_eq!(s.vlans, BTreeSet::from([0]));
    }
    assert!(port.vlan_caps().filter && port.vlan_caps().filter_best_effort);
    port.add_vlan(Vid::new(100).unwrap()).unwrap();
    port.set_vlan_filter(true).unwrap();
    assert_eq!(fake.st().vlans, BTreeSet::from([0, 100]));
    assert_eq!(
        fake.st().promisc,
        Some(true),
        "the filter leaves unicast alone"
    );
    port.remove_vlan(Vid::new(100).unwrap()).unwrap();
    port.remove_vlan(Vid::new(0).unwrap()).unwrap();
    assert_eq!(fake.st().vlans, BTreeSet::from([0]), "VID 0 stays");
}

/// Not promiscuous, with the device's table asked for: the filter starts on (the table holds
/// VID 0 only, no command opens it at bring-up); with the filter off every VID must pass, so
/// the table is opened (all of 0..=4094) and closed again when the filter goes on.
#[test]
fn a_port_that_is_not_promiscuous_opens_its_table_while_the_filter_is_off() {
    let fake = Fake::new(GOOD | CTRL, [8, 8, 64]);
    let c = VirtioConfig {
        promiscuous: false,
        vlan_filter: true,
        ..cfg()
    };
    let mut port =
        VirtioPort::bring_up(transport(&fake), None, None, fake.iommu.clone(), None, c).unwrap();
    assert_eq!(fake.st().promisc, Some(false));
    assert_eq!(fake.st().vlans, BTreeSet::from([0]), "asked for: filter on");
    assert_eq!(fake.st().commands, 3, "RX_PROMISC, RX_ALLMULTI, VLAN_ADD 0");
    port.set_vlan_filter(false).unwrap();
    assert_eq!(fake.st().vlans.len(), 4095, "every VID with the filter off");
    port.add_vlan(Vid::new(7).unwrap()).unwrap();
    port.remove_vlan(Vid::new(7).unwrap()).unwrap();
    assert!(
        fake.st().vlans.contains(&7),
        "filter off: the table stays open"
    );
    port.add_vlan(Vid::new(9).unwrap()).unwrap();
    port.set_vlan_filter(true).unwrap();
    assert_eq!(fake.st().vlans, BTreeSet::from([0, 9]));
    port.set_vlan_filter(false).unwrap();
    assert_eq!(fake.st().vlans.len(), 4095);
}

/// CTRL_VLAN is negotiated only when the port asks for the device's table: without it a port
/// that is not promiscuous costs two control commands at open, not 4,096, and its filter
/// runs in software (the device passes every VID).
#[test]
fn the_device_table_is_negotiated_only_when_a_filter_is_asked_for() {
    let fake = Fake::new(GOOD | CTRL, [8, 8, 64]);
    let c = VirtioConfig {
        promiscuous: false,
        ..cfg()
    };
    let mut port =
        VirtioPort::bring_up(transport(&fake), None, None, fake.iommu.clone(), None, c).unwrap();
    {
        let s = fake.st();
        assert_eq!(s.driver_features & feature::CTRL_VLAN, 0, "not asked for");
        assert_eq!(
            s.driver_features & CTRL,
            feature::CTRL_VQ | feature::CTRL_RX
        );
        assert_eq!(s.commands, 2, "RX_PROMISC and RX_ALLMULTI only");
        assert!(s.vlans.is_empty());
    }
    assert!(!port.vlan_caps().filter);
    assert!(
        port.set_vlan_filter(true).is_err(),
        "no table to filter with"
    );
}

/// A receive buffer must hold a full-size tagged frame and the header: 1530 bytes (Linux's
/// GOOD_PACKET_LEN and the header), not the spec's 1526, which leaves no room for the tag.
#[test]
fn receive_buffers_too_short_for_a_tagged_full_size_frame_are_refused() {
    for (headroom, ok) in [(146, true), (147, false), (150, false)] {
        // 1664-byte buffers: 1518, 1517 and 1514 bytes of frame behind the headroom.
        let fake = Fake::new(GOOD, [8, 8, 0]);
        let c = VirtioConfig {
            pool: PoolConfig {
                buffers: 64,
                buf_size: 1664,
                headroom,
            },
            ..cfg()
        };
        let r = VirtioPort::bring_up(transport(&fake), None, None, fake.iommu.clone(), None, c);
        match r {
            Ok(_) => assert!(ok, "headroom {headroom}: a short buffer was taken"),
            Err(e) => {
                assert!(!ok, "headroom {headroom}: {e}");
                assert!(e.to_string().contains("1530"), "{e}");
            }
        }
    }
}

/// DEVICE_NEEDS_RESET (the device stopped after an error of its own) is reported by `link()`
/// as an error that says to reopen the port.
#[test]
fn a_device_that_needs_a_reset_says_so_through_link() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let port = open(&fake).unwrap();
    assert!(port.link().unwrap().up);
    fake.st().status |= status::DEVICE_NEEDS_RESET;
    let e = port.link().unwrap_err();
    assert!(matches!(e, Error::DeviceState { .. }), "{e}");
    assert!(
        e.to_string().contains("DEVICE_NEEDS_RESET") && e.to_string().contains("reopen"),
        "{e}"
    );
}

/// A control command the device never answers times out, and the next one fails naming it
/// (its buffers are the device's until it answers) instead of reusing them; once the device
/// answers, commands work again.
#[test]
fn an_unanswered_control_command_blocks_the_next_with_its_name() {
    let fake = Fake::new(GOOD | CTRL, [8, 8, 64]);
    let mut port = open(&fake).unwrap();
    fake.st().ignore_ctrl = true;
    let e = port.add_vlan(Vid::new(5).unwrap()).unwrap_err().to_string();
    assert!(e.contains("did not answer VLAN_ADD"), "{e}");
    let e = port.add_vlan(Vid::new(6).unwrap()).unwrap_err().to_string();
    assert!(e.contains("never answered VLAN_ADD"), "{e}");
    {
        let mut s = fake.st();
        s.ignore_ctrl = false;
        fake.serve_ctrl(&mut s);
    }
    port.add_vlan(Vid::new(6).unwrap()).unwrap();
    assert!(fake.st().vlans.contains(&6) && fake.st().vlans.contains(&5));
}

/// Interrupt mode: the receive queue sleeps its whole timeout when nothing comes, wakes on a
/// frame the device returns while it sleeps, and a frame that came while it was polled (no
/// interrupt then) is reported by the arming itself, never lost. A polled port refuses to arm.
#[test]
fn interrupt_mode_wakes_on_a_frame_and_misses_none() {
    use std::time::Instant;
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let irq = Interrupt::new(0).unwrap();
    let set = InterruptSet::new(vec![irq.clone()], ());
    let c = VirtioConfig {
        interrupts: true,
        ..cfg()
    };
    let mut port = VirtioPort::bring_up(
        transport(&fake),
        None,
        Some(set),
        fake.iommu.clone(),
        None,
        c,
    )
    .unwrap();
    fake.st().rx_irq = Some(irq);
    assert_eq!(port.interrupts().len(), 1);
    let (mut rx, _tx) = port.take_queues().unwrap();
    let q = &mut rx[0];
    let t = Instant::now();
    assert!(!q.wait(Duration::from_millis(50)).unwrap(), "nothing came");
    assert!(t.elapsed() >= Duration::from_millis(50));
    // Polled again after the wait: a frame raises no interrupt, and arming reports it.
    deliver(&fake, &frame(64, 1));
    assert_eq!(fake.st().interrupts_sent, 0, "disarmed: no interrupt");
    assert!(
        q.arm_interrupt().unwrap(),
        "a frame is waiting: do not sleep"
    );
    q.disarm_interrupt();
    let mut batch = Vec::new();
    assert_eq!(q.rx_burst(&mut batch, 8).unwrap(), 1);
    // A frame that comes while the queue sleeps wakes it.
    let f2 = fake.clone();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        deliver(&f2, &frame(64, 2));
    });
    assert!(
        q.wait(Duration::from_secs(5)).unwrap(),
        "woken by the frame"
    );
    sender.join().unwrap();
    assert_eq!(fake.st().interrupts_sent, 1);
    assert_eq!(q.rx_burst(&mut batch, 8).unwrap(), 1);

    let polled = Fake::new(GOOD, [8, 8, 0]);
    let mut p = open(&polled).unwrap();
    let (mut rx, _tx) = p.take_queues().unwrap();
    assert!(rx[0].interrupt().is_none());
    let e = rx[0].arm_interrupt().unwrap_err().to_string();
    assert!(e.contains("opened polled"), "{e}");
}
