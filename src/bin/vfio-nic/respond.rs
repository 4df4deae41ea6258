//! `respond`: answer ARP and ping for one address, so any host's `ping` checks the port end to end.
//!
//! The logic is [`vfio_nic::app::respond::Responder`]; this file moves frames. Replies reuse the
//! request's buffer (a reply is never longer than its request, padding aside), carry the
//! request's VLAN tag through the transmit VLAN mode, and go out in the same burst.
//!
//! `--probe-from PEER` opens the wired peer port in the same process and sends it an ARP request
//! and pings, so the whole path can be seen without a second machine (on `sim:` ports, or two
//! cabled NICs).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map};
use vfio_nic::app::respond::{arp_request, echo_request, Ipv4Cidr, Responder, ResponderConfig};
use vfio_nic::app::wire::{
    ArpPacket, EthernetFrame, IcmpPacket, Ipv4Packet, ARP_REPLY, ICMP_ECHO_REPLY,
};
use vfio_nic::device::{MacAddr, Port, RxQueue, TxQueue};
use vfio_nic::devices::{self, AnyRx, AnyTx};
use vfio_nic::platform::dma::Pool;
use vfio_nic::vlan::{PacketVlan, Tci, VlanRx, VlanTx};
use vfio_nic::{Error, Result};

use crate::common::{self, IrqOpts, RunOpts, VlanRxOpts, VlanTxOpts};
use crate::live::Live;
use crate::{CliError, CliResult};

/// Options of `respond`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Answers ARP requests for ADDR and ICMP echo requests to ADDR (and this \
port's MAC); with --vlan only on that VLAN, otherwise only untagged (or VID 0) frames. \
From another host: `ip addr add 192.0.2.2/24 dev eth0; ping 192.0.2.1`.\n\
Without a second machine: `vfio-nic respond sim:1 --ip 192.0.2.1/24 --probe-from sim:0` sends \
an ARP request and pings from the wired peer in the same process and checks the replies."
)]
pub struct RespondArgs {
    /// The port to answer on.
    pub port: String,
    /// The address to answer for, with its prefix length (e.g. 192.0.2.1/24).
    #[arg(long, value_name = "ADDR/PREFIX")]
    pub ip: String,
    /// Answer only on this VLAN (replies carry the request's tag).
    #[arg(long, value_name = "VID")]
    pub vlan: Option<String>,
    #[command(flatten)]
    pub rx: VlanRxOpts,
    #[command(flatten)]
    pub tx: VlanTxOpts,
    /// Send an ARP request and pings from this port (wired to PORT) and check the replies; the
    /// command ends when they are all answered (or after --duration, default 5 s).
    #[arg(long, value_name = "PEER")]
    pub probe_from: Option<String>,
    /// Pings sent by --probe-from.
    #[arg(long, default_value_t = 3)]
    pub pings: u16,
    #[command(flatten)]
    pub irq: IrqOpts,
    #[command(flatten)]
    pub run: RunOpts,
}

/// The prober: the peer's queues and what it has seen.
struct Probe {
    name: String,
    rx: AnyRx,
    tx: VlanTx<AnyTx>,
    mac: MacAddr,
    arp_from: Option<MacAddr>,
    echo_replies: u16,
    pings: u16,
}

impl Probe {
    /// An address in the responder's subnet for the prober: ADDR + 1 or ADDR - 1, whichever is
    /// a host address there.
    fn ip(target: Ipv4Cidr) -> std::net::Ipv4Addr {
        let a = u32::from(target.addr);
        let host = u32::MAX.checked_shr(u32::from(target.prefix)).unwrap_or(0);
        [a.wrapping_add(1), a.wrapping_sub(1)]
            .into_iter()
            .find(|&c| host < 3 || (c & host != 0 && c & host != host))
            .unwrap_or(a ^ 1)
            .into()
    }

