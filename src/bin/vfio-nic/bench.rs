//! `vfio-nic bench`: what each VLAN placement costs, as paired comparisons that know the noise.
//!
//! For each in-memory device, traffic (untagged, tagged) and application work, the bench
//! compares placements against their natural baseline, on the same ports, switching the VLAN
//! modes between repetitions (the modes are runtime switches):
//!
//! - receive: Software vs Hardware and Deferred vs Hardware (the NIC strips), or, on a device
//!   without VLAN hardware, Software vs Deferred;
//! - transmit: Software vs Hardware insertion, where the device can insert;
//! - an A/A comparison of the baseline against itself: the noise floor of this machine now.
//!
//! Each comparison runs `--pairs` interleaved pairs (A B, B A, A B, ...) of `--seconds` each
//! ([`vfio_nic::app::compare`]) and reports B - A in ns per packet with its 95 % confidence
//! interval (paired t), and the relative difference. A difference whose interval includes zero,
//! or that is within the A/A floor, is printed as "no difference measurable here".
//!
//! A matrix of some 30 comparisons at 95 % each would show a winner or two by chance alone, so
//! the matrix is judged as one family once it has all been measured: the paired t tests'
//! p-values of its comparisons (not of its A/A rows, which measure floors) are adjusted by
//! Holm's procedure (`compare::holm`), and a difference is declared only where the adjusted p is
//! below 0.05 as well. That is why the table comes at the end of the run, each row with its
//! `p(Holm)`, and only a progress line (standard error) shows before; a run that stops early
//! prints the rows it measured, judged as a family of those. `--json` has each comparison's raw
//! and adjusted p, and the correction and its family size at the top.
//!
//! The floor is the machine's noise when it was measured. When a comparison's baseline A runs
//! clearly off where the same placement ran in the group's comparison before
//! (`compare::baseline_moved`: the host moved the vCPUs, say), an A/A of that baseline is run
//! at once ("A/A anew"); its floor judges that comparison and the group's next ones if the
//! baseline matches it, the larger of the two floors if it matches neither; the row says so.
//! On the threaded software 82599 each row also says when the model, not the driver, set the
//! pace (`compare::pace`): B - A is then the whole system's.
//!
//! Devices:
//! - `null`: the null device (copy mode, so every received buffer holds the template frame and
//!   every sent one is read). It has no VLAN hardware.
//! - `sim`: the ixgbe driver on the software 82599 in threaded mode. Port A has a traffic
//!   source (64-byte UDP frames, tagged or not) and port B transmits into the void; both are
//!   served by ONE device thread on the other core, so frames arrive in cache lines another core
//!   wrote, as DMA writes do. The model's own transmit counter must match what was sent. Each
//!   comparison also prints the model's busy time per frame and, from one extra repetition of
//!   A and of B, the forwarder's busy time per packet: the larger of the two sets the pace.
//!
//! On the null device, `fwd` also runs as a pipeline: receive on this thread, transmit on a
//! second one (on the second `--pin` CPU), bursts handed over through a lock-free queue
//! ([`forward_pipelined`]). Every buffer is then freed on the other core and comes home through
//! the pool's slow path, against the one-core loop where every buffer takes the fast path.
//! That difference includes moving packets between cores; the `return` comparison isolates the
//! pool's part ([`recycle_pipelined`]): the same two threads and hand-off without a device, the
//! buffers freed on the other core (slow path) or handed back and freed where they were
//! allocated (fast path).
//!
//! - `afp`: an af_packet port on a veth pair this command does not make (`--afp-pair SEND,RECV`,
//!   both ends in this network namespace; `bench/dpdk-compare --ports afp` makes one and runs
//!   this). A generator thread on the second `--pin` CPU sends tagged or untagged frames into
//!   SEND as fast as the kernel takes them; the forwarder receives them on RECV and sends them
//!   into a null port. The generator cannot keep up with the receiver, so a repetition does not
//!   time the stream: it lets RECV's ring fill while nobody reads it, then times draining it
//!   ([`Rig::rep_drain`]), which is the receive path's own cost per packet. Compared: Hardware
//!   vs Deferred receive (the tag the kernel took delivered as metadata, or put back into the
//!   frame while copying: the seed's 0.6 %) and Hardware vs Software.
//!
//! Work: `fwd` forwards A.rx -> B.tx without reading the frame ([`forward_burst`]); `l2` reads
//! the destination MAC and the tag with [`PacketVlan::take_vlan`], folds both into a checksum
//! the compiler must keep, and asks for the same tag on transmit (a VLAN-transparent
//! forwarder). A benchmark reports figures; it asserts nothing about speed.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use vfio_nic::app::compare::{
    self, abba, mean_95, noise_floor, paired_p, paired_t_95, Interval, Pace, Verdict,
};
use vfio_nic::app::forward::{forward_burst, forward_burst_with, FwdStats};
use vfio_nic::app::pipeline::{forward_pipelined, recycle_pipelined, FreeOn};
use vfio_nic::device::{Port, RxQueue, TxQueue};
use vfio_nic::devices::ixgbe::{IxgbeConfig, IxgbePort};
use vfio_nic::devices::null::{NullConfig, NullPort};
use vfio_nic::devices::qm::model::{Mode as QmMode, QmSoc, QmSocConfig};
use vfio_nic::devices::qm::{QmConfig, QmPort};
use vfio_nic::devices::sim::{pin_current_thread, DeviceThread, Mode, SimConfig, SimPort, Source};
use vfio_nic::devices::{AnyPort, AnyRx, AnyTx};
use vfio_nic::platform::dma::{Packet, PoolConfig};
use vfio_nic::vlan::{
    PacketVlan, RxMode, SwVlanTx, TxMode, VlanConfig, VlanControl, VlanRx, VlanTx,
};
use vfio_nic::{Error, Result};

use crate::machine::MachineNotes;

/// Options of `bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Interleaved A/B pairs per comparison (at least 2; 10 or more for a usable interval).
    #[arg(long, default_value_t = 10)]
    pub pairs: usize,
    /// Seconds per repetition (each pair runs two).
    #[arg(long, default_value_t = 0.2)]
    pub seconds: f64,
    /// Packets per burst.
    #[arg(long, default_value_t = 32)]
    pub burst: usize,
    /// Descriptors per ring (sim), and the pool is four rings' worth of buffers.
    #[arg(long, default_value_t = 512)]
    pub ring: usize,
    /// Which devices to run.
    #[arg(long, value_enum, default_value_t = DeviceSel::Both)]
    pub device: DeviceSel,
    /// Only this traffic (untagged, tagged); both by default.
    #[arg(long, value_delimiter = ',')]
    pub traffic: Vec<String>,
    /// Only this work (fwd, l2); both by default.
    #[arg(long, value_delimiter = ',')]
    pub work: Vec<String>,
    /// Write a chart of every comparison (B - A with its interval, and the noise floor) as SVG.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Pin the forwarding thread to the first CPU and the sim's device thread (or the afp
    /// generator) to the second.
    #[arg(long, value_delimiter = ',', num_args = 1..=2)]
    pub pin: Vec<usize>,
    /// The veth pair of `--device afp`: the interface the generator sends into and the one the
    /// forwarder receives from (both ends in this network namespace, up).
    #[arg(long, value_delimiter = ',')]
    pub afp_pair: Vec<String>,
    /// `--device irq`: empty polls in a row before the adaptive loop sleeps.
    #[arg(long, default_value_t = 256)]
    pub idle_polls: u32,
}

