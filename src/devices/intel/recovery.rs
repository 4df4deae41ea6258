//! The faults an Intel port meets in the field, handled by the shell for both chips: a link
//! that goes and comes back, a hot unplug, and PCIe errors with the recovery an uncorrectable
//! one needs.
//!
//! A port opened through VFIO gets a watch thread (`Watch`) that sleeps on the device's
//! request and error eventfds ([`DeviceEvents`]) and wakes every [`LINK_POLL`] to read the
//! link register, so that [`Health::link`] says when the link changed within that time,
//! whatever the application does. It reacts like Linux's igb and DPDK do:
//!
//! - **Hot unplug** (the kernel relays a removal through VFIO's device request, which it
//!   repeats every 10 s until the device is let go): the thread clears Bus Master Enable at
//!   once, so nothing the device does reaches memory any more, and marks the port removed.
//!   Every burst then fails with [`QueueError::DeviceRemoved`](crate::device::QueueError) (one
//!   compare per burst, below), and the application drops the queues and the port, which
//!   closes the device and lets the removal complete. DPDK leaves the same last step to the
//!   application (RTE_ETH_EVENT_INTR_RMV, then `rte_eth_dev_close`); the kernel cannot take a
//!   device back from a process that still maps it.
//! - **An uncorrectable PCIe error** (vfio-pci's AER callback signals the error eventfd; for a
//!   non-fatal error the kernel resets nothing and leaves recovery to us): the thread names
//!   the error (the device's AER status, the kernel's counters), marks the port as resetting,
//!   resets the function (`VFIO_DEVICE_RESET`: FLR, config space saved and restored by the
//!   kernel) and restores the port as it was: the chip's [`IntelChip::restore`] (reset, MAC,
//!   VLAN filter table, TPID and switch, strip, promiscuous mode, link, interrupt routing, RSS,
//!   receive and transmit on) from the state the port published (`Snapshot`). Each queue
//!   then puts its own ring back at its next burst (base, length, thresholds; receive slots
//!   re-armed, transmit buffers in flight released and counted dropped). Linux's igb does the
//!   same from its `pci_error_handlers` (`igb_io_error_detected`, `igb_io_slot_reset`,
//!   `igb_io_resume`: down, reset, up), QEMU stops the VM instead (hw/vfio/pci.c
//!   `vfio_err_notifier_handler`), DPDK raises RTE_ETH_EVENT_INTR_RESET for the application to
//!   call `rte_eth_dev_reset`.
//! - **A correctable PCIe error** reaches no eventfd (vfio-pci has no callback for it): the
//!   thread reads the device's AER status every [`AER_POLL`] and reports what it finds.
//!
//! Why the queues reset their own rings: a queue belongs to the thread that polls it, and
//! nothing else may touch its ring's software state. So the watch thread only moves the port's
//! reset epoch ([`Health::epoch`]); each burst compares it with the epoch its ring was
//! programmed in (one load and compare per burst, about 0.1 instruction per packet at burst
//! 32) and, when it moved, does what it says: nothing while the reset runs (an empty burst),
//! its ring back once the port is restored, `DeviceRemoved` after a removal, `DeviceGone` after
//! a recovery that failed. Every queue register stays disabled from the reset until the queue
//! itself enables it again, so a burst that was running when the reset came can only write a
//! tail to a disabled queue, which the queue's own restart rewrites.
//!
//! Device counters (the port's `stats`) lose what the device counted between their last read
//! and the reset: the reset clears them.

use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::config::IntelConfig;
use super::port::{IntelChip, ShellOnly};
use super::vlan::VlanShadow;
use crate::device::MacAddr;
use crate::error::{Error, Result};
use crate::health::{EventKind, Health, Severity};
use crate::platform::irq::{Interrupt, InterruptSet};
use crate::platform::mmio::Mmio;
use crate::platform::pci::Sysfs;
use crate::platform::vfio::{
    bit_names, counter_growth, AerStatus, DeviceEvents, COR_NAMES, UNCOR_NAMES,
};

/// How often the watch thread reads the link register.
pub const LINK_POLL: Duration = Duration::from_millis(100);
/// How often it reads the AER status registers (correctable errors reach no eventfd).
pub const AER_POLL: Duration = Duration::from_secs(1);
/// How long the function reset may be refused while the kernel still handles the error.
const RESET_WAIT: Duration = Duration::from_secs(2);

/// What the port changes after it opened and a restore must put back: published by every
/// setter of the port (under the same lock the restore holds, so that neither overtakes the
/// other).
pub(crate) struct Snapshot<C: IntelChip> {
    pub(crate) vlan: VlanShadow,
    pub(crate) strip: C::Strip,
    pub(crate) promiscuous: bool,
}

