//! A software virtio-net device ("virtio model"): the modern PCI transport and the device side
//! of split virtqueues, so that the unchanged virtio driver runs without a VM: for host tests
//! outside `cfg(test)`, and for `bench/instructions --device virtio`, which counts the
//! driver's instructions per packet under callgrind.
//!
//! It is ours, not QEMU: what QEMU's device does is proven on the test bed
//! (`hwtests/qemu/run --layout virtio`). The formats follow OASIS virtio 1.2 cs01 (4.1.4.3 the
//! common configuration, 4.1.4.4 notifications, 5.1.4 the device configuration, 2.7 split
//! virtqueues, 5.1.6 the net header) and QEMU's hw/virtio/virtio-pci.c and hw/net/virtio-net.c.
//!
//! # What it is
//! One BAR of [`BAR_LEN`] bytes holding the three structures the capability walk would find
//! (the layout the host tests' fake uses): the common configuration at [`COMMON`], the
//! device configuration (MAC, link status) at [`DEVICE`], the doorbells at [`NOTIFY`] (queue
//! `q`'s at `NOTIFY + 4 q`). Every field answers only an access of its natural width (virtio
//! 1.2, 4.1.3.1): any other access panics, naming the offset and width, as the fake does. The
//! register map is `regs/virtio.toml` and `regs/virtio_net.toml`. Queue 0 receives, queue 1
//! transmits; there is no control queue (CTRL_VQ is not offered), no interrupt (every MSI-X
//! vector reads back as none), no offload and no merged buffers.
//!
//! All DMA goes through a [`SoftIommu`] ([`virtqueue`]): bus addresses are not pointers. A
//! fault stops the device, which then sets DEVICE_NEEDS_RESET (virtio 1.2, 2.1.2).
//!
//! # When work happens: inline
//! The device works inside the driver's doorbell write, on the driver's thread, under the
//! model's lock, so every run is the same sequence of instructions (callgrind counts are
//! repeatable). A receive-queue doorbell (and DRIVER_OK) lets the traffic source fill every
//! receive buffer the driver made available ("full speed", as the software 82599's
//! [`Source`]: frames are offered only into posted buffers, so none is lost); a transmit
//! doorbell consumes every available chain, into the void (counted: frames and bytes, the
//! buffers' reachability checked) or into the wired peer's receive queue (a frame the peer
//! has no buffer for is dropped and counted there). The used ring's flags stay 0: the device
//! wants every doorbell, since a doorbell is its only chance to run.
//!
//! # Or on a device thread
//! With [`ModelConfig::thread`], the device works on a device thread of its own (or one it
//! shares with other models: [`DeviceThread`], `devices/worker.rs`), as the software 82599's
//! and the queue-manager model's threaded modes do: the thread polls the rings, consumes every
//! available transmit chain and fills every posted receive buffer, so descriptors and frames
//! are written by another core, as DMA is (for `vfio-nic bench`). A polling device needs no
//! doorbell: its used rings carry VIRTQ_USED_F_NO_NOTIFY, and the driver, which reads that
//! flag after each publish, rings none (virtio 1.2, 2.7.10).
//!
//! The register entry points (`Mmio::read*` and `write*` of [`VirtioModel`]) are
//! `#[inline(never)]`, so that `bench/instructions` can switch callgrind's collection off
//! inside them and count the driver alone (as for the software 82599's `SimRegs`).

pub mod virtqueue;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use self::virtqueue::{device_writes, Desc, DeviceQueue};
use super::transport::{status, Transport, Window, NO_VECTOR};
use super::{feature, VirtioConfig, VirtioPort};
use crate::device::MacAddr;
use crate::devices::sim::Source;
use crate::devices::worker::DeviceThread;
use crate::error::Result;
use crate::platform::dma::{DmaFault, DmaView, SoftIommu};
use crate::platform::mmio::Mmio;
use crate::platform::regs::virtio as c;
use crate::platform::regs::virtio_net as n;

