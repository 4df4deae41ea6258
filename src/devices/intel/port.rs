//! The Intel port shell: one port type for the 82576 and the 82599, over a per-chip trait.
//!
//! Most of a port is the same program on both chips with other register names: open (check the
//! PCI id and the configuration, then bring the chip up with a `Drop` that already cleans up),
//! liveness, promiscuous mode, [`Port`] (info, link, counters, `take_queues`), the VLAN filter
//! setters and the shutdown order in `Drop`. That program is [`IntelPort`], written once. What
//! differs is [`IntelChip`]: the init sequence, the shutdown, where the link and promiscuous
//! bits are, the counter table, the receive queue type and the VLAN register writes. Each chip's
//! implementation lives in its own folder (`igb/`, `ixgbe/`), so "the 82599's VLAN strip" is in
//! `ixgbe/vlan.rs` and nowhere else.
//!
//! `IgbPort<B>` and `IxgbePort<B>` are this type with the chip filled in.

use std::sync::Arc;
use std::time::Duration;

use super::config::{Chip, IntelConfig};
use super::irq::{IrqRegs, QueueIrq};
use super::queue::{self, RingRegs};
use super::recovery::{self, PortCtx, QueueWatch, Restore, Shared, Snapshot, Watch, WatchCtx};
use super::rxq::IntelRx;
use super::stats::HwStats;
use super::vlan::VlanShadow;
use super::IntelTx;
use crate::device::{LinkStatus, MacAddr, Port, PortInfo, PortStats, QueueSet, RxQueue};
use crate::devices::ids::{self, Family};
use crate::error::{Error, Result};
use crate::health::Health;
use crate::platform::bus::Bus;
use crate::platform::irq::{Interrupt, InterruptSet};
use crate::platform::mmio::{wait_for, Mmio};
use crate::platform::regs::{Reg, RegArray, Stats};
use crate::vlan::{Tpid, Vid, VlanCaps, VlanHardware};

/// Only the shell can make one: the chip's bring-up and shutdown hooks take it, so they cannot
/// be run from outside on a port whose queues are live.
pub struct ShellOnly(());

impl ShellOnly {
    /// For the shell's own modules (the watch thread's restore, `recovery.rs`).
    pub(super) fn new() -> ShellOnly {
        ShellOnly(())
    }
}

