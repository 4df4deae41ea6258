//! The af_packet backend: any Linux network interface as a port (`afp:IFNAME`).
//!
//! Each queue pair is one packet socket bound to the interface, with TPACKET_V2 receive and
//! transmit rings (`platform::packet`). With more than one queue the sockets join one fanout
//! group, and the kernel spreads flows over them by hash. Frames are copied out of the receive
//! ring into the queue's pool buffers and out of pool buffers into the transmit ring, so the
//! burst API, `Packet` and the pools are those of every other device. What a user gets is the
//! tool, the capture, the responder and the benchmark on a machine without a free NIC, against
//! a Linux peer set up in seconds.
//!
//! VLAN, with the answers of every other device (docs/vlan-rules.md):
//! - the kernel has already taken the outer tag out of every received frame into the ring
//!   header (`tp_vlan_tci`, `tp_vlan_tpid`) before a packet socket sees it, since Linux 3.0,
//!   whatever the NIC does. So this device "strips" by doing nothing: where the VLAN layer asks
//!   for stripping (receive Hardware mode, and Software mode outside extended mode, see
//!   `VlanCaps::rx_pre_stripped`), the packet carries the tag as metadata. Everywhere else
//!   (Deferred mode, extended mode, a port used without the VLAN layer, and a tag whose TPID is
//!   not the one the port counts) the tag is put back while copying, with the TPID the kernel
//!   reports, and the frame is delivered as it was on the wire. DPDK's af_packet driver always
//!   writes 0x8100 there, which is wrong for an 802.1ad outer tag.
//! - Transmit: the kernel ignores the ring header's VLAN field, so a tag is inserted while
//!   copying into the ring frame (the VLAN layer's Software mode). Hardware insertion is refused.
//! - Sizes: the kernel sends a frame of MTU + 14 bytes, or MTU + 18 if its ethertype is 0x8100
//!   (`packet_extra_vlan_len_allowed`); anything larger is refused here, counted and logged,
//!   never handed to the kernel to drop silently.
//!
//! Any MTU: the ring frames are sized for the interface's MTU (`RingGeometry::for_frames`,
//! the kernel's rules for ring geometry), not for the pool's buffers, so that an MTU-9000 link
//! or `lo` (MTU 65,536) opens with the default 2 KiB buffers. A received frame longer than a
//! buffer is copied into a chain of buffers (`Packet::push_segment`), as a NIC's scatter would
//! deliver it; a chain to send is gathered into one ring frame while copying. Ring memory grows
//! with the MTU: 512 frames of `lo` are 37 MiB per ring (`afp:lo,frames=N` for less).
//!
//! Checksums: frames that the peer's own network stack sends over a veth pair (TCP, UDP with
//! checksum offload) arrive with the checksum unfinished (`TP_STATUS_CSUMNOTREADY`); they are
//! delivered as they are, and forwarding them onward carries the unfinished checksum. Turn the
//! peer's offload off (`ethtool -K IFNAME tx off`) when that matters; raw test traffic and
//! frames from a real NIC are complete.
//!
//! System calls: none to receive (the ring is read in memory, never polled), one `send()` per
//! transmit burst that queued something (the kick). Each queue counts them
//! ([`AfpRx::syscalls`], [`AfpTx::syscalls`]).
//!
//! Facts and their sources: docs/dpaa2-afpacket.md. Errors name what to do: no such
//! interface, interface down, not permitted (CAP_NET_RAW), ring memory refused.

mod queue;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

pub use queue::{AfpRx, AfpTx};

use crate::device::{LinkStatus, MacAddr, Port, PortInfo, PortStats, QueueSet};
use crate::error::{Error, Result};
use crate::platform::dma::{IdentityMapper, Pool, PoolConfig};
use crate::platform::packet::{self, Interface, PacketSocket, RingGeometry, SocketCounters};
use crate::vlan::{Tpid, Vid, VlanCaps, VlanHardware};

/// Configuration of an af_packet port (also settable in the port name:
/// `afp:IFNAME,queues=N,frames=N`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// Queue pairs (sockets in one fanout group when more than one).
    pub queues: u16,
    /// Frames per ring (each socket has a receive and a transmit ring), at least: rounded up
    /// to whole ring blocks (515 for 512 at MTU 1500; `PortInfo::rx_ring` says how many).
    pub frames: u32,
    /// The pool of each receive queue.
    pub pool: PoolConfig,
}

impl Default for AfPacketConfig {
    /// One queue, rings of 512 frames (DPDK's default), 2,048 buffers per receive queue.
    fn default() -> Self {
        AfPacketConfig {
            queues: 1,
            frames: 512,
            pool: PoolConfig {
                buffers: 2048,
                ..PoolConfig::default()
            },
        }
    }
}

