//! Host tests of the whole driver against a fake virtio-net device: the common configuration
//! as registers ([`Fake`], an [`Mmio`]), and the device's side of the rings played step by step
//! through a software IOMMU (the driver's bus addresses are not pointers, so a driver that
//! hands over the wrong address faults here instead of working by accident).
//!
//! The fake is ours, not QEMU: what QEMU's device does is proven on the test bed
//! (`hwtests/qemu/run --layout virtio`). It is here for the driver's own logic: bring-up
//! order, refusals of bad devices, the header placement, padding, index wrap, the protocol
//! violations, and the reset before memory goes.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::transport::{status, Transport, Window};
use super::{feature, VirtioConfig, VirtioPort};
use crate::device::{MacAddr, Port, QueueError, RxQueue, TxQueue};
use crate::error::Error;
use crate::platform::dma::{PoolConfig, SoftIommu};
use crate::platform::mmio::Mmio;

const COMMON: usize = 0;
const DEVICE: usize = 0x2000;
const NOTIFY: usize = 0x3000;

/// A queue as the fake device sees it after the driver set it up.
#[derive(Clone, Copy, Debug, Default)]
struct Q {
    max: u16,
    size: u16,
    desc: u64,
    avail: u64,
    used: u64,
    enabled: bool,
    last_avail: u16,
    used_idx: u16,
}

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
    queues: [Q; 3],
    notified: Vec<u16>,
    resets: u32,
}

/// The fake device's registers.
struct Fake(Mutex<State>);

impl Fake {
    fn new(features: u64, max: [u16; 3]) -> Arc<Fake> {
        let mut s = State {
            features,
            ..State::default()
        };
        for (q, m) in s.queues.iter_mut().zip(max) {
            q.max = m;
        }
        Arc::new(Fake(Mutex::new(s)))
    }
    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }
}

fn set_half(v: &mut u64, hi: bool, x: u32) {
    let shift = if hi { 32 } else { 0 };
    *v = *v & !(0xffff_ffffu64 << shift) | u64::from(x) << shift;
}

impl Mmio for Fake {
    fn read32(&self, off: usize) -> u32 {
        let s = self.st();
        let q = s
            .queues
            .get(usize::from(s.sel))
            .copied()
            .unwrap_or_default();
        match off {
            0x00 => s.dfsel,
            0x04 => (s.features >> (32 * s.dfsel.min(1))) as u32,
            0x08 => s.gfsel,
            0x10 => 3 << 16,
            0x14 => u32::from(s.status) | u32::from(s.sel) << 16,
            0x18 => u32::from(if q.size != 0 { q.size } else { q.max }),
            0x1c => u32::from(q.enabled) | u32::from(s.sel) << 16,
            o if o == DEVICE => u32::from_le_bytes([0x52, 0x54, 0, 0x12]),
            o if o == DEVICE + 4 => u32::from_le_bytes([0x34, 0x5a, 1, 0]),
            _ => 0,
        }
    }
    fn write32(&self, off: usize, v: u32) {
        let mut s = self.st();
        let sel = usize::from(s.sel);
        match off {
            0x00 => s.dfsel = v,
            0x08 => s.gfsel = v,
            0x0c => {
                let hi = s.gfsel == 1;
                set_half(&mut s.driver_features, hi, v);
            }
            0x14 => {
                let mut st = v as u8;
                if st == 0 {
                    s.resets += 1;
                    let max = s.queues.map(|q| q.max);
                    s.queues = Default::default();
                    for (q, m) in s.queues.iter_mut().zip(max) {
                        q.max = m;
                    }
                }
                if s.refuse_features {
                    st &= !status::FEATURES_OK;
                }
                s.status = st;
                s.sel = (v >> 16) as u16;
            }
            0x18 => {
                if let Some(q) = s.queues.get_mut(sel) {
                    q.size = v as u16;
                }
            }
            0x1c => {
                if let Some(q) = s.queues.get_mut(sel) {
                    q.enabled = v & 1 == 1;
                }
            }
            0x20..=0x34 => {
                if let Some(q) = s.queues.get_mut(sel) {
                    let hi = off & 4 != 0;
                    match off & !7 {
                        0x20 => set_half(&mut q.desc, hi, v),
                        0x28 => set_half(&mut q.avail, hi, v),
                        _ => set_half(&mut q.used, hi, v),
                    }
                }
            }
            o if o >= NOTIFY => s.notified.push(v as u16),
            _ => {}
        }
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
        0,
        Some(w(DEVICE, 0x100)),
        Duration::from_millis(200),
    )
}

