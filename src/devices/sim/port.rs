//! [`SimPort`], its configuration, the traffic source and the `sim:N` registry.

use std::collections::HashMap;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::engine::{RxEngine, SourceState, WireFrame};
use super::regs::{lock, SimRegs, Spec};
use super::SimCounters;
use crate::device::MacAddr;
use crate::devices::worker::DeviceThread;
use crate::error::{Error, Result};
use crate::platform::bus::Bus;
use crate::platform::dma::{DmaMapper, SoftIommu};
use crate::platform::irq::{Interrupt, InterruptSet};

/// When the model does its work (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Inside the driver's register writes: deterministic, for tests.
    #[default]
    Inline,
    /// On a device thread per port, polling the tails: for benchmarks.
    Threaded,
}

/// A built-in traffic generator feeding a port's receive side.
///
/// It is a well-behaved wire: it produces frames only while the port can receive (receive
/// enabled, link up) and only into free descriptors ("full speed": every free descriptor is
/// filled whenever the driver posts buffers), so with a `count` exactly that many frames are
/// offered. Frames pass through the whole receive path (filters, VLAN, RSS) like any other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// Frame bytes (no FCS), cut or zero-padded to `size`.
    pub template: Vec<u8>,
    /// Frame length before the optional tag.
    pub size: usize,
    /// A tag (TPID, TCI) inserted after the MAC addresses (the frame grows by 4).
    pub vlan: Option<(u16, u16)>,
    /// Frames to produce in all; `None` for no end.
    pub count: Option<u64>,
}

impl Source {
    /// A source repeating `template` as it is, without end.
    pub fn new(template: Vec<u8>) -> Source {
        Source {
            size: template.len(),
            template,
            vlan: None,
            count: None,
        }
    }

    /// IPv4/UDP frames of `size` bytes (at least 60) to `dst`, from 02:00:00:00:00:01,
    /// 10.0.0.1:1234 to 10.0.0.2:5678, with valid checksums.
    pub fn udp(dst: MacAddr, size: usize) -> Source {
        let src = [0x02, 0, 0, 0, 0, 1];
        Source::new(super::frame::udp_frame(dst.0, src, (1234, 5678), size))
    }

    /// With a tag inserted.
    pub fn with_vlan(mut self, tpid: u16, tci: u16) -> Source {
        self.vlan = Some((tpid, tci));
        self
    }

    /// Limited to `n` frames.
    pub fn with_count(mut self, n: u64) -> Source {
        self.count = Some(n);
        self
    }

    /// The frame as it goes on the wire.
    pub fn frame(&self) -> Vec<u8> {
        let mut f = self.template.clone();
        f.resize(self.size, 0);
        if let Some((tpid, tci)) = self.vlan {
            super::frame::insert_tag(&mut f, tpid, tci);
        }
        f
    }

    fn state(&self) -> SourceState {
        SourceState {
            frame: self.frame(),
            remaining: self.count,
        }
    }
}

/// Configuration of a software 82599 port.
#[derive(Clone, Debug, Default)]
pub struct SimConfig {
    /// The MAC in RAL0/RAH0 after reset (and EEPROM words 0..2). Default: 02:53:49:4d:hh:ll
    /// from the port number; the second port of a pair gets this MAC with the last byte + 1.
    pub mac: Option<MacAddr>,
    /// Inline or threaded.
    pub mode: Mode,
    /// A traffic source feeding the receive side.
    pub source: Option<Source>,
    /// Reads of LINKS that still see the link down after autonegotiation is restarted.
    pub link_up_after_reads: u32,
    /// Keep the last this-many transmitted frames for [`SimPort::take_captured`].
    pub capture: usize,
    /// Threaded mode: the device thread to run on (shared with the other ports given the same
    /// one, perhaps pinned to a CPU); `None` gives the port a thread of its own.
    pub thread: Option<DeviceThread>,
}

/// A software 82599 port: a cheap handle; every clone is the same device.
#[derive(Clone, Debug)]
pub struct SimPort {
    dev: Arc<SimRegs>,
}

/// Tells whether a port's device thread is still running, after the port is gone.
#[derive(Clone, Debug)]
pub struct WorkerWatch(Arc<AtomicBool>);

impl WorkerWatch {
    /// Whether the thread runs.
    pub fn running(&self) -> bool {
        self.0.load(Acquire)
    }
}

/// The software IOMMU all sim ports share.
fn shared_iommu() -> Arc<SoftIommu> {
    static IOMMU: OnceLock<Arc<SoftIommu>> = OnceLock::new();
    IOMMU
        .get_or_init(|| Arc::new(SoftIommu::new("software 82599")))
        .clone()
}