/// Splits `IFNAME,key=value,...` into the interface name and `config` with the options applied.
pub fn parse_name(spec: &str, config: &AfPacketConfig) -> Result<(String, AfPacketConfig)> {
    let bad = |reason: String| Error::BadPortName {
        input: format!("afp:{spec}"),
        reason,
    };
    let mut parts = spec.split(',');
    let ifname = parts.next().unwrap_or_default();
    if ifname.is_empty() || ifname.len() > 15 || ifname.contains(['/', ' ', ':']) {
        return Err(bad(format!(
            "'{ifname}' is not an interface name (1 to 15 characters, no '/', ':' or spaces)"
        )));
    }
    let mut c = config.clone();
    for opt in parts {
        let (k, v) = opt
            .split_once('=')
            .ok_or_else(|| bad(format!("option '{opt}' is not key=value")))?;
        let n: u32 = v
            .parse()
            .map_err(|_| bad(format!("option {k}: '{v}' is not a number")))?;
        match k {
            "queues" if (1..=64).contains(&n) => c.queues = n as u16,
            "frames" if (2..=65536).contains(&n) => c.frames = n,
            "queues" | "frames" => {
                return Err(bad(format!(
                    "option {k}={n} is out of range (queues 1..=64, frames 2..=65536)"
                )))
            }
            _ => return Err(bad(format!("unknown option '{k}' (known: queues, frames)"))),
        }
    }
    Ok((ifname.to_string(), c))
}

/// The receive VLAN setting of one queue, shared with it: bit 0 "deliver the kernel's tag as
/// metadata" (the strip bit), bits 31:16 the TPID that counts.
pub(crate) type VlanWord = Arc<AtomicU32>;

const STRIP: u32 = 1;

fn vlan_word(strip: bool, tpid: u16) -> u32 {
    u32::from(tpid) << 16 | u32::from(strip)
}

/// An af_packet port (`afp:IFNAME`).
pub struct AfPacketPort {
    name: String,
    ifname: String,
    iface: Interface,
    config: AfPacketConfig,
    /// The rings' geometry (frames rounded up to whole blocks).
    ring: RingGeometry,
    sockets: Vec<PacketSocket>,
    counters: Vec<SocketCounters>,
    /// Socket counters so far (the kernel clears them at every read): received, dropped.
    totals: Mutex<(u64, u64)>,
    vlan: Vec<VlanWord>,
    tpid: u16,
}

/// Bytes a frame may grow beyond MTU + 14 in a ring frame: a tag the kernel took and a tag
/// accepted with its 4-byte allowance.
const TAG_ROOM: usize = 8;

impl AfPacketPort {
    /// Opens interface `ifname` of the calling thread's network namespace.
    pub fn open(ifname: &str, config: AfPacketConfig) -> Result<AfPacketPort> {
        if config.queues == 0 {
            return Err(Error::InvalidConfig(
                "an af_packet port needs at least one queue".into(),
            ));
        }
        // The kernel holds no pool buffer (frames are copied out of its ring as bursts ask):
        // a pool needs a burst's worth.
        crate::devices::pool_rule::check_rx_pool(
            &format!("afp:{ifname}"),
            "none held by the kernel",
            0,
            config.pool.buffers,
        )?;
        let iface = packet::interface(ifname)?;
        if !iface.up {
            return Err(Error::InterfaceDown {
                name: ifname.into(),
            });
        }
        let ring = RingGeometry::for_frames(
            iface.mtu as usize + 14 + TAG_ROOM,
            config.frames,
            packet::page_size(),
        )?;
        // A group per port: two ports on one interface in one process must not share one.
        static PORTS: AtomicU32 = AtomicU32::new(0);
        let seq = PORTS.fetch_add(1, Ordering::Relaxed);
        let group =
            ((std::process::id().wrapping_mul(31) ^ seq << 8 ^ iface.index as u32) & 0xffff) as u16;
        let mut sockets = Vec::new();
        for _ in 0..config.queues {
            let s = PacketSocket::open(iface.index, ring)?;
            if config.queues > 1 {
                s.join_fanout(group)?;
            }
            sockets.push(s);
        }
        let counters = sockets.iter().map(PacketSocket::counters).collect();
        let tpid = Tpid::C_TAG.get();
        let vlan = (0..config.queues)
            .map(|_| Arc::new(AtomicU32::new(vlan_word(false, tpid))))
            .collect();
        tracing::debug!(
            interface = ifname,
            index = iface.index,
            mtu = iface.mtu,
            queues = config.queues,
            frames = ring.frames(),
            frame_size = ring.frame_size,
            block_size = ring.block_size,
            "af_packet port opened"
        );
        Ok(AfPacketPort {
            name: format!("afp:{ifname}"),
            ifname: ifname.into(),
            iface,
            config,
            ring,
            sockets,
            counters,
            totals: Mutex::new((0, 0)),
            vlan,
            tpid,
        })
    }

    fn refuse(&self, what: &str) -> Error {
        Error::NotSupported {
            device: self.name.clone(),
            what: what.into(),
            why: "an af_packet port has no VLAN filter or QinQ offload; the VLAN layer filters in software and handles extended mode in software".into(),
        }
    }
}

impl Port for AfPacketPort {
    type Rx = AfpRx;
    type Tx = AfpTx;

