//! `vfio-nic fwd`: forward between two ports (or back out of one), like testpmd's io mode.
//!
//! One thread per queue pair; each publishes its counters with relaxed stores once per burst
//! into the shared live-status channels, and the main thread prints a status line once per
//! `--stats-period` and a summary at the end.
//!
//! Ports pair up as testpmd's `--port-topology` says: `paired` (the default) crosses ports 0
//! and 1, 2 and 3, ...; `loop` sends what each port receives back out of it. A port that is
//! removed while forwarding (hot unplug: its bursts fail with `DeviceRemoved`) ends the
//! directions that use it, each with a one-line reason, and is closed at once so that the
//! kernel can finish the removal; the other directions go on. The status lines show a port's
//! link when it is down or has changed, with the time the driver saw it.
//!
//! Without VLAN options the loop is the library's [`forward_burst`], untouched frames. With any
//! of them the queues are wrapped in the VLAN layer and frames keep their tags: a tag removed on
//! receive (`--vlan-rx hw|sw`) is put back on transmit (`--vlan-tx`), so the frames leave as they
//! arrived in every mode, and `--vlan-filter` drops the other VLANs.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map};
use vfio_nic::app::forward::{forward_burst, forward_burst_with, FwdStats};
use vfio_nic::app::idle::IdleStats;
use vfio_nic::device::{Port, QueueError, RxQueue};
use vfio_nic::devices::{self, AnyRx, AnyTx};
use vfio_nic::platform::dma::{Meta, Packet, Pool};
use vfio_nic::vlan::{PacketVlan, Tci, VlanControl};
use vfio_nic::{Error, Result};

use crate::common::{self, IrqOpts, RunOpts, VlanRxOpts, VlanTxOpts};
use crate::live::{Channel, Live};

/// Options of `fwd`.
#[derive(clap::Args, Debug)]
pub struct FwdArgs {
    /// One port (frames go back out of it), or several paired as --topology says.
    #[arg(required = true, num_args = 1..)]
    pub ports: Vec<String>,
    /// How ports pair up: `paired` crosses ports 0 and 1, 2 and 3, ...; `loop` sends each
    /// port's frames back out of it (testpmd's --port-topology).
    #[arg(long, default_value = "paired", value_name = "paired|loop")]
    pub topology: String,
    /// Packets per burst.
    #[arg(long, default_value_t = 32)]
    pub burst: usize,
    /// Queue pairs per port (one forwarding thread each).
    #[arg(long, default_value_t = 1)]
    pub queues: u16,
    #[command(flatten)]
    pub run: RunOpts,
    /// Frame size of null ports.
    #[arg(long, default_value_t = 64)]
    pub null_size: usize,
    /// Null ports write a template into every received frame and read every sent one (DPDK's copy=1).
    #[arg(long)]
    pub null_copy: bool,
    /// Where received VLAN tags are removed (hw, sw, deferred); removed tags are re-inserted on
    /// transmit. Without any VLAN option frames are forwarded untouched.
    #[arg(long, value_name = "hw|sw|deferred")]
    pub vlan_rx: Option<String>,
    /// Where transmit tags are inserted (hw or sw).
    #[arg(long, value_name = "hw|sw")]
    pub vlan_tx: Option<String>,
    /// Turn the VLAN filter on with these VIDs (comma-separated) on every port.
    #[arg(long, value_name = "VID,...")]
    pub vlan_filter: Option<String>,
    #[command(flatten)]
    pub irq: IrqOpts,
}

/// A receive and a transmit queue, with or without the VLAN layer.
enum Dir {
    Plain(AnyRx, AnyTx),
    Vlan(vfio_nic::vlan::VlanRx<AnyRx>, vfio_nic::vlan::VlanTx<AnyTx>),
}

impl Dir {
    /// The receive side, for sleeping on its interrupt.
    fn rx(&mut self) -> &mut dyn RxQueue {
        match self {
            Dir::Plain(rx, _) => rx,
            Dir::Vlan(rx, _) => rx,
        }
    }
}

/// One burst through the VLAN layer, keeping tags: what the receive side stripped goes back on
/// as a transmit tag.
fn vlan_burst(
    rx: &mut vfio_nic::vlan::VlanRx<AnyRx>,
    tx: &mut vfio_nic::vlan::VlanTx<AnyTx>,
    batch: &mut Vec<Packet>,
    burst: usize,
    st: &mut FwdStats,
) -> Result<usize, QueueError> {
    forward_burst_with(rx, tx, batch, burst, st, |_, batch| {
        for p in batch {
            if p.meta.has(Meta::VLAN_STRIPPED) {
                // A stripped TCI came off the wire, so it is not 4095 unless the wire carried
                // it; such a frame is sent on without its tag rather than dropped.
                let _ = p.set_tx_vlan(Tci::from_raw(p.meta.vlan_tci));
            }
        }
    })
}