/// What a chip supplies to the shell. Implemented by the chip's marker type
/// ([`Chip82576`](crate::devices::igb::Chip82576), [`Chip82599`](crate::devices::ixgbe::Chip82599)).
/// Sealed, through [`Chip`]: only this crate's chips implement it (see `src/sealed.rs`).
pub trait IntelChip: Chip {
    /// The family in the PCI id table; its name is the driver's in [`PortInfo`] ("igb",
    /// "ixgbe").
    const FAMILY: Family;
    /// A register that reads all-ones when the device is gone (surprise removal).
    const STATUS: Reg;
    /// Unicast and multicast promiscuous mode: the register and its UPE | MPE bits.
    const PROMISC: (Reg, u32);
    /// The counters the port reports (the `[stats]` table of the chip's register map).
    const STATS: &'static Stats;
    /// The VLAN filter switch: the register, its VFE bit and its CFIEN bit (always cleared:
    /// the CFI/DEI bit must not decide whether a frame passes).
    const VFE: (Reg, u32, u32);
    /// The VLAN filter table (VFTA) registers.
    const VFTA: RegArray;
    /// The receive ring registers.
    const RX_RING: &'static RingRegs;
    /// The transmit ring registers.
    const TX_RING: &'static RingRegs;
    /// The device reset: register, self-clearing bits, their datasheet name, and how long the
    /// chip wants after it.
    const RESET: (Reg, u32, &'static str, Duration);
    /// The link register, its "up" bit and its datasheet name (for the wait after init).
    const LINK: (Reg, u32, &'static str);
    /// The interrupt registers, for interrupt mode ([`IntelConfig::interrupts`]); `None` where
    /// the driver has no interrupt mode yet (opening with interrupts is then refused).
    const IRQ: Option<&'static IrqRegs>;
    /// The chip's receive queue.
    type Rx<B: Bus>: RxQueue;
    /// The chip's own strip state (port-wide on the 82576, per queue on the 82599); a copy
    /// of it is what a restore after an error puts back.
    type Strip: Send + Clone;

    /// The strip state a port opened with `cfg` starts from.
    fn strip_state(cfg: &IntelConfig<Self>) -> Self::Strip;
    /// Decodes the link register.
    fn decode_link(v: u32) -> LinkStatus;
    /// The whole bring-up: reset, MAC, link, VLAN registers from the shadow, rings and queues
    /// (into `port.rx` and `port.tx`), enable. Called once by [`IntelPort::open`] on a port
    /// whose `Drop` already cleans up; ends by waiting for the link (`IntelPort::wait_link`).
    fn init<B: Bus>(port: &mut IntelPort<Self, B>, shell: ShellOnly) -> Result<()>;
    /// The chip's part of the shutdown, after every queue stopped and before the reset:
    /// receive and transmit off, interrupts masked, whatever else the chip asks for. Runs in
    /// `Drop`, so it never fails: problems are logged.
    fn stop<M: Mmio + ?Sized>(m: &M, name: &str, shell: ShellOnly);

    /// What the chip's VLAN hardware can do, as the VLAN layer asks.
    fn vlan_caps<B: Bus>(port: &IntelPort<Self, B>) -> VlanCaps;
    /// Receive tag stripping for one queue (or, where the chip strips port-wide, the port).
    fn set_rx_strip<B: Bus>(port: &mut IntelPort<Self, B>, queue: u16, on: bool) -> Result<()>;
    /// Writes the TPID and the extended (double) VLAN setting of `shadow`.
    fn write_tpid<M: Mmio + ?Sized>(m: &M, shadow: &VlanShadow);

    /// The chip's receive queue as the shared one (its ring, registers and fault watch).
    fn intel_rx<B: Bus>(q: &mut Self::Rx<B>) -> &mut IntelRx<B>;
    /// After a function reset (PCIe error recovery, `recovery.rs`), on the watch thread:
    /// everything the port had programmed except the rings, which each queue puts back itself
    /// when it sees the reset. Every queue's ENABLE is left clear; receive and transmit end on.
    /// A chip that cannot be restored says why (the port then stays down).
    fn restore<M: Mmio + ?Sized>(m: &M, r: &Restore<'_, Self>, shell: ShellOnly) -> Result<()>;
}

/// A link state from its parts: `up`, the speed field's value `speed` decoded by `mbps` (index
/// = field value; a link that is down has speed 0), and the duplex.
pub(crate) fn link_status(up: bool, speed: u32, mbps: [u32; 4], full_duplex: bool) -> LinkStatus {
    LinkStatus {
        up,
        speed_mbps: if up { mbps[speed as usize & 3] } else { 0 },
        full_duplex: up && full_duplex,
    }
}

/// An open Intel port: the shell's state, the chip's strip state and the queues until they are
/// taken. Fields are the chips' to use in their init and VLAN code.
pub struct IntelPort<C: IntelChip, B: Bus> {
    /// The watch thread (faults: link changes, hot unplug, PCIe errors), for a port on a bus
    /// that delivers the device's notifications; stopped first in `Drop`.
    watch: Option<Watch>,
    /// What a restore after an error puts back, shared with the watch thread.
    shared: Option<Shared<C>>,
    /// What the driver saw happen to the device.
    pub(crate) health: Arc<Health>,
    /// Interrupt mode's vectors, routed to eventfds (shared with the receive queues). First,
    /// so that the routing is taken down before the bus and its BAR mapping go.
    pub(crate) irqs: Option<Arc<InterruptSet>>,
    pub(crate) bus: B,
    pub(crate) regs: Arc<B::Mmio>,
    pub(crate) name: Arc<str>,
    pub(crate) model: &'static str,
    pub(crate) cfg: IntelConfig<C>,
    pub(crate) mac: MacAddr,
    /// The VLAN filter table, TPID, extended setting and filter switch, written back at init.
    pub(crate) vlan: VlanShadow,
    pub(crate) strip: C::Strip,
    /// The queues until `take_queues` hands them out.
    pub(crate) rx: Vec<C::Rx<B>>,
    pub(crate) tx: Vec<IntelTx<B>>,
    taken: bool,
    pub(crate) stats: HwStats,
}

impl<C: IntelChip, B: Bus> IntelPort<C, B> {
    /// Opens the chip behind `bus`: resets it and brings it up as `cfg` says.
    ///
    /// Refuses devices of another family ([`Error::UnsupportedDevice`]). A link that stays
    /// down for `cfg.link_timeout` is logged and reported by [`Port::link`], not an error.
    pub fn open(bus: B, cfg: IntelConfig<C>) -> Result<Self> {
        let (vendor, device) = bus.pci_id();
        let model = match ids::lookup(vendor, device) {
            Some((family, model)) if family == C::FAMILY => model,
            _ => {
                return Err(Error::UnsupportedDevice {
                    addr: bus.name().to_string(),
                    vendor,
                    device,
                    supported: format!(
                        "{} (the {} driver)",
                        ids::family_list(C::FAMILY),
                        C::FAMILY.name()
                    ),
                });
            }
        };
        cfg.check()?;
        let vlan = VlanShadow::from_config(C::VFTA, cfg.tpid, &cfg.vlans, cfg.vlan_filter)?;
        // From here on the port exists, so an error or a panic below runs its `Drop`: queues
        // disabled, device reset, bus mastering off, before any ring memory is freed.
        let mut port = IntelPort {
            watch: None,
            shared: None,
            health: Arc::new(Health::new(bus.name(), LinkStatus::default())),
            irqs: None,
            regs: bus.regs().clone(),
            name: bus.name().into(),
            bus,
            model,
            strip: C::strip_state(&cfg),
            cfg,
            mac: MacAddr::default(),
            vlan,
            rx: Vec::new(),
            tx: Vec::new(),
            taken: false,
            stats: HwStats::new(C::STATS),
        };
        // Bus master on before anything else (notes 1.2 and 1.4 step 1: nothing is received
        // without it); the chip's bring-up follows.
        port.bus.enable_bus_master()?;
        if port.cfg.interrupts.is_some() {
            port.irqs = Some(Arc::new(port.enable_interrupts()?));
        }
        let locked = crate::platform::memlock::locked();
        C::init(&mut port, ShellOnly(())).map_err(|e| memlock_for_port(e, locked, &port.cfg))?;
        port.health = Arc::new(Health::new(&port.name, port.read_link()?));
        port.start_watch();
        Ok(port)
    }

    /// Starts the watch thread when the bus delivers the device's notifications. A port
    /// whose notifications cannot be had still works, without fault handling: logged.
    fn start_watch(&mut self) {
        let events = match self.bus.device_events() {
            None => return,
            Some(Ok(ev)) => ev,
            Some(Err(e)) => {
                tracing::warn!(port = %self.name, error = %e, "the device's request and error notifications are not available: hot unplug and PCIe errors will not be handled for this port");
                return;
            }
        };
        let ctx = WatchCtx {
            port: self.port_ctx(),
            events,
            kernel_seen: Default::default(),
        };
        match Watch::start(ctx) {
            Ok(w) => self.watch = Some(w),
            Err(e) => {
                self.shared = None;
                tracing::warn!(port = %self.name, error = %e, "no watch thread: hot unplug and PCIe errors will not be handled for this port")
            }
        }
    }

    /// What a reset and restore of this port needs, the snapshot made (and from now on kept
    /// up to date by the setters).
    pub(crate) fn port_ctx(&mut self) -> PortCtx<C, B::Mmio> {
        let shared = self
            .shared
            .get_or_insert_with(|| {
                Arc::new(std::sync::Mutex::new(Snapshot {
                    vlan: self.vlan.clone(),
                    strip: self.strip.clone(),
                    promiscuous: self.cfg.promiscuous,
                }))
            })
            .clone();
        PortCtx {
            regs: self.regs.clone(),
            name: self.name.clone(),
            health: self.health.clone(),
            cfg: self.cfg.clone(),
            mac: self.mac,
            pci_id: self.bus.pci_id(),
            shared,
            irqs: self.irqs.clone(),
        }
    }

    /// Runs a setter of what a restore puts back (VLAN, strip, promiscuous mode) under the
    /// snapshot's lock, then publishes the new state: a restore running meanwhile finishes
    /// first, and the next one sees the change.
    pub(crate) fn published<T>(&mut self, set: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let Some(shared) = self.shared.clone() else {
            return set(self);
        };
        let mut snap = recovery::lock(&shared);
        let r = set(self);
        snap.vlan = self.vlan.clone();
        snap.strip = self.strip.clone();
        snap.promiscuous = self.cfg.promiscuous;
        r
    }

    /// The link register, decoded (`DeviceGone` for all-ones).
    fn read_link(&self) -> Result<LinkStatus> {
        match self.regs.read(C::LINK.0) {
            u32::MAX => Err(self.gone()),
            v => Ok(C::decode_link(v)),
        }
    }

    /// Routes one vector per receive queue to an eventfd (interrupt mode), or says why not.
    fn enable_interrupts(&self) -> Result<InterruptSet> {
        let (Some(regs), Some(_)) = (C::IRQ, self.cfg.interrupts) else {
            return Err(Error::NotSupported {
                device: self.name.to_string(),
                what: "interrupt mode".into(),
                why: format!(
                    "the {} driver has no interrupt mode; poll instead (leave interrupts off)",
                    C::FAMILY.name()
                ),
            });
        };
        if self.cfg.rx_queues > regs.max_vectors {
            return Err(Error::NotSupported {
                device: self.name.to_string(),
                what: format!("interrupt mode with {} receive queues", self.cfg.rx_queues),
                why: format!(
                    "the {} driver gives each receive queue a vector of its own and has {} (one EICR bit each); use at most {} queues",
                    C::FAMILY.name(),
                    regs.max_vectors,
                    regs.max_vectors
                ),
            });
        }
        self.bus.enable_interrupts(self.cfg.rx_queues)
    }

    /// For init, after the receive queues are set up: programs interrupt mode (when the port
    /// was opened with it) and gives each receive queue its vector, masked.
    pub(crate) fn setup_interrupts(
        &mut self,
        attach: impl Fn(&mut C::Rx<B>, QueueIrq),
    ) -> Result<()> {
        let (Some(set), Some(regs), Some(cfg)) = (&self.irqs, C::IRQ, self.cfg.interrupts) else {
            return Ok(());
        };
        let queues = self.rx.len() as u32;
        let irqs = super::irq::program(&*self.regs, regs, set, queues, cfg)?;
        for (q, irq) in self.rx.iter_mut().zip(irqs) {
            attach(q, irq);
        }
        Ok(())
    }

    /// The interrupt vectors of interrupt mode, in queue order (none when polled).
    pub fn interrupts(&self) -> &[Interrupt] {
        self.irqs.as_ref().map_or(&[], |s| s.vectors())
    }

    /// The port's MAC address (receive address 0 as loaded from the EEPROM).
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// The configuration the port was opened with.
    pub fn config(&self) -> &IntelConfig<C> {
        &self.cfg
    }

    /// The bus the port sits on.
    pub fn bus(&self) -> &B {
        &self.bus
    }

    /// Unicast and multicast promiscuous mode (UPE | MPE); broadcast is always accepted.
    pub fn set_promiscuous(&mut self, on: bool) -> Result<()> {
        self.published(|p| {
            let (reg, bits) = C::PROMISC;
            p.regs.modify(reg, bits, if on { bits } else { 0 });
            p.cfg.promiscuous = on;
            p.alive()
        })
    }

    /// `Err(DeviceGone)` if the device answers all-ones (surprise removal).
    pub(crate) fn alive(&self) -> Result<()> {
        if self.regs.read(C::STATUS) == u32::MAX {
            return Err(self.gone());
        }
        Ok(())
    }

    fn gone(&self) -> Error {
        Error::DeviceGone {
            device: self.name.to_string(),
        }
    }

    /// For init: allocates and programs every transmit queue, disabled, with TXDCTL as `ctl`
    /// computes it from its current value (the chip's thresholds).
    pub(crate) fn setup_tx(&mut self, ctl: fn(u32) -> u32) -> Result<()> {
        self.tx = (0..u32::from(self.cfg.tx_queues))
            .map(|q| {
                IntelTx::setup(
                    C::TX_RING,
                    &self.bus,
                    self.name.clone(),
                    q,
                    self.cfg.tx_ring,
                    self.cfg.reg_timeout,
                    ctl,
                )
            })
            .collect::<Result<_>>()?;
        Ok(())
    }

    /// For init: reads the counters once (they clear on read), so totals start at zero.
    pub(crate) fn clear_stats(&mut self) {
        self.stats.accumulate(&*self.regs, self.cfg.rx_queues);
        self.stats.clear();
    }

    /// The last step of init: waits for the link. Down after `cfg.link_timeout` is logged, not
    /// an error (the cable may come later; [`Port::link`] reports it).
    pub(crate) fn wait_link(&self) -> Result<()> {
        let (reg, up, what) = C::LINK;
        let timeout = self.cfg.link_timeout;
        match wait_for(&*self.regs, &self.name, reg, what, up, up, timeout) {
            Ok(v) => {
                let l = C::decode_link(v);
                tracing::info!(port = %self.name, mac = %self.mac, speed_mbps = l.speed_mbps, full_duplex = l.full_duplex, "link up");
                Ok(())
            }
            Err(Error::RegisterTimeout { .. }) => {
                tracing::warn!(
                    port = %self.name,
                    timeout_ms = timeout.as_millis() as u64,
                    "link is still down; check the cable and the link partner (link() reports it)"
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// VLAN filtering on or off (the chip's VFE bit; CFIEN cleared).
    pub fn set_vlan_filter(&mut self, on: bool) -> Result<()> {
        self.published(|p| {
            p.vlan.enabled = on;
            p.write_filter();
            p.alive()
        })
    }

    /// Lets frames tagged `vid` through the filter. VID 4095 is refused; VID 0 is always in.
    pub fn add_vlan(&mut self, vid: u16) -> Result<()> {
        self.published(|p| {
            p.vlan.table.add(vid)?;
            p.write_vfta_word(vid)
        })
    }

    /// Stops letting frames tagged `vid` through the filter (VID 0 stays: priority tags always
    /// pass). VID 4095 is refused.
    pub fn remove_vlan(&mut self, vid: u16) -> Result<()> {
        self.published(|p| {
            p.vlan.table.remove(vid)?;
            p.write_vfta_word(vid)
        })
    }

    /// Writes the VFTA word holding `vid` (a VID the table accepted).
    fn write_vfta_word(&self, vid: u16) -> Result<()> {
        let (i, w) = self.vlan.word_of(vid);
        self.regs.write(self.vlan.vfta.at(i), w);
        self.alive()
    }

    /// The VLAN filter state as software keeps it (table, TPID, extended, enable).
    pub fn vlan_filter(&self) -> &VlanShadow {
        &self.vlan
    }

    /// The TPID recognised on receive and used for insertion.
    pub fn set_tpid(&mut self, tpid: u16) -> Result<()> {
        self.published(|p| {
            p.vlan.tpid = tpid;
            C::write_tpid(&*p.regs, &p.vlan);
            p.alive()
        })
    }

    /// Extended (double, QinQ) VLAN: with it on, frames carry an outer tag with `outer_tpid`,
    /// and filtering and stripping act on the inner tag. `outer_tpid` is ignored when turning
    /// it off. (The VLAN layer uses it only where [`VlanCaps::extended`] says the chip can.)
    pub fn set_extended_vlan(&mut self, on: bool, outer_tpid: u16) -> Result<()> {
        self.published(|p| {
            p.vlan.extended = on.then_some(outer_tpid);
            C::write_tpid(&*p.regs, &p.vlan);
            p.alive()
        })
    }

    /// For init: the VLAN registers from the shadow (table cleared first, then TPID and
    /// extended setting, then the filter switch).
    pub(crate) fn restore_vlan(&self) {
        restore_vlan::<C, _>(&*self.regs, &self.vlan);
    }

    /// The filter switch as the shadow says (CFIEN cleared).
    fn write_filter(&self) {
        write_filter::<C, _>(&*self.regs, &self.vlan);
    }
}

/// A refused DMA mapping as the port sees it: the limit must allow everything the port maps
/// (its pools and rings, [`IntelConfig::dma_allocations`]) on top of what was locked before
/// it opened, not just the one mapping that was refused. Each allocation is counted in whole
/// pages of the size the refused one used (2 MiB huge pages, or 4 KiB when none were left).
fn memlock_for_port<C: Chip>(e: Error, locked_before: u64, cfg: &IntelConfig<C>) -> Error {
    let Error::MemlockLimit {
        bytes,
        limit,
        locked,
        needed,
        ..
    } = e
    else {
        return e;
    };
    let page = crate::platform::dma::HUGE_PAGE as u64;
    let page = if bytes % page == 0 { page } else { 4096 };
    let all: u64 = cfg
        .dma_allocations()
        .iter()
        .map(|&len| (len as u64).div_ceil(page) * page)
        .sum();
    let needed = needed.max(locked_before + all);
    Error::MemlockLimit {
        bytes,
        limit,
        locked,
        needed,
        needed_kib: needed.div_ceil(1024),
    }
}

/// The VLAN registers from a shadow (table cleared first, then TPID and extended setting,
/// then the filter switch): at init, and in a restore after an error.
pub(crate) fn restore_vlan<C: IntelChip, M: Mmio + ?Sized>(m: &M, vlan: &VlanShadow) {
    vlan.write_table(m);
    C::write_tpid(m, vlan);
    write_filter::<C, M>(m, vlan);
}

/// The filter switch as `vlan` says (CFIEN cleared).
fn write_filter<C: IntelChip, M: Mmio + ?Sized>(m: &M, vlan: &VlanShadow) {
    let (reg, vfe, cfien) = C::VFE;
    let on = if vlan.enabled { vfe } else { 0 };
    m.modify(reg, vfe | cfien, on);
}

impl<C: IntelChip, B: Bus> IntelPort<C, B> {
    /// Stops every queue, receive and transmit (also those handed out, which may still run:
    /// all enable bits are cleared first, so they stop in parallel), lets the chip turn the
    /// rest off, and resets the device. Never fails: problems are logged, because it runs in
    /// `Drop`.
    fn shutdown(&self) {
        let (m, name, t) = (&*self.regs, &*self.name, self.cfg.reg_timeout);
        if m.read(C::STATUS) == u32::MAX {
            tracing::warn!(port = %name, "device is gone; nothing to stop");
            return;
        }
        let rx = (0..u32::from(self.cfg.rx_queues)).map(|q| (q, C::RX_RING.ctl(q)));
        let tx = (0..u32::from(self.cfg.tx_queues)).map(|q| (q, C::TX_RING.ctl(q)));
        queue::stop_all(m, name, rx.chain(tx), t);
        C::stop(m, name, ShellOnly(()));
        let (reg, bits, what, settle) = C::RESET;
        m.modify(reg, 0, bits);
        if let Err(e) = wait_for(m, name, reg, what, bits, 0, t) {
            tracing::warn!(port = %name, error = %e, "device reset did not complete");
        }
        std::thread::sleep(settle);
        tracing::debug!(port = %name, "device stopped and reset");
    }
}

impl<C: IntelChip, B: Bus> Port for IntelPort<C, B> {
    type Rx = C::Rx<B>;
    type Tx = IntelTx<B>;

    fn info(&self) -> PortInfo {
        PortInfo {
            name: self.name.to_string(),
            driver: C::FAMILY.name(),
            model: self.model.to_string(),
            pci_id: Some(self.bus.pci_id()),
            mac: self.mac,
            rx_queues: self.cfg.rx_queues,
            tx_queues: self.cfg.tx_queues,
            rx_ring: self.cfg.rx_ring as u16,
            tx_ring: self.cfg.tx_ring as u16,
            mtu: None,
        }
    }

    fn link(&self) -> Result<LinkStatus> {
        if self.health.is_removed() {
            return Err(Error::DeviceRemoved {
                device: self.name.to_string(),
            });
        }
        let l = self.read_link()?;
        if !self.health.recovering() {
            self.health.observe_link(l);
        }
        Ok(l)
    }

    fn health(&self) -> Option<Arc<Health>> {
        Some(self.health.clone())
    }

    fn stats(&mut self) -> Result<PortStats> {
        if self.health.is_removed() {
            return Err(Error::DeviceRemoved {
                device: self.name.to_string(),
            });
        }
        self.stats.accumulate(&*self.regs, self.cfg.rx_queues);
        self.alive()?;
        Ok(PortStats {
            hw: self.stats.totals(self.cfg.rx_queues),
        })
    }

    fn take_queues(&mut self) -> Result<QueueSet<Self::Rx, IntelTx<B>>> {
        if self.taken {
            return Err(Error::InvalidConfig(format!(
                "{}: queues were already taken",
                self.name
            )));
        }
        self.taken = true;
        let (mut rx, mut tx) = (std::mem::take(&mut self.rx), std::mem::take(&mut self.tx));
        if self.shared.is_some() {
            // Queues of a watched port look at its health on every burst.
            for q in &mut rx {
                C::intel_rx(q).watch = Some(QueueWatch::new(self.health.clone()));
            }
            for q in &mut tx {
                q.watch = Some(QueueWatch::new(self.health.clone()));
            }
        }
        Ok((rx, tx))
    }
}

impl<C: IntelChip, B: Bus> Drop for IntelPort<C, B> {
    /// Stops all DMA before anything is unmapped: queues still held here drop first (each
    /// disables its hardware queue), every queue's enable bit is cleared (also those handed
    /// out), receive and transmit are turned off, the device is reset and bus mastering is
    /// disabled. Runs while a panic unwinds too.
    fn drop(&mut self) {
        // The watch thread first: no restore may run while the port goes down.
        self.watch = None;
        self.rx.clear();
        self.tx.clear();
        self.shutdown();
        if let Err(e) = self.bus.disable_bus_master() {
            tracing::warn!(port = %self.name, error = %e, "could not disable bus mastering");
        }
    }
}

/// Both chips behind the device-independent VLAN layer: capabilities and the strip switch come
/// from the chip, the filter, TPID and extended setters are the shell's.
impl<C: IntelChip, B: Bus> VlanHardware for IntelPort<C, B> {
    fn vlan_caps(&self) -> VlanCaps {
        C::vlan_caps(self)
    }

    fn set_rx_strip(&mut self, queue: u16, on: bool) -> Result<()> {
        // The chip publishes its strip state itself (the 82576's setter is public on its own;
        // the 82599's queues share theirs with the port).
        C::set_rx_strip(self, queue, on)
    }

    fn set_vlan_filter(&mut self, on: bool) -> Result<()> {
        IntelPort::set_vlan_filter(self, on)
    }

    fn add_vlan(&mut self, vid: Vid) -> Result<()> {
        IntelPort::add_vlan(self, vid.get())
    }

    fn remove_vlan(&mut self, vid: Vid) -> Result<()> {
        IntelPort::remove_vlan(self, vid.get())
    }

    fn set_tpid(&mut self, tpid: Tpid) -> Result<()> {
        IntelPort::set_tpid(self, tpid.get())
    }

    fn set_extended_vlan(&mut self, on: bool, outer_tpid: Tpid) -> Result<()> {
        IntelPort::set_extended_vlan(self, on, outer_tpid.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::igb::IgbConfig;
    use crate::platform::dma::PoolConfig;

    #[test]
    fn a_refused_mapping_names_what_the_whole_port_needs() {
        let cfg = IgbConfig {
            rx_queues: 2,
            tx_queues: 2,
            rx_ring: 256,
            tx_ring: 256,
            pool: PoolConfig {
                buffers: 1024,
                buf_size: 2048,
                ..PoolConfig::default()
            },
            ..IgbConfig::default()
        };
        // Two pools of 2 MiB, four rings of 4 KiB: six allocations.
        assert_eq!(cfg.dma_allocations().len(), 6);
        let refused = |bytes| Error::MemlockLimit {
            bytes,
            limit: 1 << 20,
            locked: 0,
            needed: bytes,
            needed_kib: bytes / 1024,
        };
        // On huge pages every allocation takes whole 2 MiB pages: 6 of them, on top of the
        // 1 MiB locked before the port opened.
        let Error::MemlockLimit {
            needed, needed_kib, ..
        } = memlock_for_port(refused(2 << 20), 1 << 20, &cfg)
        else {
            panic!("still a memlock error")
        };
        assert_eq!(needed, (1 << 20) + 6 * (2 << 20));
        assert_eq!(needed_kib, needed / 1024);
        // On 4 KiB pages: the pools and the rings as they are.
        let Error::MemlockLimit { needed, .. } = memlock_for_port(refused(4096), 0, &cfg) else {
            panic!("still a memlock error")
        };
        assert_eq!(needed, 2 * (2 << 20) + 4 * 4096);
        // Other errors pass through.
        let other = memlock_for_port(Error::InvalidConfig("x".into()), 0, &cfg);
        assert!(matches!(other, Error::InvalidConfig(_)));
        // The message names the limit and both ways to set it.
        let msg = memlock_for_port(refused(4096), 0, &cfg).to_string();
        assert!(
            msg.contains("ulimit -l 4112") && msg.contains("LimitMEMLOCK=4210688"),
            "{msg}"
        );
    }
}