    fn info(&self) -> PortInfo {
        PortInfo {
            name: self.name.clone(),
            driver: "afpacket",
            model: format!(
                "Linux interface {} (packet sockets, TPACKET_V2 rings)",
                self.ifname
            ),
            pci_id: None,
            mac: MacAddr(self.iface.mac),
            rx_queues: self.config.queues,
            tx_queues: self.config.queues,
            rx_ring: self.ring.frames().min(u32::from(u16::MAX)) as u16,
            tx_ring: self.ring.frames().min(u32::from(u16::MAX)) as u16,
            mtu: Some(self.iface.mtu),
        }
    }

    /// The interface's state now: up with a carrier. (Its speed is not read: 0.) Asked
    /// through the first socket, so that it is the interface of the socket's network
    /// namespace whichever thread asks.
    fn link(&self) -> Result<LinkStatus> {
        let i = self.counters[0].interface(&self.ifname)?;
        Ok(LinkStatus {
            up: i.up && i.running,
            speed_mbps: 0,
            full_duplex: true,
        })
    }

    /// The kernel's per-socket counters, added up over the queues since the port was opened:
    /// `socket_rx_packets` (frames the sockets received, into the ring or dropped) and
    /// `socket_rx_drops` (frames dropped because a receive ring was full).
    fn stats(&mut self) -> Result<PortStats> {
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        for c in &self.counters {
            let (p, d) = c.take()?;
            t.0 += p;
            t.1 += d;
        }
        Ok(PortStats {
            hw: vec![("socket_rx_packets", t.0), ("socket_rx_drops", t.1)],
        })
    }

    fn take_queues(&mut self) -> Result<QueueSet<AfpRx, AfpTx>> {
        if self.sockets.is_empty() {
            return Err(Error::InvalidConfig(format!(
                "{}: queues were already taken",
                self.name
            )));
        }
        let mut rx = Vec::new();
        let mut tx = Vec::new();
        for (i, s) in std::mem::take(&mut self.sockets).into_iter().enumerate() {
            let pool = Pool::new(self.config.pool, Arc::new(IdentityMapper))?;
            let (r, t) = queue::pair(s, pool, self.vlan[i].clone(), self.iface.mtu as usize)?;
            rx.push(r);
            tx.push(t);
        }
        Ok((rx, tx))
    }
}

/// The kernel strips: "stripping" on is delivering its tag as metadata, off is putting the
/// tag back into the frame. The TPID says which tag counts; no filter, no extended mode.
impl VlanHardware for AfPacketPort {
    fn vlan_caps(&self) -> VlanCaps {
        VlanCaps {
            device: self.name.clone(),
            rx_strip: true,
            rx_pre_stripped: true,
            tx_insert: false,
            filter: false,
            filter_best_effort: false,
            extended: false,
            tx_insert_extended: false,
            any_tpid: true,
            rx_queues: self.config.queues,
            per_queue_strip: true,
        }
    }

    fn set_rx_strip(&mut self, queue: u16, on: bool) -> Result<()> {
        let w = self.vlan.get(usize::from(queue)).ok_or_else(|| {
            Error::InvalidConfig(format!("{}: no receive queue {queue}", self.name))
        })?;
        w.store(vlan_word(on, self.tpid), Ordering::Relaxed);
        Ok(())
    }

    fn set_vlan_filter(&mut self, _on: bool) -> Result<()> {
        Err(self.refuse("VLAN filtering"))
    }

    fn add_vlan(&mut self, _vid: Vid) -> Result<()> {
        Err(self.refuse("a VLAN filter table"))
    }

    fn remove_vlan(&mut self, _vid: Vid) -> Result<()> {
        Err(self.refuse("a VLAN filter table"))
    }

    fn set_tpid(&mut self, tpid: Tpid) -> Result<()> {
        self.tpid = tpid.get();
        for w in &self.vlan {
            let strip = w.load(Ordering::Relaxed) & STRIP != 0;
            w.store(vlan_word(strip, self.tpid), Ordering::Relaxed);
        }
        Ok(())
    }

    fn set_extended_vlan(&mut self, _on: bool, _outer_tpid: Tpid) -> Result<()> {
        Err(self.refuse("extended (QinQ) VLAN mode"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_take_options() {
        let d = AfPacketConfig::default();
        let (n, c) = parse_name("veth0", &d).unwrap();
        assert_eq!((n.as_str(), c.queues, c.frames), ("veth0", 1, 512));
        let (n, c) = parse_name("eth1,queues=4,frames=1024", &d).unwrap();
        assert_eq!((n.as_str(), c.queues, c.frames), ("eth1", 4, 1024));
        for bad in [
            "",
            "a/b",
            "x,queues",
            "x,queues=0",
            "x,frames=1",
            "x,speed=3",
            "sixteen-chars-xx",
        ] {
            let e = parse_name(bad, &d).unwrap_err().to_string();
            assert!(e.contains("afp:"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_missing_interface_is_named() {
        let e = AfPacketPort::open("vnic-nonesuch", AfPacketConfig::default())
            .err()
            .unwrap();
        assert!(matches!(e, Error::NoSuchInterface { .. }), "{e}");
        assert!(e.to_string().contains("ip link"), "{e}");
    }
}
