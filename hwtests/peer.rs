//! The kernel-peer test: Linux's own igb driver on the other port, with a VLAN 100 interface
//! (10.99.0.1/24), pings our port, and a small ARP/ICMP responder on our port answers, in every
//! VLAN receive x transmit mode. It checks interoperation with an independent implementation:
//! Linux must accept our tags (hardware- or software-inserted), and we must see its tags.
//!
//! The addresses live only inside the isolated test guest, on a virtual hub with nothing else
//! on it. The library's responder ([`vfio_nic::app::respond`]) answers ARP requests and ICMP echo
//! requests for 10.99.0.2 on VLAN 100 and ignores everything else (IPv6 neighbour discovery).

use std::process::Command;
use std::time::{Duration, Instant};

use vfio_nic::app::respond::{Responder, ResponderConfig};
use vfio_nic::device::{Port, RxQueue, TxQueue};
use vfio_nic::platform::dma::{Packet, Pool};
use vfio_nic::vlan::{PacketVlan, Vid, VlanConfig, VlanControl, VlanRxCtx};

use super::drv;
use super::proc::{self, Bounded};
use super::{step, Ctx, Outcome};

/// How long one shell command of the peer set-up (`ip`, `ping`, `arping`) may take.
const SH_LIMIT: Duration = Duration::from_secs(30);

/// The VLAN the peer tests use.
pub const VID: u16 = 100;
/// Our port's address on that VLAN.
pub const OUR_IP: &str = "10.99.0.2/24";
const PEER_IP: &str = "10.99.0.1/24";

/// The Linux peer's VLAN interface (`<if>.100`, 10.99.0.1/24), removed again on drop.
pub struct PeerVlan {
    ifname: String,
    /// The VLAN interface's name.
    pub vif: String,
}

impl PeerVlan {
    /// Brings `ifname` up and adds the VLAN interface with the peer's address.
    pub fn up(ifname: &str) -> Result<PeerVlan, String> {
        let vif = format!("{ifname}.{VID}");
        let guard = PeerVlan {
            ifname: ifname.to_string(),
            vif: vif.clone(),
        };
        sh(&format!("ip link set {ifname} up"))?;
        if sh(&format!(
            "ip link add link {ifname} name {vif} type vlan id {VID}"
        ))
        .is_err()
        {
            sh(&format!("vconfig add {ifname} {VID}"))?;
        }
        sh(&format!(
            "ip addr add {PEER_IP} dev {vif} && ip link set {vif} up"
        ))?;
        Ok(guard)
    }
}

impl Drop for PeerVlan {
    fn drop(&mut self) {
        let _ = sh(&format!(
            "ip link del {0} 2>/dev/null || vconfig rem {0}",
            self.vif
        ));
        let _ = sh(&format!("ip link set {} down", self.ifname));
    }
}

/// Runs a shell command (at most [`SH_LIMIT`]); its output, or an error naming the command and
/// what it printed.
pub fn sh(cmd: &str) -> Result<String, String> {
    let f = proc::run(
        &format!("`{cmd}`"),
        Command::new("sh").arg("-c").arg(cmd),
        SH_LIMIT,
    )?;
    Ok(f.stdout + &f.stderr)
}

