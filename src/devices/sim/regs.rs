//! [`SimRegs`]: the software 82599's BAR0 and the device state behind it.
//!
//! Register storage is one `AtomicU32` per word of the 128 KiB BAR, so the device thread of the
//! threaded mode reads tails without a lock; only register writes with side effects (reset, a
//! queue stopping) and the engines themselves take the receive/transmit locks. Reads and writes
//! are classified by offset ([`super::layout`]) and get the semantics described in the module
//! documentation of [`crate::devices::sim`]: self-clearing reset, read-to-clear counters, a link that comes
//! up after autonegotiation is restarted, enable bits that read back at once.
//!
//! Lock order: `tx` before `rx` (only reset takes both); the inbound queue, `peer` and
//! `returns` locks are leaves (nothing is locked while one is held); no other lock of one port
//! is ever held while taking a lock of another.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::engine::{RxEngine, TxEngine, WireFrame};
use super::layout::{self, canonical, classify, Kind, RxReg, TxReg, WIDE};
use super::Counters;
use crate::device::MacAddr;
use crate::platform::dma::SoftIommu;
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe as r;
use crate::platform::regs::Reg;

/// Size of BAR0.
pub const BAR_LEN: usize = 128 * 1024;

/// Locks a mutex, ignoring poisoning (a panicking test thread must not wedge the model).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The 64-bit counters and the latched high halves (on their own cache lines).
#[repr(align(64))]
struct Wide {
    value: [AtomicU64; WIDE],
    latch: [AtomicU32; WIDE],
}

/// Fault injection state, set through the port handle.
#[derive(Default)]
pub(super) struct Faults {
    /// Received frames still to be written back with RXE set.
    pub rx_errors: AtomicU32,
    /// Received frames still to be split into chunks of `split_chunk` bytes.
    pub split_frames: AtomicU32,
    pub split_chunk: AtomicUsize,
}

/// The register window of one software 82599 port, and the device behind it.
///
/// It implements [`Mmio`]; a driver gets it through [`crate::platform::bus::Bus::regs`] of a
/// [`super::SimPort`].
pub struct SimRegs {
    pub(super) name: String,
    pub(super) lan_id: u32,
    pub(super) mac: MacAddr,
    pub(super) inline: AtomicBool,
    pub(super) link_delay: u32,
    /// Fixed size, so that reads at constant offsets need no bounds check.
    word: Box<[AtomicU32; BAR_LEN / 4]>,
    wide: Wide,
    pub(super) removed: AtomicBool,
    pub(super) bus_master: AtomicBool,
    link_trained: AtomicBool,
    pub(super) link_forced_down: AtomicBool,
    link_countdown: AtomicU32,
    pub(super) tx: Mutex<TxEngine>,
    pub(super) rx: Mutex<RxEngine>,
    pub(super) inbound: Mutex<VecDeque<WireFrame>>,
    /// Frame buffers the peer's receive engine is done with, for this port's transmit engine
    /// to reuse (a leaf lock): forwarded traffic then allocates no buffer per frame.
    pub(super) returns: Mutex<Vec<Vec<u8>>>,
    pub(super) inbound_bytes: AtomicUsize,
    /// Bumped by every register write but RDT and TDT (and by a reset): a frame's cached verdict
    /// and the receive snapshot, with its ring cursor, remember the value they were made at
    /// (`rx.rs`, `rx_config.rs`).
    pub(super) config_epoch: AtomicU64,
    pub(super) peer: Mutex<Weak<SimRegs>>,
    pub(super) counters: Counters,
    pub(super) faults: Faults,
    warned_off: Box<[AtomicU64]>,
    warned_reg: [AtomicU64; 4],
    pub(super) iommu: Arc<SoftIommu>,
    pub(super) capture: Mutex<VecDeque<Vec<u8>>>,
    pub(super) capture_cap: usize,
    /// TXDCTL.ENABLE of queues 0..63 and 64..127 (what the device thread scans).
    pub(super) tx_enabled: [AtomicU64; 2],
    /// Transmit features already reported as not modelled.
    pub(super) gaps: Mutex<Vec<&'static str>>,
    /// Set while the device thread (threaded mode) runs.
    pub(super) worker_alive: Arc<AtomicBool>,
    /// Interrupt delivery: its state (`msix.rs`), what the registers make of it (`irq.rs`).
    pub(super) irq: super::msix::SimIrq,
}

