//! The virtio split ring (virtio 1.2, 2.7) under loom: the driver's real `SplitRing`
//! (`set_desc`, `push`, `publish`, `pop_used`) on its thread, the device side on another: the
//! virtio model's real `DeviceQueue` (`pop_into`, `push_into`, `publish`: QEMU's
//! `virtqueue_pop` and `virtqueue_push`) through the software IOMMU, driven the way QEMU's
//! virtio-net drives a queue when its device runs on a thread of its own and suppresses
//! doorbells (`device_round`).
//!
//! What is checked, over every interleaving loom explores:
//! - every chain published is consumed once and returned once, and the driver harvests each
//!   used entry once, with the bytes the device wrote into its buffer (the buffer copies are
//!   loom-checked: a harvest not ordered after the device's write is a data race);
//! - no lost wake-up: when the driver has published its last chain, either the device saw it
//!   or the driver rang the doorbell for it. That rests on the two full barriers of the
//!   store-buffering pattern: `SplitRing::publish`'s `virtio_mb` between the available index
//!   store and the used flags load (Linux `virtqueue_kick_prepare_split`), and the device's
//!   between clearing `VIRTQ_USED_F_NO_NOTIFY` and reading the available index again (QEMU
//!   `virtio_queue_split_set_notification`'s `smp_mb()`);
//! - the device reads a chain's descriptor and available entry only after the driver wrote
//!   them: `publish`'s `virtio_wmb` before its relaxed store of the available index, and the
//!   device's acquire load of it (QEMU `vring_avail_idx` then `smp_rmb()`);
//! - the driver reads a used entry and its buffer only after the device wrote them:
//!   `used_pending`'s relaxed load of the used index followed by `virtio_rmb` (Linux
//!   `virtqueue_get_buf_ctx_split`), against the device's release store of it.
//!
//! The rings use the barriers of their default [`VirtioOrder::Smp`](crate::platform::barrier::VirtioOrder::Smp) (QEMU's virtio-net does not
//! offer `VIRTIO_F_ORDER_PLATFORM`): `smp_wmb`, `smp_rmb`, `smp_mb`. Without each the check fails
//! (the `_fails_without_` tests): without the driver's `smp_mb`, or the device's, loom finds the
//! lost wake-up ("virtio: lost wake-up"); without `smp_wmb` the device reads an available
//! entry the driver has not written yet, and sends the wrong chain's frame ("virtio: the bytes
//! of chain ..."; a descriptor read early is caught as "the device read a descriptor the driver
//! had not written"); without `smp_rmb` the harvest reads a used entry before the device wrote
//! it ("virtio: used length of chain ..."; or the buffer's bytes racing the device's write).
//!
//! The ring's indices start at 2 (`start_indices_at`, as the host tests do for the 16-bit
//! wrap): loom's location is an aligned 8-byte word (`platform/dma/shadow.rs`), and from 2 on
//! the available slots and used entries the models use lie in other words than the indices,
//! so the order of the index store after them is checked as the hardware needs it.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::Arc as StdArc;

use loom::sync::atomic::{AtomicBool, AtomicUsize};
use loom::sync::Arc;

use super::model;
use crate::devices::virtio::model::virtqueue::{device_writes, Desc, DeviceQueue};
use crate::devices::virtio::ring::{SplitRing, DESC_F_WRITE, USED_F_NO_NOTIFY};
use crate::platform::barrier::loom_model::{omitting, Barrier};
use crate::platform::dma::{DmaMemory, DmaView, SoftIommu};

/// Descriptors per ring.
const SIZE: u16 = 4;
/// Where the indices start (module doc).
const START: u16 = 2;
/// Bytes per buffer, and per frame.
const BUF: usize = 128;
const FRAME: usize = 60;
/// Frames per model.
const FRAMES: u16 = 2;

/// Frame `k`'s bytes.
fn frame(k: u16) -> [u8; FRAME] {
    [0x40 + k as u8; FRAME]
}

