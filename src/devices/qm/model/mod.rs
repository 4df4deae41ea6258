//! The software queue-manager device ("qm"): a model of NXP's DPAA2 (QBMan and a WRIOP
//! network interface, a DPNI) close enough that the driver's portal, frame-descriptor and
//! command code is the code a real LX2160A needs. It is not proof of what the hardware does;
//! every format comes from Linux's and DPDK's drivers (cited in [`layout`](super::layout) and
//! `regs/qbman.toml`), and what only a board can confirm is said where it is used.
//!
//! # Packaging (ours)
//! DPAA2 is not PCI: its objects (DPNI, DPBP, DPIO portals, the MC command portal) sit on the
//! fsl-mc bus and VFIO exposes each as regions. The model presents one port as a [`Bus`]:
//! BAR0 (`regs()`) is the port's MC command portal, and software portal `p` is two further
//! regions, its cache-enabled memory ([`QmDevice::portal`]'s first) and its cache-inhibited
//! registers. Portal `2q` serves receive queue `q`, portal `2q + 1` transmit queue `q`. A
//! later fsl-mc bus adapter implements the same traits from a DPRC scan.
//!
//! # What it does
//! - MC commands (`mc.rs`): open, close, reset, attributes, buffer layout, pools, queues, tail
//!   drop, max frame length, enable, disable, link state, primary MAC, VLAN filter on/off,
//!   add/remove VID, statistics; DPBP open, enable, attributes, fill count.
//! - Portals (`engine.rs`): the enqueue ring (32 entries, valid bit flipping on every wrap,
//!   EQCR_PI doorbell, EQCR_CI written back at CENA 0x1840), pull dequeue into a storage
//!   array in the driver's memory (results written through the software IOMMU, the first word
//!   last), release through RAR and RCR_AM_RT, acquire through CR/RR. A portal's doorbells
//!   and triggers are refused (counted, [`QmDevice::uninitialised_uses`]) until the writes
//!   that Linux's and DPDK's `qbman_swp_init` make after CFG have been made: RT to EQCR_PI
//!   and RCR_PI, SDQCR = 0 (`region.rs`, `before_ready`).
//! - BMan pools: a free list per DPBP; a frame that finds its pool empty is dropped and
//!   counted (page 2, no-buffer discards). Frame queues with tail drop (in frames).
//! - Receive: a buffer from the pool, the 64-byte annotation (parse-result word with the L2
//!   and VLAN-present bits at +0x10, the first TCI's offset at +0x22), the frame behind the
//!   annotation and the head room, the FD on the receive queue. VLAN in hardware is a filter
//!   table only (no strip, no insert), as on a DPNI. Frames longer than the max frame length
//!   are discarded. MAC filtering is not modelled: every frame is accepted, as with unicast
//!   promiscuous on.
//! - Transmit: the frame (padded to 60 bytes) goes to the wired peer; its buffer goes back to
//!   the FD's pool unless IVP is set.
//!
//! # When work happens
//! - [`Mode::Inline`] (tests, deterministic): inside the driver's register writes (a doorbell,
//!   a read trigger), under one lock for the whole model, so that no two ports can deadlock.
//! - [`Mode::Threaded`] (benchmarks): the doorbells and read triggers only store into atomic
//!   words (`Hot`), and a device thread ([`DeviceThread`], shared with the sim's) polls them
//!   and does the same work under the lock, so results, annotations and frames are written by
//!   another core, as DMA is. The driver's burst path then takes no lock (but for one
//!   register read every 64 idle receive bursts, the check for a device gone).
//!
//! Management commands are answered inside the command's write in both modes (they are the
//! configuration path). Portal memory and the hot words are atomics outside the lock.
//!
//! A port may carry a built-in traffic source ([`QmDevice::set_source`]): whenever a pull
//! finds its receive queue holding fewer frames than it asks for, the source's frame arrives
//! until it does (as far as the buffer pool allows), so a benchmark measures the driver at
//! full speed.
//!
//! # Not modelled
//! Push (static) dequeue and the DQRR, array-mode enqueue (EQAR reads "no slot"), order
//! restoration, congestion groups, interrupts, flow steering and RSS (one queue per port),
//! frame lists and scatter/gather, checksum offload, timestamps.

mod engine;
mod mc;
mod region;
mod state;

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

pub use crate::devices::worker::DeviceThread;
use region::Kind;
pub use region::QmRegion;
pub use state::DpniCounters;
/// The model-checking build's view of the doorbell words (tests/loom_qm.rs); not public
/// otherwise.
#[cfg(loom)]
pub use state::Hot;
#[cfg(not(loom))]
use state::Hot;
use state::SocState;