/// The devices `--device` selects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceSel {
    /// The null device.
    Null,
    /// The ixgbe driver on the software 82599 (threaded).
    Sim,
    /// The software 82599 in inline mode too (its writes on the forwarding core), for the
    /// cold-line A/B against the threaded one.
    SimInline,
    /// The null device and both software 82599 modes.
    Both,
    /// An af_packet port on the veth pair `--afp-pair` (not part of `both`: it needs root and
    /// a pair made beforehand).
    Afp,
    /// The qm driver on the threaded queue-manager model (DPAA2-like): the seed's Software
    /// vs Deferred receive.
    Qm,
    /// The queue-manager model in inline mode too (its writes on the forwarding core).
    QmInline,
    /// The interrupt row: polling against the adaptive loop (interrupt mode) on the threaded
    /// software 82599, under load and for the wake-up latency (`bench_irq.rs`).
    Irq,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Work {
    Fwd,
    L2,
}

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Fwd => "fwd",
            Work::L2 => "l2",
        }
    }
}

/// Frame length on the wire without the tag and without FCS.
const FRAME: usize = 64;
/// Frames per ring of the afp device's ports.
const AFP_RING: u32 = 4096;
/// The tag of tagged traffic: VID 100, PCP 5.
const TCI: u16 = 0xa064;

fn rx_name(m: RxMode) -> &'static str {
    match m {
        RxMode::Hardware => "hw",
        RxMode::Software => "sw",
        RxMode::Deferred => "deferred",
    }
}

fn tx_name(m: TxMode) -> &'static str {
    match m {
        TxMode::Hardware => "hw",
        TxMode::Software => "sw",
    }
}

/// A placement: the receive and transmit modes.
type Placement = (RxMode, TxMode);

fn placement_name(p: Placement) -> String {
    format!("rx {} tx {}", rx_name(p.0), tx_name(p.1))
}

/// The frame the source sends (and the null device copies into every buffer).
fn frame(tagged: bool) -> Vec<u8> {
    let mut s = Source::udp(vfio_nic::device::MacAddr([0x02, 0, 0, 0, 0, 2]), FRAME);
    if tagged {
        s = s.with_vlan(0x8100, TCI);
    }
    s.frame()
}

/// One burst of the `l2` work: read the destination MAC and the tag, use both, send the frame
/// out with the tag it came with.
#[inline]
fn l2_burst<R: RxQueue, T: SwVlanTx>(
    rx: &mut VlanRx<R>,
    tx: &mut VlanTx<T>,
    batch: &mut Vec<Packet>,
    burst: usize,
    st: &mut FwdStats,
    acc: &mut u64,
) -> std::result::Result<(), vfio_nic::device::QueueError> {
    forward_burst_with(rx, tx, batch, burst, st, |rx, batch| {
        let ctx = rx.ctx();
        for p in batch {
            let tci = p.take_vlan(ctx);
            let d = p.data();
            let dst = d.get(..6).map_or(0, |m| {
                u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0])
            });
            let t = tci.map_or(0, |t| t.raw());
            *acc = acc.rotate_left(5) ^ dst ^ u64::from(t);
            if let Some(t) = tci {
                // Cannot fail: the tag was received, so its VID is not 4095.
                let _ = p.set_tx_vlan(t);
            }
        }
    })?;
    Ok(())
}

/// What [`timed`] returns as its time.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Clock {
    /// The time the loop took.
    Elapsed,
    /// The loop's busy time: the bursts that received something, each from its clock read to
    /// the next (a clock read a burst, which `Elapsed` does not pay: for a separate repetition,
    /// not one of the compared samples).
    Busy,
}