/// Answers until `child` (the ping) exits; returns whether it succeeded.
fn serve(
    child: &mut Bounded,
    rx: &mut impl RxQueue,
    tx: &mut impl TxQueue,
    ctx: impl Fn() -> VlanRxCtx,
    pool: &Pool,
    responder: &mut Responder,
) -> Result<bool, String> {
    let start = Instant::now();
    let mut batch: Vec<Packet> = Vec::new();
    let mut out: Vec<Packet> = Vec::new();
    let mut reply = Vec::new();
    loop {
        if let Some(st) = child.exited() {
            return Ok(st.success());
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err("ping did not finish within 30 s".into());
        }
        batch.clear();
        if rx.rx_burst(&mut batch, 32).map_err(|e| e.to_string())? == 0 {
            std::thread::sleep(Duration::from_micros(500));
            continue;
        }
        let c = ctx();
        for p in &mut batch {
            let tci = p.take_vlan(c);
            if let Ok(r) = responder.handle(p.data(), tci, &mut reply) {
                let mut q = drv::packet(pool, &reply)?;
                if let Some(t) = r.tci {
                    q.set_tx_vlan(t).map_err(|e| e.to_string())?;
                }
                out.push(q);
            }
        }
        let queued_by = Instant::now() + drv::STALL;
        while !out.is_empty() {
            tx.tx_burst(&mut out).map_err(|e| e.to_string())?;
            if !out.is_empty() && Instant::now() > queued_by {
                return Err(format!(
                    "the transmit queue took none of {} replies for {} s (ring stuck?)",
                    out.len(),
                    drv::STALL.as_secs()
                ));
            }
        }
    }
}

/// Linux pings our port over VLAN 100 in every receive x transmit mode.
pub fn kernel_peer_vlan_ping(ctx: &Ctx) -> Outcome {
    let Some(ifname) = ctx.peer_if.clone() else {
        return Outcome::Skip(
            "set VFIO_NIC_PEER_IF to the Linux netdev wired to the first port (kernel-peer layout)"
                .into(),
        );
    };
    let peer = match PeerVlan::up(&ifname) {
        Ok(p) => p,
        Err(e) => return Outcome::Fail(e),
    };
    let vif = peer.vif.clone();
    let result = super::verdict(|| {
        let mut port = drv::open(ctx.ports[0], false)?;
        let mac = port.info().mac;
        let ctl = VlanControl::new(&mut port, &VlanConfig::default()).map_err(|e| e.to_string())?;
        let (mut rx, mut tx) = port.take_queues().map_err(|e| e.to_string())?;
        let pool = rx[0].pool().clone();
        let mut rx = ctl.wrap_rx(rx.remove(0));
        let mut tx = ctl.wrap_tx(tx.remove(0));
        let mut done = Vec::new();
        let rx_all = super::vlan_tests::rx_modes(&mut port, &ctl)?;
        let tx_all = super::vlan_tests::tx_modes(&mut port, &ctl)?;
        for &rxm in &rx_all {
            for &txm in &tx_all {
                ctl.set_rx_mode(&mut port, rxm).map_err(|e| e.to_string())?;
                ctl.set_tx_mode(&mut port, txm).map_err(|e| e.to_string())?;
                let _ = sh(&format!("ip neigh flush dev {vif}"));
                step(format!(
                    "receive {rxm} / transmit {txm}: answering Linux's ping"
                ));
                let mut child = Bounded::spawn(
                    "ping",
                    Command::new("ping").args(["-c", "3", "-W", "2", "-w", "15", "10.99.0.2"]),
                )?;
                let mut responder = Responder::new(ResponderConfig {
                    mac,
                    ip: OUR_IP.parse().map_err(|e: vfio_nic::Error| e.to_string())?,
                    vlan: Some(Vid::new(VID).map_err(|e| e.to_string())?),
                });
                let ok = serve(
                    &mut child,
                    &mut rx,
                    &mut tx,
                    || ctl.rx_ctx(),
                    &pool,
                    &mut responder,
                )?;
                let counts = responder.stats();
                let text = child.finish(Duration::from_secs(5)).stdout;
                if !ok || !text.contains("3 packets received") {
                    return Err(format!(
                        "receive {rxm} / transmit {txm}: ping failed ({counts:?}): {}",
                        text.trim().replace('\n', " | ")
                    ));
                }
                done.push(format!(
                    "{rxm}/{txm} ({} ARP, {} echo)",
                    counts.arp_replies, counts.echo_replies
                ));
            }
        }
        Ok(format!(
            "Linux's ping over VLAN {VID} answered 3/3 in {}",
            done.join(", ")
        ))
    });
    drop(peer);
    result
}