use super::layout::cena;
use super::mc::{McStatus, PORTAL_BYTES};
use crate::device::MacAddr;
use crate::error::{Error, Result};
use crate::platform::bus::Bus;
use crate::platform::dma::{DmaMapper, SoftIommu};

/// Software portals per port: one for the receive queue, one for the transmit queue.
pub const PORTALS_PER_PORT: usize = 2;
/// Ports of the process-wide set behind `qm:N` names.
pub const NAMED_PORTS: usize = 64;

/// When the model does its work (see the module documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Inside the driver's register writes: deterministic, for tests.
    #[default]
    Inline,
    /// On a device thread, polling the portals: for benchmarks.
    Threaded,
}

/// How to build a set of ports.
#[derive(Clone, Debug, Default)]
pub struct QmSocConfig {
    /// Ports in the set.
    pub ports: usize,
    /// Wire ports 2k and 2k + 1 to each other; unwired ports send into the void.
    pub wired: bool,
    /// Inline or threaded.
    pub mode: Mode,
    /// Threaded mode: the device thread (shared with other devices given the same one,
    /// perhaps pinned); `None` gives the set a thread of its own.
    pub thread: Option<DeviceThread>,
}

/// The device thread's busy counters, on a line of their own: the thread writes them at every
/// busy poll, and the driver reads the fields of [`Inner`] beside them at every register
/// access.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Busy {
    ns: AtomicU64,
    polls: AtomicU64,
}

struct Inner {
    iommu: Arc<SoftIommu>,
    state: Mutex<SocState>,
    mode: Mode,
    /// The doorbells and the enqueue ring's consumer index of each portal.
    hot: Box<[Hot]>,
    /// Threaded mode: the device thread's busy time and busy polls.
    busy: Busy,
    /// Set while a device thread serves the set.
    alive: Arc<AtomicBool>,
    /// CENA memory of each portal.
    cena: Box<[Box<[AtomicU32]>]>,
    /// The MC command portal of each port.
    mcp: Box<[[AtomicU32; PORTAL_BYTES / 4]]>,
    /// Ports surprise-removed: every read returns all ones.
    gone: Box<[AtomicBool]>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, SocState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a portal has work waiting (threaded mode).
    fn pending(h: &Hot) -> bool {
        h.driver.pi.load(Relaxed) != h.device.ci.load(Relaxed)
            || h.driver.vdq.load(Relaxed)
            || h.driver.cr.load(Relaxed)
            || h.driver.rcr.load(Relaxed) != 0
    }
}

/// The device thread's work: every portal's waiting doorbells and triggers, under the lock.
impl crate::sealed::Sealed for Inner {}

impl crate::devices::worker::Polled for Inner {
    fn poll(&self) -> bool {
        if !self.hot.iter().any(Inner::pending) {
            return false;
        }
        let mut s = self.lock();
        // Releases first, of every portal: a buffer released before a frame was sent (by
        // the same program) is in the pool when the frame arrives. Each word is read before
        // it is swapped, so that an idle portal's line is not written.
        for (p, h) in self.hot.iter().enumerate() {
            let mut r = h.take_releases();
            while r != 0 {
                engine::release_slot(&mut s, &self.cena[p], h, r.trailing_zeros());
                r &= r - 1;
            }
        }
        for (p, h) in self.hot.iter().enumerate() {
            let pi = h.driver.pi.load(Acquire);
            if pi != h.device.ci.load(Relaxed) {
                engine::eqcr_consume(&mut s, &self.iommu, &self.cena[p], h, pi);
            }
        }
        for (p, h) in self.hot.iter().enumerate() {
            let mem = &self.cena[p];
            if h.driver.vdq.load(Relaxed) && h.driver.vdq.swap(false, Acquire) {
                engine::pull(&mut s, &self.iommu, mem);
            }
            if h.driver.cr.load(Relaxed) && h.driver.cr.swap(false, Acquire) {
                engine::command(&mut s, p, mem);
            }
        }
        true
    }

    fn name(&self) -> &str {
        "qm"
    }

    fn busy(&self, ns: u64) {
        self.busy.ns.fetch_add(ns, Relaxed);
        self.busy.polls.fetch_add(1, Relaxed);
    }
}

/// A set of modelled ports sharing one queue manager, buffer manager and IOMMU (as the
/// objects of one DPRC do). Ports 2k and 2k + 1 are wired to each other.
#[derive(Clone)]
pub struct QmSoc(Arc<Inner>);

impl QmSoc {
    /// A set of `ports` inline ports, 2k wired to 2k + 1; port `d` has MAC
    /// 02:51:4d:00:hh:ll (`d` in the last two bytes).
    pub fn new(ports: usize) -> QmSoc {
        QmSoc::inner(ports, true, Mode::Inline)
    }