/// Forwards for `dur`; returns the stats and the time taken (or busy, see [`Clock`]).
fn timed<R: RxQueue, T: SwVlanTx>(
    rx: &mut VlanRx<R>,
    tx: &mut VlanTx<T>,
    work: Work,
    burst: usize,
    dur: Duration,
    clock: Clock,
) -> Result<(FwdStats, Duration)> {
    let mut batch = Vec::with_capacity(burst);
    let mut st = FwdStats::default();
    let mut acc = 0u64;
    let start = Instant::now();
    let deadline = start + dur;
    let (mut busy_time, mut last, mut got) = (Duration::ZERO, start, 0);
    let err = |e: vfio_nic::device::QueueError| Error::InvalidConfig(format!("burst failed: {e}"));
    loop {
        for _ in 0..256 {
            if clock == Clock::Busy {
                let t = Instant::now();
                if got > 0 {
                    busy_time += t - last;
                }
                last = t;
            }
            let before = st.rx;
            match work {
                Work::Fwd => forward_burst(rx, tx, &mut batch, burst, &mut st).map(drop),
                Work::L2 => l2_burst(rx, tx, &mut batch, burst, &mut st, &mut acc),
            }
            .map_err(err)?;
            got = st.rx - before;
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    let took = start.elapsed();
    if got > 0 {
        busy_time += start + took - last;
    }
    std::hint::black_box(acc);
    Ok((
        st,
        if clock == Clock::Busy {
            busy_time
        } else {
            took
        },
    ))
}

/// Two ports of one device and traffic, with their VLAN control handles and wrapped queues:
/// the modes switch between repetitions, the ports stay.
struct Rig {
    device: &'static str,
    a: AnyPort,
    b: AnyPort,
    a_ctl: VlanControl,
    b_ctl: VlanControl,
    rx: VlanRx<AnyRx>,
    tx: VlanTx<AnyTx>,
    /// The software 82599's ports, to read the model's counters.
    sim: Option<(SimPort, SimPort)>,
    /// The queue-manager model's set of ports (its device thread's busy time, its counters).
    qm: Option<QmSoc>,
    /// What the placement is now.
    now: Placement,
    /// Packets sent since the rig was made (to check against the model's transmit counter).
    sent: u64,
    /// The afp device's generator thread (stopped and joined when the rig goes).
    generator: Option<Generator>,
}

/// A thread sending one frame into an af_packet port as fast as the kernel takes it, which
/// can be paused (so that a drain times the receiver alone).
struct Generator {
    stop: Arc<AtomicBool>,
    /// Asked to pause, and paused (the thread's answer).
    pause: Arc<(AtomicBool, AtomicBool)>,
    thread: Option<std::thread::JoinHandle<Result<u64>>>,
}

impl Generator {
    /// Starts sending `frame` through `port` (on CPU `cpu`, if given).
    fn start(mut port: AnyPort, frame: Vec<u8>, cpu: Option<usize>) -> Result<Generator> {
        let stop = Arc::new(AtomicBool::new(false));
        let pause = Arc::new((AtomicBool::new(false), AtomicBool::new(false)));
        let (flag, hold) = (stop.clone(), pause.clone());
        let thread = std::thread::spawn(move || -> Result<u64> {
            if let Some(c) = cpu {
                pin_current_thread(c)?;
            }
            let (rx, mut tx) = port.take_queues()?;
            let pool = rx[0].pool().clone();
            let mut batch = Vec::with_capacity(32);
            let mut sent = 0u64;
            while !flag.load(Relaxed) {
                if hold.0.load(Relaxed) {
                    hold.1.store(true, Relaxed);
                    std::thread::sleep(Duration::from_micros(50));
                    continue;
                }
                hold.1.store(false, Relaxed);
                while batch.len() < 32 {
                    let Some(mut p) = pool.alloc() else { break };
                    p.set_data(&frame);
                    batch.push(p);
                }
                sent += tx[0].tx_burst(&mut batch)? as u64;
                if !batch.is_empty() {
                    std::thread::yield_now();
                }
            }
            Ok(sent)
        });
        Ok(Generator {
            stop,
            pause,
            thread: Some(thread),
        })
    }

    /// Pauses (true) or resumes sending; a pause waits (1 s at most) until the thread has
    /// stopped, and 1 ms more for the frames it sent to arrive.
    fn hold(&self, on: bool) -> Result<()> {
        self.pause.0.store(on, Relaxed);
        if !on {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while !self.pause.1.load(Relaxed) {
            if Instant::now() > deadline || self.thread.as_ref().is_none_or(|t| t.is_finished()) {
                return Err(Error::Stalled {
                    stage: "afp bench",
                    what: "the generator thread to pause (it failed, or is not scheduled)",
                    waited_ms: 1000,
                });
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        std::thread::sleep(Duration::from_millis(1));
        Ok(())
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Rig {
    fn null(args: &BenchArgs, tagged: bool) -> Result<Rig> {
        let f = frame(tagged);
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
        Rig::new("null", a, b, None)
    }

    /// Threaded: one device thread on the other core serves both ports. Inline: the model
    /// does the device's work inside the driver's register writes, on the forwarding core.
    fn sim(args: &BenchArgs, tagged: bool, mode: Mode) -> Result<Rig> {
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
        let mut src = Source::udp(vfio_nic::device::MacAddr([0x02, 0, 0, 0, 0, 2]), FRAME);
        if tagged {
            src = src.with_vlan(0x8100, TCI);
        }
        let sa = SimPort::with_source(scfg.clone(), src);
        // B's own source never sends: B only transmits, into the void.
        let sb = SimPort::with_source(scfg, Source::new(frame(false)).with_count(0));
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
            "sim"
        } else {
            "sim-inline"
        };
        Rig::new(device, a, b, Some((sa, sb)))
    }

    fn new(
        device: &'static str,
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
            now,
            sent: 0,
            generator: None,
        })
    }

    /// The qm driver on the queue-manager model: A receives from the model's built-in source,
    /// B (not wired) sends into the void; both ports are in one set, so B's frames carry A's
    /// pool id and their buffers go home to A's hardware pool (no copy). Threaded: one device
    /// thread on the other core serves both.
    fn qm(args: &BenchArgs, tagged: bool, mode: QmMode) -> Result<Rig> {
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
        da.set_source(Some(frame(tagged)));
        let qcfg = QmConfig::default();
        let a = AnyPort::Qm(Box::new(QmPort::open(da, qcfg.clone())?));
        let b = AnyPort::Qm(Box::new(QmPort::open(db, qcfg)?));
        let device = if mode == QmMode::Threaded {
            "qm"
        } else {
            "qm-inline"
        };
        let mut rig = Rig::new(device, a, b, None)?;
        rig.qm = Some(soc);
        Ok(rig)
    }

    /// An af_packet port on RECV of `--afp-pair`, forwarding into a null port, with a
    /// generator sending into SEND. Rings of 4,096 frames: what one drain times.
    fn afp(args: &BenchArgs, tagged: bool) -> Result<Rig> {
        let [send, recv] = args.afp_pair.as_slice() else {
            return Err(Error::InvalidConfig(
                "--device afp needs --afp-pair SEND,RECV (a veth pair in this network namespace; bench/dpdk-compare --ports afp makes one)".into(),
            ));
        };
        let cfg = vfio_nic::devices::PortConfig {
            afpacket: vfio_nic::devices::afpacket::AfPacketConfig {
                frames: AFP_RING,
                pool: PoolConfig {
                    buffers: 2 * AFP_RING as usize,
                    ..PoolConfig::default()
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let a = vfio_nic::devices::open(&format!("afp:{recv}"), &cfg)?;
        let b = AnyPort::Null(NullPort::new(1, NullConfig::default())?);
        let gen_port = vfio_nic::devices::open(&format!("afp:{send}"), &cfg)?;
        let mut rig = Rig::new("afp", a, b, None)?;
        rig.generator = Some(Generator::start(
            gen_port,
            frame(tagged),
            args.pin.get(1).copied(),
        )?);
        Ok(rig)
    }

    /// One repetition on the afp device: five times, let the receive ring fill (nobody reads it
    /// for 10 ms per 1,000 frames it holds: the generator sends about 0.35 Mpps on this
    /// machine, so the ring is full three times over), pause the generator, then forward until
    /// the ring is empty, timing from the first burst to the last that received something;
    /// ns per packet over the five drains. The frames were written by the kernel on the
    /// generator's CPU: the lines arrive cold, as from a NIC.
    fn rep_drain(&mut self, p: Placement, work: Work, args: &BenchArgs) -> Result<f64> {
        self.set(p)?;
        let fill = Duration::from_micros(10 * u64::from(AFP_RING));
        let err =
            |e: vfio_nic::device::QueueError| Error::InvalidConfig(format!("burst failed: {e}"));
        let mut batch = Vec::with_capacity(args.burst);
        let (mut packets, mut busy) = (0u64, Duration::ZERO);
        let mut acc = 0u64;
        for _ in 0..5 {
            std::thread::sleep(fill);
            if let Some(g) = &self.generator {
                g.hold(true)?;
            }
            let mut st = FwdStats::default();
            let start = Instant::now();
            let mut last = start;
            let mut idle = 0;
            while idle < 2 {
                let before = st.rx;
                match work {
                    Work::Fwd => {
                        forward_burst(&mut self.rx, &mut self.tx, &mut batch, args.burst, &mut st)
                            .map_err(err)?;
                    }
                    Work::L2 => {
                        l2_burst(
                            &mut self.rx,
                            &mut self.tx,
                            &mut batch,
                            args.burst,
                            &mut st,
                            &mut acc,
                        )
                        .map_err(err)?;
                    }
                }
                if st.rx > before {
                    idle = 0;
                    last = Instant::now();
                } else {
                    idle += 1;
                }
            }
            packets += st.tx;
            busy += last - start;
            self.sent += st.tx;
            if let Some(g) = &self.generator {
                g.hold(false)?;
            }
        }
        std::hint::black_box(acc);
        if packets == 0 {
            return Err(Error::InvalidConfig(
                "afp: nothing arrived on the receive interface: is the pair a veth pair, both ends up?".into(),
            ));
        }
        Ok(busy.as_secs_f64() * 1e9 / packets as f64)
    }

    /// Switches to placement `p` (a no-op when it is the current one).
    fn set(&mut self, p: Placement) -> Result<()> {
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
    fn rep(&mut self, p: Placement, work: Work, args: &BenchArgs, dur: Duration) -> Result<f64> {
        if self.device == "afp" {
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
                "{}: nothing was forwarded in {}: the model or the driver is stuck",
                self.device,
                placement_name(p)
            )));
        }
        Ok(took.as_secs_f64() * 1e9 / st.tx as f64)
    }

    /// The forwarder's busy time per packet in placement `p` (software 82599, threaded: read
    /// beside the model's time per frame, the larger sets the pace): one repetition of
    /// [`timed`] with [`Clock::Busy`], not one of the compared samples.
    fn rep_busy(
        &mut self,
        p: Placement,
        work: Work,
        args: &BenchArgs,
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
    /// transmit on another (pinned to the second `--pin` CPU); ns per packet transmitted.
    fn rep_pipeline(&mut self, p: Placement, args: &BenchArgs, dur: Duration) -> Result<f64> {
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
                self.device
            )));
        }
        Ok(took.as_secs_f64() * 1e9 / st.tx as f64)
    }

    /// One repetition of the pool's paths under a pipeline ([`recycle_pipelined`]) on the
    /// receive queue's pool: buffers freed where they were allocated or on the other thread
    /// (pinned to the second `--pin` CPU); the two threads' busy ns per packet, added up.
    fn rep_return(&mut self, free_on: FreeOn, args: &BenchArgs, dur: Duration) -> Result<f64> {
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
    fn model_time(&self) -> Option<(u64, u64)> {
        if self.device == "qm" {
            return self.qm.as_ref().map(|q| (q.busy().0, self.sent));
        }
        if self.device != "sim" {
            return None;
        }
        self.sim
            .as_ref()
            .map(|(sa, sb)| (sa.counters().busy_ns + sb.counters().busy_ns, self.sent))
    }

    /// The software 82599's own check: it transmitted what the forwarder sent, and refused
    /// nothing. Waits (2 s at most) for the device thread to drain the ring.
    fn check_model(&self) -> Result<()> {
        if let Some(q) = &self.qm {
            return check_qm(q, self.sent);
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

/// The pipeline comparisons against page_pool's seed figure (72.74 ns per packet recycled on
/// the allocating CPU, 74.42 ns returned from another, called noise by its authors).
fn pipeline_lines(results: &[Judged]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.c.kind == "pipeline" || r.c.kind == "return")
        .map(|r| {
            let c = &r.c;
            let what = if c.kind == "return" {
                "the pool alone, buffers freed on the other core (slow path) vs handed back and freed where allocated (fast path)"
            } else {
                "forwarding, receive and transmit on two cores (every buffer by the slow path) vs one core (fast path)"
            };
            format!(
                "{} {}, {what}: {:.2} vs {:.2} ns per packet: {} (page_pool's seed: 74.42 vs 72.74 ns, +1.68 ns, called noise)",
                c.kind,
                c.traffic,
                c.b_mean.mean,
                c.a_mean.mean,
                verdict_text(r)
            )
        })
        .collect()
}

/// One comparison as measured; its verdict waits for the rest of the matrix ([`Judged`]).
#[derive(Clone, Debug, Serialize)]
struct Comparison {
    device: &'static str,
    traffic: &'static str,
    work: Work,
    /// "A/A", "A/A anew", "receive", "transmit", "cold", "pipeline" or "return".
    kind: &'static str,
    a: String,
    b: String,
    #[serde(skip)]
    pa: Placement,
    #[serde(skip)]
    pb: Placement,
    /// ns per packet of every repetition, pair by pair.
    a_ns: Vec<f64>,
    b_ns: Vec<f64>,
    a_mean: Interval,
    b_mean: Interval,
    /// B - A, ns per packet (paired t, 95 %).
    diff: Interval,
    /// The A/A floor of the group this comparison belongs to, ns.
    floor: f64,
    /// The paired t test's two-sided p-value of B - A, before the matrix's correction.
    p: f64,
    /// The baseline's move from the same placement's run before in the group (A's mean over
    /// that one's, minus one), when it moved (`compare::baseline_moved`): an A/A of A was then
    /// run anew.
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_moved: Option<Moved>,
    /// Threaded software 82599: which stage set the pace (`compare::pace`). Where the model
    /// did, B - A is the whole system's, not the driver's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pace: Option<Pace>,
    /// On the pipeline comparison: the pool's buffers that went home through its slow path
    /// (cross-thread returns) per packet in B, as a check that B took it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pipeline: Option<String>,
    /// Software 82599: the model's own time per frame on the device core (its busy time over
    /// the comparison's frames, both placements), next to the forwarder's ns per packet.
    model_ns_per_frame: Option<f64>,
    /// Software 82599, threaded: the forwarder's busy time per packet (bursts that received
    /// something) in A and B, from one extra repetition of each; beside the model's time per
    /// frame, the larger of the two sets the pace.
    driver_busy_ns: Option<[f64; 2]>,
}

impl Comparison {
    /// An A/A row (planned or run anew): it measures a floor and is not one of the matrix's
    /// hypotheses.
    fn is_floor(&self) -> bool {
        self.kind.starts_with("A/A")
    }
}

/// A comparison judged with the rest of its matrix ([`judge`]).
#[derive(Clone, Debug, Serialize)]
struct Judged {
    #[serde(flatten)]
    c: Comparison,
    /// The p-value adjusted by Holm's procedure over the matrix's comparisons; none on the A/A
    /// rows (floors, not hypotheses).
    p_holm: Option<f64>,
    verdict: Verdict,
}

/// Judges a whole matrix at once: the p-values of its comparisons, the A/A rows left out, are
/// adjusted together by Holm's procedure, and each verdict asks for its adjusted p below 0.05
/// besides an interval clear of zero and of the floor. An A/A row is judged with its raw p
/// against its own floor, which covers it: never a difference.
fn judge(results: Vec<Comparison>) -> Vec<Judged> {
    let family: Vec<f64> = results
        .iter()
        .filter(|c| !c.is_floor())
        .map(|c| c.p)
        .collect();
    let mut adjusted = compare::holm(&family).into_iter();
    results
        .into_iter()
        .map(|c| {
            let p_holm = if c.is_floor() { None } else { adjusted.next() };
            let p = p_holm.unwrap_or(c.p);
            let verdict = compare::verdict(&c.diff, c.a_mean.mean, c.floor, p);
            Judged { c, p_holm, verdict }
        })
        .collect()
}

/// The size of the family Holm's procedure corrected for: the matrix's comparisons, not its
/// A/A rows.
fn family_size(rows: &[Judged]) -> usize {
    rows.iter().filter(|r| r.p_holm.is_some()).count()
}

/// `p(Holm) 0.003` (or `<0.001`), for the rows and the summary lines.
fn p_holm_text(p: f64) -> String {
    if p < 0.001 {
        "p(Holm) <0.001".to_string()
    } else {
        format!("p(Holm) {p:.3}")
    }
}

/// A row's verdict with its Holm-adjusted p, as the table and the summary lines print it.
fn verdict_text(r: &Judged) -> String {
    match r.p_holm {
        Some(p) => format!("{}, {}", r.verdict, p_holm_text(p)),
        None => r.verdict.to_string(),
    }
}

/// The comparisons run on one device: the A/A first (its floor judges the others).
///
/// On both software 82599 modes, Software vs Deferred receive with the tag left to the NIC on
/// transmit is the cold-line pair: the model does the same in both placements (it strips
/// nothing), so B - A is what reading the frame's first line in the burst costs, with the line
/// written on the other core (threaded) or on the forwarding core just before (inline).
fn plan(device: &str) -> Vec<(&'static str, Placement, Placement)> {
    use RxMode::*;
    use TxMode::{Hardware as TxHw, Software as TxSw};
    match device {
        "null" => vec![
            ("A/A", (Deferred, TxSw), (Deferred, TxSw)),
            ("receive", (Deferred, TxSw), (Software, TxSw)),
            // fwd only: A on one core, B as a two-core pipeline (see `Rig::rep_pipeline`).
            ("pipeline", (Deferred, TxSw), (Deferred, TxSw)),
            // fwd only: the pool's fast vs slow path alone (see `Rig::rep_return`).
            ("return", (Deferred, TxSw), (Deferred, TxSw)),
        ],
        "afp" => vec![
            ("A/A", (Hardware, TxSw), (Hardware, TxSw)),
            ("receive", (Hardware, TxSw), (Deferred, TxSw)),
            ("receive", (Hardware, TxSw), (Software, TxSw)),
        ],
        // The seed's argument (DPDK commit 87dd2307c0): the strip in the burst (Software)
        // against none (Deferred: the application strips, or never needs to). A DPNI has no
        // strip and no insertion, so both transmit in software.
        "qm" | "qm-inline" => vec![
            ("A/A", (Deferred, TxSw), (Deferred, TxSw)),
            ("receive", (Deferred, TxSw), (Software, TxSw)),
        ],
        "sim" => vec![
            ("A/A", (Hardware, TxHw), (Hardware, TxHw)),
            ("receive", (Hardware, TxHw), (Software, TxHw)),
            ("receive", (Hardware, TxHw), (Deferred, TxHw)),
            ("cold", (Deferred, TxHw), (Software, TxHw)),
            ("transmit", (Hardware, TxHw), (Hardware, TxSw)),
        ],
        _ => vec![
            ("A/A", (Deferred, TxHw), (Deferred, TxHw)),
            ("cold", (Deferred, TxHw), (Software, TxHw)),
        ],
    }
}

/// The cold-line A/B: the same Software vs Deferred receive comparison with the device's
/// writes on the other core (threaded) and on the forwarding core (inline), each with its
/// Holm-adjusted p, and the difference of the two differences (its interval from both
/// half-widths added in quadrature: the two comparisons are independent).
fn cold_lines(results: &[Judged]) -> Vec<String> {
    let cold = |device: &'static str| {
        results
            .iter()
            .filter(move |r| r.c.device == device && r.c.kind == "cold")
    };
    let mut out = Vec::new();
    for r in cold("sim") {
        let c = &r.c;
        let Some(wr) = cold("sim-inline").find(|w| w.c.traffic == c.traffic && w.c.work == c.work)
        else {
            continue;
        };
        let w = &wr.c;
        let p = |r: &Judged| {
            r.p_holm
                .map_or_else(String::new, |p| format!(" ({})", p_holm_text(p)))
        };
        let d = c.diff.mean - w.diff.mean;
        let h = (c.diff.half_width().powi(2) + w.diff.half_width().powi(2)).sqrt();
        out.push(format!(
            "cold lines, {} {}: software strip (sw vs deferred receive) {:+.2} ns [{:+.2}, {:+.2}]{} with the frame written on the other core, {:+.2} ns [{:+.2}, {:+.2}]{} on the forwarding core: {:+.2} ns +-{:.2} per packet for the line arriving cold",
            c.traffic, c.work.name(), c.diff.mean, c.diff.lo, c.diff.hi, p(r), w.diff.mean, w.diff.lo, w.diff.hi, p(wr), d, h
        ));
    }
    out
}

/// Progress on the terminal (standard error), one line rewritten in place; a line per
/// comparison when standard error is not a terminal.
struct Progress {
    total_reps: usize,
    done_reps: usize,
    started: Instant,
    tty: bool,
}

impl Progress {
    fn show(&mut self, what: &str, pair: usize, pairs: usize) {
        self.done_reps += 2;
        let left = self.total_reps.saturating_sub(self.done_reps);
        let per = self.started.elapsed().as_secs_f64() / self.done_reps.max(1) as f64;
        let eta = (per * left as f64).round() as u64;
        if self.tty {
            eprint!(
                "\r\x1b[2K[{}/{} repetitions, about {}m{:02}s left] {what}: pair {pair}/{pairs}",
                self.done_reps,
                self.total_reps,
                eta / 60,
                eta % 60
            );
        } else if pair == pairs {
            eprintln!(
                "bench: {what} done ({}/{} repetitions, about {eta} s left)",
                self.done_reps, self.total_reps
            );
        }
    }

    fn end(&self) {
        if self.tty {
            eprint!("\r\x1b[2K");
        }
    }
}

fn pick<'a>(given: &[String], all: &[&'a str], what: &str) -> Result<Vec<&'a str>> {
    if given.is_empty() {
        return Ok(all.to_vec());
    }
    given
        .iter()
        .map(|g| {
            all.iter()
                .copied()
                .find(|a| *a == g.as_str())
                .ok_or_else(|| {
                    Error::InvalidConfig(format!("unknown {what} {g:?} (one of {all:?})"))
                })
        })
        .collect()
}

/// Runs the benchmark.
pub fn run(args: &BenchArgs, json_out: bool, stop: Arc<AtomicBool>) -> Result<()> {
    if args.burst == 0 || args.burst > 512 || args.pairs < 2 || args.seconds <= 0.0 {
        return Err(Error::InvalidConfig(
            "--burst 1..=512, --pairs >= 2 and --seconds > 0".into(),
        ));
    }
    let traffic = pick(&args.traffic, &["untagged", "tagged"], "traffic")?;
    let works: Vec<Work> = pick(&args.work, &["fwd", "l2"], "work")?
        .into_iter()
        .map(|w| if w == "fwd" { Work::Fwd } else { Work::L2 })
        .collect();
    let devices: &[&'static str] = match args.device {
        DeviceSel::Null => &["null"],
        DeviceSel::Sim => &["sim"],
        DeviceSel::SimInline => &["sim", "sim-inline"],
        DeviceSel::Both => &["null", "sim", "sim-inline"],
        DeviceSel::Afp => &["afp"],
        DeviceSel::Qm => &["qm"],
        DeviceSel::QmInline => &["qm", "qm-inline"],
        // (main.rs sends `--device irq` to bench_irq.rs.)
        DeviceSel::Irq => &[],
    };
    let comparisons: usize = devices
        .iter()
        .map(|d| {
            plan(d)
                .iter()
                .map(|c| {
                    if c.0 == "pipeline" || c.0 == "return" {
                        usize::from(works.contains(&Work::Fwd))
                    } else {
                        works.len()
                    }
                })
                .sum::<usize>()
                * traffic.len()
        })
        .sum();
    // The machine's cross-core latency and huge pages, which the sim figures follow
    // (`machine.rs`); measured before anything is pinned or running.
    let machine = if devices
        .iter()
        .any(|d| d.starts_with("sim") || d.starts_with("qm"))
    {
        let cpus = match (args.pin.first(), args.pin.get(1)) {
            (Some(&a), Some(&b)) => Some([a, b]),
            _ => std::thread::available_parallelism()
                .is_ok_and(|n| n.get() >= 2)
                .then_some([0, 1]),
        };
        cpus.map(MachineNotes::probe).transpose()?
    } else {
        None
    };
    if let Some(&cpu) = args.pin.first() {
        pin_current_thread(cpu)?;
    }
    // Each threaded sim comparison runs one more repetition of A and of B: the driver's busy
    // time (`Rig::rep_busy`).
    let busy_reps: usize = devices
        .iter()
        .filter(|&&d| d == "sim" || d == "qm")
        .map(|d| {
            let plain = plan(d)
                .iter()
                .filter(|c| c.0 != "pipeline" && c.0 != "return")
                .count();
            plain * works.len() * traffic.len() * 2
        })
        .sum();
    let mut progress = Progress {
        total_reps: comparisons * args.pairs * 2 + busy_reps,
        done_reps: 0,
        started: Instant::now(),
        tty: std::io::stderr().is_terminal(),
    };
    if !json_out {
        outln!(
            "vfio-nic bench: {} interleaved pairs of {} s per comparison (A B, B A, ...), burst {}, ring {} (sim), {}-byte frames (+4 tagged), pin {:?}",
            args.pairs, args.seconds, args.burst, args.ring, FRAME, args.pin
        );
        if let Some(m) = &machine {
            outln!("{}", m.line());
        }
    }
    let mut results = Vec::new();
    let matrix = Matrix {
        devices,
        traffic: &traffic,
        works: &works,
    };
    let measured = measure_matrix(args, &matrix, &stop, &mut progress, &mut results);
    progress.end();
    // Holm needs every p-value of the matrix: the rows are judged, and printed, only now.
    let rows = judge(results);
    if let Err(e) = measured {
        if !json_out && !rows.is_empty() {
            // The run's own failure is the one to report, even where the reader has gone.
            let _ = print_partial_table(&rows, &e);
        }
        return Err(e);
    }
    if !json_out {
        print_table(&rows)?;
    }
    // Again at the end, with every device thread gone: a machine whose latency moved during
    // the run shows it here.
    let machine_end = match &machine {
        Some(m) => Some(MachineNotes::probe(m.cpus)?),
        None => None,
    };
    if let (Some(m), false) = (&machine_end, json_out) {
        outln!("at the end, {}", m.line());
    }
    let cold = cold_lines(&rows);
    let piped = pipeline_lines(&rows);
    if !json_out {
        for line in cold.iter().chain(&piped) {
            outln!("{line}");
        }
    }
    if let Some(path) = &args.svg {
        chart(path, &rows, args)?;
        if !json_out {
            outln!("chart written to {}", path.display());
        }
    }
    if json_out {
        let correction = serde_json::json!({
            "method": "holm", "family_size": family_size(&rows), "alpha": compare::ALPHA,
            "family": "every comparison of this run but the A/A rows (noise floors)",
        });
        let v = serde_json::json!({
            "pairs": args.pairs, "seconds": args.seconds, "burst": args.burst, "ring": args.ring,
            "frame_bytes": FRAME, "pin": args.pin, "interval": "95 % paired t", "correction": correction,
            "machine": machine, "machine_at_end": machine_end,
            "comparisons": rows, "cold_lines": cold, "pipeline_lines": piped,
        });
        outln!("{v}");
    }
    Ok(())
}

/// What a run measures: each device's plan for each traffic and work.
struct Matrix<'a> {
    devices: &'a [&'static str],
    traffic: &'a [&'static str],
    works: &'a [Work],
}