fn registry() -> &'static Mutex<HashMap<u32, Weak<SimRegs>>> {
    static REG: OnceLock<Mutex<HashMap<u32, Weak<SimRegs>>>> = OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Numbers of unregistered ports (pairs, sources), from 0x8000 up so MACs do not collide
/// with `sim:N` below 32768.
static ANON: AtomicU32 = AtomicU32::new(0x8000);

fn default_mac(id: u32) -> MacAddr {
    MacAddr([0x02, 0x53, 0x49, 0x4d, (id >> 8) as u8, id as u8])
}

fn next_mac(m: MacAddr) -> MacAddr {
    let mut b = m.0;
    b[5] = b[5].wrapping_add(1);
    MacAddr(b)
}

impl SimPort {
    fn build(name: String, lan_id: u32, mac: MacAddr, cfg: &SimConfig) -> SimPort {
        let dev = Arc::new(SimRegs::new(Spec {
            name,
            lan_id,
            mac,
            inline: cfg.mode == Mode::Inline,
            link_delay: cfg.link_up_after_reads,
            capture_cap: cfg.capture,
            rx: RxEngine::new(cfg.source.as_ref().map(Source::state)),
            iommu: shared_iommu(),
        }));
        if cfg.mode == Mode::Threaded {
            let thread = cfg.thread.clone().unwrap_or_default();
            if let Err(e) = crate::devices::worker::attach(&dev, dev.worker_alive.clone(), &thread)
            {
                tracing::error!(port = %dev.name(), error = %e, "no device thread; running inline");
                dev.inline.store(true, Release);
            }
        }
        SimPort { dev }
    }

    fn wire(a: &SimPort, b: &SimPort) {
        *lock(&a.dev.peer) = Arc::downgrade(&b.dev);
        *lock(&b.dev.peer) = Arc::downgrade(&a.dev);
    }

    /// Two ports wired to each other (not in the `sim:N` registry; named "sim:pairK.0/1").
    /// A source in `cfg` feeds both.
    pub fn pair(cfg: SimConfig) -> (SimPort, SimPort) {
        let id = ANON.fetch_add(2, Relaxed);
        let mac0 = cfg.mac.unwrap_or_else(|| default_mac(id));
        let a = SimPort::build(format!("sim:pair{id}.0"), 0, mac0, &cfg);
        let b = SimPort::build(format!("sim:pair{id}.1"), 1, next_mac(mac0), &cfg);
        SimPort::wire(&a, &b);
        (a, b)
    }

    /// A port fed by `source`, not wired to any peer (what it transmits goes nowhere).
    pub fn with_source(cfg: SimConfig, source: Source) -> SimPort {
        let id = ANON.fetch_add(1, Relaxed);
        let mac = cfg.mac.unwrap_or_else(|| default_mac(id));
        let cfg = SimConfig {
            source: Some(source),
            ..cfg
        };
        SimPort::build(format!("sim:src{id}"), 0, mac, &cfg)
    }

    /// Port `sim:<index>` of the process-wide registry: wired to `sim:<index ^ 1>` if that one
    /// is open. Opening a live index again returns the same device (`cfg` is then ignored).
    pub fn open_named(index: u32, cfg: &SimConfig) -> Result<SimPort> {
        let mut reg = lock(registry());
        if let Some(dev) = reg.get(&index).and_then(Weak::upgrade) {
            return Ok(SimPort { dev });
        }
        let mac = cfg.mac.unwrap_or_else(|| default_mac(index));
        let port = SimPort::build(format!("sim:{index}"), index & 1, mac, cfg);
        reg.insert(index, Arc::downgrade(&port.dev));
        if let Some(dev) = reg.get(&(index ^ 1)).and_then(Weak::upgrade) {
            SimPort::wire(&port, &SimPort { dev });
        }
        reg.retain(|_, w| w.strong_count() > 0);
        Ok(port)
    }

    /// The MAC address the port resets to.
    pub fn mac(&self) -> MacAddr {
        self.dev.mac
    }

    /// The port wired to this one, if any.
    pub fn peer(&self) -> Option<SimPort> {
        lock(&self.dev.peer).upgrade().map(|dev| SimPort { dev })
    }

    /// The software IOMMU the port's DMA goes through (shared by all sim ports).
    pub fn iommu(&self) -> Arc<SoftIommu> {
        self.dev.iommu.clone()
    }

    /// The model's counters.
    pub fn counters(&self) -> SimCounters {
        self.dev.counters.snapshot()
    }

    /// Whether bus mastering is enabled.
    pub fn bus_master_enabled(&self) -> bool {
        self.dev.bus_master.load(Acquire)
    }

