//! `gen` and `capture`: sending numbered IPv4/UDP frames, and writing received frames to pcap.
//!
//! # Why `capture --gen-on PEER`
//! In-memory ports are wired only inside one process (`sim:0` <-> `sim:1`), and a VFIO device can
//! be opened by one process only, so a generator and a capture that must see each other's frames
//! have to run in one process. `capture PORT --gen-on PEER ...` does exactly that: it opens both
//! ports, sends from PEER with the generator options, and writes what PORT receives. With real
//! NICs it is also the simplest two-port check: one command, one cable.
//!
//! Both loops run on the calling thread: a generator burst, then a receive burst. On the inline
//! software 82599 a transmit delivers into the peer's receive ring at once, so alternating keeps
//! that ring from overflowing.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map};
use vfio_nic::app::capture::{PcapSink, Timestamps};
use vfio_nic::app::wire::{
    build_tcp_frame, build_udp_frame, tcp_frame_offload, UdpFlow, MAX_TCP_FRAME, MAX_UDP_FRAME,
    MIN_UDP_FRAME, TCP_FRAME_HEADERS,
};
use vfio_nic::device::{MacAddr, Port, RxQueue, TxQueue};
use vfio_nic::devices::{self, AnyPort, AnyRx, AnyTx};
use vfio_nic::platform::dma::{Packet, Pool};
use vfio_nic::vlan::{PacketVlan, Tci, VlanControl, VlanRx, VlanTx};
use vfio_nic::{Error, Result};

use crate::common::{self, IrqOpts, RunOpts, VlanRxOpts, VlanTxOpts};
use crate::live::{Channel, Live};

/// What the generator sends (shared by `gen` and `capture --gen-on`).
#[derive(clap::Args, Debug, Clone)]
pub struct GenOpts {
    /// Frame size in bytes without FCS and without the VLAN tag (60..=9014; above 1514 the
    /// path needs jumbo frames, MTU 9000; with --tso up to 65,549, one TSO request) [default: 60].
    /// Frames longer than a pool buffer are sent as chains.
    #[arg(long, value_name = "B")]
    pub size: Option<usize>,
    /// Send TCP/IPv4 frames (one flow, ACK|PSH, sequence numbers advancing) with the IPv4 and
    /// TCP checksums left to the port's transmit offloads (in software where it has none).
    #[arg(long)]
    pub tcp: bool,
    /// With --tcp: every frame is one TSO request, cut by the port into segments of MSS
    /// payload bytes (in software where it has no TSO).
    #[arg(long, value_name = "MSS", requires = "tcp")]
    pub tso: Option<u16>,
    /// Tag every frame with this VLAN (and priority): VID 0..=4094, PCP 0..=7.
    #[arg(long, value_name = "VID[:PCP]")]
    pub vlan: Option<String>,
    /// Where the generator's VLAN tags are inserted: hw (by the NIC) or sw (written into the
    /// frame) [default: sw].
    #[arg(long, value_name = "hw|sw")]
    pub vlan_tx: Option<String>,
    /// Destination MAC [default: ff:ff:ff:ff:ff:ff].
    #[arg(long, value_name = "MAC")]
    pub dst: Option<String>,
    /// Source IPv4 address [default: 198.18.0.1].
    #[arg(long, value_name = "IP")]
    pub src_ip: Option<Ipv4Addr>,
    /// Destination IPv4 address [default: 198.18.0.2].
    #[arg(long, value_name = "IP")]
    pub dst_ip: Option<Ipv4Addr>,
    /// Frames per second (default: as fast as the port takes them).
    #[arg(long, value_name = "PPS")]
    pub rate: Option<f64>,
}

impl GenOpts {
    fn any(&self) -> bool {
        self.size.is_some()
            || self.tcp
            || self.tso.is_some()
            || self.vlan.is_some()
            || self.vlan_tx.is_some()
            || self.dst.is_some()
            || self.src_ip.is_some()
            || self.dst_ip.is_some()
            || self.rate.is_some()
    }
}