/// Offset of the common configuration in the BAR.
pub const COMMON: usize = 0;
/// Offset of the device configuration (`struct virtio_net_config`).
pub const DEVICE: usize = 0x2000;
/// Offset of the doorbells: queue `q`'s is `NOTIFY + NOTIFY_MULT * q`.
pub const NOTIFY: usize = 0x3000;
/// notify_off_multiplier (queue_notify_off reads the queue's number).
pub const NOTIFY_MULT: u32 = 4;
/// Bytes in the BAR.
pub const BAR_LEN: usize = 0x4000;

/// Bytes of `struct virtio_net_hdr_v1` before every frame (virtio 1.2, 5.1.6).
const HDR: usize = super::queue::NET_HDR_LEN;
/// Queues: receive, transmit, and a control queue that does not exist (size 0).
const QUEUES: usize = 3;
const RX: usize = 0;
const TX: usize = 1;

/// How the device is built.
#[derive(Clone, Debug)]
pub struct ModelConfig {
    /// The MAC in the device configuration.
    pub mac: MacAddr,
    /// The largest receive and transmit queue the device offers (QEMU: 256).
    pub queue_max: u16,
    /// Link up in the device configuration's status.
    pub link_up: bool,
    /// Frames the device receives whenever the driver posts buffers (None: only what a wired
    /// peer sends).
    pub source: Option<Source>,
    /// Work on this device thread instead of inside the doorbell writes (see the module
    /// doc); `None`: inline.
    pub thread: Option<DeviceThread>,
}

impl Default for ModelConfig {
    /// 52:54:00:12:34:56 (QEMU's first), queues of 256, link up, no source.
    fn default() -> Self {
        ModelConfig {
            mac: MacAddr([0x52, 0x54, 0, 0x12, 0x34, 0x56]),
            queue_max: 256,
            link_up: true,
            source: None,
            thread: None,
        }
    }
}

/// What the device did, counted since it was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelCounters {
    /// Frames written into receive buffers (source and peer).
    pub rx_frames: u64,
    /// Their bytes (without the net header).
    pub rx_bytes: u64,
    /// Frames a wired peer sent that found no receive buffer, or did not fit one.
    pub rx_dropped: u64,
    /// Frames taken from the transmit queue.
    pub tx_frames: u64,
    /// Their bytes (without the net header).
    pub tx_bytes: u64,
    /// Doorbell writes, per queue (receive, transmit, control).
    pub notifies: [u64; QUEUES],
    /// Device resets (status 0 written).
    pub resets: u64,
    /// Register accesses (reads and writes of any width, doorbells included).
    pub accesses: u64,
}

#[derive(Default)]
struct Counters {
    rx_frames: AtomicU64,
    rx_bytes: AtomicU64,
    rx_dropped: AtomicU64,
    tx_frames: AtomicU64,
    tx_bytes: AtomicU64,
    notifies: [AtomicU64; QUEUES],
    resets: AtomicU64,
    accesses: AtomicU64,
}

/// The source's state: the header and frame as the device writes them, and what is left.
struct SourceState {
    bytes: Vec<u8>,
    remaining: Option<u64>,
}

struct State {
    driver_features: u64,
    dfsel: u32,
    gfsel: u32,
    status: u8,
    sel: u16,
    queues: [DeviceQueue; QUEUES],
    source: Option<SourceState>,
    /// A descriptor chain, reused.
    chain: Vec<Desc>,
}

/// The software virtio-net device; its [`Mmio`] is its one BAR.
pub struct VirtioModel {
    st: Mutex<State>,
    iommu: Arc<SoftIommu>,
    counters: Counters,
    cfg: ModelConfig,
    /// The wired peer's receive side (None: transmit into the void).
    peer: Mutex<Option<Weak<VirtioModel>>>,
    /// Threaded mode: a device thread serves the device now.
    alive: Arc<AtomicBool>,
    /// A device thread was started for the device (false inline, or when the system refused
    /// the thread: the device then works inline, as the software 82599 does).
    threaded: AtomicBool,
    /// Threaded mode: the device thread's time in polls that found work, and those polls.
    busy_ns: AtomicU64,
    busy_polls: AtomicU64,
}