/// Measures the whole matrix into `results`, in order (an A/A run anew right after the
/// comparison whose moved baseline called for it). Judging waits for all of it ([`judge`]);
/// on an error, `results` holds what was measured before it.
fn measure_matrix(
    args: &BenchArgs,
    matrix: &Matrix<'_>,
    stop: &AtomicBool,
    progress: &mut Progress,
    results: &mut Vec<Comparison>,
) -> Result<()> {
    for &dev in matrix.devices {
        for &t in matrix.traffic {
            let tagged = t == "tagged";
            let mut rig = match dev {
                "null" => Rig::null(args, tagged)?,
                "afp" => Rig::afp(args, tagged)?,
                "sim" => Rig::sim(args, tagged, Mode::Threaded)?,
                "qm" => Rig::qm(args, tagged, QmMode::Threaded)?,
                "qm-inline" => Rig::qm(args, tagged, QmMode::Inline)?,
                _ => Rig::sim(args, tagged, Mode::Inline)?,
            };
            for &work in matrix.works {
                let g = Group { dev, t, work };
                // The group's floor (its A/A's, or the A/A run anew's), and each placement's
                // latest samples, which tell whether the machine moved since.
                let mut floor = 0.0;
                let mut seen = Baselines::default();
                for (kind, pa, pb) in plan(dev) {
                    let piped = kind == "pipeline" || kind == "return";
                    if piped && work != Work::Fwd {
                        continue;
                    }
                    let m = measure(&mut rig, g, (kind, pa, pb), args, stop, progress)?;
                    let mut c = m.compared(g, (kind, pa, pb), floor);
                    let moved = seen
                        .latest(pa)
                        .filter(|_| kind != "return") // (its A is not a forwarding loop)
                        .and_then(|then| compare::baseline_moved(then, &c.a_ns));
                    let mut anew = None;
                    if kind == "A/A" {
                        floor = c.floor;
                    } else if let Some(share) = moved {
                        // The floor was measured on another machine than this one: an A/A of
                        // this baseline now. Its floor judges this comparison (and the group's
                        // next ones) if the baseline matches it, else the larger floor does.
                        let again = ("A/A anew", pa, pa);
                        progress.total_reps +=
                            args.pairs * 2 + 2 * usize::from(rig.model_time().is_some());
                        let m = measure(&mut rig, g, again, args, stop, progress)?;
                        let r = m.compared(g, again, 0.0);
                        let both = [r.a_ns.clone(), r.b_ns.clone()].concat();
                        let matches = compare::baseline_moved(&both, &c.a_ns).is_none();
                        floor = if matches { r.floor } else { floor.max(r.floor) };
                        c = c.with_floor_anew(floor, share, matches);
                        anew = Some(r);
                    }
                    for row in std::iter::once(c).chain(anew) {
                        seen.record(&row);
                        results.push(row);
                    }
                }
            }
            rig.check_model()?;
        }
    }
    Ok(())
}