/// Options of `gen`.
#[derive(clap::Args, Debug)]
pub struct GenArgs {
    #[arg(help = vfio_nic::devices::kinds::port_arg_help())]
    pub port: String,
    /// Frames to send (default: until --duration or Ctrl-C).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    #[command(flatten)]
    pub gen: GenOpts,
    /// Packets per burst.
    #[arg(long, default_value_t = 32)]
    pub burst: usize,
    /// Turn the port's VLAN filter on with these VIDs (it affects what the port receives).
    #[arg(long, value_name = "VID,...")]
    pub vlan_filter: Option<String>,
    /// The port's MTU (Intel ports, 68 to the chip's limit): above 1500 it receives
    /// jumbo frames, as chains of buffers [default: 1500].
    #[arg(long, value_name = "M")]
    pub mtu: Option<u16>,
    #[command(flatten)]
    pub run: RunOpts,
}

/// Options of `capture`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Frames are written as they were on the wire: a VLAN tag the NIC or the \
receive burst removed is put back, so every --vlan-rx mode gives the same file.\n\n\
In-memory ports are wired only inside one process (sim:0 <-> sim:1), so to see frames flow \
without hardware, let capture run the generator on the peer: \n  \
vfio-nic capture sim:1 -w out.pcap --gen-on sim:0 --count 100 --vlan 100:5\n\
The generator options (--size, --vlan, --vlan-tx, --dst, --src-ip, --dst-ip, --rate) need --gen-on."
)]
pub struct CaptureArgs {
    /// The port to capture on.
    pub port: String,
    /// The pcap file to write (Ethernet link type, microsecond timestamps).
    #[arg(short = 'w', long = "write", value_name = "FILE.pcap")]
    pub file: PathBuf,
    /// Stop after this many frames (with --gen-on: also the number of frames generated).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    #[command(flatten)]
    pub vlan: VlanRxOpts,
    /// Timestamp every frame 0 (files of the same traffic are then identical byte for byte).
    #[arg(long, conflicts_with = "timestamps")]
    pub no_timestamps: bool,
    /// Timestamps: wall (clock time), zero, or index (frame i at i microseconds).
    #[arg(long, value_name = "wall|zero|index")]
    pub timestamps: Option<String>,
    /// Run the generator on this port (wired to PORT) in the same process.
    #[arg(long, value_name = "PEER")]
    pub gen_on: Option<String>,
    /// The MTU of PORT (and of PEER): above 1500 jumbo frames are received, as chains of
    /// buffers, and written whole [default: 1500].
    #[arg(long, value_name = "M")]
    pub mtu: Option<u16>,
    #[command(flatten)]
    pub gen: GenOpts,
    #[command(flatten)]
    pub irq: IrqOpts,
    /// Packets per burst.
    #[arg(long, default_value_t = 32)]
    pub burst: usize,
    #[command(flatten)]
    pub run: RunOpts,
}

fn check_burst(burst: usize) -> Result<()> {
    if burst == 0 || burst > 512 {
        return Err(Error::InvalidConfig(format!(
            "--burst {burst} must be between 1 and 512"
        )));
    }
    Ok(())
}

/// A parsed generator: everything but the port.
struct GenPlan {
    size: usize,
    tcp: bool,
    tso: Option<u16>,
    mtu: Option<u16>,
    tag: Option<Tci>,
    tx: VlanTxOpts,
    dst: MacAddr,
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    rate: Option<f64>,
    count: Option<u64>,
}

impl GenPlan {
    fn parse(o: &GenOpts, count: Option<u64>, mtu: Option<u16>) -> Result<GenPlan> {
        let size = o.size.unwrap_or(MIN_UDP_FRAME);
        let max = if o.tso.is_some() {
            MAX_TCP_FRAME
        } else {
            MAX_UDP_FRAME
        };
        if !(MIN_UDP_FRAME..=max).contains(&size) {
            return Err(Error::InvalidConfig(format!(
                "--size {size} is outside {MIN_UDP_FRAME}..={max} (frame bytes without FCS and VLAN tag{})",
                if o.tso.is_some() { ", one TSO request" } else { "; up to 65,549 with --tcp --tso" }
            )));
        }
        if o.tso == Some(0) {
            return Err(Error::InvalidConfig(
                "--tso 0: the MSS is the TCP payload bytes per segment, at least 1".into(),
            ));
        }
        if let Some(r) = o.rate {
            if !(r > 0.0 && r.is_finite()) {
                return Err(Error::InvalidConfig(format!(
                    "--rate {r} must be a positive number of frames per second"
                )));
            }
        }
        Ok(GenPlan {
            size,
            tcp: o.tcp,
            tso: o.tso,
            mtu,
            tag: o
                .vlan
                .as_deref()
                .map(|s| common::parse_tag(s, "--vlan"))
                .transpose()?,
            tx: VlanTxOpts {
                vlan_tx: o.vlan_tx.clone().unwrap_or_else(|| "sw".into()),
            },
            dst: o
                .dst
                .as_deref()
                .map(str::parse)
                .transpose()?
                .unwrap_or(MacAddr::BROADCAST),
            src_ip: o.src_ip.unwrap_or(Ipv4Addr::new(198, 18, 0, 1)),
            dst_ip: o.dst_ip.unwrap_or(Ipv4Addr::new(198, 18, 0, 2)),
            rate: o.rate,
            count,
        })
    }
}