fn publish(ch: &Channel, st: &FwdStats) {
    ch.store(st.rx, 0, st.tx_dropped, 0);
}

/// Runs the forwarder: checks the options, opens the ports, pairs their queues into
/// directions, forwards on one thread per queue pair until the end, and prints the summary.
pub fn run(args: &FwdArgs, json_out: bool, stop: Arc<AtomicBool>) -> Result<()> {
    check(args)?;
    let mut opened = open_ports(args)?;
    let (pairs, names) = directions(args, &mut opened);
    // Channel (queue q, direction d) is number q * directions + d; channels of one direction
    // share its name and are added up for display.
    let channel_names: Vec<String> = (0..pairs.len())
        .flat_map(|_| names.iter().cloned())
        .collect();
    let mut live = Live::new(channel_names, &args.run, json_out, stop).without_bytes();
    live.watch_links(
        opened
            .ports
            .iter()
            .flatten()
            .map(|p| (p.info().name, p.health())),
    );
    let ended = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = pairs
        .into_iter()
        .enumerate()
        .map(|(q, dirs)| spawn_forwarder(args, &live, q, &names, dirs, &ended, json_out))
        .collect();
    let (idle, failure) = wait_for(&mut live, threads, &mut opened);
    let ended = std::mem::take(&mut *ended.lock().unwrap_or_else(|p| p.into_inner()));
    let printed = summary(args, &mut opened, &mut live, &idle, &ended);
    // The run's own failure before any error of the printing (a reader gone, `| head`).
    drop(opened);
    failure.map_or(printed, Err)
}

/// Whether the ports pair up crossed (`paired`) or each on itself (`loop`).
fn looped(args: &FwdArgs) -> Result<bool> {
    match args.topology.as_str() {
        "paired" => Ok(args.ports.len() == 1),
        "loop" => Ok(true),
        t => Err(Error::InvalidConfig(format!(
            "--topology {t}: use paired (ports 0 and 1, 2 and 3, ... cross over) or loop (each port's frames go back out of it)"
        ))),
    }
}

fn check(args: &FwdArgs) -> Result<()> {
    args.run.check()?;
    args.irq.check()?;
    if !looped(args)? && args.ports.len() % 2 == 1 {
        return Err(Error::InvalidConfig(format!(
            "{} ports cannot pair up: the paired topology crosses ports 0 and 1, 2 and 3, ...; give an even number, or --topology loop to send each port's frames back out of it",
            args.ports.len()
        )));
    }
    if args.burst == 0 || args.burst > 512 {
        return Err(Error::InvalidConfig(format!(
            "--burst {} must be between 1 and 512",
            args.burst
        )));
    }
    Ok(())
}

/// The ports, their VLAN controls (with any VLAN option) and their queues.
struct Opened {
    /// Ports outlive their queues: they are dropped (device reset) after the threads end, or
    /// as soon as they are removed (hot unplug), so that the kernel can have them back.
    ports: Vec<Option<devices::AnyPort>>,
    ctls: Vec<VlanControl>,
    queues: Vec<(Vec<AnyRx>, Vec<AnyTx>)>,
}

fn open_ports(args: &FwdArgs) -> Result<Opened> {
    let use_vlan = args.vlan_rx.is_some() || args.vlan_tx.is_some() || args.vlan_filter.is_some();
    let vcfg = common::vlan_config(
        Some(&VlanRxOpts {
            vlan_rx: args.vlan_rx.clone().unwrap_or_else(|| "sw".into()),
            vlan_filter: args.vlan_filter.clone(),
        }),
        Some(&VlanTxOpts {
            vlan_tx: args.vlan_tx.clone().unwrap_or_else(|| "sw".into()),
        }),
    )?;
    let mut config = common::port_config(args.queues);
    common::want_vlan_filter(&mut config, &vcfg);
    config.null.frame_size = args.null_size;
    config.null.copy = args.null_copy;
    args.irq.apply(&mut config);
    let mut o = Opened {
        ports: Vec::new(),
        ctls: Vec::new(),
        queues: Vec::new(),
    };
    for name in &args.ports {
        let mut p = devices::open(name, &config)?;
        if use_vlan {
            o.ctls.push(common::vlan_control(&mut p, &vcfg)?);
        }
        let q = p.take_queues()?;
        args.irq.require(name, &q.0)?;
        o.queues.push(q);
        o.ports.push(Some(p));
    }
    Ok(o)
}