impl std::fmt::Debug for SimRegs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimRegs").field("name", &self.name).finish()
    }
}

/// What a new device is made of.
pub(super) struct Spec {
    pub name: String,
    pub lan_id: u32,
    pub mac: MacAddr,
    pub inline: bool,
    pub link_delay: u32,
    pub capture_cap: usize,
    pub rx: RxEngine,
    pub iommu: Arc<SoftIommu>,
}

impl SimRegs {
    pub(super) fn new(s: Spec) -> SimRegs {
        let Spec {
            name,
            lan_id,
            mac,
            inline,
            link_delay,
            capture_cap,
            rx,
            iommu,
        } = s;
        let dev = SimRegs {
            name,
            lan_id,
            mac,
            inline: AtomicBool::new(inline),
            link_delay,
            word: (0..BAR_LEN / 4)
                .map(|_| AtomicU32::new(0))
                .collect::<Box<[_]>>()
                .try_into()
                .expect("BAR_LEN / 4 words"),
            wide: Wide {
                value: std::array::from_fn(|_| AtomicU64::new(0)),
                latch: std::array::from_fn(|_| AtomicU32::new(0)),
            },
            removed: AtomicBool::new(false),
            bus_master: AtomicBool::new(false),
            link_trained: AtomicBool::new(false),
            link_forced_down: AtomicBool::new(false),
            link_countdown: AtomicU32::new(0),
            tx: Mutex::new(TxEngine::default()),
            rx: Mutex::new(rx),
            inbound: Mutex::new(VecDeque::new()),
            returns: Mutex::new(Vec::new()),
            inbound_bytes: AtomicUsize::new(0),
            config_epoch: AtomicU64::new(0),
            peer: Mutex::new(Weak::new()),
            counters: Counters::default(),
            faults: Faults::default(),
            warned_off: (0..BAR_LEN / 4 / 64).map(|_| AtomicU64::new(0)).collect(),
            warned_reg: std::array::from_fn(|_| AtomicU64::new(0)),
            iommu,
            capture: Mutex::new(VecDeque::new()),
            capture_cap,
            tx_enabled: [AtomicU64::new(0), AtomicU64::new(0)],
            gaps: Mutex::new(Vec::new()),
            worker_alive: Arc::new(AtomicBool::new(false)),
            irq: Default::default(),
        };
        dev.reset();
        dev
    }

    /// The port's name ("sim:0").
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Current value of a register as the engines see it (no read side effects).
    #[inline]
    pub(super) fn get(&self, reg: Reg) -> u32 {
        self.word[canonical(reg.offset()) / 4].load(Acquire)
    }

    /// Value at a raw (canonical) offset, no side effects.
    #[inline]
    pub(super) fn get_off(&self, off: usize) -> u32 {
        self.word[off / 4].load(Acquire)
    }

    #[inline]
    pub(super) fn set_off(&self, off: usize, v: u32) {
        self.word[off / 4].store(v, Release)
    }

    /// Adds to a 32-bit read-to-clear counter.
    #[inline]
    pub(super) fn bump(&self, reg: Reg, n: u32) {
        self.word[reg.offset() / 4].fetch_add(n, Relaxed);
    }

    /// Adds to a 64-bit (L/H) counter.
    #[inline]
    pub(super) fn bump_wide(&self, i: usize, n: u64) {
        self.wide.value[i].fetch_add(n, Relaxed);
    }

    /// Statistics counter index (0..15) that RQSMR/TQSM map queue `q` to.
    pub(super) fn stat_index(&self, map_base: usize, q: usize) -> usize {
        let v = self.get_off(map_base + 4 * (q / 4));
        ((v >> (8 * (q % 4))) & 0xf) as usize
    }

    /// Whether the link is up (trained, not forced down, countdown over).
    pub(super) fn link_up(&self) -> bool {
        self.link_trained.load(Acquire)
            && !self.link_forced_down.load(Acquire)
            && self.link_countdown.load(Acquire) == 0
    }

    /// Whether the device may master the bus.
    pub(super) fn dma_allowed(&self) -> bool {
        self.bus_master.load(Acquire) && !self.removed.load(Acquire)
    }