    fn send(&mut self, frames: Vec<Vec<u8>>, tag: Option<Tci>) -> Result<()> {
        let mut batch = Vec::new();
        for f in frames {
            let mut p = self.rx.pool().alloc().ok_or_else(|| {
                Error::InvalidConfig(format!("{}: no free buffer for a probe frame", self.name))
            })?;
            if !p.set_data(&f) {
                return Err(Error::InvalidConfig(format!(
                    "{}: a probe frame does not fit a buffer",
                    self.name
                )));
            }
            if let Some(t) = tag {
                p.set_tx_vlan(t).map_err(|_| Error::ReservedVlanId {
                    what: "as a transmit tag",
                })?;
            }
            batch.push(p);
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while !batch.is_empty() && Instant::now() < deadline {
            self.tx.tx_burst(&mut batch)?;
        }
        Pool::free_bulk(batch);
        Ok(())
    }

    /// Reads the peer's receive queue and checks replies (tags stay in the frame: software
    /// receive mode is not used on the prober, so a tagged reply is parsed after its tag).
    fn poll(&mut self, cfg: &ResponderConfig, tag: Option<Tci>) -> Result<()> {
        let mut batch = Vec::new();
        self.rx.rx_burst(&mut batch, 32)?;
        for p in &batch {
            let d = p.data();
            let tagged = d.len() >= 14 && d[12..14] == [0x81, 0x00];
            if let Some(t) = tag {
                if !tagged || d.len() < 18 || d[14..16] != t.raw().to_be_bytes() {
                    continue;
                }
                let mut untagged = d[..12].to_vec();
                untagged.extend_from_slice(&d[16..]);
                self.check(&untagged, cfg);
                continue;
            }
            if !tagged {
                self.check(d, cfg);
            }
        }
        Pool::free_bulk(batch);
        Ok(())
    }

    fn check(&mut self, frame: &[u8], cfg: &ResponderConfig) {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return;
        };
        if eth.dst() != self.mac || eth.src() != cfg.mac {
            return;
        }
        if let Ok(arp) = ArpPacket::new_checked(eth.payload()) {
            if arp.operation() == ARP_REPLY && arp.sender_ip() == cfg.ip.addr {
                self.arp_from = Some(arp.sender_mac());
            }
            return;
        }
        if let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) {
            if let Ok(icmp) = IcmpPacket::new_checked(ip.payload()) {
                if ip.src() == cfg.ip.addr
                    && ip.verify_checksum()
                    && icmp.verify_checksum()
                    && icmp.msg_type() == ICMP_ECHO_REPLY
                {
                    self.echo_replies += 1;
                }
            }
        }
    }

    fn done(&self) -> bool {
        self.arp_from.is_some() && self.echo_replies >= self.pings
    }
}