/// The directions each forwarding thread serves (one list per queue pair, each direction
/// with its index) and their names: paired, A.rx -> B.tx and B.rx -> A.tx for each pair of
/// ports; looped, A.rx -> A.tx for each port. The receive side's VLAN control wraps the
/// receive queue, the transmit side's the transmit queue.
fn directions(args: &FwdArgs, o: &mut Opened) -> (Vec<Vec<(usize, Dir)>>, Vec<String>) {
    let n = o.queues.len();
    let ends: Vec<(usize, usize)> = if looped(args).unwrap_or(true) {
        (0..n).map(|p| (p, p)).collect()
    } else {
        (0..n).map(|p| (p, p ^ 1)).collect()
    };
    let names = ends
        .iter()
        .map(|&(r, t)| format!("{} -> {}", args.ports[r], args.ports[t]))
        .collect();
    // Every port's queues by queue number, each taken once (each port receives in one
    // direction and transmits in one).
    let mut rx: Vec<Vec<Option<AnyRx>>> = Vec::new();
    let mut tx: Vec<Vec<Option<AnyTx>>> = Vec::new();
    for (r, t) in std::mem::take(&mut o.queues) {
        rx.push(r.into_iter().map(Some).collect());
        tx.push(t.into_iter().map(Some).collect());
    }
    let queues = rx
        .iter()
        .map(Vec::len)
        .chain(tx.iter().map(Vec::len))
        .min()
        .unwrap_or(0);
    let ctls = &o.ctls;
    let pairs = (0..queues)
        .map(|q| {
            ends.iter()
                .enumerate()
                .map(|(d, &(r, t))| {
                    let rxq = rx[r][q]
                        .take()
                        .expect("each receive queue serves one direction");
                    let txq = tx[t][q]
                        .take()
                        .expect("each transmit queue serves one direction");
                    let dir = match (ctls.get(r), ctls.get(t)) {
                        (Some(cr), Some(ct)) => Dir::Vlan(cr.wrap_rx(rxq), ct.wrap_tx(txq)),
                        _ => Dir::Plain(rxq, txq),
                    };
                    (d, dir)
                })
                .collect()
        })
        .collect();
    (pairs, names)
}

/// The directions that ended before the run did (their port was removed), with the reason.
type Ended = Arc<Mutex<Vec<(String, String)>>>;