    fn raise(&self, cause: u32) {
        self.word_fetch_or(r::EICR.offset(), cause);
    }

    /// Sets bits of the register at `off` atomically (interrupt causes).
    pub(super) fn word_fetch_or(&self, off: usize, bits: u32) {
        self.word[off / 4].fetch_or(bits, AcqRel);
    }

    /// Clears bits of the register at `off` atomically.
    pub(super) fn word_fetch_and(&self, off: usize, bits: u32) {
        self.word[off / 4].fetch_and(bits, AcqRel);
    }

    pub(super) fn link_changed(&self) {
        self.raise(r::eicr::LSC.bit());
    }

    fn train_link(&self) {
        self.link_countdown.store(self.link_delay, Release);
        self.link_trained.store(true, Release);
        if self.link_delay == 0 {
            self.link_changed();
        }
        tracing::debug!(port = %self.name, reads = self.link_delay, "autonegotiation restarted; link comes up");
    }

    fn read_links(&self) -> u32 {
        if !self.link_trained.load(Acquire) || self.link_forced_down.load(Acquire) {
            return 0;
        }
        let was = self
            .link_countdown
            .fetch_update(AcqRel, Acquire, |c| c.checked_sub(1));
        match was {
            Ok(1) => {
                self.link_changed();
                0
            }
            Ok(_) => 0,
            Err(_) => {
                let lms = r::autoc::LMS.get(self.get(r::AUTOC));
                let speed = if matches!(lms, 0 | 2 | 5) { 2 } else { 3 };
                r::links::UP.bit() | r::links::LINK_SPEED.val(speed) | r::links::KX_AN_COMP.bit()
            }
        }
    }

    fn status(&self) -> u32 {
        let mut v = r::status::LAN_ID.val(self.lan_id);
        if !r::ctrl::GIO_DIS.is_set(self.get(r::CTRL)) {
            v |= r::status::GIO.bit();
        }
        if self.link_up() {
            v |= 1 << 7;
        }
        v
    }

    fn eeprom_word(&self, addr: u32) -> u16 {
        let m = self.mac.0;
        match addr {
            0..=2 => u16::from_le_bytes([m[2 * addr as usize], m[2 * addr as usize + 1]]),
            _ => 0xffff,
        }
    }

    /// CTRL.RST / LNK_RST: every register back to its reset value, rings, contexts, counters
    /// and the inbound queue cleared, link down until autonegotiation is restarted.
    pub(super) fn reset(&self) {
        self.irq.reset();
        let mut tx = lock(&self.tx);
        let mut rx = lock(&self.rx);
        for (i, w) in self.word.iter().enumerate() {
            if !layout::kept_by_reset(i * 4) {
                w.store(0, Relaxed);
            }
        }
        for (off, v) in layout::nonzero_defaults() {
            self.word[off / 4].store(v, Relaxed);
        }
        let m = self.mac.0;
        self.set_off(
            r::RAL.at(0).offset(),
            u32::from_le_bytes([m[0], m[1], m[2], m[3]]),
        );
        self.set_off(
            r::RAH.at(0).offset(),
            u32::from(u16::from_le_bytes([m[4], m[5]])) | r::rah::AV.bit(),
        );
        for i in 0..WIDE {
            self.wide.value[i].store(0, Relaxed);
            self.wide.latch[i].store(0, Relaxed);
        }
        for m in &self.tx_enabled {
            m.store(0, Relaxed);
        }
        *tx = TxEngine::default();
        rx.reset();
        {
            // (Under the FIFO's lock, so that a sender queueing meanwhile is counted.)
            let mut q = lock(&self.inbound);
            q.clear();
            self.inbound_bytes.store(0, Relaxed);
        }
        self.config_epoch.fetch_add(1, Release);
        self.link_trained.store(false, Release);
        self.link_countdown.store(0, Release);
        tracing::debug!(port = %self.name, "device reset");
    }

