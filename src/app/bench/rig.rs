//! A rig: two ports of one device and traffic, their VLAN switches, and one repetition of
//! work on them.
//!
//! Devices:
//! - `null`: the null device (copy mode, so every received buffer holds the template frame and
//!   every sent one is read). It has no VLAN hardware.
//! - `sim`: the ixgbe driver on the software 82599 in threaded mode. Port A has a traffic
//!   source (64-byte UDP frames, tagged or not) and port B transmits into the void; both are
//!   served by ONE device thread on the other core, so frames arrive in cache lines another core
//!   wrote, as DMA writes do. The model's own transmit counter must match what was sent. Each
//!   comparison also measures the model's busy time per frame and, from one extra repetition of
//!   A and of B, the forwarder's busy time per packet: the larger of the two sets the pace.
//! - `qm`: the qm driver on the queue-manager model, its source on port A (see [`Rig::qm`]).
//! - `afp`: an af_packet port on a veth pair (see [`super::afp`]).
//! - `virtio`: the virtio driver on two software virtio-net devices (see [`super::virtio`]).
//!
//! On the null device, `fwd` also runs as a pipeline: receive on this thread, transmit on a
//! second one (on the second [`BenchConfig::pin`] CPU), bursts handed over through a lock-free
//! queue ([`forward_pipelined`]). Every buffer is then freed on the other core and comes home
//! through the pool's slow path, against the one-core loop where every buffer takes the fast
//! path. That difference includes moving packets between cores; the `return` comparison
//! isolates the pool's part ([`recycle_pipelined`]): the same two threads and hand-off without a
//! device, the buffers freed on the other core (slow path) or handed back and freed where they
//! were allocated (fast path).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::app::pipeline::{forward_pipelined, recycle_pipelined, FreeOn};
use crate::device::{Port, RxQueue};
use crate::devices::ixgbe::{IxgbeConfig, IxgbePort};
use crate::devices::null::{NullConfig, NullPort};
use crate::devices::qm::model::{Mode as QmMode, QmSoc, QmSocConfig};
use crate::devices::qm::{QmConfig, QmPort};
use crate::devices::sim::{pin_current_thread, DeviceThread, Mode, SimConfig, SimPort, Source};
use crate::devices::virtio::model::VirtioModel;
use crate::devices::{AnyPort, AnyRx, AnyTx};
use crate::platform::dma::PoolConfig;
use crate::vlan::{RxMode, TxMode, VlanConfig, VlanControl, VlanRx, VlanTx};
use crate::{Error, Result};

use super::generator::Generator;
use super::plan::{placement_name, Device, Placement, Traffic, Work};
use super::work::{frame, source, timed, Clock, STALL};
use super::BenchConfig;

/// Two ports of one device and traffic, with their VLAN control handles and wrapped queues:
/// the modes switch between repetitions, the ports stay.
pub(super) struct Rig {
    device: Device,
    a: AnyPort,
    b: AnyPort,
    a_ctl: VlanControl,
    b_ctl: VlanControl,
    pub(super) rx: VlanRx<AnyRx>,
    pub(super) tx: VlanTx<AnyTx>,
    /// The software 82599's ports, to read the model's counters.
    sim: Option<(SimPort, SimPort)>,
    /// The queue-manager model's set of ports (its device thread's busy time, its counters).
    qm: Option<QmSoc>,
    /// The software virtio-net devices of ports A and B (their device thread's busy time, their
    /// counters).
    pub(super) virtio: Option<(Arc<VirtioModel>, Arc<VirtioModel>)>,
    /// What the placement is now.
    now: Placement,
    /// Packets sent since the rig was made (to check against the model's transmit counter).
    pub(super) sent: u64,
    /// The afp device's generator thread (stopped and joined when the rig goes).
    pub(super) generator: Option<Generator>,
}

impl Rig {
    /// The rig of `device` with `traffic` arriving on port A.
    pub(super) fn open(config: &BenchConfig, device: Device, traffic: Traffic) -> Result<Rig> {
        match device {
            Device::Null => Rig::null(config, traffic),
            Device::Afp => Rig::afp(config, traffic),
            Device::Sim => Rig::sim(config, traffic, Mode::Threaded),
            Device::SimInline => Rig::sim(config, traffic, Mode::Inline),
            Device::Qm => Rig::qm(config, traffic, QmMode::Threaded),
            Device::QmInline => Rig::qm(config, traffic, QmMode::Inline),
            Device::Virtio => Rig::virtio(config, traffic, true),
            Device::VirtioInline => Rig::virtio(config, traffic, false),
        }
    }