/// The forwarding thread of queue pair `q`: a burst per direction in turn, its counters
/// published after each, and in interrupt mode a sleep after enough empty rounds.
fn spawn_forwarder(
    args: &FwdArgs,
    live: &Live,
    q: usize,
    names: &[String],
    mut dirs: Vec<(usize, Dir)>,
    ended: &Ended,
    json_out: bool,
) -> std::thread::JoinHandle<Result<IdleStats>> {
    let channels = live.channels();
    let stop = live.stop_flag();
    let mut idle = args.irq.idle();
    let burst = args.burst;
    let names = names.to_vec();
    let directions = names.len();
    let ended = ended.clone();
    std::thread::spawn(move || -> Result<IdleStats> {
        let mut batch = Vec::with_capacity(burst);
        let mut stats = vec![FwdStats::default(); directions];
        while !stop.load(Relaxed) && !dirs.is_empty() {
            let mut got = 0;
            let mut i = 0;
            while i < dirs.len() {
                let (d, dir) = &mut dirs[i];
                let d = *d;
                let r = match dir {
                    Dir::Plain(rx, tx) => forward_burst(rx, tx, &mut batch, burst, &mut stats[d]),
                    Dir::Vlan(rx, tx) => vlan_burst(rx, tx, &mut batch, burst, &mut stats[d]),
                };
                publish(&channels[q * directions + d], &stats[d]);
                match r {
                    Ok(n) => {
                        got += n;
                        i += 1;
                    }
                    // The port went away: this direction ends (its queues are dropped here,
                    // which lets the kernel finish the removal), the others go on.
                    Err(e @ QueueError::DeviceRemoved) => {
                        Pool::free_vec(&mut batch);
                        drop(dirs.remove(i));
                        let why = e.to_string();
                        if !json_out {
                            let _ = crate::write_line(format_args!(
                                "fwd: {} ended after {} packets: {why}; {} other direction(s) of queue {q} go on",
                                names[d],
                                stats[d].rx,
                                dirs.len()
                            ));
                        }
                        ended
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((names[d].clone(), why));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            // Interrupt mode: after enough empty rounds, sleep until a frame arrives.
            if let Some(idle) = idle.as_mut() {
                if !dirs.is_empty() && idle.after_round(got) {
                    let mut rxs: Vec<&mut dyn RxQueue> =
                        dirs.iter_mut().map(|(_, d)| d.rx()).collect();
                    idle.sleep(&mut rxs)?;
                }
            }
        }
        Ok(idle.map(|i| i.stats()).unwrap_or_default())
    })
}

/// Prints status lines until the run ends (its duration, Ctrl-C, or a thread that stopped),
/// closing every port that is removed meanwhile; then stops and joins the threads: their idle
/// figures added up, and the first error.
fn wait_for(
    live: &mut Live,
    threads: Vec<std::thread::JoinHandle<Result<IdleStats>>>,
    o: &mut Opened,
) -> (IdleStats, Option<Error>) {
    loop {
        std::thread::sleep(Duration::from_millis(20));
        for slot in &mut o.ports {
            if slot
                .as_ref()
                .and_then(|p| p.health())
                .is_some_and(|h| h.is_removed())
            {
                // Stopped and closed now; the device is released when its queues are gone
                // too (the forwarding threads drop them when their bursts fail).
                *slot = None;
            }
        }
        if live.done() || threads.iter().any(|t| t.is_finished()) {
            break;
        }
        live.tick();
    }
    live.request_stop();
    let mut failure = None;
    let mut idle = IdleStats::default();
    for t in threads {
        match t.join().expect("forwarding thread panicked") {
            Ok(s) => {
                idle.sleeps += s.sleeps;
                idle.wakeups += s.wakeups;
            }
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    (idle, failure)
}

/// The summary: totals, per direction, the VLAN configuration, the ports' counters and in
/// interrupt mode how often the threads slept. A run that moved nothing says so instead of a
/// time per packet.
fn summary(
    args: &FwdArgs,
    o: &mut Opened,
    live: &mut Live,
    idle: &IdleStats,
    ended: &[(String, String)],
) -> Result<()> {
    let secs = live.elapsed();
    let totals = live.totals();
    let total: u64 = totals.iter().map(|t| t.packets).sum();
    let ns_per_packet = (total > 0).then(|| secs * 1e9 / total as f64);
    let mut extra = Map::new();
    extra.insert("burst".into(), json!(args.burst));
    extra.insert("queues".into(), json!(args.queues));
    extra.insert("packets".into(), json!(total));
    extra.insert("mpps".into(), json!(total as f64 / secs / 1e6));
    extra.insert("ns_per_packet".into(), json!(ns_per_packet));
    extra.insert(
        "directions".into(),
        totals
            .iter()
            .map(|t| json!({ "direction": t.name, "rx": t.packets, "tx": t.packets - t.dropped, "dropped": t.dropped, "mpps": t.packets as f64 / secs / 1e6 }))
            .collect(),
    );
    if let Some(c) = o.ctls.first() {
        extra.insert("vlan".into(), common::vlan_json(c));
    }
    let mut hw = Map::new();
    for p in o.ports.iter_mut().flatten() {
        let s = common::read_hw(p);
        hw.insert(p.info().name, common::hw_json(&s));
    }
    extra.insert("hw".into(), serde_json::Value::Object(hw));
    extra.insert(
        "ended".into(),
        ended
            .iter()
            .map(|(d, why)| json!({"direction": d, "why": why}))
            .collect(),
    );
    let mut text = vec![match ns_per_packet {
        Some(ns) => format!(
            "total {total} packets in {secs:.2} s: {:.2} Mpps, {ns:.1} ns per packet",
            total as f64 / secs / 1e6
        ),
        None => format!("total 0 packets in {secs:.2} s: nothing was forwarded"),
    }];
    if let Some(c) = o.ctls.first() {
        text.push(format!("VLAN: {}", common::vlan_line(c)));
    }
    for (d, why) in ended {
        text.push(format!("{d}: ended before the run: {why}"));
    }
    if args.irq.interrupts {
        extra.insert("idle".into(), json!(idle));
        text.push(common::idle_line(idle));
    }
    live.finish(extra, &text)
}