/// `vfio-nic respond`.
pub fn run(args: &RespondArgs, json_out: bool, stop: Arc<AtomicBool>) -> CliResult {
    args.run.check()?;
    args.irq.check()?;
    let ip: Ipv4Cidr = args.ip.parse()?;
    let vlan = args
        .vlan
        .as_deref()
        .map(|v| common::parse_vid(v, "--vlan"))
        .transpose()?;
    let vcfg = common::vlan_config(Some(&args.rx), Some(&args.tx))?;
    let mut pcfg = common::port_config(1);
    common::want_vlan_filter(&mut pcfg, &vcfg);
    args.irq.apply(&mut pcfg);
    let mut port = devices::open(&args.port, &pcfg)?;
    let ctl = common::vlan_control(&mut port, &vcfg)?;
    let cfg = ResponderConfig {
        mac: port.info().mac,
        ip,
        vlan,
    };
    let mut responder = Responder::new(cfg);
    // The prober is opened before the responder's queues start, so nothing it sends is missed.
    let mut probe = match &args.probe_from {
        Some(peer) => {
            let mut pp = devices::open(peer, &common::port_config(1))?;
            let pctl = common::vlan_control(&mut pp, &common::vlan_config(None, None)?)?;
            let mac = pp.info().mac;
            let (mut r, mut t) = pp.take_queues()?;
            Some((
                pp,
                Probe {
                    name: peer.clone(),
                    rx: r.swap_remove(0),
                    tx: pctl.wrap_tx(t.swap_remove(0)),
                    mac,
                    arp_from: None,
                    echo_replies: 0,
                    pings: args.pings,
                },
            ))
        }
        None => None,
    };
    let (mut rxs, mut txs) = port.take_queues()?;
    args.irq.require(&args.port, &rxs)?;
    let mut idle = args.irq.idle();
    let mut rx: VlanRx<AnyRx> = ctl.wrap_rx(rxs.swap_remove(0));
    let mut tx: VlanTx<AnyTx> = ctl.wrap_tx(txs.swap_remove(0));

    let mut run = args.run.clone();
    if probe.is_some() && run.duration.is_none() {
        run.duration = Some(5.0);
    }
    let mut live = Live::new(
        vec![format!("{} rx", args.port), format!("{} tx", args.port)],
        &run,
        json_out,
        stop,
    );
    live.watch_links([(args.port.clone(), port.health())]);
    let tag = vlan.map(Tci::from_vid);
    if let Some((_, p)) = &mut probe {
        let pip = Probe::ip(ip);
        let mut frames = vec![arp_request(p.mac, pip, ip.addr)];
        for seq in 0..args.pings {
            frames.push(echo_request(
                p.mac,
                cfg.mac,
                pip,
                ip.addr,
                0x7666,
                seq,
                b"vfio-nic respond --probe-from\0\0\0",
            ));
        }
        p.send(frames, tag)?;
    }
    let (mut rx_n, mut rx_bytes, mut tx_n, mut tx_bytes, mut tx_drop) = (0u64, 0u64, 0, 0, 0);
    let mut batch = Vec::with_capacity(32);
    let mut replies = Vec::with_capacity(32);
    let mut out = Vec::with_capacity(128);
    while !live.done() {
        let n = rx.rx_burst(&mut batch, 32)?;
        if n > 0 {
            rx_n += n as u64;
            let ctx = rx.ctx();
            for mut p in batch.drain(..) {
                rx_bytes += p.len() as u64;
                let tci = p.take_vlan(ctx);
                if let Ok(reply) = responder.handle(p.data(), tci, &mut out) {
                    if !p.set_data(&out) {
                        continue;
                    }
                    p.meta.flags = 0;
                    if let Some(t) = reply.tci {
                        if p.set_tx_vlan(t).is_err() {
                            continue;
                        }
                    }
                    tx_bytes += (out.len() + if reply.tci.is_some() { 4 } else { 0 }) as u64;
                    replies.push(p);
                }
            }
            if !replies.is_empty() {
                let want = replies.len() as u64;
                let sent = tx.tx_burst(&mut replies)? as u64;
                tx_n += sent;
                tx_drop += want - sent;
                Pool::free_vec(&mut replies);
            }
            let q = rx.stats();
            live.ch(0).store(rx_n, rx_bytes, q.no_room, q.dropped);
            live.ch(1).store(tx_n, tx_bytes, tx_drop, 0);
        }
        if let Some((_, p)) = &mut probe {
            p.poll(&cfg, tag)?;
            if p.done() {
                break;
            }
        }
        live.tick();
        // Interrupt mode: after enough empty polls, sleep until a frame arrives.
        if let Some(idle) = idle.as_mut() {
            if idle.after_round(n) {
                idle.sleep(&mut [&mut rx])?;
            }
        }
    }
    let st = responder.stats();
    let hw = common::read_hw(&mut port);
    let mut extra = Map::new();
    extra.insert("ip".into(), json!(ip.to_string()));
    extra.insert("mac".into(), json!(cfg.mac.to_string()));
    extra.insert("vlan".into(), json!(vlan.map(|v| v.get())));
    extra.insert(
        "responder".into(),
        json!({"arp_replies": st.arp_replies, "echo_replies": st.echo_replies,
               "wrong_vlan": st.wrong_vlan, "not_for_us": st.not_for_us, "bad": st.bad}),
    );
    extra.insert("vlan_config".into(), common::vlan_json(&ctl));
    extra.insert("hw".into(), common::hw_json(&hw));
    let mut text = vec![format!(
        "answered {} ARP requests and {} pings for {ip} on {}{}; ignored {} on other VLANs, {} for others, {} malformed",
        st.arp_replies,
        st.echo_replies,
        args.port,
        vlan.map(|v| format!(" VLAN {v}")).unwrap_or_default(),
        st.wrong_vlan,
        st.not_for_us,
        st.bad
    )];
    if let Some(idle) = &idle {
        extra.insert("idle".into(), json!(idle.stats()));
        text.push(common::idle_line(&idle.stats()));
    }
    let mut probe_ok = true;
    if let Some((_, p)) = &probe {
        probe_ok = p.done();
        extra.insert(
            "probe".into(),
            json!({"from": p.name, "arp_reply_from": p.arp_from.map(|m| m.to_string()),
                   "echo_replies": p.echo_replies, "pings": p.pings, "ok": probe_ok}),
        );
        text.push(format!(
            "probe from {}: ARP reply {}, {}/{} echo replies: {}",
            p.name,
            p.arp_from
                .map(|m| format!("from {m}"))
                .unwrap_or_else(|| "missing".into()),
            p.echo_replies,
            p.pings,
            if probe_ok { "ok" } else { "FAILED" }
        ));
    }
    // The probe's verdict before any error of the printing (a reader gone, `| head`).
    let printed = live.finish(extra, &text);
    if !probe_ok {
        return Err(CliError::Failed(format!(
            "the probe from {} did not get every reply; check --vlan and the VLAN filter of both ports",
            args.probe_from.as_deref().unwrap_or("")
        )));
    }
    Ok(printed?)
}