/// The snapshot as the port and its watch thread share it.
pub(crate) type Shared<C> = Arc<Mutex<Snapshot<C>>>;

/// Locks the snapshot (a panic while it was held left plain data behind: still usable).
pub(crate) fn lock<C: IntelChip>(s: &Shared<C>) -> MutexGuard<'_, Snapshot<C>> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a chip's [`IntelChip::restore`] puts back.
pub struct Restore<'a, C: IntelChip> {
    /// The port's name, for messages.
    pub name: &'a str,
    /// The configuration the port was opened with (its `promiscuous` is the opening value;
    /// [`Restore::promiscuous`] is the current one).
    pub cfg: &'a IntelConfig<C>,
    /// The port's MAC address (receive address 0).
    pub mac: MacAddr,
    /// The device's PCI vendor and device id (the 82599's link setup depends on the part).
    pub pci_id: (u16, u16),
    /// The VLAN filter table, TPID, extended setting and filter switch.
    pub vlan: &'a VlanShadow,
    /// The chip's strip state.
    pub strip: &'a C::Strip,
    /// Unicast and multicast promiscuous mode, as the port has it now.
    pub promiscuous: bool,
    /// Interrupt mode's vectors (their routing survives the reset; the chip's registers do
    /// not).
    pub irqs: Option<&'a Arc<InterruptSet>>,
}

/// The watch thread of a port, stopped and joined when dropped.
pub(crate) struct Watch {
    stop: Interrupt,
    thread: Option<JoinHandle<()>>,
}

/// What a reset and restore of a port needs (the watch thread's copy of the port).
pub(crate) struct PortCtx<C: IntelChip, M> {
    pub(crate) regs: Arc<M>,
    pub(crate) name: Arc<str>,
    pub(crate) health: Arc<Health>,
    pub(crate) cfg: IntelConfig<C>,
    pub(crate) mac: MacAddr,
    pub(crate) pci_id: (u16, u16),
    pub(crate) shared: Shared<C>,
    pub(crate) irqs: Option<Arc<InterruptSet>>,
}

/// What the watch thread needs.
pub(crate) struct WatchCtx<C: IntelChip, M> {
    pub(crate) port: PortCtx<C, M>,
    pub(crate) events: DeviceEvents,
    /// The kernel's AER counters of the device (correctable, non-fatal, fatal) when last
    /// read: what grew since names an error whose status the kernel already cleared.
    pub(crate) kernel_seen: [Vec<(String, u64)>; 3],
}

impl Watch {
    /// Starts the watch thread.
    pub(crate) fn start<C: IntelChip, M: Mmio + Send + Sync + 'static>(
        ctx: WatchCtx<C, M>,
    ) -> Result<Watch> {
        let stop = Interrupt::new(0)?;
        let stop2 = stop.clone();
        let name = format!("vfio-nic watch {}", ctx.port.name);
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || ctx.run(&stop2))
            .map_err(|e| Error::io("starting a port's watch thread", e))?;
        Ok(Watch {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Err(e) = self.stop.trigger() {
            tracing::error!("cannot stop a port's watch thread ({e}); it ends with the process");
            return;
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("a port's watch thread panicked");
            }
        }
    }
}