    fn null(args: &BenchConfig, traffic: Traffic) -> Result<Rig> {
        let f = frame(traffic);
        let ncfg = NullConfig {
            copy: true,
            frame_size: f.len(),
            template: Some(f),
            pool: PoolConfig {
                buffers: 4 * args.ring.max(args.burst),
                ..PoolConfig::default()
            },
            ..NullConfig::default()
        };
        let a = AnyPort::Null(NullPort::new(0, ncfg.clone())?);
        let b = AnyPort::Null(NullPort::new(1, ncfg)?);
        Rig::new(Device::Null, a, b, None)
    }

    /// Threaded: one device thread on the other core serves both ports. Inline: the model
    /// does the device's work inside the driver's register writes, on the forwarding core.
    fn sim(args: &BenchConfig, traffic: Traffic, mode: Mode) -> Result<Rig> {
        let thread = (mode == Mode::Threaded).then(|| {
            args.pin
                .get(1)
                .map_or_else(DeviceThread::new, |&c| DeviceThread::pinned(c))
        });
        let scfg = SimConfig {
            mode,
            thread,
            ..SimConfig::default()
        };
        let sa = SimPort::with_source(scfg.clone(), source(traffic));
        // B's own source never sends: B only transmits, into the void.
        let sb = SimPort::with_source(scfg, Source::new(frame(Traffic::Untagged)).with_count(0));
        let icfg = IxgbeConfig {
            rx_ring: args.ring,
            tx_ring: args.ring,
            pool: PoolConfig {
                buffers: 4 * args.ring,
                ..PoolConfig::default()
            },
            link_timeout: Duration::from_secs(2),
            ..IxgbeConfig::default()
        };
        let a = AnyPort::IxgbeSim(Box::new(IxgbePort::open(sa.clone(), icfg.clone())?));
        let b = AnyPort::IxgbeSim(Box::new(IxgbePort::open(sb.clone(), icfg)?));
        let device = if mode == Mode::Threaded {
            Device::Sim
        } else {
            Device::SimInline
        };
        Rig::new(device, a, b, Some((sa, sb)))
    }

    /// The rig of ports `a` and `b`, both in the first placement of every plan's A/A
    /// (deferred receive, software insertion) until [`Rig::set`] switches them.
    pub(super) fn new(
        device: Device,
        mut a: AnyPort,
        mut b: AnyPort,
        sim: Option<(SimPort, SimPort)>,
    ) -> Result<Rig> {
        let now = (RxMode::Deferred, TxMode::Software);
        let cfg = |rx, tx| VlanConfig {
            rx_mode: rx,
            tx_mode: tx,
            ..VlanConfig::default()
        };
        let a_ctl = VlanControl::new(&mut a, &cfg(now.0, TxMode::Software))?;
        let b_ctl = VlanControl::new(&mut b, &cfg(RxMode::Software, now.1))?;
        let (mut arx, _) = a.take_queues()?;
        let (_, mut btx) = b.take_queues()?;
        let rx = a_ctl.wrap_rx(arx.remove(0));
        let tx = b_ctl.wrap_tx(btx.remove(0));
        Ok(Rig {
            device,
            a,
            b,
            a_ctl,
            b_ctl,
            rx,
            tx,
            sim,
            qm: None,
            virtio: None,
            now,
            sent: 0,
            generator: None,
        })
    }

    /// The qm driver on the queue-manager model: A receives from the model's built-in source,
    /// B (not wired) sends into the void; both ports are in one set, so B's frames carry A's
    /// pool id and their buffers go home to A's hardware pool (no copy). Threaded: one device
    /// thread on the other core serves both.
    fn qm(args: &BenchConfig, traffic: Traffic, mode: QmMode) -> Result<Rig> {
        let thread = (mode == QmMode::Threaded).then(|| {
            args.pin
                .get(1)
                .map_or_else(DeviceThread::new, |&c| DeviceThread::pinned(c))
        });
        let soc = QmSoc::build(QmSocConfig {
            ports: 2,
            wired: false,
            mode,
            thread,
        })?;
        let (da, db) = (soc.port(0)?, soc.port(1)?);
        da.set_source(Some(frame(traffic)));
        let qcfg = QmConfig::default();
        let a = AnyPort::Qm(Box::new(QmPort::open(da, qcfg.clone())?));
        let b = AnyPort::Qm(Box::new(QmPort::open(db, qcfg)?));
        let device = if mode == QmMode::Threaded {
            Device::Qm
        } else {
            Device::QmInline
        };
        let mut rig = Rig::new(device, a, b, None)?;
        rig.qm = Some(soc);
        Ok(rig)
    }