/// The features the device offers.
const OFFERED: u64 = feature::VERSION_1 | feature::ACCESS_PLATFORM | feature::MAC | feature::STATUS;

impl VirtioModel {
    /// A device doing its DMA through `iommu` (share one between devices whose drivers pass
    /// packets to each other without a copy: one DMA domain).
    ///
    /// In threaded mode, a device whose thread the system refuses works inline (logged).
    pub fn new(cfg: ModelConfig, iommu: Arc<SoftIommu>) -> Arc<VirtioModel> {
        let mut queues = [DeviceQueue::default(); QUEUES];
        queues[RX].max = cfg.queue_max;
        queues[TX].max = cfg.queue_max;
        let source = cfg.source.as_ref().map(|s| {
            let mut bytes = vec![0u8; HDR];
            bytes.extend_from_slice(&s.frame());
            SourceState {
                bytes,
                remaining: s.count,
            }
        });
        let m = Arc::new(VirtioModel {
            st: Mutex::new(State {
                driver_features: 0,
                dfsel: 0,
                gfsel: 0,
                status: 0,
                sel: 0,
                queues,
                source,
                chain: Vec::with_capacity(4),
            }),
            iommu,
            counters: Counters::default(),
            cfg,
            peer: Mutex::new(None),
            alive: Arc::new(AtomicBool::new(false)),
            threaded: AtomicBool::new(false),
            busy_ns: AtomicU64::new(0),
            busy_polls: AtomicU64::new(0),
        });
        if let Some(thread) = &m.cfg.thread {
            match crate::devices::worker::attach(&m, m.alive.clone(), thread) {
                Ok(()) => m.threaded.store(true, Relaxed),
                Err(e) => {
                    tracing::error!(error = %e, "virtio model: no device thread; running inline")
                }
            }
        }
        m
    }

    /// Whether the device works on a device thread ([`ModelConfig::thread`]).
    pub fn threaded(&self) -> bool {
        self.threaded.load(Relaxed)
    }

    /// Threaded mode: the device thread's time in polls that found work (ns), and those polls.
    pub fn busy(&self) -> (u64, u64) {
        (self.busy_ns.load(Relaxed), self.busy_polls.load(Relaxed))
    }

    /// Threaded mode: whether a device thread serves the device now.
    pub fn thread_alive(&self) -> bool {
        self.alive.load(Relaxed)
    }