    fn inner(ports: usize, wired: bool, mode: Mode) -> QmSoc {
        let macs: Vec<MacAddr> = (0..ports)
            .map(|d| MacAddr([0x02, 0x51, 0x4d, 0, (d >> 8) as u8, d as u8]))
            .collect();
        let peers: Vec<Option<usize>> = (0..ports)
            .map(|d| (wired && d ^ 1 < ports).then_some(d ^ 1))
            .collect();
        let words = cena::SIZE / 4;
        let portals = ports * PORTALS_PER_PORT;
        QmSoc(Arc::new(Inner {
            iommu: Arc::new(SoftIommu::new("software queue manager")),
            state: Mutex::new(SocState::new(&macs, &peers)),
            mode,
            hot: (0..portals).map(|_| Hot::default()).collect(),
            busy: Busy::default(),
            alive: Arc::new(AtomicBool::new(false)),
            cena: (0..portals)
                .map(|_| (0..words).map(|_| AtomicU32::new(0)).collect())
                .collect(),
            mcp: (0..ports).map(|_| Default::default()).collect(),
            gone: (0..ports).map(|_| AtomicBool::new(false)).collect(),
        }))
    }

    /// A set as `config` says; threaded mode starts (or joins) its device thread.
    pub fn build(config: QmSocConfig) -> Result<QmSoc> {
        let soc = QmSoc::inner(config.ports, config.wired, config.mode);
        if config.mode == Mode::Threaded {
            let thread = config.thread.unwrap_or_default();
            crate::devices::worker::attach(&soc.0, soc.0.alive.clone(), &thread)?;
        }
        Ok(soc)
    }

    /// The device thread's busy time over the whole set, and its busy polls (threaded mode).
    pub fn busy(&self) -> (u64, u64) {
        (
            self.0.busy.ns.load(Relaxed),
            self.0.busy.polls.load(Relaxed),
        )
    }

    /// Whether a device thread serves the set now.
    pub fn thread_alive(&self) -> bool {
        self.0.alive.load(Acquire)
    }

    /// The process-wide set behind `qm:N`.
    fn named() -> &'static QmSoc {
        static SOC: OnceLock<QmSoc> = OnceLock::new();
        SOC.get_or_init(|| QmSoc::new(NAMED_PORTS))
    }

    /// Port `d` of this set.
    pub fn port(&self, d: usize) -> Result<QmDevice> {
        if d >= self.0.gone.len() {
            return Err(Error::InvalidConfig(format!(
                "qm port {d} does not exist (this set has ports 0..{})",
                self.0.gone.len()
            )));
        }
        let region = |kind| {
            Arc::new(QmRegion {
                soc: self.0.clone(),
                d,
                kind,
            })
        };
        let mut regions = vec![region(Kind::Mc)];
        for p in d * PORTALS_PER_PORT..(d + 1) * PORTALS_PER_PORT {
            regions.push(region(Kind::Cena(p)));
            regions.push(region(Kind::Cinh(p)));
        }
        Ok(QmDevice {
            soc: self.clone(),
            d,
            name: format!("qm:{d}"),
            regions,
        })
    }
}

/// One modelled port: a cheap handle (every clone is the same device), the [`Bus`] the qm
/// driver runs on, and the test's handle for faults and the model's own counters.
#[derive(Clone)]
pub struct QmDevice {
    soc: QmSoc,
    d: usize,
    name: String,
    /// The MC portal, then each software portal's CENA and CINH regions.
    regions: Vec<Arc<QmRegion>>,
}

impl std::fmt::Debug for QmDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QmDevice({})", self.name)
    }
}

impl QmDevice {
    /// Port `qm:N` of the process-wide set (ports 2k and 2k + 1 are wired to each other;
    /// opening an index again gives the same device).
    pub fn open_named(index: u32) -> Result<QmDevice> {
        QmSoc::named().port(index as usize)
    }

    /// A pair of wired ports of a set of their own (tests).
    pub fn pair() -> (QmDevice, QmDevice) {
        let soc = QmSoc::new(2);
        (soc.port(0).expect("port 0"), soc.port(1).expect("port 1"))
    }

    /// The DPNI (and DPBP) object id of this port.
    pub fn object_id(&self) -> u32 {
        self.d as u32
    }

    /// Software portal `p` of this port (`0..PORTALS_PER_PORT`): its CENA memory and its
    /// CINH registers.
    pub fn portal(&self, p: usize) -> Option<super::PortalRegions<QmRegion>> {
        (p < PORTALS_PER_PORT).then(|| {
            (
                self.regions[1 + 2 * p].clone(),
                self.regions[2 + 2 * p].clone(),
            )
        })
    }