const GOOD: u64 = feature::VERSION_1 | feature::ACCESS_PLATFORM | feature::MAC | feature::STATUS;

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

fn open(fake: &Arc<Fake>, iommu: &Arc<SoftIommu>) -> crate::Result<VirtioPort<Fake>> {
    VirtioPort::bring_up(transport(fake), None, iommu.clone(), None, cfg())
}

/// A descriptor as the fake device reads it: address, length, flags.
type Desc = (u64, u32, u16);

/// The device side of queue `q`: the next available chain (its head and descriptors).
fn pop(fake: &Fake, iommu: &SoftIommu, q: usize) -> Option<(u16, Vec<Desc>)> {
    let mut s = fake.st();
    let qs = &mut s.queues[q];
    let idx = (iommu.load_u32(qs.avail, Acquire).unwrap() >> 16) as u16;
    if idx == qs.last_avail {
        return None;
    }
    let slot = qs.avail + 4 + 2 * u64::from(qs.last_avail & (qs.size - 1));
    let w = iommu.load_u32(slot & !3, Relaxed).unwrap();
    let head = (w >> (8 * (slot & 3))) as u16;
    qs.last_avail = qs.last_avail.wrapping_add(1);
    let mut chain = Vec::new();
    let mut id = head;
    loop {
        let at = qs.desc + 16 * u64::from(id);
        let addr = iommu.load_u64(at, Relaxed).unwrap();
        let len = iommu.load_u32(at + 8, Relaxed).unwrap();
        let fl = iommu.load_u32(at + 12, Relaxed).unwrap();
        chain.push((addr, len, fl as u16));
        if fl & 1 == 0 {
            break;
        }
        id = (fl >> 16) as u16;
    }
    Some((head, chain))
}

/// The device side: returns chain `id` with `len` bytes written (`publish`: make it visible).
fn push_used(fake: &Fake, iommu: &SoftIommu, q: usize, id: u32, len: u32, publish: bool) {
    let mut s = fake.st();
    let qs = &mut s.queues[q];
    let at = qs.used + 4 + 8 * u64::from(qs.used_idx & (qs.size - 1));
    iommu.store_u32(at, id, Relaxed).unwrap();
    iommu.store_u32(at + 4, len, Relaxed).unwrap();
    qs.used_idx = qs.used_idx.wrapping_add(1);
    if publish {
        iommu
            .store_u32(qs.used, u32::from(qs.used_idx) << 16, Release)
            .unwrap();
    }
}

/// The device receives `frame`: header and frame into the next receive buffer.
fn deliver(fake: &Fake, iommu: &SoftIommu, frame: &[u8]) {
    let (head, chain) = pop(fake, iommu, 0).expect("a receive buffer is posted");
    let (addr, len, flags) = chain[0];
    assert_eq!(chain.len(), 1);
    assert_eq!(flags, super::ring::DESC_F_WRITE);
    assert!(frame.len() + 12 <= len as usize);
    let mut bytes = vec![0u8; 12];
    bytes.extend_from_slice(frame);
    iommu.write(addr, &bytes).unwrap();
    push_used(fake, iommu, 0, u32::from(head), bytes.len() as u32, true);
}