/// The table of a run that stopped at `e`: the rows measured before, corrected as a family of
/// those (the comparisons it did not reach were never tested).
fn print_partial_table(rows: &[Judged], e: &Error) -> Result<()> {
    outln!(
        "the run stopped after {} rows ({e}); what it measured, judged as a family of those:",
        rows.len()
    );
    print_table(rows)
}

/// The table of a judged matrix: what its columns and verdicts mean, then a row per comparison.
fn print_table(rows: &[Judged]) -> Result<()> {
    outln!("B - A: ns per packet with its 95 % confidence interval (paired t over the pairs); floor: the A/A comparison's");
    let m = family_size(rows);
    outln!(
        "p(Holm): the paired t test's p adjusted over the {m} comparison{} of this run (A/A rows are floors, not tested); a difference is declared where p(Holm) < {} and B - A is clear of zero and of the floor",
        if m == 1 { "" } else { "s" },
        compare::ALPHA
    );
    outln!(
        "{:<4} {:<8} {:<3} {:<8} {:<17} {:<17} {:>14} {:>14}  verdict (B - A)",
        "dev",
        "traffic",
        "wrk",
        "kind",
        "A",
        "B",
        "A ns/pkt",
        "B ns/pkt"
    );
    for r in rows {
        print_comparison(r)?;
    }
    Ok(())
}