    fn warn_once(&self, off: usize, value: u32, bits: u32, kind: Kind) {
        let (w, b) = (off / 4 / 64, (off / 4) % 64);
        if self.warned_off[w].fetch_or(1 << b, Relaxed) & (1 << b) != 0 {
            return;
        }
        let Some((i, info, n)) = layout::in_map(off).map(|(i, n)| (i, &r::MAP.registers[i], n))
        else {
            tracing::warn!(port = %self.name, offset = format_args!("{off:#07x}"), value = format_args!("{value:#010x}"),
                "write to a register the software 82599 does not know; ignored except for storage");
            return;
        };
        if i < 256
            && self.warned_reg[i / 64].fetch_or(1 << (i % 64), Relaxed) & (1 << (i % 64)) != 0
        {
            return;
        }
        let fields: Vec<&str> = info
            .fields
            .iter()
            .filter(|f| f.field().mask() & bits != 0)
            .map(|f| f.name)
            .collect();
        let what = match kind {
            k if k.is_read_only() => "write to a read-only register ignored",
            Kind::Storage => "register stored but its function is not modelled",
            _ => "bits written that the software 82599 does not model",
        };
        tracing::warn!(
            port = %self.name,
            register = %info.instance_name(n),
            value = format_args!("{value:#010x}"),
            bits = format_args!("{bits:#010x}"),
            fields = ?fields,
            "{what} (logged once per register)"
        );
    }

    fn read_reg(&self, off: usize) -> u32 {
        let k = classify(off);
        let w = &self.word[canonical(off) / 4];
        match k {
            Kind::Count | Kind::Eicr => w.swap(0, AcqRel),
            Kind::Lo(n) => {
                let v = self.wide.value[n as usize].swap(0, AcqRel);
                self.wide.latch[n as usize].store((v >> 32) as u32, Release);
                v as u32
            }
            Kind::Hi(n) => self.wide.latch[n as usize].swap(0, AcqRel),
            Kind::Links => self.read_links(),
            Kind::Status => self.status(),
            Kind::Eics | Kind::Eimc => 0,
            // The read that finds the semaphore free takes it.
            Kind::Swsm => w.fetch_or(r::swsm::SMBI.bit(), AcqRel),
            Kind::Secrxstat => {
                let idle = r::secrxctrl::RX_DIS.is_set(self.get(r::SECRXCTRL));
                if idle {
                    r::secrxstat::SECRX_RDY.bit()
                } else {
                    0
                }
            }
            _ => w.load(Acquire),
        }
    }