    fn state(&self) -> MutexGuard<'_, SocState> {
        self.soc.0.lock()
    }

    /// The DPNI's counters.
    pub fn counters(&self) -> DpniCounters {
        self.state().dpnis[self.d].counters
    }

    /// Frames waiting on the receive frame queue.
    pub fn rx_queued(&self) -> usize {
        self.state().dpnis[self.d].rx_fq.len()
    }

    /// Objects open on the whole set (tokens the MC handed out and nobody closed).
    pub fn open_tokens(&self) -> usize {
        self.state().tokens.len()
    }

    /// Free buffers in this port's DPBP (its BMan pool's fill).
    pub fn pool_fill(&self) -> usize {
        self.state().dpbps[self.d].bufs.len()
    }

    /// Device accesses the IOMMU refused, commands with a stale valid bit, and commands the
    /// model could not act on, over the whole set.
    pub fn faults(&self) -> (u64, u64, u64) {
        let f = &self.state().faults;
        (f.dma_faults, f.stale_commands, f.bad_commands)
    }

    /// A frame arrives from the wire (as if the peer had sent it).
    pub fn inject(&self, frame: &[u8]) {
        let mut s = self.state();
        engine::receive(&mut s, &self.soc.0.iommu.view(), self.d, frame);
    }

    /// Gives the port a traffic source (see the module documentation), or takes it away.
    pub fn set_source(&self, frame: Option<Vec<u8>>) {
        self.state().dpnis[self.d].source = frame;
    }

    /// The set this port belongs to.
    pub fn soc(&self) -> &QmSoc {
        &self.soc
    }

    /// A frame descriptor lands on the receive frame queue as it is (a device that names a
    /// buffer of its choosing). Refused for a buffer the model holds itself (in a pool's free
    /// list or a queue): the model would write into it later, under a packet that owns it.
    pub fn inject_fd(&self, fd: super::layout::Fd) -> Result<()> {
        let mut s = self.state();
        let a = fd.addr();
        let held = s.dpbps.iter().any(|b| b.bufs.contains(&a))
            || s.dpnis
                .iter()
                .any(|n| n.rx_fq.iter().any(|f| f.addr() == a));
        if held {
            return Err(Error::InvalidConfig(format!(
                "the model holds the buffer at {a:#x} (in a pool or a queue); handing it out as \
                 well would give it two owners"
            )));
        }
        s.dpnis[self.d].rx_fq.push_back(fd);
        Ok(())
    }

    /// The link goes down (frames are neither sent nor received) or comes back.
    pub fn set_link(&self, up: bool) {
        self.state().dpnis[self.d].link_up = up;
    }

    /// The port is surprise-removed: every read returns all ones, writes are ignored.
    pub fn surprise_remove(&self) {
        self.soc.0.gone[self.d].store(true, Release);
    }

    /// Doorbells and triggers the model refused because their portal was not initialised
    /// since its CFG write (EQCR_PI and RCR_PI to RT, SDQCR to 0).
    pub fn uninitialised_uses(&self) -> u64 {
        self.state().faults.uninitialised
    }

    /// Leaves software portal `p` "not clean": DQPI reads nonzero, as after a process that
    /// did not shut its portal down.
    pub fn dirty_portal(&self, p: usize) {
        self.state().portals[self.d * PORTALS_PER_PORT + p].dqpi = 3;
    }

    /// The next pull of the whole set is answered with a token that is not the pull's.
    pub fn stale_token_next(&self) {
        self.state().faults.stale_token_next = true;
    }

    /// The next command on a DPNI of the set answers `status` instead of doing its work.
    pub fn fail_next_command(&self, status: McStatus) {
        self.state().faults.fail_next_command = Some(status as u8);
    }
}

impl Bus for QmDevice {
    type Mmio = QmRegion;

    fn regs(&self) -> &Arc<QmRegion> {
        &self.regions[0]
    }

    fn dma_mapper(&self) -> Arc<dyn DmaMapper> {
        self.soc.0.iommu.clone()
    }

    /// Freescale's (NXP's) PCI vendor id and device 0: DPAA2 objects are not PCI functions
    /// and have no device id; the qm driver does not look at this.
    fn pci_id(&self) -> (u16, u16) {
        (0x1957, 0)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn enable_bus_master(&self) -> Result<()> {
        self.state().dpnis[self.d].master = true;
        Ok(())
    }

    fn disable_bus_master(&self) -> Result<()> {
        self.state().dpnis[self.d].master = false;
        Ok(())
    }
}