/// A comparison's baseline that moved from the same placement's run before in its group
/// (`compare::baseline_moved`).
#[derive(Clone, Copy, Debug, Serialize)]
struct Moved {
    /// A's mean over the same placement's run before, minus one.
    share: f64,
    /// Whether A matches the A/A run anew (then that floor judges; else the larger one).
    anew_matches: bool,
}

/// Each placement's latest samples in a group, from whichever comparison ran it last.
#[derive(Default)]
struct Baselines(Vec<(Placement, Vec<f64>)>);

impl Baselines {
    fn latest(&self, p: Placement) -> Option<&[f64]> {
        self.0.iter().find(|x| x.0 == p).map(|x| x.1.as_slice())
    }

    fn set(&mut self, p: Placement, ns: Vec<f64>) {
        self.0.retain(|x| x.0 != p);
        self.0.push((p, ns));
    }

    /// Keeps what `c` ran of the forwarding loop: both sides of an A/A (one placement), A and
    /// B of a placement comparison, A alone of the pipeline (its B is the two-core loop),
    /// nothing of the pool-return comparison.
    fn record(&mut self, c: &Comparison) {
        match c.kind {
            "return" => {}
            "pipeline" => self.set(c.pa, c.a_ns.clone()),
            _ if c.is_floor() => self.set(c.pa, [c.a_ns.clone(), c.b_ns.clone()].concat()),
            _ => {
                self.set(c.pa, c.a_ns.clone());
                self.set(c.pb, c.b_ns.clone());
            }
        }
    }
}