    /// Switches to placement `p` (a no-op when it is the current one).
    pub(super) fn set(&mut self, p: Placement) -> Result<()> {
        if p.0 != self.now.0 {
            self.a_ctl.set_rx_mode(&mut self.a, p.0)?;
        }
        if p.1 != self.now.1 {
            self.b_ctl.set_tx_mode(&mut self.b, p.1)?;
        }
        self.now = p;
        Ok(())
    }

    /// One repetition of `work` in placement `p`: a short warm-up (caches, the pool's free
    /// list, a strip switch finishing in the queue's bursts), then `dur`; ns per packet.
    pub(super) fn rep(
        &mut self,
        p: Placement,
        work: Work,
        args: &BenchConfig,
        dur: Duration,
    ) -> Result<f64> {
        if self.device == Device::Afp {
            return self.rep_drain(p, work, args);
        }
        self.set(p)?;
        let (warm, _) = timed(
            &mut self.rx,
            &mut self.tx,
            work,
            args.burst,
            Duration::from_millis(20),
            Clock::Elapsed,
        )?;
        let (st, took) = timed(
            &mut self.rx,
            &mut self.tx,
            work,
            args.burst,
            dur,
            Clock::Elapsed,
        )?;
        self.sent += warm.tx + st.tx;
        if st.tx == 0 {
            return Err(Error::InvalidConfig(format!(
                "{}: nothing was forwarded in {} within {} s: the model or the driver is stuck",
                self.device.name(),
                placement_name(p),
                STALL.as_secs()
            )));
        }
        Ok(took.as_secs_f64() * 1e9 / st.tx as f64)
    }

    /// The forwarder's busy time per packet in placement `p` (software 82599, threaded: read
    /// beside the model's time per frame, the larger sets the pace): one repetition of
    /// [`timed`] with [`Clock::Busy`], not one of the compared samples.
    pub(super) fn rep_busy(
        &mut self,
        p: Placement,
        work: Work,
        args: &BenchConfig,
        dur: Duration,
    ) -> Result<f64> {
        self.set(p)?;
        let (st, busy) = timed(
            &mut self.rx,
            &mut self.tx,
            work,
            args.burst,
            dur,
            Clock::Busy,
        )?;
        self.sent += st.tx;
        Ok(busy.as_secs_f64() * 1e9 / st.tx.max(1) as f64)
    }

    /// One repetition of `fwd` in placement `p` as a pipeline: receive on this thread,
    /// transmit on another (pinned to the second [`BenchConfig::pin`] CPU); ns per packet transmitted.
    pub(super) fn rep_pipeline(
        &mut self,
        p: Placement,
        args: &BenchConfig,
        dur: Duration,
    ) -> Result<f64> {
        self.set(p)?;
        let cpu = args.pin.get(1).copied();
        let setup = move || cpu.map_or(Ok(()), pin_current_thread);
        let (warm, _) = forward_pipelined(
            &mut self.rx,
            &mut self.tx,
            args.burst,
            Duration::from_millis(20),
            setup,
        )?;
        let (st, took) = forward_pipelined(&mut self.rx, &mut self.tx, args.burst, dur, setup)?;
        self.sent += warm.tx + st.tx;
        if st.tx == 0 {
            return Err(Error::InvalidConfig(format!(
                "{}: the pipeline forwarded nothing",
                self.device.name()
            )));
        }
        Ok(took.as_secs_f64() * 1e9 / st.tx as f64)
    }