impl<C: IntelChip, M: Mmio + Send + Sync + 'static> WatchCtx<C, M> {
    fn run(mut self, stop: &Interrupt) {
        self.kernel_seen = self.events.kernel_aer_counters(&Sysfs::default());
        let mut next_aer = Instant::now() + AER_POLL;
        loop {
            let s = match self.events.wait(stop, LINK_POLL) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(port = %self.port.name, error = %e, "waiting for the device's notifications failed; retrying");
                    std::thread::sleep(LINK_POLL);
                    continue;
                }
            };
            if s.stop {
                return;
            }
            if s.request && !self.port.health.is_removed() {
                self.removed();
            }
            if self.port.health.is_removed() || self.port.health.is_failed() {
                // The device is going away, or the port is down for good: nothing to watch.
                continue;
            }
            if s.error {
                self.recover();
            }
            let v = self.port.regs.read(C::LINK.0);
            if v != u32::MAX && !self.port.health.recovering() {
                self.port.health.observe_link(C::decode_link(v));
            }
            if Instant::now() >= next_aer {
                next_aer = Instant::now() + AER_POLL;
                self.poll_aer();
            }
        }
    }

    /// The kernel asks for the device back: DMA off now, the port marked removed, sleepers
    /// woken so that their next burst sees it.
    fn removed(&mut self) {
        if let Err(e) = self.events.removal_requested() {
            tracing::error!(port = %self.port.name, error = %e, "could not clear Bus Master Enable of a device being removed");
        }
        self.port.health.mark_removed();
        self.port.kick();
    }

    /// Correctable errors (and uncorrectable ones no eventfd told of) from the AER status.
    fn poll_aer(&mut self) {
        let status = match self.events.take_aer() {
            Ok(Some(s)) if s.any() => s,
            Ok(_) => return,
            Err(e) => {
                tracing::debug!(port = %self.port.name, error = %e, "reading the AER status failed");
                return;
            }
        };
        if status.correctable != 0 {
            let what = bit_names(status.correctable, COR_NAMES).join(", ");
            tracing::warn!(port = %self.port.name, %what, "correctable PCIe error (the link corrected it; nothing to do)");
            self.port.health.record(EventKind::PcieError {
                severity: Severity::Correctable,
                what,
            });
        }
        if status.uncorrectable != 0 && !self.events.has_error() {
            // No error eventfd (a conventional PCI function, an old kernel): the status is all
            // we learn, so it starts the recovery itself, and clears the status.
            let _ = self.events.clear_uncorrectable(status.uncorrectable);
            self.recover_from(Some(status), (Severity::NonFatal, Vec::new()));
        }
    }

    /// An uncorrectable error was signalled: name it, reset the function, restore the port.
    fn recover(&mut self) {
        let status = self.events.take_aer().ok().flatten();
        // The kernel's counters moved when it handled the error, before it signalled us; the
        // names come from the device's status if the kernel has not cleared it yet, else from
        // the counters that grew.
        let now = self.events.kernel_aer_counters(&Sysfs::default());
        let fatal = counter_growth(&self.kernel_seen[2], &now[2]);
        let named: Vec<String> = counter_growth(&self.kernel_seen[1], &now[1])
            .into_iter()
            .map(|n| format!("{n} (non-fatal, the kernel's count)"))
            .chain(
                fatal
                    .iter()
                    .map(|n| format!("{n} (fatal, the kernel's count)")),
            )
            .collect();
        self.kernel_seen = now;
        let kernel_severity = if fatal.is_empty() {
            Severity::NonFatal
        } else {
            Severity::Fatal
        };
        self.recover_from(status, (kernel_severity, named));
    }

    /// Reports the error (`status`: the device's AER status if it was still set; `kernel`:
    /// what the kernel's counters say), then resets and restores the port.
    fn recover_from(&mut self, status: Option<AerStatus>, kernel: (Severity, Vec<String>)) {
        let (severity, what) = match status {
            Some(s) if s.uncorrectable != 0 => (
                if s.uncorrectable & s.severity != 0 {
                    Severity::Fatal
                } else {
                    Severity::NonFatal
                },
                bit_names(s.uncorrectable, UNCOR_NAMES),
            ),
            _ => kernel,
        };
        let what = if what.is_empty() {
            "signalled by the kernel's AER driver; neither the device's AER status nor the kernel's counters name it (cleared already)"
                .to_string()
        } else {
            what.join(", ")
        };
        tracing::error!(port = %self.port.name, %severity, %what, "uncorrectable PCIe error: resetting the function and restoring the port");
        self.port
            .health
            .record(EventKind::PcieError { severity, what });

        self.port
            .reset_and_restore(|| self.events.reset(RESET_WAIT));
    }
}

impl<C: IntelChip, M: Mmio + Send + Sync + 'static> PortCtx<C, M> {
    /// The recovery proper: the port marked as resetting (its queues stop touching their
    /// rings), sleepers woken, `reset` (the function reset: true if done), the chip's restore
    /// from the published snapshot (the setters wait meanwhile), the epoch moved on so that
    /// each queue puts its ring back; or, when anything failed, the port marked down.
    pub(crate) fn reset_and_restore(&self, reset: impl FnOnce() -> Result<bool>) {
        let t0 = Instant::now();
        let snap = lock(&self.shared);
        self.health.begin_reset();
        self.kick();
        let result = reset().and_then(|flr| {
            if !flr {
                tracing::warn!(port = %self.name, "VFIO cannot reset this function (no FLR); the chip's own reset must do");
            }
            let r = Restore {
                name: &self.name,
                cfg: &self.cfg,
                mac: self.mac,
                pci_id: self.pci_id,
                vlan: &snap.vlan,
                strip: &snap.strip,
                promiscuous: snap.promiscuous,
                irqs: self.irqs.as_ref(),
            };
            C::restore(&*self.regs, &r, ShellOnly::new())
        });
        drop(snap);
        match result {
            Ok(()) => {
                self.health.end_reset();
                let took_ms = t0.elapsed().as_millis() as u64;
                tracing::warn!(port = %self.name, took_ms, "port restored after the PCIe error (function reset; MAC, VLAN, modes and queues back)");
                self.health.record(EventKind::Recovered { took_ms });
            }
            Err(e) => self.health.mark_failed(&e.to_string()),
        }
        self.kick();
    }

    /// Wakes every queue sleeping on its interrupt, so that it looks at the port at once.
    fn kick(&self) {
        for irq in self.irqs.iter().flat_map(|s| s.vectors()) {
            let _ = irq.trigger();
        }
    }
}