    fn write_reg(&self, off: usize, v: u32) {
        let k = classify(off);
        let c = canonical(off);
        let unmodelled = match k {
            Kind::Storage if v == 0 => 0,
            Kind::Storage => v,
            // Unknown and read-only registers are reported even when written with 0.
            Kind::Unknown
            | Kind::Status
            | Kind::Eec
            | Kind::Links
            | Kind::Count
            | Kind::Secrxstat => v | u32::from(v == 0),
            _ => layout::unmodelled_bits(k, v),
        };
        if unmodelled != 0 {
            self.warn_once(off, v, unmodelled, k);
        }
        if !matches!(k, Kind::Rx(RxReg::Tail, _) | Kind::Tx(TxReg::Tail, _)) {
            // Verdicts judged before this write may no longer hold (`rx.rs`).
            self.config_epoch.fetch_add(1, Release);
        }
        match k {
            Kind::Rx(RxReg::Tail, _) => {
                self.set_off(c, v);
                if self.inline.load(Relaxed) {
                    self.service_rx();
                }
            }
            Kind::Tx(TxReg::Tail, q) => {
                self.set_off(c, v);
                if self.inline.load(Relaxed) {
                    self.run_tx(q as usize);
                }
            }
            Kind::Ctrl => {
                let rst = r::ctrl::RST.bit() | r::ctrl::LNK_RST.bit();
                if v & rst != 0 {
                    self.reset();
                }
                self.set_off(c, v & !rst);
            }
            k if k.is_read_only() => {}
            Kind::Rxctrl => {
                let rxen = r::rxctrl::RXEN.bit();
                let secrx_off = r::secrxctrl::RX_DIS.is_set(self.get(r::SECRXCTRL));
                if (self.get_off(c) ^ v) & rxen != 0 && !secrx_off {
                    self.errata(
                        "RXCTRL.RXEN changed without SECRXCTRL.RX_DIS set and SECRXSTAT.SECRX_RDY \
                         seen (82599 erratum: traffic arriving meanwhile can hang the receive DMA)",
                    );
                }
                let enabled = v & rxen != 0 && self.get_off(c) & rxen == 0;
                self.set_off(c, v);
                // Receive starts now: frames waiting (and the source) fill the armed rings.
                if enabled && self.inline.load(Relaxed) {
                    self.service_rx();
                }
            }
            Kind::Dmatxctl => {
                let te = r::dmatxctl::TE.bit();
                if v & te != 0 && self.get_off(c) & te == 0 {
                    let size_kb = self.get(r::TXPBSIZE.at(0)) >> 10;
                    let thresh = r::txpbthresh::THRESH.get(self.get(r::TXPBTHRESH.at(0)));
                    if thresh + 10 > size_kb {
                        self.errata(
                            "transmit enabled with TXPBTHRESH(0) above TXPBSIZE(0) in KB - 10 \
                             (the threshold must fit the packet buffer)",
                        );
                    }
                }
                self.set_off(c, v);
            }
            Kind::Eerd => {
                let mut out = v & !r::eerd::START.bit();
                if r::eerd::START.is_set(v) {
                    let a = r::eerd::ADDR.get(v);
                    out = r::eerd::ADDR.val(a)
                        | r::eerd::DONE.bit()
                        | r::eerd::DATA.val(u32::from(self.eeprom_word(a)));
                }
                self.set_off(c, out);
            }
            Kind::Eicr => {
                self.word[c / 4].fetch_and(!v, AcqRel);
            }
            Kind::Eics => {
                self.raise(v);
                self.send_due();
            }
            Kind::Eims => {
                self.word[r::EIMS.offset() / 4].fetch_or(v, AcqRel);
                // A cause that waited while masked sends its message now.
                self.send_due();
            }
            Kind::Eimc => {
                self.word[r::EIMS.offset() / 4].fetch_and(!v, AcqRel);
            }
            Kind::Autoc => {
                if !r::sw_fw_sync::SW_MAC_CSR_SM.is_set(self.get(r::SW_FW_SYNC)) {
                    self.errata(
                        "AUTOC written without holding SW_FW_SYNC.SW_MAC_CSR_SM (manageability \
                         firmware may be changing the link at the same time)",
                    );
                }
                self.set_off(c, v & !r::autoc::AN_RESTART.bit());
                if v & (r::autoc::AN_RESTART.bit() | r::autoc::FLU.bit()) != 0 {
                    self.train_link();
                }
            }
            Kind::Rdrxctl => self.set_off(c, v | r::rdrxctl::DMAIDONE.bit()),
            Kind::Tx(TxReg::Dctl, q) => {
                let q = q as usize;
                let on = r::txdctl::ENABLE.is_set(v);
                let bit = 1u64 << (q % 64);
                if on {
                    self.tx_enabled[q / 64].fetch_or(bit, AcqRel);
                    self.set_off(c, v);
                } else {
                    self.tx_enabled[q / 64].fetch_and(!bit, AcqRel);
                    let mut tx = lock(&self.tx);
                    self.set_off(c, v);
                    tx.stop(q);
                }
            }
            _ => self.set_off(c, v),
        }
    }

    /// Counts and logs a register sequence the real part would hang or misbehave on.
    fn errata(&self, what: &str) {
        self.counters.errata.inc();
        tracing::error!(port = %self.name, "{what}");
    }

    #[inline]
    fn check(&self, off: usize) {
        assert!(
            off % 4 == 0 && off + 4 <= BAR_LEN,
            "{}: register offset {off:#x} outside the {BAR_LEN:#x}-byte BAR or misaligned",
            self.name
        );
    }
}

/// `read32` and `write32` are never inlined: they are the model's entry points, which
/// `bench/instructions` names to callgrind (`--toggle-collect`) to leave the model's work out of
/// the driver's instruction count.
impl Mmio for SimRegs {
    #[inline(never)]
    fn read32(&self, offset: usize) -> u32 {
        self.check(offset);
        if self.removed.load(Acquire) {
            return u32::MAX;
        }
        self.read_reg(offset)
    }

    #[inline(never)]
    fn write32(&self, offset: usize, value: u32) {
        self.check(offset);
        if self.removed.load(Acquire) {
            return;
        }
        self.write_reg(offset, value)
    }

    fn len(&self) -> usize {
        BAR_LEN
    }
}