    /// Wires two devices: what either transmits, the other receives.
    pub fn wire(a: &Arc<VirtioModel>, b: &Arc<VirtioModel>) {
        *a.peer.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::downgrade(b));
        *b.peer.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::downgrade(a));
    }

    /// The IOMMU the device's DMA goes through (the driver's mapper).
    pub fn iommu(&self) -> &Arc<SoftIommu> {
        &self.iommu
    }

    /// What the device did.
    pub fn counters(&self) -> ModelCounters {
        let c = &self.counters;
        ModelCounters {
            rx_frames: c.rx_frames.load(Relaxed),
            rx_bytes: c.rx_bytes.load(Relaxed),
            rx_dropped: c.rx_dropped.load(Relaxed),
            tx_frames: c.tx_frames.load(Relaxed),
            tx_bytes: c.tx_bytes.load(Relaxed),
            notifies: c.notifies.each_ref().map(|n| n.load(Relaxed)),
            resets: c.resets.load(Relaxed),
            accesses: c.accesses.load(Relaxed),
        }
    }

    /// The device status the driver wrote (and DEVICE_NEEDS_RESET after a fault).
    pub fn status(&self) -> u8 {
        self.st().status
    }

    /// The transport a driver opens the device through (what the capability walk would find
    /// on a PCI device); `timeout` bounds the driver's waits.
    pub fn transport(self: &Arc<Self>, name: &str, timeout: Duration) -> Transport<VirtioModel> {
        let w = |base, len, what| Window::new(self.clone(), base, len, what);
        Transport::new(
            name.into(),
            w(COMMON, 0x1000, "common configuration")
                .expect("the model's windows fit its BAR")
                .with_map(&c::MAP),
            w(NOTIFY, 0x1000, "notify").expect("the model's windows fit its BAR"),
            NOTIFY_MULT,
            Some(
                w(DEVICE, 0x100, "device configuration")
                    .expect("the model's windows fit its BAR")
                    .with_map(&n::MAP),
            ),
            timeout,
        )
    }

    /// Counts a register access.
    #[inline(always)]
    fn counted(&self) {
        self.counters.accesses.fetch_add(1, Relaxed);
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fault stops the device until the driver resets it (virtio 1.2, 2.1.2).
    #[cold]
    fn needs_reset(s: &mut State, what: &str, e: DmaFault) {
        tracing::error!(error = %e, "virtio model: {what}; the device needs a reset");
        s.status |= status::DEVICE_NEEDS_RESET;
        for q in &mut s.queues {
            q.enabled = false;
        }
    }

    /// The device resets: it reads each ring's used index one last time (a driver that freed a
    /// ring before the reset makes this fault in the IOMMU) and forgets its queues.
    fn reset(&self, s: &mut State) {
        for q in s.queues.iter().filter(|q| q.used != 0) {
            let _ = self.iommu.load_u32(q.used, Relaxed);
        }
        self.counters.resets.fetch_add(1, Relaxed);
        s.driver_features = 0;
        s.status = 0;
        s.sel = 0;
        for q in &mut s.queues {
            *q = DeviceQueue {
                max: q.max,
                ..DeviceQueue::default()
            };
        }
    }

    /// The source fills every receive buffer the driver made available; whether it filled
    /// any.
    fn run_source(&self, s: &mut State) -> bool {
        let State {
            queues,
            source,
            chain,
            status: st,
            ..
        } = s;
        let Some(src) = source.as_mut() else {
            return false;
        };
        let q = &mut queues[RX];
        if *st & status::DRIVER_OK == 0 || !q.live() {
            return false;
        }
        let v = self.iommu.view();
        let (mut frames, mut bytes) = (0u64, 0u64);
        // Published only when something was returned: a polling device thread that rewrote
        // the used index on every poll would pull the line away from the driver reading it.
        let first = q.used_idx;
        let r = (|| {
            while src.remaining != Some(0) {
                if q.available(&v)? == 0 {
                    break;
                }
                let head = q.pop_into(&v, chain)?.expect("a chain is available");
                let Some(len) = write_chain(&v, chain, &src.bytes)? else {
                    // A buffer too short for the frame: returned empty, as QEMU does not (it
                    // would need MRG_RXBUF); counted as a drop.
                    q.push_into(&v, u32::from(head), 0)?;
                    self.counters.rx_dropped.fetch_add(1, Relaxed);
                    continue;
                };
                q.push_into(&v, u32::from(head), len)?;
                frames += 1;
                bytes += (len as usize - HDR) as u64;
                if let Some(n) = src.remaining.as_mut() {
                    *n -= 1;
                }
            }
            if q.used_idx == first {
                return Ok(());
            }
            q.publish(&v)
        })();
        self.counters.rx_frames.fetch_add(frames, Relaxed);
        self.counters.rx_bytes.fetch_add(bytes, Relaxed);
        drop(v);
        if let Err(e) = r {
            Self::needs_reset(s, "DMA fault on the receive queue", e);
        }
        frames > 0
    }

    /// Frames a wired peer sent: each into the next available receive buffer, or dropped.
    fn receive(&self, frames: &[Vec<u8>]) {
        let mut g = self.st();
        let s = &mut *g;
        let q = &mut s.queues[RX];
        if s.status & status::DRIVER_OK == 0 || !q.live() {
            self.counters
                .rx_dropped
                .fetch_add(frames.len() as u64, Relaxed);
            return;
        }
        let v = self.iommu.view();
        let mut hdr_frame = Vec::new();
        let r = (|| {
            for f in frames {
                let Some(head) = q.pop_into(&v, &mut s.chain)? else {
                    self.counters.rx_dropped.fetch_add(1, Relaxed);
                    continue;
                };
                hdr_frame.clear();
                hdr_frame.resize(HDR, 0);
                hdr_frame.extend_from_slice(f);
                match write_chain(&v, &s.chain, &hdr_frame)? {
                    Some(len) => {
                        q.push_into(&v, u32::from(head), len)?;
                        self.counters.rx_frames.fetch_add(1, Relaxed);
                        self.counters.rx_bytes.fetch_add(f.len() as u64, Relaxed);
                    }
                    None => {
                        q.push_into(&v, u32::from(head), 0)?;
                        self.counters.rx_dropped.fetch_add(1, Relaxed);
                    }
                }
            }
            q.publish(&v)
        })();
        drop(v);
        if let Err(e) = r {
            Self::needs_reset(s, "DMA fault on the receive queue", e);
        }
    }

    /// Takes every available transmit chain: header and frame read (the header must be the
    /// 12 bytes, device-readable), the frame counted and kept for the peer when `keep`.
    /// Returns the frames kept and how many went.
    fn run_tx(&self, s: &mut State, keep: bool) -> (Vec<Vec<u8>>, u64) {
        let mut out = Vec::new();
        let State {
            queues,
            chain,
            status: st,
            ..
        } = s;
        let q = &mut queues[TX];
        if *st & status::DRIVER_OK == 0 || !q.live() {
            return (out, 0);
        }
        let v = self.iommu.view();
        let (mut frames, mut bytes) = (0u64, 0u64);
        // Published only when something was returned: a polling device thread that rewrote
        // the used index on every poll would pull the line away from the driver reading it.
        let first = q.used_idx;
        let r = (|| {
            while let Some(head) = q.pop_into(&v, chain)? {
                let mut frame = Vec::new();
                let mut total = 0usize;
                for &(addr, len, flags) in chain.iter() {
                    if device_writes(flags) {
                        return Err(DmaFault {
                            iova: addr,
                            len: len as usize,
                            write: false,
                        });
                    }
                    total += len as usize;
                    if keep {
                        v.read_append(addr, len as usize, &mut frame)?;
                    } else {
                        // Reachability checked as a read of the whole buffer would be.
                        v.read_prefix(addr, len as usize, &mut [])?;
                    }
                }
                let n = total.saturating_sub(HDR);
                if keep {
                    frame.drain(..HDR.min(frame.len()));
                    out.push(frame);
                }
                q.push_into(&v, u32::from(head), 0)?;
                frames += 1;
                bytes += n as u64;
            }
            if q.used_idx == first {
                return Ok(());
            }
            q.publish(&v)
        })();
        self.counters.tx_frames.fetch_add(frames, Relaxed);
        self.counters.tx_bytes.fetch_add(bytes, Relaxed);
        drop(v);
        if let Err(e) = r {
            Self::needs_reset(s, "DMA fault on the transmit queue", e);
        }
        (out, frames)
    }

    fn doorbell(&self, q: u16) {
        if let Some(c) = self.counters.notifies.get(usize::from(q)) {
            c.fetch_add(1, Relaxed);
        }
        if self.threaded() {
            // The device thread polls the rings.
            return;
        }
        self.run_queue(q);
    }

    /// The work a doorbell of queue `q` asks for: the source fills the receive buffers, or
    /// the transmit chains go out (to the peer, or into the void). Whether any was done.
    fn run_queue(&self, q: u16) -> bool {
        match usize::from(q) {
            RX => self.run_source(&mut self.st()),
            TX => {
                let peer = self
                    .peer
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_ref()
                    .and_then(Weak::upgrade);
                let (frames, n) = self.run_tx(&mut self.st(), peer.is_some());
                // Delivered with this device's lock released: two wired devices sending to
                // each other from two threads cannot deadlock.
                if let Some(p) = peer {
                    p.receive(&frames);
                }
                n > 0
            }
            _ => {
                tracing::warn!(queue = q, "virtio model: a doorbell for a queue it lacks");
                false
            }
        }
    }

    fn read_field(&self, off: usize, width: usize) -> u32 {
        let s = self.st();
        let q = s
            .queues
            .get(usize::from(s.sel))
            .copied()
            .unwrap_or_default();
        let is = |o: usize, w: usize| off == o && width == w;
        let dev = off.wrapping_sub(DEVICE);
        let mac = self.cfg.mac.0;
        match () {
            _ if is(c::DEVICE_FEATURE_SELECT.offset(), 4) => s.dfsel,
            _ if is(c::DEVICE_FEATURE.offset(), 4) => match s.dfsel {
                0 => OFFERED as u32,
                1 => (OFFERED >> 32) as u32,
                _ => 0,
            },
            _ if is(c::DRIVER_FEATURE_SELECT.offset(), 4) => s.gfsel,
            _ if is(c::DRIVER_FEATURE.offset(), 4) => match s.gfsel {
                0 => s.driver_features as u32,
                1 => (s.driver_features >> 32) as u32,
                _ => 0,
            },
            _ if is(c::CONFIG_MSIX_VECTOR.offset(), 2) => u32::from(NO_VECTOR),
            _ if is(c::NUM_QUEUES.offset(), 2) => QUEUES as u32,
            _ if is(c::DEVICE_STATUS.offset(), 1) => u32::from(s.status),
            _ if is(c::CONFIG_GENERATION.offset(), 1) => 0,
            _ if is(c::QUEUE_SELECT.offset(), 2) => u32::from(s.sel),
            _ if is(c::QUEUE_SIZE.offset(), 2) => {
                u32::from(if q.size != 0 { q.size } else { q.max })
            }
            _ if is(c::QUEUE_MSIX_VECTOR.offset(), 2) => u32::from(NO_VECTOR),
            _ if is(c::QUEUE_ENABLE.offset(), 2) => u32::from(q.enabled),
            _ if is(c::QUEUE_NOTIFY_OFF.offset(), 2) => u32::from(s.sel),
            _ if width == 4
                && (c::QUEUE_DESC_LO.offset()..=c::QUEUE_DEVICE_HI.offset()).contains(&off) =>
            {
                let a = match (off - c::QUEUE_DESC_LO.offset()) / 8 {
                    0 => q.desc,
                    1 => q.avail,
                    _ => q.used,
                };
                (a >> (8 * (off & 4))) as u32
            }
            _ if width == 1 && (n::MAC0.offset()..=n::MAC5.offset()).contains(&dev) => {
                u32::from(mac[dev])
            }
            _ if width == 2 && dev == n::STATUS.offset() => u32::from(self.cfg.link_up),
            _ if width == 2 && dev == n::MAX_VIRTQUEUE_PAIRS.offset() => 1,
            _ => panic!("virtio model: a {width}-byte read at {off:#x}, not a field of that width"),
        }
    }

    fn write_field(&self, off: usize, width: usize, v: u32) {
        let mut g = self.st();
        let s = &mut *g;
        let sel = usize::from(s.sel);
        let is = |o: usize, w: usize| off == o && width == w;
        let half = |x: &mut u64, hi: bool| {
            let shift = if hi { 32 } else { 0 };
            *x = *x & !(0xffff_ffffu64 << shift) | u64::from(v) << shift;
        };
        match () {
            _ if is(c::DEVICE_FEATURE_SELECT.offset(), 4) => s.dfsel = v,
            _ if is(c::DRIVER_FEATURE_SELECT.offset(), 4) => s.gfsel = v,
            _ if is(c::DRIVER_FEATURE.offset(), 4) => {
                if s.gfsel <= 1 {
                    let hi = s.gfsel == 1;
                    half(&mut s.driver_features, hi);
                }
            }
            // No interrupts: a vector cannot be routed and reads back as none.
            _ if is(c::CONFIG_MSIX_VECTOR.offset(), 2) => {}
            _ if is(c::QUEUE_MSIX_VECTOR.offset(), 2) => {}
            _ if is(c::DEVICE_STATUS.offset(), 1) => {
                let st = v as u8;
                if st == 0 {
                    self.reset(s);
                    return;
                }
                let mut st = st;
                // FEATURES_OK stays set only for features the device offered.
                if st & status::FEATURES_OK != 0 && s.driver_features & !OFFERED != 0 {
                    st &= !status::FEATURES_OK;
                }
                let starting = st & status::DRIVER_OK != 0 && s.status & status::DRIVER_OK == 0;
                s.status = st | (s.status & status::DEVICE_NEEDS_RESET);
                if starting {
                    self.run_source(s);
                }
            }
            _ if is(c::QUEUE_SELECT.offset(), 2) => s.sel = v as u16,
            _ if sel >= QUEUES => {
                tracing::warn!(queue = sel, "virtio model: a write to a queue it lacks")
            }
            _ if is(c::QUEUE_SIZE.offset(), 2) => s.queues[sel].size = v as u16,
            _ if is(c::QUEUE_ENABLE.offset(), 2) => {
                let q = &mut s.queues[sel];
                q.enabled = v & 1 == 1;
                // A device thread polls: it asks for no doorbells.
                q.no_notify = self.threaded();
            }
            _ if width == 4
                && (c::QUEUE_DESC_LO.offset()..=c::QUEUE_DEVICE_HI.offset()).contains(&off) =>
            {
                let q = &mut s.queues[sel];
                let hi = off & 4 != 0;
                match (off - c::QUEUE_DESC_LO.offset()) / 8 {
                    0 => half(&mut q.desc, hi),
                    1 => half(&mut q.avail, hi),
                    _ => half(&mut q.used, hi),
                }
            }
            _ if width == 2 && off >= NOTIFY && (off - NOTIFY) % NOTIFY_MULT as usize == 0 => {
                let q = v as u16;
                assert_eq!(
                    off,
                    NOTIFY + NOTIFY_MULT as usize * usize::from(q),
                    "virtio model: queue {q}'s number written to another queue's doorbell"
                );
                drop(g);
                self.doorbell(q);
            }
            _ => {
                panic!("virtio model: a {width}-byte write at {off:#x}, not a field of that width")
            }
        }
    }
}