    /// One repetition of the pool's paths under a pipeline ([`recycle_pipelined`]) on the
    /// receive queue's pool: buffers freed where they were allocated or on the other thread
    /// (pinned to the second [`BenchConfig::pin`] CPU); the two threads' busy ns per packet, added up.
    pub(super) fn rep_return(
        &mut self,
        free_on: FreeOn,
        args: &BenchConfig,
        dur: Duration,
    ) -> Result<f64> {
        let pool = self.rx.pool().clone();
        let cpu = args.pin.get(1).copied();
        let setup = move || cpu.map_or(Ok(()), pin_current_thread);
        let warm = Duration::from_millis(20);
        let (w, _) = recycle_pipelined(&pool, args.burst, warm, free_on, setup)?;
        let (n, busy) = recycle_pipelined(&pool, args.burst, dur, free_on, setup)?;
        // Counted as sent for the slow-path ratio; the null device checks no transmit count.
        self.sent += w + n;
        if n == 0 {
            return Err(Error::InvalidConfig(
                "the pool pipeline moved nothing: the pool is exhausted".into(),
            ));
        }
        Ok(busy.as_secs_f64() * 1e9 / n as f64)
    }

    /// The software 82599's device-thread busy time so far (both ports), ns, and the packets
    /// sent; `None` on the null device and in inline mode (no device thread: the model's time
    /// is inside the forwarder's).
    pub(super) fn model_time(&self) -> Option<(u64, u64)> {
        if self.device == Device::Qm {
            return self.qm.as_ref().map(|q| (q.busy().0, self.sent));
        }
        if self.device == Device::Virtio {
            return self
                .virtio
                .as_ref()
                .map(|(a, b)| (a.busy().0 + b.busy().0, self.sent));
        }
        if self.device != Device::Sim {
            return None;
        }
        self.sim
            .as_ref()
            .map(|(sa, sb)| (sa.counters().busy_ns + sb.counters().busy_ns, self.sent))
    }

    /// The software 82599's own check: it transmitted what the forwarder sent, and refused
    /// nothing. Waits (2 s at most) for the device thread to drain the ring.
    pub(super) fn check_model(&self) -> Result<()> {
        if let Some(q) = &self.qm {
            return check_qm(q, self.sent);
        }
        if let Some((a, b)) = &self.virtio {
            return check_virtio(a, b, self.sent);
        }
        let Some((sa, sb)) = &self.sim else {
            return Ok(());
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        while sb.counters().tx_frames < self.sent && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let (ca, cb) = (sa.counters(), sb.counters());
        if cb.tx_frames != self.sent
            || ca.rx_errors + ca.rx_filtered + ca.dma_faults + cb.dma_faults != 0
        {
            return Err(Error::InvalidConfig(format!(
                "the software 82599 disagrees with the forwarder: it sent {} frames, the forwarder {}; A {ca:?}, B {cb:?}",
                cb.tx_frames, self.sent
            )));
        }
        Ok(())
    }
}

/// The queue-manager model's own check: the void port sent what the forwarder sent, nothing was
/// refused, and no frame lacked a buffer. Waits (2 s at most) for the device thread to drain.
fn check_qm(soc: &QmSoc, sent: u64) -> Result<()> {
    let (a, b) = (soc.port(0)?, soc.port(1)?);
    let deadline = Instant::now() + Duration::from_secs(2);
    while b.counters().egress[0] < sent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (ca, cb) = (a.counters(), b.counters());
    let faults = a.faults();
    if cb.egress[0] != sent || faults != (0, 0, 0) || ca.drops[0] + ca.drops[1] != 0 {
        return Err(Error::InvalidConfig(format!(
            "the queue-manager model disagrees with the forwarder: it sent {} frames, the forwarder {sent}; faults (dma, stale, bad) {faults:?}; A {ca:?}",
            cb.egress[0]
        )));
    }
    Ok(())
}

/// The software virtio-net devices' own check: B transmitted what the forwarder sent, A dropped nothing
/// (no frame lacked a buffer), and neither faulted. Waits (2 s at most) for the device thread
/// to drain B's queue.
fn check_virtio(a: &VirtioModel, b: &VirtioModel, sent: u64) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(2);
    while b.counters().tx_frames < sent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (ca, cb) = (a.counters(), b.counters());
    let faults = a.iommu().faults();
    if cb.tx_frames != sent || ca.rx_dropped != 0 || faults != 0 {
        return Err(Error::InvalidConfig(format!(
            "the software virtio-net devices disagree with the forwarder: B sent {} frames, the forwarder {sent}; A dropped {}; {faults} DMA faults",
            cb.tx_frames, ca.rx_dropped
        )));
    }
    Ok(())
}