/// What a queue handed out by a watched port knows of its port: the health, and the reset
/// epoch its ring was last programmed in.
pub(crate) struct QueueWatch {
    health: Arc<Health>,
    epoch: u32,
}

/// What a queue must do, after its port's epoch moved.
pub(crate) enum Verdict {
    /// Nothing new (a burst may go on).
    Run,
    /// The port is being reset: an empty burst, no register touched.
    Wait,
    /// The port was restored in this epoch: put the ring back, then [`QueueWatch::synced`].
    Resync(u32),
    /// The device is being removed.
    Removed,
    /// The port could not be restored.
    Failed,
}

impl QueueWatch {
    /// A queue whose ring is programmed now.
    pub(crate) fn new(health: Arc<Health>) -> QueueWatch {
        let epoch = health.epoch();
        QueueWatch { health, epoch }
    }

    /// Whether the port's epoch moved since the ring was programmed: the one check of a burst.
    #[inline(always)]
    pub(crate) fn moved(&self) -> bool {
        self.health.epoch() != self.epoch
    }

    /// What the move means (cold).
    pub(crate) fn verdict(&self) -> Verdict {
        if self.health.is_removed() {
            return Verdict::Removed;
        }
        if self.health.is_failed() {
            return Verdict::Failed;
        }
        match self.health.epoch() {
            e if e == self.epoch => Verdict::Run,
            e if e & 1 == 1 => Verdict::Wait,
            e => Verdict::Resync(e),
        }
    }

    /// The ring was put back in epoch `e`.
    pub(crate) fn synced(&mut self, e: u32) {
        self.epoch = e;
    }
}