/// The group a comparison belongs to: device, traffic, work.
#[derive(Clone, Copy)]
struct Group {
    dev: &'static str,
    t: &'static str,
    work: Work,
}

/// The samples of one comparison, before they are judged.
struct Measured {
    a_ns: Vec<f64>,
    b_ns: Vec<f64>,
    /// Buffers home by the pool's slow path, and packets sent: A, B.
    slow: [(u64, u64); 2],
    model_ns_per_frame: Option<f64>,
    driver_busy_ns: Option<[f64; 2]>,
}

/// Runs one comparison on `rig`: `args.pairs` interleaved pairs, then (threaded sim) one
/// more repetition of A and of B for the forwarder's busy time.
fn measure(
    rig: &mut Rig,
    g: Group,
    (kind, pa, pb): (&'static str, Placement, Placement),
    args: &BenchArgs,
    stop: &AtomicBool,
    progress: &mut Progress,
) -> Result<Measured> {
    let piped = kind == "pipeline" || kind == "return";
    let what = format!(
        "{} {} {} {kind}: {} vs {}",
        g.dev,
        g.t,
        g.work.name(),
        placement_name(pa),
        placement_name(pb)
    );
    let dur = Duration::from_secs_f64(args.seconds);
    let (mut a_ns, mut b_ns) = (Vec::new(), Vec::new());
    let model_before = rig.model_time();
    let mut slow = [(0u64, 0u64); 2];
    for (i, a_first) in abba(args.pairs).enumerate() {
        if stop.load(Relaxed) {
            progress.end();
            return Err(Error::InvalidConfig("interrupted".into()));
        }
        let mut side = |b: bool| {
            let (s0, n0) = (rig.rx.pool().stats().slow_returns, rig.sent);
            let ns = match b {
                _ if kind == "return" => {
                    let on = if b { FreeOn::Other } else { FreeOn::Allocating };
                    rig.rep_return(on, args, dur)
                }
                true if piped => rig.rep_pipeline(pb, args, dur),
                true => rig.rep(pb, g.work, args, dur),
                false => rig.rep(pa, g.work, args, dur),
            };
            let s = &mut slow[usize::from(b)];
            s.0 += rig.rx.pool().stats().slow_returns - s0;
            s.1 += rig.sent - n0;
            ns
        };
        let x = side(!a_first)?;
        let y = side(a_first)?;
        let (a, b) = if a_first { (x, y) } else { (y, x) };
        a_ns.push(a);
        b_ns.push(b);
        progress.show(&what, i + 1, args.pairs);
    }
    let model_ns_per_frame = match (model_before, rig.model_time()) {
        (Some((busy0, sent0)), Some((busy1, sent1))) if sent1 > sent0 => {
            Some((busy1 - busy0) as f64 / (sent1 - sent0) as f64)
        }
        _ => None,
    };
    // Which side sets the pace: the forwarder's own busy time in A and B, from one more
    // repetition of each (not samples of the comparison).
    let driver_busy_ns = match model_ns_per_frame {
        Some(_) if !piped => {
            let busy = [
                rig.rep_busy(pa, g.work, args, dur)?,
                rig.rep_busy(pb, g.work, args, dur)?,
            ];
            progress.done_reps += 2;
            Some(busy)
        }
        _ => None,
    };
    Ok(Measured {
        a_ns,
        b_ns,
        slow,
        model_ns_per_frame,
        driver_busy_ns,
    })
}

impl Measured {
    /// The comparison these samples make, to be judged against `floor` (an A/A's own floor is
    /// its own) once the matrix is done.
    fn compared(
        self,
        g: Group,
        (kind, pa, pb): (&'static str, Placement, Placement),
        floor: f64,
    ) -> Comparison {
        let piped = kind == "pipeline" || kind == "return";
        let diff = paired_t_95(&self.a_ns, &self.b_ns);
        let floor = if kind.starts_with("A/A") {
            noise_floor(&diff)
        } else {
            floor
        };
        let a_mean = mean_95(&self.a_ns);
        let (a, b) = if kind == "return" {
            (
                "freed on alloc core".to_string(),
                "freed on other core".to_string(),
            )
        } else if piped {
            (
                format!("{} 1 core", placement_name(pa)),
                format!("{} 2 cores", placement_name(pb)),
            )
        } else {
            (placement_name(pa), placement_name(pb))
        };
        let slow = self.slow;
        Comparison {
            device: g.dev,
            traffic: g.t,
            work: g.work,
            kind,
            a,
            b,
            pa,
            pb,
            p: paired_p(&self.a_ns, &self.b_ns),
            a_mean,
            b_mean: mean_95(&self.b_ns),
            a_ns: self.a_ns,
            b_ns: self.b_ns,
            diff,
            floor,
            baseline_moved: None,
            pace: self
                .model_ns_per_frame
                .zip(self.driver_busy_ns)
                .map(|(m, d)| compare::pace(m, d)),
            model_ns_per_frame: self.model_ns_per_frame,
            driver_busy_ns: self.driver_busy_ns,
            pipeline: piped.then(|| {
                let per = |(s, n): (u64, u64)| s as f64 / n.max(1) as f64;
                format!(
                    "buffers home by the pool's slow path per packet: A {:.3}, B {:.3}",
                    per(slow[0]),
                    per(slow[1])
                )
            }),
        }
    }
}

impl Comparison {
    /// The same comparison to be judged against `floor`, from the A/A run anew because its
    /// baseline moved by `share` from the group's A/A; `matches`: the new A/A's baseline
    /// matches it.
    fn with_floor_anew(mut self, floor: f64, share: f64, matches: bool) -> Comparison {
        self.floor = floor;
        self.baseline_moved = Some(Moved {
            share,
            anew_matches: matches,
        });
        self
    }
}

/// One row of the table: the comparison, and its verdict with its Holm-adjusted p (an A/A row's
/// floor instead), and its notes.
fn print_comparison(r: &Judged) -> Result<()> {
    let c = &r.c;
    let mut verdict = if c.is_floor() {
        format!(
            "floor: +-{:.2} ns (A/A difference {:+.2} [{:+.2}, {:+.2}])",
            c.floor, c.diff.mean, c.diff.lo, c.diff.hi
        )
    } else {
        verdict_text(r)
    };
    if let Some(m) = c.baseline_moved {
        let judge = if m.anew_matches {
            "its floor judges"
        } else {
            "A matches neither: the larger floor judges"
        };
        verdict += &format!(
            " [the machine moved: A ran {:+.0} % off its run before; A/A run anew, {judge}]",
            100.0 * m.share
        );
    }
    if let (Some(Pace::Model { a, b }), false) = (c.pace, c.is_floor()) {
        let sides = match (a, b) {
            (true, true) => "A and B",
            (true, false) => "A",
            _ => "B",
        };
        verdict += &format!(
            " [the model set the pace of {sides}: B - A is the system's, not the driver's alone]"
        );
    }
    let model = c
        .model_ns_per_frame
        .map(|m| {
            let driver = c.driver_busy_ns.map_or(String::new(), |[a, b]| {
                format!("; driver busy: A {a:.0}, B {b:.0} ns per packet")
            });
            format!("  (model: {m:.0} ns per frame on the device core{driver})")
        })
        .or_else(|| c.pipeline.as_ref().map(|p| format!("  ({p})")))
        .unwrap_or_default();
    outln!(
        "{:<4} {:<8} {:<3} {:<8} {:<17} {:<17} {:>14} {:>14}  {verdict}{model}",
        c.device,
        c.traffic,
        c.work.name(),
        c.kind,
        c.a,
        c.b,
        format!("{:.2}+-{:.2}", c.a_mean.mean, c.a_mean.half_width()),
        format!("{:.2}+-{:.2}", c.b_mean.mean, c.b_mean.half_width()),
    );
    Ok(())
}

/// One row per comparison: B - A with its 95 % interval as an error bar, coloured by its
/// verdict (after the matrix's correction), and the group's noise floor as a grey band; one
/// panel per device (their scales differ).
fn chart(path: &std::path::Path, results: &[Judged], args: &BenchArgs) -> Result<()> {
    use plotters::prelude::*;
    let fail = |e: String| Error::InvalidConfig(format!("writing {}: {e}", path.display()));
    let devices: Vec<&str> = ["null", "afp", "sim", "sim-inline", "qm", "qm-inline"]
        .into_iter()
        .filter(|d| results.iter().any(|r| r.c.device == *d))
        .collect();
    if devices.is_empty() {
        return Ok(());
    }
    let rows = |d: &str| results.iter().filter(|r| r.c.device == d).count() as u32;
    let height = devices.iter().map(|d| 90 + 22 * rows(d)).sum::<u32>();
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let mut rest = root.clone();
    for d in devices {
        let (area, below) = rest.split_vertically(90 + 22 * rows(d));
        rest = below;
        let mine: Vec<&Judged> = results.iter().filter(|r| r.c.device == d).collect();
        let n = mine.len();
        let reach = mine
            .iter()
            .map(|r| r.c.diff.lo.abs().max(r.c.diff.hi.abs()).max(r.c.floor))
            .filter(|x| x.is_finite())
            .fold(1.0f64, f64::max)
            * 1.1;
        let labels: Vec<String> = mine
            .iter()
            .map(|r| {
                let c = &r.c;
                format!(
                    "{} {} {}: {} vs {}",
                    c.traffic,
                    c.work.name(),
                    c.kind,
                    c.b,
                    c.a
                )
            })
            .collect();
        let what = match d {
            "null" => "null device (copy mode)",
            "afp" => "af_packet port on a veth pair (ring drained)",
            "sim" => "ixgbe on the software 82599, threaded",
            "sim-inline" => "ixgbe on the software 82599, inline",
            "qm" => "qm on the queue-manager model, threaded",
            _ => "qm on the queue-manager model, inline",
        };
        let mut ch = ChartBuilder::on(&area)
            .caption(
                format!(
                    "{what}: B - A, ns per packet, 95 % CI over {} interleaved pairs (grey: A/A noise floor), burst {}",
                    args.pairs, args.burst
                ),
                ("sans-serif", 14),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(330)
            .build_cartesian_2d(-reach..reach, (0i32..n as i32).into_segmented())
            .map_err(|e| fail(e.to_string()))?;
        ch.configure_mesh()
            .disable_y_mesh()
            .y_labels(n)
            .y_label_formatter(&|y| match y {
                SegmentValue::CenterOf(i) => labels.get(*i as usize).cloned().unwrap_or_default(),
                _ => String::new(),
            })
            .x_desc(
                "B - A, ns per packet (right: B costs more; red, blue: slower, faster after Holm)",
            )
            .draw()
            .map_err(|e| fail(e.to_string()))?;
        ch.draw_series(mine.iter().enumerate().map(|(i, r)| {
            Rectangle::new(
                [
                    (-r.c.floor, SegmentValue::Exact(i as i32)),
                    (r.c.floor, SegmentValue::Exact(i as i32 + 1)),
                ],
                BLACK.mix(0.12).filled(),
            )
        }))
        .map_err(|e| fail(e.to_string()))?;
        let color = |r: &Judged| match r.verdict {
            Verdict::NoDifference { .. } => BLACK,
            Verdict::Slower { .. } => RED,
            Verdict::Faster { .. } => BLUE,
        };
        let shown: Vec<(usize, &Judged)> = mine
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, r)| r.c.diff.lo.is_finite() && r.c.diff.hi.is_finite())
            .collect();
        // The interval as a whisker, the mean as a dot.
        ch.draw_series(shown.iter().map(|&(i, r)| {
            PathElement::new(
                vec![
                    (r.c.diff.lo, SegmentValue::CenterOf(i as i32)),
                    (r.c.diff.hi, SegmentValue::CenterOf(i as i32)),
                ],
                color(r).stroke_width(2),
            )
        }))
        .map_err(|e| fail(e.to_string()))?;
        ch.draw_series(shown.iter().map(|&(i, r)| {
            Circle::new(
                (r.c.diff.mean, SegmentValue::CenterOf(i as i32)),
                4,
                color(r).filled(),
            )
        }))
        .map_err(|e| fail(e.to_string()))?;
    }
    root.present().map_err(|e| fail(e.to_string()))?;
    Ok(())
}