/// Writes `bytes` (header and frame) across the device-writable descriptors of `chain`;
/// returns the bytes written, or `None` when they do not fit (nothing written then).
fn write_chain(v: &DmaView<'_>, chain: &[Desc], bytes: &[u8]) -> Result<Option<u32>, DmaFault> {
    let room: usize = chain
        .iter()
        .filter(|d| device_writes(d.2))
        .map(|d| d.1 as usize)
        .sum();
    if room < bytes.len() {
        return Ok(None);
    }
    let mut rest = bytes;
    for &(addr, len, _) in chain.iter().filter(|d| device_writes(d.2)) {
        if rest.is_empty() {
            break;
        }
        let k = rest.len().min(len as usize);
        v.write(addr, &rest[..k])?;
        rest = &rest[k..];
    }
    Ok(Some(bytes.len() as u32))
}

/// The BAR. Not inlined: `bench/instructions --device virtio` switches callgrind's collection
/// off inside these, so that the device's work is not counted as the driver's. Each counts the
/// access after the work, which also keeps the work a call inside the entry point: a tail
/// call (a jump) would leave it, and callgrind's toggle with it, before the work is done.
impl Mmio for VirtioModel {
    #[inline(never)]
    fn read32(&self, off: usize) -> u32 {
        let v = self.read_field(off, 4);
        self.counted();
        v
    }
    #[inline(never)]
    fn write32(&self, off: usize, v: u32) {
        self.write_field(off, 4, v);
        self.counted();
    }
    #[inline(never)]
    fn read16(&self, off: usize) -> u16 {
        let v = self.read_field(off, 2) as u16;
        self.counted();
        v
    }
    #[inline(never)]
    fn write16(&self, off: usize, v: u16) {
        self.write_field(off, 2, u32::from(v));
        self.counted();
    }
    #[inline(never)]
    fn read8(&self, off: usize) -> u8 {
        let v = self.read_field(off, 1) as u8;
        self.counted();
        v
    }
    #[inline(never)]
    fn write8(&self, off: usize, v: u8) {
        self.write_field(off, 1, u32::from(v));
        self.counted();
    }
    fn len(&self) -> usize {
        BAR_LEN
    }
}