/// A ring of [`SIZE`] through `iommu`, its indices at [`START`], and the device's view of it.
fn ring(iommu: &StdArc<SoftIommu>) -> (SplitRing, DeviceQueue) {
    let mut ring = SplitRing::new(SIZE, 0, iommu.clone()).unwrap();
    ring.start_indices_at(START);
    let q = DeviceQueue {
        max: SIZE,
        size: SIZE,
        desc: ring.desc_iova(),
        avail: ring.avail_iova(),
        used: ring.used_iova(),
        enabled: true,
        vector: 0xffff,
        last_avail: START,
        used_idx: START,
        // The model's device thread sets the flag itself (below), as QEMU's does.
        no_notify: false,
    };
    (ring, q)
}

/// `n` buffers of [`BUF`] bytes through `iommu`, their bytes checked by loom.
fn buffers(iommu: &StdArc<SoftIommu>, n: usize) -> StdArc<DmaMemory> {
    let m = DmaMemory::allocate(n * BUF, iommu.clone()).unwrap();
    m.loom_bytes(0, n * BUF);
    StdArc::new(m)
}

/// QEMU's `virtio_queue_split_set_notification` (hw/virtio/virtio.c) without EVENT_IDX:
/// `VIRTQ_USED_F_NO_NOTIFY` set or cleared in the used ring's flags and, when enabling,
/// `smp_mb()` "before caller checks the avail idx". (The model's device, which runs inside the
/// doorbell, keeps the flags 0; a device on a thread of its own suppresses doorbells so. The
/// software IOMMU stores 32-bit words: the flags go with the used index already published.)
/// `mb`: the device's `smp_mb()` (false only to show the model fails without it).
fn set_notification(v: &DmaView<'_>, q: &DeviceQueue, enable: bool, mb: bool) {
    let flags = if enable {
        0
    } else {
        u32::from(USED_F_NO_NOTIFY)
    };
    v.store_u32(q.used, flags | u32::from(q.used_idx) << 16, Relaxed)
        .unwrap();
    if enable && mb {
        loom::sync::atomic::fence(SeqCst);
    }
}

/// The device's work after a doorbell: QEMU's virtio-net transmit path (hw/net/virtio-net.c:
/// `virtio_net_handle_tx_bh` turns doorbells off and schedules `virtio_net_tx_bh`, which
/// flushes the queue, turns doorbells on, and flushes again: "flush anything that may have
/// come in while we weren't looking"). `each` handles one chain and returns the bytes to
/// report in its used entry; the used index is published after each flush.
fn device_round(
    v: &DmaView<'_>,
    q: &mut DeviceQueue,
    mb: bool,
    mut each: impl FnMut(u16, &[Desc]) -> u32,
) {
    let mut chain = Vec::new();
    let mut flush = |q: &mut DeviceQueue| {
        let mut n = 0;
        while let Some(head) = q.pop_into(v, &mut chain).unwrap() {
            let len = each(head, &chain);
            q.push_into(v, u32::from(head), len).unwrap();
            n += 1;
        }
        q.publish(v).unwrap();
        n
    };
    loop {
        set_notification(v, q, false, mb);
        flush(q);
        set_notification(v, q, true, mb);
        if flush(q) == 0 {
            return;
        }
    }
}

/// The device thread: a round at once (it was started), then a round per doorbell. Asleep
/// with doorbells on, it stops when the driver says it has published its last chain: any
/// chain still available then was published without a doorbell after the device's last look,
/// a lost wake-up.
fn device_thread(
    q: &mut DeviceQueue,
    v: &DmaView<'_>,
    bell: &Doorbell,
    mb: bool,
    mut each: impl FnMut(u16, &[Desc]) -> u32,
) {
    let mut seen = 0;
    loop {
        device_round(v, q, mb, &mut each);
        loop {
            let rung = bell.rung.load(Acquire);
            if rung != seen {
                seen = rung;
                break;
            }
            if bell.last.load(Acquire) {
                if bell.rung.load(Acquire) != seen {
                    break;
                }
                assert_eq!(
                    q.available(v).unwrap(),
                    0,
                    "virtio: lost wake-up: a chain was published after the device's last look \
                     and no doorbell was rung for it"
                );
                return;
            }
            loom::thread::yield_now();
        }
    }
}