impl std::fmt::Debug for QueueWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueWatch")
            .field("epoch", &self.epoch)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    //! The recovery and the queue restarts on the software 82599 (the sim has no VFIO
    //! notifications, so the tests run what the watch thread runs, with the chip's own reset
    //! standing in for the function reset).

    use std::time::Duration;

    use crate::device::{MacAddr, Port, QueueError, RxQueue, TxQueue};
    use crate::devices::ixgbe::{IxgbeConfig, IxgbePort, IxgbeRx, IxgbeTx};
    use crate::devices::sim::{SimConfig, SimPort};
    use crate::platform::bus::Bus;
    use crate::platform::dma::{Packet, Pool, PoolConfig};
    use crate::platform::mmio::Mmio;
    use crate::platform::regs::ixgbe as r;

    fn cfg() -> IxgbeConfig {
        IxgbeConfig {
            rx_ring: 64,
            tx_ring: 64,
            pool: PoolConfig {
                buffers: 256,
                ..PoolConfig::default()
            },
            link_timeout: Duration::from_millis(200),
            reg_timeout: Duration::from_millis(200),
            ..IxgbeConfig::default()
        }
    }

    fn frames(pool: &Pool, dst: MacAddr, first: u32, n: u32) -> Vec<Packet> {
        (first..first + n)
            .map(|i| {
                let mut f = dst.0.to_vec();
                f.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0x88, 0xb5]);
                f.extend_from_slice(&i.to_be_bytes());
                f.resize(60, 0);
                let mut p = pool.alloc().expect("room in the test pool");
                assert!(p.set_data(&f));
                p
            })
            .collect()
    }

    /// Sends `n` frames from `tx` and receives them on `rx` (the sim delivers inline); returns
    /// their sequence numbers in arrival order. The first bursts after a reset put the rings
    /// back and move nothing, so a few rounds are allowed.
    fn pump(
        tx: &mut IxgbeTx<SimPort>,
        rx: &mut IxgbeRx<SimPort>,
        pool: &Pool,
        dst: MacAddr,
        first: u32,
        n: u32,
    ) -> Vec<u32> {
        let mut out = frames(pool, dst, first, n);
        let mut got = Vec::new();
        let mut batch = Vec::new();
        for _ in 0..50 {
            // The receiver polls first (after a reset, its first burst puts its ring back;
            // frames sent to a queue not back yet are dropped by the device, as on a card).
            rx.rx_burst(&mut batch, 32).unwrap();
            // Sixteen at a time: the sim delivers inline, into a ring the loop empties by 32.
            let mut some: Vec<Packet> = out.drain(..out.len().min(16)).collect();
            tx.tx_burst(&mut some).unwrap();
            out.splice(0..0, some);
            rx.rx_burst(&mut batch, 32).unwrap();
            got.extend(
                batch
                    .drain(..)
                    .map(|p| u32::from_be_bytes(p.data()[14..18].try_into().unwrap())),
            );
            if out.is_empty() && got.len() == n as usize {
                break;
            }
        }
        got
    }

    #[test]
    fn a_reset_port_comes_back_with_its_configuration_and_loses_no_buffer() {
        let (sa, sb) = SimPort::pair(SimConfig::default());
        let pool = Pool::new(PoolConfig::default(), sa.dma_mapper()).unwrap();
        let mut a = IxgbePort::open(sa, cfg()).unwrap();
        let mut b = IxgbePort::open(sb, cfg()).unwrap();
        let (ctx_a, ctx_b) = (a.port_ctx(), b.port_ctx());
        let (arx, mut atx) = a.take_queues().unwrap();
        let (mut brx, _btx) = b.take_queues().unwrap();
        let (mut atx, mut brx) = (atx.remove(0), brx.remove(0));
        // Set after the snapshot was made: published, so the restore puts it back.
        b.add_vlan(100).unwrap();
        b.set_promiscuous(false).unwrap();
        let dst = b.mac();
        assert_eq!(
            pump(&mut atx, &mut brx, &pool, dst, 0, 100),
            (0..100).collect::<Vec<_>>()
        );

        // Both ports reset under the queues (the sim's chip reset wipes rings and filters).
        ctx_a.reset_and_restore(|| Ok(false));
        ctx_b.reset_and_restore(|| Ok(false));
        let h = b.health().unwrap();
        assert_eq!((h.epoch(), h.counts().recoveries), (2, 1));
        let m = b.bus().regs();
        assert_ne!(
            m.read(r::VFTA.at(100 / 32)) & 1 << (100 % 32),
            0,
            "VID 100 back in the table"
        );
        assert_eq!(
            m.read(r::FCTRL) & r::fctrl::UPE.bit(),
            0,
            "promiscuous mode as set, off"
        );

        // Traffic resumes once each queue has put its ring back; nothing lost on the way.
        assert_eq!(
            pump(&mut atx, &mut brx, &pool, dst, 100, 100),
            (100..200).collect::<Vec<_>>()
        );
        atx.reclaim().unwrap();
        assert_eq!(pool.stats().in_use, 0, "every transmitted buffer came home");
        let rx_pool = brx.pool().clone();
        drop((brx, b, arx, atx, a));
        assert_eq!(rx_pool.stats().in_use, 0, "every receive buffer came home");
    }

    #[test]
    fn queues_restart_on_their_rings_and_a_failed_recovery_stops_them() {
        let (sa, sb) = SimPort::pair(SimConfig::default());
        let pool = Pool::new(PoolConfig::default(), sa.dma_mapper()).unwrap();
        let mut a = IxgbePort::open(sa, cfg()).unwrap();
        let mut b = IxgbePort::open(sb, cfg()).unwrap();
        let ctx_a = a.port_ctx();
        let (_arx, mut atx) = a.take_queues().unwrap();
        let (mut brx, _btx) = b.take_queues().unwrap();
        let (mut atx, mut brx) = (atx.remove(0), brx.remove(0));
        let dst = b.mac();
        for round in 0..4u32 {
            let got = pump(&mut atx, &mut brx, &pool, dst, round * 50, 50);
            assert_eq!(got, (round * 50..round * 50 + 50).collect::<Vec<_>>());
            brx.restart().unwrap();
            atx.restart().unwrap();
        }
        assert_eq!(
            atx.stats().dropped + brx.stats().dropped,
            0,
            "nothing in flight was lost"
        );
        atx.reclaim().unwrap();
        assert_eq!(pool.stats().in_use, 0);

        // A recovery that fails leaves the port down, and says so in every burst.
        ctx_a.reset_and_restore(|| Err(crate::Error::InvalidConfig("injected".into())));
        let h = a.health().unwrap();
        assert!(h.is_failed() && h.counts().failed_recoveries == 1);
        let mut batch = frames(&pool, dst, 0, 1);
        assert_eq!(atx.tx_burst(&mut batch), Err(QueueError::DeviceGone));
    }
}