/// The device thread's work (threaded mode): the transmit chains out, the receive buffers
/// filled.
impl crate::sealed::Sealed for VirtioModel {}

impl crate::devices::worker::Polled for VirtioModel {
    fn poll(&self) -> bool {
        let sent = self.run_queue(TX as u16);
        let received = self.run_queue(RX as u16);
        sent || received
    }

    fn name(&self) -> &str {
        "virtio model"
    }

    fn busy(&self, ns: u64) {
        self.busy_ns.fetch_add(ns, Relaxed);
        self.busy_polls.fetch_add(1, Relaxed);
    }
}

impl VirtioModel {
    /// Port `virtio:N` of the process-wide set: ports 2k and 2k + 1 are wired to each other,
    /// and all share one software IOMMU (one DMA domain, so an application forwarding between
    /// them sends the other port's buffers without a copy). Opening an index that is still
    /// open gives the same device. MAC 52:54:00:12:hh:ll from the index, no source.
    pub fn open_named(index: u32) -> Arc<VirtioModel> {
        use std::collections::BTreeMap;
        use std::sync::OnceLock;
        static SET: Mutex<BTreeMap<u32, Weak<VirtioModel>>> = Mutex::new(BTreeMap::new());
        static IOMMU: OnceLock<Arc<SoftIommu>> = OnceLock::new();
        let mut set = SET.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = set.get(&index).and_then(Weak::upgrade) {
            return m;
        }
        let iommu = IOMMU
            .get_or_init(|| Arc::new(SoftIommu::new("virtio model ports")))
            .clone();
        let [.., hi, lo] = index.to_be_bytes();
        let m = VirtioModel::new(
            ModelConfig {
                mac: MacAddr([0x52, 0x54, 0, 0x12, hi, lo]),
                ..ModelConfig::default()
            },
            iommu,
        );
        if let Some(peer) = set.get(&(index ^ 1)).and_then(Weak::upgrade) {
            VirtioModel::wire(&m, &peer);
        }
        set.insert(index, Arc::downgrade(&m));
        m
    }
}

impl VirtioPort<VirtioModel> {
    /// Opens a port on the software device, as a driver opens a PCI one after the capability
    /// walk: its transport, its IOMMU as the DMA mapper, polled.
    pub fn open_model(model: &Arc<VirtioModel>, name: &str, cfg: VirtioConfig) -> Result<Self> {
        let mapper = model.iommu().clone();
        VirtioPort::bring_up(
            model.transport(name, cfg.timeout),
            None,
            None,
            mapper,
            None,
            cfg,
        )
    }
}