    /// A frame arrives from the wire (with a valid FCS), as if the peer had sent it.
    pub fn inject_frame(&self, frame: &[u8]) {
        self.dev.arrive(WireFrame {
            data: frame.to_vec(),
            fcs_ok: true,
        });
    }

    /// Replaces the traffic source (or removes it); in inline mode it starts producing on the
    /// next RDT write.
    pub fn set_source(&self, source: Option<Source>) {
        lock(&self.dev.rx).source = source.as_ref().map(Source::state);
    }

    /// The next `frames` received frames are written back with RXE (b29, a MAC error) set in
    /// every descriptor. They are still delivered; the driver must drop them, as it would any
    /// frame with a MAC error.
    pub fn inject_rx_errors(&self, frames: u32) {
        self.dev.faults.rx_errors.fetch_add(frames, AcqRel);
    }

    /// The next `frames` received frames are split into pieces of at most `chunk` bytes, one
    /// descriptor each, whatever SRRCTL.BSIZEPKT says (which is honoured anyway).
    pub fn split_rx(&self, frames: u32, chunk: usize) {
        self.dev.faults.split_chunk.store(chunk.max(1), Release);
        self.dev.faults.split_frames.store(frames, Release);
    }

    /// Drops the link: LINKS.UP reads 0, nothing is received, transmitted frames are lost.
    pub fn link_down(&self) {
        self.dev.link_forced_down.store(true, Release);
        self.dev.link_changed();
    }

    /// Undoes [`SimPort::link_down`] (the link is up again if it was trained).
    pub fn link_restore(&self) {
        self.dev.link_forced_down.store(false, Release);
        self.dev.link_changed();
    }

    /// Surprise removal: from now on every register read returns 0xFFFFFFFF, writes are
    /// ignored and the device does no DMA. There is no way back.
    pub fn surprise_remove(&self) {
        tracing::warn!(port = %self.dev.name(), "surprise removal injected");
        self.dev.removed.store(true, Release);
    }

    /// Whether [`SimPort::surprise_remove`] was called.
    pub fn is_removed(&self) -> bool {
        self.dev.removed.load(Acquire)
    }

    /// Watches the device thread (threaded mode); it ends when the last handle is dropped.
    pub fn worker(&self) -> WorkerWatch {
        WorkerWatch(self.dev.worker_alive.clone())
    }

    /// The frames captured on transmit (oldest first), if [`SimConfig::capture`] is set.
    pub fn take_captured(&self) -> Vec<Vec<u8>> {
        lock(&self.dev.capture).drain(..).collect()
    }
}

impl Bus for SimPort {
    type Mmio = SimRegs;

    fn regs(&self) -> &Arc<SimRegs> {
        &self.dev
    }

    fn dma_mapper(&self) -> Arc<dyn DmaMapper> {
        self.dev.iommu.clone()
    }

    fn pci_id(&self) -> (u16, u16) {
        (0x8086, 0x10fb)
    }

    fn name(&self) -> &str {
        self.dev.name()
    }

    fn enable_bus_master(&self) -> Result<()> {
        self.dev.bus_master.store(true, Release);
        Ok(())
    }

    fn disable_bus_master(&self) -> Result<()> {
        self.dev.bus_master.store(false, Release);
        Ok(())
    }

    /// The model's MSI-X: vectors 0 to n - 1 (at most 16, the EICR queue bits it models)
    /// signal eventfds, until the set is dropped.
    fn enable_interrupts(&self, vectors: u16) -> Result<InterruptSet> {
        if vectors == 0 || usize::from(vectors) > super::msix::VECTORS {
            return Err(Error::NotSupported {
                device: self.dev.name().to_string(),
                what: format!("interrupt mode with {vectors} vectors"),
                why: format!(
                    "the software 82599 models vectors 0 to {} (the EICR queue bits); use at most {} receive queues",
                    super::msix::VECTORS - 1,
                    super::msix::VECTORS
                ),
            });
        }
        let irqs = (0..vectors)
            .map(Interrupt::new)
            .collect::<Result<Vec<_>>>()?;
        let generation = self.dev.route_interrupts(irqs.clone());
        Ok(InterruptSet::new(
            irqs,
            Unroute {
                dev: self.dev.clone(),
                generation,
            },
        ))
    }
}

/// Takes the model's interrupt routing down when an [`InterruptSet`] goes (unless a newer
/// routing replaced it).
struct Unroute {
    dev: Arc<SimRegs>,
    generation: u64,
}

impl Drop for Unroute {
    fn drop(&mut self) {
        self.dev.unroute_interrupts(self.generation);
    }
}