/// A running generator on one port's first queue pair.
struct Generator {
    name: String,
    ctl: VlanControl,
    // Kept for its pool (transmit buffers come from it) and drained so its ring never stalls.
    rx: AnyRx,
    tx: VlanTx<AnyTx>,
    flow: UdpFlow,
    /// TCP frames with offloads (and TSO's MSS), and the next TCP sequence number.
    tcp: Option<Option<u16>>,
    tcp_seq: u32,
    tag: Option<Tci>,
    rate: Option<f64>,
    count: Option<u64>,
    sent: u64,
    batch: Vec<Packet>,
    frame: Vec<u8>,
    start: Instant,
}

impl Generator {
    fn open(name: &str, plan: &GenPlan, filter: Option<&str>) -> Result<(AnyPort, Generator)> {
        let rx_opts = VlanRxOpts {
            vlan_rx: "sw".into(),
            vlan_filter: filter.map(str::to_string),
        };
        let cfg = common::vlan_config(Some(&rx_opts), Some(&plan.tx))?;
        let mut pcfg = common::port_config_mtu(1, plan.mtu);
        common::want_vlan_filter(&mut pcfg, &cfg);
        let mut port = devices::open(name, &pcfg)?;
        let ctl = common::vlan_control(&mut port, &cfg)?;
        let src_mac = port.info().mac;
        let (mut rx, mut tx) = port.take_queues()?;
        let g = Generator {
            name: name.to_string(),
            tx: ctl.wrap_tx(tx.swap_remove(0)),
            rx: rx.swap_remove(0),
            ctl,
            flow: UdpFlow {
                dst_mac: plan.dst,
                src_mac,
                src_ip: plan.src_ip,
                dst_ip: plan.dst_ip,
                src_port: 1024,
                dst_port: 9,
                size: plan.size,
            },
            tcp: plan.tcp.then_some(plan.tso),
            tcp_seq: 1,
            tag: plan.tag,
            rate: plan.rate,
            count: plan.count,
            sent: 0,
            batch: Vec::new(),
            frame: Vec::new(),
            start: Instant::now(),
        };
        Ok((port, g))
    }

    fn finished(&self) -> bool {
        self.count.is_some_and(|c| self.sent >= c) && self.batch.is_empty()
    }

    /// Sends up to one burst; counts into `ch`. Returns how many frames were queued.
    fn step(&mut self, burst: usize, ch: &Channel) -> Result<usize> {
        let mut want = burst.saturating_sub(self.batch.len()) as u64;
        if let Some(c) = self.count {
            want = want.min(c - self.sent);
        }
        if let Some(r) = self.rate {
            let allowed = (self.start.elapsed().as_secs_f64() * r) as u64;
            want = want.min(allowed.saturating_sub(self.sent));
        }
        for _ in 0..want {
            match self.tcp {
                Some(_) => build_tcp_frame(&self.flow, self.tcp_seq, &mut self.frame),
                None => build_udp_frame(&self.flow, self.sent, &mut self.frame),
            };
            // A frame longer than a buffer goes as a chain.
            let Some(mut p) = self.rx.pool().packet_from(&self.frame) else {
                break;
            };
            if let Some(tso) = self.tcp {
                p.set_tx_offload(tcp_frame_offload(tso));
                // The payload: the frame behind its 54 bytes of headers.
                let payload = self.frame.len() - TCP_FRAME_HEADERS;
                self.tcp_seq = self.tcp_seq.wrapping_add(payload as u32);
            }
            if let Some(t) = self.tag {
                p.set_tx_vlan(t).map_err(|_| Error::ReservedVlanId {
                    what: "as a transmit tag",
                })?;
            }
            self.batch.push(p);
            self.sent += 1;
        }
        if self.batch.is_empty() {
            return Ok(0);
        }
        let bytes: u64 = self.batch.iter().map(|p| self.wire_len(p)).sum();
        let before = self.batch.len();
        let n = self.tx.tx_burst(&mut self.batch)?;
        let left: u64 = self.batch.iter().map(|p| self.wire_len(p)).sum();
        ch.add(n as u64, bytes - left);
        debug_assert_eq!(before - self.batch.len(), n);
        // Frames sent to this port are not ours to keep.
        let mut junk = Vec::new();
        self.rx.rx_burst(&mut junk, burst)?;
        Pool::free_bulk(junk);
        Ok(n)
    }