/// A queue's doorbell (the notify register) and the driver's "no more chains".
#[derive(Default)]
struct Doorbell {
    /// Doorbells rung.
    rung: AtomicUsize,
    /// The driver published its last chain.
    last: AtomicBool,
}

impl Doorbell {
    /// The driver's doorbell write (`Doorbell::ring`'s register store): a count, so that no
    /// ring is lost to the model's bookkeeping.
    fn ring(&self) {
        self.rung.fetch_add(1, Release);
    }
}

/// Publishes chain `id` (one descriptor: `len` bytes at `addr`, `flags`) and rings the
/// doorbell when the device asks for it: the driver's side of a doorbell, as the receive
/// and transmit queues make it (`VirtioRx::start`, `VirtioTx::tx_burst`).
fn post(ring: &mut SplitRing, bell: &Doorbell, id: u16, addr: u64, len: u32, flags: u16) {
    ring.set_desc(id, addr, len, flags, 0);
    ring.push(id);
    if ring.publish() {
        bell.ring();
    }
}

/// Harvests every used entry there is, checking each buffer holds its frame; the ids.
fn harvest(ring: &mut SplitRing, bufs: &DmaMemory, len: u32, got: &mut Vec<u16>) {
    while let Some((id, n)) = ring.pop_used().unwrap() {
        assert_eq!(n, len, "virtio: used length of chain {id}");
        if len != 0 {
            let mut b = [0u8; FRAME];
            bufs.read_bytes(usize::from(id) * BUF, &mut b);
            assert_eq!(b, frame(id), "virtio: the bytes of chain {id}");
        }
        got.push(id);
    }
}

/// Two threads (`device_mb`: the device's `smp_mb`): the driver posts two receive buffers, one publish each (a doorbell when the
/// device asks for one), then harvests what came back; the device fills each with its frame.
/// After both, every buffer came back once with its frame, and no wake-up was lost.
fn receive(device_mb: bool) {
    model(2, move || {
        let iommu = StdArc::new(SoftIommu::new("loom"));
        let (mut ring, mut q) = ring(&iommu);
        let bufs = buffers(&iommu, usize::from(FRAMES));
        let base = bufs.iova();
        let bell = Arc::new(Doorbell::default());
        let (b, m) = (bell.clone(), bufs.clone());
        let driver = super::spawn(move || {
            for id in 0..FRAMES {
                let addr = base + (usize::from(id) * BUF) as u64;
                post(&mut ring, &b, id, addr, BUF as u32, DESC_F_WRITE);
            }
            b.last.store(true, Release);
            let mut got = Vec::new();
            harvest(&mut ring, &m, FRAME as u32, &mut got);
            (ring, got)
        });
        {
            let v = iommu.view();
            device_thread(&mut q, &v, &bell, device_mb, |head, chain| {
                let (addr, len, flags) = chain[0];
                assert!(
                    device_writes(flags) && len as usize == BUF,
                    "virtio: the device read a descriptor the driver had not written \
                     (flags {flags:#x}, length {len})"
                );
                v.write(addr, &frame(head)).unwrap();
                FRAME as u32
            });
        }
        let (mut ring, mut got) = driver.join().unwrap();
        harvest(&mut ring, &bufs, FRAME as u32, &mut got);
        assert_eq!(got, (0..FRAMES).collect::<Vec<_>>(), "virtio: harvested");
        assert_eq!(iommu.faults(), 0);
    });
}