/// The device sends what the transmit queue posted: the frames on the wire.
fn wire(fake: &Fake, iommu: &SoftIommu) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some((head, chain)) = pop(fake, iommu, 1) {
        assert_eq!(chain.len(), 2, "header + frame");
        let mut hdr = [0xffu8; 12];
        iommu.read(chain[0].0, &mut hdr).unwrap();
        assert_eq!((hdr, chain[0].1), ([0; 12], 12), "a zeroed 12-byte header");
        let mut f = vec![0u8; chain[1].1 as usize];
        iommu.read(chain[1].0, &mut f).unwrap();
        out.push(f);
        push_used(fake, iommu, 1, u32::from(head), 0, true);
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
    let iommu = Arc::new(SoftIommu::new("virtio test"));
    let port = open(&fake, &iommu).unwrap();
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

#[test]
fn bad_devices_are_refused_with_typed_errors() {
    let iommu = Arc::new(SoftIommu::new("virtio test"));
    let legacy = Fake::new(feature::MAC, [8, 8, 0]);
    let e = open(&legacy, &iommu).unwrap_err();
    assert!(matches!(e, Error::NotSupported { .. }), "{e}");
    assert!(e.to_string().contains("VERSION_1"), "{e}");

    let no_iommu = Fake::new(feature::VERSION_1 | feature::MAC, [8, 8, 0]);
    let e = open(&no_iommu, &iommu).unwrap_err().to_string();
    assert!(
        e.contains("ACCESS_PLATFORM") && e.contains("iommu_platform=on"),
        "{e}"
    );

    let refuses = Fake::new(GOOD, [8, 8, 0]);
    refuses.st().refuse_features = true;
    let e = open(&refuses, &iommu).unwrap_err();
    assert!(matches!(e, Error::DeviceState { .. }), "{e}");
    assert!(e.to_string().contains("FEATURES_OK"), "{e}");
    assert_eq!(refuses.st().status & status::FAILED, status::FAILED);

    for (max, want) in [([0, 8, 0], "size 0"), ([8, 100, 0], "not a power of two")] {
        let f = Fake::new(GOOD, max);
        let e = open(&f, &iommu).unwrap_err().to_string();
        assert!(e.contains(want), "{max:?}: {e}");
        assert!(!f.st().queues[0].enabled || max[0] != 0);
    }
    assert_eq!(iommu.faults(), 0);
}

#[test]
fn frames_both_ways_across_the_index_wrap_byte_identical() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let iommu = Arc::new(SoftIommu::new("virtio test"));
    let mut port = open(&fake, &iommu).unwrap();
    let (mut rx, mut tx) = port.take_queues().unwrap();
    let (rx, tx) = (&mut rx[0], &mut tx[0]);
    let mut batch = Vec::new();
    // 200 frames through an 8-descriptor ring: the free-running indices pass 65535 only on
    // long runs, but the ring slots wrap 25 times; the ring tests cover the 16-bit wrap.
    for i in 0..200u32 {
        let f = frame(60 + (i as usize * 37) % 1400, i as u8);
        deliver(&fake, &iommu, &f);
        assert_eq!(rx.rx_burst(&mut batch, 32).unwrap(), 1);
        assert_eq!(batch[0].data(), &f[..], "frame {i}");
        assert_eq!(tx.tx_burst(&mut batch).unwrap(), 1);
        assert_eq!(wire(&fake, &iommu), [f], "frame {i} on the wire");
    }
    assert_eq!(rx.stats().packets, 200);
    assert_eq!(tx.stats().packets, 200);
    let st = port.stats().unwrap();
    assert_eq!(st.get("rx_packets"), Some(200));
    assert_eq!(st.get("tx_packets"), Some(200));
    assert_eq!(iommu.faults(), 0);
}

#[test]
fn short_frames_are_padded_and_a_full_ring_keeps_the_rest() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let iommu = Arc::new(SoftIommu::new("virtio test"));
    let mut port = open(&fake, &iommu).unwrap();
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
    let w = wire(&fake, &iommu);
    let lens: Vec<usize> = w.iter().map(Vec::len).collect();
    assert_eq!(lens, [60, 60, 60, 60]);
    assert!(w[0].iter().all(|&b| b == 0), "an empty frame is 60 zeros");
    assert_eq!(&w[2][..20], &[0xab; 20]);
    assert!(w[2][20..].iter().all(|&b| b == 0));
    assert_eq!(tx[0].tx_burst(&mut batch).unwrap(), 2);
    let lens: Vec<usize> = wire(&fake, &iommu).iter().map(Vec::len).collect();
    assert_eq!(lens, [60, 61]);
}