    fn wire_len(&self, p: &Packet) -> u64 {
        (p.frame_len() + if p.tx_vlan().is_some() { 4 } else { 0 }) as u64
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "port": self.name,
            "sent": self.sent - self.batch.len() as u64,
            "size": self.flow.size,
            "tcp": self.tcp.is_some(),
            "tso_mss": self.tcp.flatten(),
            "vlan": self.tag.map(|t| json!({"vid": t.vid(), "pcp": t.pcp()})),
            "vlan_tx": self.ctl.tx_mode().to_string(),
            "dst": self.flow.dst_mac.to_string(),
            "src_ip": self.flow.src_ip.to_string(),
            "dst_ip": self.flow.dst_ip.to_string(),
            "rate": self.rate,
        })
    }
}

/// `vfio-nic gen`.
pub fn gen(args: &GenArgs, json_out: bool, stop: Arc<AtomicBool>) -> Result<()> {
    args.run.check()?;
    check_burst(args.burst)?;
    let plan = GenPlan::parse(&args.gen, args.count, args.mtu)?;
    let (mut port, mut g) = Generator::open(&args.port, &plan, args.vlan_filter.as_deref())?;
    let mut live = Live::new(vec![format!("{} tx", args.port)], &args.run, json_out, stop);
    let mut failure = None;
    while !live.done() && !g.finished() {
        if let Err(e) = g.step(args.burst, live.ch(0)) {
            failure = Some(e);
            break;
        }
        live.tick();
        if g.rate.is_some() {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    let unsent = g.batch.len();
    Pool::free_vec(&mut g.batch);
    let hw = common::read_hw(&mut port);
    let mut extra = Map::new();
    extra.insert("generator".into(), g.json());
    extra.insert("hw".into(), common::hw_json(&hw));
    let mut text = vec![format!(
        "sent {} frames of {} bytes{} from {} ({} VLAN insertion)",
        g.sent - unsent as u64,
        g.flow.size,
        g.tag
            .map(|t| format!(" tagged vid {} pcp {}", t.vid(), t.pcp()))
            .unwrap_or_default(),
        args.port,
        g.ctl.tx_mode()
    )];
    if let Some(v) = hw.get("GPTC") {
        text.push(format!("device GPTC {v}"));
    }
    // The run's own failure before any error of the printing (a reader gone, `| head`).
    let printed = live.finish(extra, &text);
    failure.map_or(printed, Err)
}

/// `vfio-nic capture`.
pub fn capture(args: &CaptureArgs, json_out: bool, stop: Arc<AtomicBool>) -> Result<()> {
    args.run.check()?;
    check_burst(args.burst)?;
    if args.gen_on.is_none() && args.gen.any() {
        return Err(Error::InvalidConfig(
            "generator options (--size, --vlan, --vlan-tx, --dst, --src-ip, --dst-ip, --rate) need --gen-on PEER".into(),
        ));
    }
    let ts = match (args.no_timestamps, args.timestamps.as_deref()) {
        (true, _) | (_, Some("zero")) => Timestamps::Zero,
        (_, None | Some("wall")) => Timestamps::Wall,
        (_, Some("index")) => Timestamps::Index,
        (_, Some(other)) => {
            return Err(Error::InvalidConfig(format!(
                "--timestamps '{other}': use wall, zero or index"
            )))
        }
    };
    let vcfg = common::vlan_config(Some(&args.vlan), None)?;
    let plan = args
        .gen_on
        .as_ref()
        .map(|_| GenPlan::parse(&args.gen, args.count, args.mtu))
        .transpose()?;
    // The file first: a bad path fails before any device is touched.
    let mut sink = PcapSink::create(&args.file, ts)?;
    args.irq.check()?;
    let mut pcfg = common::port_config_mtu(1, args.mtu);
    common::want_vlan_filter(&mut pcfg, &vcfg);
    args.irq.apply(&mut pcfg);
    let mut port = devices::open(&args.port, &pcfg)?;
    let ctl = common::vlan_control(&mut port, &vcfg)?;
    let mut gen = match (&args.gen_on, &plan) {
        (Some(peer), Some(plan)) => Some(Generator::open(peer, plan, None)?),
        _ => None,
    };
    let (mut rxs, _txs) = port.take_queues()?;
    args.irq.require(&args.port, &rxs)?;
    // Interrupt mode: sleep when idle (not while the in-process generator sends: it needs
    // this thread).
    let mut idle = args.irq.idle();
    let mut rx: VlanRx<AnyRx> = ctl.wrap_rx(rxs.swap_remove(0));

    let mut names = vec![format!("{} rx", args.port)];
    if let Some(peer) = &args.gen_on {
        names.push(format!("{peer} tx"));
    }
    let mut live = Live::new(names, &args.run, json_out, stop);
    let mut batch = Vec::with_capacity(args.burst);
    let mut captured = 0u64;
    let mut bytes = 0u64;
    let mut last_rx = Instant::now();
    let mut failure = None;
    // With a generator, a capture that sees nothing for this long after the generator finished
    // is over (the rest was filtered or lost).
    let grace = Duration::from_millis(500);
    loop {
        if live.done() || args.count.is_some_and(|c| captured >= c) {
            break;
        }
        if let Some((_, g)) = &mut gen {
            if g.finished() {
                if last_rx.elapsed() > grace {
                    break;
                }
            } else if let Err(e) = g.step(args.burst, live.ch(1)) {
                failure = Some(e);
                break;
            }
        }
        let want = args
            .count
            .map_or(args.burst, |c| args.burst.min((c - captured) as usize));
        match rx.rx_burst(&mut batch, want) {
            Ok(0) => {
                if let (Some(i), None) = (idle.as_mut(), &gen) {
                    if i.after_round(0) {
                        if let Err(e) = i.sleep(&mut [&mut rx as &mut dyn RxQueue]) {
                            failure = Some(e);
                            break;
                        }
                    }
                }
            }
            Ok(n) => {
                last_rx = Instant::now();
                if let Some(i) = idle.as_mut() {
                    i.after_round(n); // frames: the idle count starts again
                }
                let ctx = rx.ctx();
                for p in &batch {
                    let before = sink.bytes();
                    if let Err(e) = sink.write_packet(p, ctx) {
                        failure = Some(e);
                        break;
                    }
                    bytes += sink.bytes() - before;
                }
                captured += n as u64;
                let q = rx.stats();
                live.ch(0).store(captured, bytes, q.no_room, q.dropped);
                Pool::free_vec(&mut batch);
                if failure.is_some() {
                    break;
                }
            }
            Err(e) => {
                failure = Some(e.into());
                break;
            }
        }
        live.tick();
        if gen.is_none() && batch.is_empty() {
            std::hint::spin_loop();
        }
    }
    let frames = sink.frames();
    sink.finish()?;
    let hw = common::read_hw(&mut port);
    let vs = rx.vlan_stats();
    let mut extra = Map::new();
    extra.insert("file".into(), json!(args.file.display().to_string()));
    extra.insert("frames".into(), json!(frames));
    extra.insert("vlan".into(), common::vlan_json(&ctl));
    extra.insert(
        "vlan_stats".into(),
        json!({"stripped": vs.stripped, "filtered": vs.filtered, "malformed": vs.malformed}),
    );
    extra.insert("hw".into(), common::hw_json(&hw));
    if let Some((_, g)) = &gen {
        extra.insert("generator".into(), g.json());
    }
    let mut text = vec![format!(
        "wrote {frames} frames to {} (VLAN {})",
        args.file.display(),
        common::vlan_line(&ctl)
    )];
    if let Some(i) = &idle {
        extra.insert("idle".into(), json!(i.stats()));
        text.push(common::idle_line(&i.stats()));
    }
    // The run's own failure before any error of the printing (a reader gone, `| head`).
    let printed = live.finish(extra, &text);
    drop(rx);
    drop(gen);
    failure.map_or(printed, Err)
}