/// Three threads (`device_mb`: the device's `smp_mb`): a transmit thread publishes two frames on one ring, the device thread
/// sends each into a receive buffer of a second ring (posted before, as the wired pair of
/// the model delivers), and a receive thread harvests them. A frame's bytes go from the
/// transmit thread's copy through the device's two copies to the receive thread's read, each
/// ordered by the rings' indices; no wake-up is lost; both rings give back every chain once.
fn transmit_to_receive(device_mb: bool) {
    model(2, move || {
        let iommu = StdArc::new(SoftIommu::new("loom"));
        let (mut tx, mut txq) = ring(&iommu);
        let (mut rx, mut rxq) = ring(&iommu);
        let tx_bufs = buffers(&iommu, usize::from(FRAMES));
        let rx_bufs = buffers(&iommu, usize::from(FRAMES));
        // The receive buffers are posted before the threads start (no doorbell: the device
        // looks at the receive ring whenever it has a frame).
        for id in 0..FRAMES {
            let addr = rx_bufs.iova() + (usize::from(id) * BUF) as u64;
            post(
                &mut rx,
                &Doorbell::default(),
                id,
                addr,
                BUF as u32,
                DESC_F_WRITE,
            );
        }
        let bell = Arc::new(Doorbell::default());
        let finished = Arc::new(AtomicBool::new(false));
        let (b, m) = (bell.clone(), tx_bufs.clone());
        let sender = super::spawn(move || {
            for id in 0..FRAMES {
                let at = usize::from(id) * BUF;
                m.write_bytes(at, &frame(id));
                post(&mut tx, &b, id, m.iova() + at as u64, FRAME as u32, 0);
            }
            b.last.store(true, Release);
            tx
        });
        let (f, m) = (finished.clone(), rx_bufs.clone());
        let receiver = super::spawn(move || {
            let mut got = Vec::new();
            loop {
                let done = f.load(Acquire);
                harvest(&mut rx, &m, FRAME as u32, &mut got);
                if done || got.len() == usize::from(FRAMES) {
                    break;
                }
                loom::thread::yield_now();
            }
            // (The ring goes back to the main thread, which drops it after the device's view:
            // its unmap takes the software IOMMU's write lock, which a thread of the same
            // model waiting for it while another holds the view would never get.)
            (rx, got)
        });
        {
            let v = iommu.view();
            let mut chain = Vec::new();
            device_thread(&mut txq, &v, &bell, device_mb, |_, desc| {
                let (addr, len, _) = desc[0];
                assert_eq!(
                    len as usize, FRAME,
                    "virtio: the device read a descriptor the driver had not written"
                );
                let mut bytes = vec![0u8; len as usize];
                v.read(addr, &mut bytes).unwrap();
                let head = rxq
                    .pop_into(&v, &mut chain)
                    .unwrap()
                    .expect("a receive buffer");
                v.write(chain[0].0, &bytes).unwrap();
                rxq.push_into(&v, u32::from(head), len).unwrap();
                rxq.publish(&v).unwrap();
                0
            });
        }
        finished.store(true, Release);
        let mut tx = sender.join().unwrap();
        let (_rx, got) = receiver.join().unwrap();
        assert_eq!(got, (0..FRAMES).collect::<Vec<_>>(), "virtio: received");
        let mut sent = Vec::new();
        harvest(&mut tx, &tx_bufs, 0, &mut sent);
        assert_eq!(
            sent,
            (0..FRAMES).collect::<Vec<_>>(),
            "virtio: sent chains back"
        );
        assert_eq!(iommu.faults(), 0);
    });
}

#[test]
fn loom_virtio_receive_publish_consume_harvest_two_threads() {
    receive(true);
}

#[test]
#[should_panic(expected = "virtio: lost wake-up")]
fn loom_virtio_receive_fails_without_the_drivers_smp_mb() {
    omitting(&[Barrier::SmpMb], || receive(true));
}

#[test]
#[should_panic(expected = "virtio: lost wake-up")]
fn loom_virtio_receive_fails_without_the_devices_smp_mb() {
    receive(false);
}

#[test]
#[should_panic(expected = "virtio: used length of chain")]
fn loom_virtio_receive_fails_without_smp_rmb() {
    omitting(&[Barrier::SmpRmb], || receive(true));
}

#[test]
fn loom_virtio_transmit_to_receive_three_threads() {
    transmit_to_receive(true);
}

#[test]
#[should_panic(expected = "virtio: the bytes of chain")]
fn loom_virtio_transmit_fails_without_smp_wmb() {
    omitting(&[Barrier::SmpWmb], || transmit_to_receive(true));
}