/// Completions out of order: buffers go back only when every older one is done.
#[test]
fn transmit_completions_out_of_order() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let iommu = Arc::new(SoftIommu::new("virtio test"));
    let mut port = open(&fake, &iommu).unwrap();
    let (rx, mut tx) = port.take_queues().unwrap();
    let pool = rx[0].pool().clone();
    let free0 = pool.stats().free;
    let mut batch = Vec::new();
    pool.alloc_bulk_len(3, 64, &mut batch);
    assert_eq!(tx[0].tx_burst(&mut batch).unwrap(), 3);
    let chains: Vec<u16> = std::iter::from_fn(|| pop(&fake, &iommu, 1).map(|c| c.0)).collect();
    // The newest first: nothing can be released yet.
    push_used(&fake, &iommu, 1, u32::from(chains[2]), 0, true);
    tx[0].tx_burst(&mut batch).unwrap();
    assert_eq!(tx[0].in_flight(), 3);
    push_used(&fake, &iommu, 1, u32::from(chains[0]), 0, true);
    tx[0].tx_burst(&mut batch).unwrap();
    assert_eq!(
        tx[0].in_flight(),
        2,
        "the oldest went back; the newest waits for the middle"
    );
    push_used(&fake, &iommu, 1, u32::from(chains[1]), 0, true);
    tx[0].tx_burst(&mut batch).unwrap();
    assert_eq!(tx[0].in_flight(), 0);
    pool.flush_thread_cache();
    assert_eq!(pool.stats().free, free0);
}

#[test]
fn a_used_index_that_jumps_stops_the_queue_without_handing_anything_out() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let iommu = Arc::new(SoftIommu::new("virtio test"));
    let mut port = open(&fake, &iommu).unwrap();
    let (mut rx, _tx) = port.take_queues().unwrap();
    {
        let mut s = fake.st();
        let q = &mut s.queues[0];
        // Nine used entries claimed on an eight-buffer ring.
        q.used_idx = 9;
        iommu.store_u32(q.used, 9 << 16, Release).unwrap();
    }
    let mut batch = Vec::new();
    let e = rx[0].rx_burst(&mut batch, 32).unwrap_err();
    assert!(matches!(e, QueueError::ProtocolViolation(_)), "{e}");
    assert!(batch.is_empty());
    assert!(rx[0].rx_burst(&mut batch, 32).is_err(), "stays stopped");
}

#[test]
fn dropping_a_queue_resets_the_device_before_its_memory_goes() {
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let iommu = Arc::new(SoftIommu::new("virtio test"));
    let mut port = open(&fake, &iommu).unwrap();
    let resets = fake.st().resets;
    let (rx, tx) = port.take_queues().unwrap();
    drop(rx);
    assert_eq!(fake.st().resets, resets + 1);
    assert_eq!(fake.st().status, 0);
    assert!(
        !port.link().unwrap().up,
        "a stopped device reports its link down"
    );
    drop(tx);
    drop(port);
    assert_eq!(fake.st().resets, resets + 1, "reset once");
    // A port whose queues were never taken resets when it closes.
    let mut p2 = open(&fake, &iommu).unwrap();
    let r2 = fake.st().resets;
    assert!(p2.take_queues().is_ok());
    assert!(p2.take_queues().is_err(), "queues are handed out once");
    drop(p2);
    assert!(fake.st().resets > r2);
}

#[test]
fn vlan_hardware_modes_are_refused_with_the_reason() {
    use crate::vlan::{Tpid, VlanHardware};
    let fake = Fake::new(GOOD, [8, 8, 0]);
    let iommu = Arc::new(SoftIommu::new("virtio test"));
    let mut port = open(&fake, &iommu).unwrap();
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
