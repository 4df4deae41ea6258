//! Packet chains and transmit offloads on the device, checked against independent receivers:
//! Linux's igb driver and network stack on the peer port (kernel-peer layout), and our own
//! driver on the second port (vfio layout).
//!
//! - Jumbo frames (MTU 9000, 2 KiB pool buffers): 9014-byte frames leave our port as chains
//!   (one descriptor per segment) and arrive byte-identical at a Linux packet socket; Linux
//!   sends 9014-byte frames that arrive at our port as chains of 5 segments (receive scatter).
//!   Between our two ports, frames of sizes around the buffer boundaries do the same.
//! - Checksums: UDP and TCP over IPv4 with 0xdead in every checksum field and the device asked
//!   to write them (`TxOffload`). Linux's sockets receive every datagram and every byte, and
//!   its checksum error counters (/proc/net/snmp) stay put; control frames sent without the
//!   offload, with a bad checksum, make those counters move, so the check can fail.
//! - TSO: one 65,000-byte TCP payload handed over as ONE chained packet (32 buffers) with
//!   MSS 1448; the device cuts it into 45 frames, and Linux's socket reads the bytes in order.
//!
//! The TCP client is hwtests/tcp.rs. The peer's addresses (10.98.0.1 Linux, 10.98.0.2 ours,
//! untagged) live only inside the test guest; the peer learns our MAC from a static ARP entry,
//! and our receive loop answers ARP as well. Note: QEMU's igb computes every transmit checksum
//! from scratch when asked (`net_tx_pkt_do_sw_csum`), so these tests prove the driver asks
//! (context descriptor, POPTS, TSE, segment lengths), not the pseudo-header preparation a real
//! 82576 relies on (the software 82599 checks that on the host).

use std::collections::HashMap;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use vfio_nic::app::respond::{Responder, ResponderConfig};
use vfio_nic::device::{MacAddr, Port, RxQueue, TxQueue};
use vfio_nic::devices::{self, AnyPort, AnyRx, AnyTx};
use vfio_nic::platform::dma::{Packet, Pool};
use vfio_nic::platform::packet::{self, PacketRx, PacketSocket, PacketTx, RingConfig};

use super::drv::{self, counter, deltas, drain, frame, TEST_ETHERTYPE};
use super::peer::sh;
use super::tcp::{self, End, Flow, Seg, ACK, PSH, RST, SYN};
use super::{step, Ctx, Outcome};

/// The jumbo MTU and the largest untagged frame it allows.
const JUMBO_MTU: u16 = 9000;
const JUMBO_LEN: usize = JUMBO_MTU as usize + 14;
/// Jumbo frames sent each way.
const JUMBO_FRAMES: usize = 4;
/// The addresses of the checksum and TSO tests (untagged, only inside the test guest).
const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 1);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 2);
/// How long any one wait of these tests may take.
const WAIT: Duration = Duration::from_secs(10);
/// TSO: payload and MSS (65,000 bytes stay below QEMU 10's limit of 0xffff - IP header).
const TSO_PAYLOAD: usize = 65_000;
const TSO_MSS: u16 = 1448;

fn run(f: impl FnOnce() -> Result<String, String>) -> Outcome {
    match f() {
        Ok(d) => Outcome::Pass(d),
        Err(e) => Outcome::Fail(e),
    }
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Opens a port with `mtu` (the suite's usual rings and pool: 2 KiB buffers).
fn open_mtu(addr: vfio_nic::platform::pci::PciAddress, mtu: u16) -> Result<AnyPort, String> {
    let mut cfg = drv::config(false);
    cfg.igb.mtu = mtu;
    cfg.ixgbe.mtu = mtu;
    step(format!("opening {addr} with MTU {mtu}"));
    devices::open(&addr.to_string(), &cfg).map_err(|e| format!("{addr}: open: {e}"))
}

/// The Linux peer's interface and MAC, or the reason to skip.
fn kernel_peer(ctx: &Ctx) -> Result<(String, MacAddr), Outcome> {
    let Some(ifname) = ctx.peer_if.clone() else {
        return Err(Outcome::Skip(
            "needs a Linux peer: set VFIO_NIC_PEER_IF to the netdev wired to the first port (kernel-peer layout)".into(),
        ));
    };
    let mac = match ctx.peer_mac {
        Some(m) => m,
        None => match packet::interface(&ifname) {
            Ok(i) => MacAddr(i.mac),
            Err(e) => return Err(Outcome::Fail(format!("{ifname}: {e}"))),
        },
    };
    Ok((ifname, mac))
}

/// The Linux peer's interface set up for a test, put back (address, ARP entry, MTU 1500,
/// down) on drop.
struct PeerIf {
    ifname: String,
    ip: bool,
}

impl PeerIf {
    /// Brings `ifname` up with `mtu`; with `our_mac`, also gives it [`PEER_IP`]/24 and a
    /// static ARP entry for [`OUR_IP`] at `our_mac`.
    fn up(ifname: &str, mtu: u16, our_mac: Option<MacAddr>) -> Result<PeerIf, String> {
        step(format!("setting up the Linux peer {ifname} (MTU {mtu})"));
        let guard = PeerIf {
            ifname: ifname.to_string(),
            ip: our_mac.is_some(),
        };
        sh(&format!("ip link set dev {ifname} mtu {mtu}"))?;
        sh(&format!("ip link set dev {ifname} up"))?;
        if let Some(mac) = our_mac {
            sh(&format!("ip addr add {PEER_IP}/24 dev {ifname}"))?;
            sh(&format!("arp -i {ifname} -s {OUR_IP} {mac}"))?;
        }
        Ok(guard)
    }
}

impl Drop for PeerIf {
    fn drop(&mut self) {
        let i = &self.ifname;
        if self.ip {
            let _ = sh(&format!("arp -i {i} -d {OUR_IP}; ip addr flush dev {i}"));
        }
        let _ = sh(&format!(
            "ip link set dev {i} down; ip link set dev {i} mtu 1500"
        ));
    }
}

/// A counter of the peer interface (/sys/class/net/IF/statistics/NAME).
fn if_counter(ifname: &str, name: &str) -> Result<u64, String> {
    let path = format!("/sys/class/net/{ifname}/statistics/{name}");
    std::fs::read_to_string(&path)
        .map_err(|e| format!("{path}: {e}"))?
        .trim()
        .parse()
        .map_err(|e| format!("{path}: {e}"))
}

/// Linux's IP, UDP and TCP counters from /proc/net/snmp and /proc/net/netstat, as
/// "Udp.InCsumErrors", "IpExt.InCsumErrors" and so on (each file is pairs of lines: a header
/// of names, then their values).
fn snmp() -> Result<HashMap<String, u64>, String> {
    let mut out = HashMap::new();
    for path in ["/proc/net/snmp", "/proc/net/netstat"] {
        let t = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let lines: Vec<&str> = t.lines().collect();
        for pair in lines.chunks(2) {
            let [names, values] = pair else { continue };
            let (Some((p, names)), Some((_, values))) =
                (names.split_once(':'), values.split_once(':'))
            else {
                continue;
            };
            for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
                if let Ok(v) = v.parse::<i64>() {
                    out.insert(format!("{p}.{n}"), v as u64);
                }
            }
        }
    }
    Ok(out)
}

/// The checksum error counters the tests watch.
const CSUM_COUNTERS: [&str; 6] = [
    "Ip.InHdrErrors",
    "IpExt.InCsumErrors",
    "Udp.InErrors",
    "Udp.InCsumErrors",
    "Tcp.InErrs",
    "Tcp.InCsumErrors",
];

/// `name`'s change between two snapshots.
fn moved(a: &HashMap<String, u64>, b: &HashMap<String, u64>, name: &str) -> u64 {
    b.get(name).copied().unwrap_or(0) - a.get(name).copied().unwrap_or(0)
}

/// The watched counters that changed, as "NAME +N" text (empty when none did).
fn csum_changes(a: &HashMap<String, u64>, b: &HashMap<String, u64>) -> String {
    CSUM_COUNTERS
        .iter()
        .filter(|n| moved(a, b, n) != 0)
        .map(|n| format!("{n} +{}", moved(a, b, n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits (at most [`WAIT`]) until `name` rose by at least `by` since `from`.
fn wait_counter(from: &HashMap<String, u64>, name: &str, by: u64) -> Result<u64, String> {
    let start = Instant::now();
    loop {
        let now = snmp()?;
        let d = moved(from, &now, name);
        if d >= by {
            return Ok(d);
        }
        if start.elapsed() > WAIT {
            return Err(format!(
                "{name} rose by {d} within {} s, expected {by}: the control frame was not caught, so the checksum check proves nothing",
                WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Queues every packet of `batch`, retrying while the ring is full, at most [`WAIT`].
fn send_all(tx: &mut impl TxQueue, batch: &mut Vec<Packet>) -> Result<(), String> {
    let start = Instant::now();
    while !batch.is_empty() {
        tx.tx_burst(batch).map_err(text)?;
        if start.elapsed() > WAIT {
            return Err(format!(
                "the transmit queue took none of {} packets for {} s",
                batch.len(),
                WAIT.as_secs()
            ));
        }
    }
    Ok(())
}

/// `bytes` as a packet of `pool` (a chain when it is longer than a buffer).
fn chain(pool: &Pool, bytes: &[u8]) -> Result<Packet, String> {
    pool.packet_from(bytes).ok_or_else(|| {
        format!(
            "the pool has too few free buffers for a {}-byte frame",
            bytes.len()
        )
    })
}

/// Where two frames first differ, for messages.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!("first difference at byte {i}"),
        None => format!("lengths {} and {}", a.len(), b.len()),
    }
}

/// A packet socket on the Linux peer's interface, with ring frames that take a jumbo frame.
fn peer_socket(ifname: &str) -> Result<(PacketRx, PacketTx), String> {
    let iface = packet::interface(ifname).map_err(text)?;
    let ring = RingConfig {
        frames: 32,
        frame_size: 16384,
    };
    let s = PacketSocket::open(iface.index, ring).map_err(|e| format!("{ifname}: {e}"))?;
    Ok(s.split())
}

/// The next test frame (ethertype 0x88b5 from `src`) a packet socket received, whole, or
/// `None` after `limit`. Other frames (IPv6 neighbour discovery of the peer, say) are skipped.
fn socket_recv(
    rx: &mut PacketRx,
    src: MacAddr,
    limit: Duration,
) -> Result<Option<Vec<u8>>, String> {
    let start = Instant::now();
    loop {
        if let Some(f) = rx.rx_next() {
            let mut head = [0u8; 14];
            if f.len() < 14 {
                continue;
            }
            f.read(0, &mut head);
            if head[6..12] != src.0 || head[12..14] != TEST_ETHERTYPE.to_be_bytes() {
                continue;
            }
            if f.len() != f.wire_len() {
                return Err(format!(
                    "the packet socket kept {} of a {}-byte frame (ring frame too small)",
                    f.len(),
                    f.wire_len()
                ));
            }
            let mut v = vec![0u8; f.len()];
            f.read(0, &mut v);
            return Ok(Some(v));
        }
        if start.elapsed() > limit {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Whether `p` is a test frame from `src`.
fn test_frame_from(p: &Packet, src: MacAddr) -> bool {
    let d = p.data();
    d.len() >= 14 && d[6..12] == src.0 && d[12..14] == TEST_ETHERTYPE.to_be_bytes()
}

/// Receives on `rx` until `n` test frames from `src` arrived (others are dropped), at most
/// [`WAIT`].
fn recv_test_frames(rx: &mut AnyRx, src: MacAddr, n: usize) -> Result<Vec<Packet>, String> {
    let mut got = Vec::new();
    let mut batch = Vec::new();
    let start = Instant::now();
    while got.len() < n {
        if start.elapsed() > WAIT {
            return Err(format!(
                "{} of {n} frames arrived within {} s",
                got.len(),
                WAIT.as_secs()
            ));
        }
        if rx.rx_burst(&mut batch, 32).map_err(text)? == 0 {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        got.extend(batch.drain(..).filter(|p| test_frame_from(p, src)));
    }
    Ok(got)
}

/// Checks that a received packet is the chain `want` describes: byte-identical, as many
/// segments as 2 KiB buffers need.
fn check_chain(p: &Packet, want: &[u8], what: &str) -> Result<(), String> {
    let room = p.capacity();
    let segs = want.len().div_ceil(room);
    let got = p.to_vec();
    if got != want {
        return Err(format!(
            "{what}: received {} bytes, sent {}; {}",
            got.len(),
            want.len(),
            first_difference(&got, want)
        ));
    }
    if p.segment_count() != segs || p.is_chained() != (segs > 1) || p.frame_len() != want.len() {
        return Err(format!(
            "{what}: a {}-byte frame arrived in {} segments (chained: {}), expected {segs} of at most {room} bytes",
            p.frame_len(),
            p.segment_count(),
            p.is_chained()
        ));
    }
    Ok(())
}

/// Jumbo frames both ways against Linux's igb (MTU 9000 on both ends): our chains arrive
/// byte-identical at a packet socket on the peer, and Linux's 9014-byte frames arrive at our
/// port as chains of 5 buffers.
pub fn jumbo_kernel_peer(ctx: &Ctx) -> Outcome {
    let (ifname, peer_mac) = match kernel_peer(ctx) {
        Ok(x) => x,
        Err(o) => return o,
    };
    if drv::is_virtio(ctx.ports[0]) {
        return Outcome::Skip(
            "receive scatter and jumbo MTU are the Intel rings' (igb/ixgbe); not a virtio port's"
                .into(),
        );
    }
    let peer = match PeerIf::up(&ifname, JUMBO_MTU, None) {
        Ok(p) => p,
        Err(e) => return Outcome::Fail(e),
    };
    let r = run(|| {
        let mut port = open_mtu(ctx.ports[0], JUMBO_MTU)?;
        let mac = port.info().mac;
        let (mut rx, mut tx) = port.take_queues().map_err(text)?;
        let (mut prx, mut ptx) = peer_socket(&ifname)?;
        drain(&mut rx[0], Duration::from_millis(50))?;
        while prx.rx_next().is_some() {}
        let s0 = drv::stats(&mut port)?;
        let (p0, pb0) = (
            if_counter(&ifname, "rx_packets")?,
            if_counter(&ifname, "rx_bytes")?,
        );

        // Ours -> Linux.
        let pool = rx[0].pool().clone();
        let out: Vec<Vec<u8>> = (0..JUMBO_FRAMES)
            .map(|i| frame(peer_mac, mac, 0x9a00_0000 + i as u32, JUMBO_LEN))
            .collect();
        let mut batch = Vec::new();
        for f in &out {
            let p = chain(&pool, f)?;
            if !p.is_chained() {
                return Err(format!(
                    "Pool::packet_from made one buffer of a {JUMBO_LEN}-byte frame"
                ));
            }
            batch.push(p);
        }
        let segs_sent = batch[0].segment_count();
        step(format!(
            "sending {JUMBO_FRAMES} {JUMBO_LEN}-byte chains ({segs_sent} segments) to Linux"
        ));
        send_all(&mut tx[0], &mut batch)?;
        for (i, want) in out.iter().enumerate() {
            let got = socket_recv(&mut prx, mac, WAIT)?.ok_or_else(|| {
                format!(
                    "Linux's packet socket got {i} of {JUMBO_FRAMES} jumbo frames within {} s",
                    WAIT.as_secs()
                )
            })?;
            if &got != want {
                return Err(format!(
                    "ours -> Linux frame {i}: {} bytes received, {} sent; {}",
                    got.len(),
                    want.len(),
                    first_difference(&got, want)
                ));
            }
        }
        let (p1, pb1) = (
            if_counter(&ifname, "rx_packets")?,
            if_counter(&ifname, "rx_bytes")?,
        );

        // Linux -> ours.
        let back: Vec<Vec<u8>> = (0..JUMBO_FRAMES)
            .map(|i| frame(mac, peer_mac, 0x9b00_0000 + i as u32, JUMBO_LEN))
            .collect();
        step(format!(
            "Linux sends {JUMBO_FRAMES} {JUMBO_LEN}-byte frames from a packet socket"
        ));
        for f in &back {
            let start = Instant::now();
            let slot = loop {
                if let Some(s) = ptx.tx_next() {
                    break s;
                }
                if start.elapsed() > WAIT {
                    return Err("the packet socket's transmit ring stayed full".into());
                }
                std::thread::sleep(Duration::from_millis(1));
            };
            if !slot.send(&[f]) {
                return Err(format!(
                    "a {JUMBO_LEN}-byte frame does not fit the packet socket's ring frame"
                ));
            }
            ptx.kick().map_err(text)?;
        }
        let got = recv_test_frames(&mut rx[0], peer_mac, JUMBO_FRAMES)?;
        for (i, (p, want)) in got.iter().zip(&back).enumerate() {
            check_chain(p, want, &format!("Linux -> ours frame {i}"))?;
        }
        let segs_recv = got[0].segment_count();
        drop(got);
        let rxs = rx[0].stats();
        if rxs.dropped != 0 {
            return Err(format!("our receive queue dropped {} frames", rxs.dropped));
        }
        let s1 = drv::stats(&mut port)?;
        let names = drv::counter_names(port.info().driver);
        let t = deltas(&s0, &s1, &names.tx)?;
        let n = JUMBO_FRAMES as u64;
        let bytes = n * (JUMBO_LEN as u64 + names.crc);
        if t != [n, bytes] {
            return Err(format!(
                "our {:?} rose by {t:?}, expected [{n}, {bytes}]",
                names.tx
            ));
        }
        // Linux counts without the CRC; IPv6 frames of its own do not reach its receive side.
        if p1 - p0 != n || pb1 - pb0 != n * JUMBO_LEN as u64 {
            return Err(format!(
                "Linux's {ifname} rx_packets/rx_bytes rose by {}/{}, expected {n}/{}",
                p1 - p0,
                pb1 - pb0,
                n * JUMBO_LEN as u64
            ));
        }
        for &name in names.rx_errors {
            let d = counter(&s1, name)? - counter(&s0, name)?;
            if d != 0 {
                return Err(format!("our receive error counter {name} rose by {d}"));
            }
        }
        Ok(format!(
            "MTU {JUMBO_MTU} both ends: {JUMBO_FRAMES} x {JUMBO_LEN} B ours -> Linux ({segs_sent}-segment chains; {:?} +{t:?}; {ifname} rx_packets +{}, rx_bytes +{}) and Linux -> ours ({segs_recv}-segment chains), byte-identical",
            names.tx,
            p1 - p0,
            pb1 - pb0
        ))
    });
    drop(peer);
    r
}

/// Jumbo chains between our two ports: port A (MTU 1500: transmit takes chains whatever the
/// MTU) sends frames around the 2 KiB buffer boundaries up to 9014 bytes; port B (MTU 9000)
/// receives each byte-identical as a chain of the right number of segments.
pub fn jumbo_vfio_pair(ctx: &Ctx) -> Outcome {
    if ctx.ports.len() < 2 {
        return Outcome::Skip("needs two ports wired to each other".into());
    }
    if drv::is_virtio(ctx.ports[0]) || drv::is_virtio(ctx.ports[1]) {
        return Outcome::Skip(
            "receive scatter and jumbo MTU are the Intel rings' (igb/ixgbe); not a virtio port's"
                .into(),
        );
    }
    run(|| {
        let mut a = drv::open(ctx.ports[0], false)?;
        let mut b = open_mtu(ctx.ports[1], JUMBO_MTU)?;
        let (ma, mb) = (a.info().mac, b.info().mac);
        let (mut rxa, mut txa) = a.take_queues().map_err(text)?;
        let (mut rxb, _txb) = b.take_queues().map_err(text)?;
        drain(&mut rxb[0], Duration::from_millis(50))?;
        drain(&mut rxa[0], Duration::from_millis(50))?;
        let (a0, b0) = (drv::stats(&mut a)?, drv::stats(&mut b)?);
        let pool = rxa[0].pool().clone();
        let room = pool.buf_size() - pool.headroom();
        let mut sizes = vec![
            room - 1,
            room,
            room + 1,
            2 * room,
            2 * room + 1,
            4 * room + 1,
        ];
        sizes.extend([JUMBO_LEN; JUMBO_FRAMES]);
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| frame(mb, ma, 0x9c00_0000 + i as u32, len))
            .collect();
        let mut batch = frames
            .iter()
            .map(|f| chain(&pool, f))
            .collect::<Result<Vec<_>, _>>()?;
        step(format!(
            "A sends {} frames of {sizes:?} bytes as chains",
            frames.len()
        ));
        send_all(&mut txa[0], &mut batch)?;
        let got = recv_test_frames(&mut rxb[0], ma, frames.len())?;
        let mut segs = Vec::new();
        for (i, (p, want)) in got.iter().zip(&frames).enumerate() {
            check_chain(p, want, &format!("frame {i} ({} bytes)", want.len()))?;
            segs.push(p.segment_count());
        }
        drop(got);
        if rxb[0].stats().dropped != 0 {
            return Err(format!(
                "B's receive queue dropped {} frames",
                rxb[0].stats().dropped
            ));
        }
        let (a1, b1) = (drv::stats(&mut a)?, drv::stats(&mut b)?);
        let names = drv::counter_names(a.info().driver);
        let n = frames.len() as u64;
        let bytes: u64 = sizes.iter().map(|&s| s as u64 + names.crc).sum();
        let t = deltas(&a0, &a1, &names.tx)?;
        let r = deltas(&b0, &b1, &names.rx)?;
        if t != [n, bytes] || r != [n, bytes] {
            return Err(format!(
                "A's {:?} rose by {t:?}, B's {:?} by {r:?}; expected [{n}, {bytes}] each",
                names.tx, names.rx
            ));
        }
        for &name in names.rx_errors {
            let d = counter(&b1, name)? - counter(&b0, name)?;
            if d != 0 {
                return Err(format!("B's receive error counter {name} rose by {d}"));
            }
        }
        Ok(format!(
            "{n} frames of {sizes:?} bytes A -> B byte-identical, in {segs:?} segments; {:?} +{t:?}, {:?} +{r:?}",
            names.tx, names.rx
        ))
    })
}

/// Our port, its queues and an ARP answerer, for the tests that talk IP to Linux.
struct IpPort {
    port: AnyPort,
    rx: AnyRx,
    tx: AnyTx,
    pool: Pool,
    mac: MacAddr,
    arp: Responder,
}

impl IpPort {
    fn open(ctx: &Ctx) -> Result<IpPort, String> {
        let mut port = drv::open(ctx.ports[0], false)?;
        let mac = port.info().mac;
        let (mut rx, mut tx) = port.take_queues().map_err(text)?;
        let (rx, tx) = (rx.remove(0), tx.remove(0));
        let pool = rx.pool().clone();
        let arp = Responder::new(ResponderConfig {
            mac,
            ip: format!("{OUR_IP}/24").parse().map_err(text)?,
            vlan: None,
        });
        Ok(IpPort {
            port,
            rx,
            tx,
            pool,
            mac,
            arp,
        })
    }

    /// Sends `frame` with the checksum offloads (and TSO with `tso_mss`), as a chain when it
    /// is longer than a buffer.
    fn send_offloaded(&mut self, frame: &[u8], tso_mss: Option<u16>) -> Result<(), String> {
        let mut p = chain(&self.pool, frame)?;
        p.set_tx_offload(tcp::offload(frame, tso_mss));
        send_all(&mut self.tx, &mut vec![p])
    }

    /// Sends `p` as it is (no offload).
    fn send_packet(&mut self, p: Packet) -> Result<(), String> {
        send_all(&mut self.tx, &mut vec![p])
    }

    /// One receive burst: answers ARP requests for [`OUR_IP`] and returns the other frames
    /// (whole, copied).
    fn poll(&mut self) -> Result<Vec<Vec<u8>>, String> {
        let mut batch = Vec::new();
        if self.rx.rx_burst(&mut batch, 32).map_err(text)? == 0 {
            std::thread::sleep(Duration::from_micros(200));
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let mut reply = Vec::new();
        for p in batch {
            if self.arp.handle(p.data(), None, &mut reply).is_ok() {
                let r = drv::packet(&self.pool, &reply)?;
                self.send_packet(r)?;
            } else {
                out.push(p.to_vec());
            }
        }
        Ok(out)
    }
}

/// UDP/IPv4 datagrams with 0xdead in both checksum fields and `UDP_CSUM | IP_CSUM` asked of
/// the device: Linux's UDP socket receives all of them and no checksum error counter moves;
/// then two control datagrams without the offload (one with a bad UDP checksum, one with a
/// bad IP header checksum) are dropped by Linux and counted.
pub fn udp_checksum_offload_kernel_peer(ctx: &Ctx) -> Outcome {
    const N: usize = 32;
    let (ifname, peer_mac) = match kernel_peer(ctx) {
        Ok(x) => x,
        Err(o) => return o,
    };
    run(|| {
        let mut us = IpPort::open(ctx)?;
        let _peer = PeerIf::up(&ifname, 1500, Some(us.mac))?;
        let sock = UdpSocket::bind((PEER_IP, 7001))
            .map_err(|e| format!("binding UDP {PEER_IP}:7001: {e}"))?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .map_err(text)?;
        drain(&mut us.rx, Duration::from_millis(50))?;
        let ours = End {
            mac: us.mac,
            ip: OUR_IP,
            port: 40001,
        };
        let theirs = End {
            mac: peer_mac,
            ip: PEER_IP,
            port: 7001,
        };
        let payload =
            |i: usize| -> Vec<u8> { (0..1 + i * 45).map(|j| (i * 31 + j * 7) as u8).collect() };
        let c0 = snmp()?;
        step(format!(
            "sending {N} UDP datagrams with checksum offload and 0xdead checksums"
        ));
        for i in 0..N {
            let f = tcp::udp_frame(&ours, &theirs, 0x100 + i as u16, &payload(i));
            us.send_offloaded(&f, None)?;
        }
        let mut buf = vec![0u8; 4096];
        let start = Instant::now();
        let mut got = 0;
        let mut bytes = 0;
        while got < N {
            if start.elapsed() > WAIT {
                return Err(format!(
                    "Linux's UDP socket received {got} of {N} datagrams within {} s (checksum counters: {})",
                    WAIT.as_secs(),
                    csum_changes(&c0, &snmp()?)
                ));
            }
            us.poll()?;
            let Ok((n, from)) = sock.recv_from(&mut buf) else {
                continue;
            };
            let want = payload(got);
            if from != SocketAddr::from((OUR_IP, 40001)) || buf[..n] != want[..] {
                return Err(format!(
                    "datagram {got}: {n} bytes from {from}, expected {} from {OUR_IP}:40001",
                    want.len()
                ));
            }
            got += 1;
            bytes += n;
        }
        let c1 = snmp()?;
        let changed = csum_changes(&c0, &c1);
        if !changed.is_empty() {
            return Err(format!("after the offloaded datagrams: {changed}"));
        }

        // Controls, without offloads: Linux must catch each bad checksum.
        step("control datagrams without offload: bad UDP checksum, bad IP header checksum");
        let mut bad_udp = tcp::udp_frame(&ours, &theirs, 0x200, b"bad udp checksum");
        tcp::fill_checksums(&mut bad_udp);
        let good = u16::from_be_bytes([bad_udp[40], bad_udp[41]]);
        let wrong = if good == tcp::BAD_CSUM {
            0xbeef
        } else {
            tcp::BAD_CSUM
        };
        bad_udp[40..42].copy_from_slice(&wrong.to_be_bytes());
        us.send_packet(drv::packet(&us.pool, &bad_udp)?)?;
        let udp_caught = wait_counter(&c1, "Udp.InCsumErrors", 1)?;
        let mut bad_ip = tcp::udp_frame(&ours, &theirs, 0x201, b"bad ip checksum");
        tcp::fill_checksums(&mut bad_ip);
        bad_ip[24] ^= 0x5a;
        us.send_packet(drv::packet(&us.pool, &bad_ip)?)?;
        let ip_caught = wait_counter(&c1, "Ip.InHdrErrors", 1)?;
        std::thread::sleep(Duration::from_millis(200));
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            return Err(format!(
                "a control datagram with a bad checksum reached the socket ({n} bytes from {from})"
            ));
        }
        let c2 = snmp()?;
        Ok(format!(
            "{N} datagrams ({bytes} payload bytes) sent with 0xdead checksums and UDP_CSUM|IP_CSUM all received by Linux; Udp.InCsumErrors {} -> {}, Ip.InHdrErrors {} -> {} over them; controls without offload caught: Udp.InCsumErrors +{udp_caught}, Ip.InHdrErrors +{ip_caught} ({})",
            c0.get("Udp.InCsumErrors").copied().unwrap_or(0),
            c1.get("Udp.InCsumErrors").copied().unwrap_or(0),
            c0.get("Ip.InHdrErrors").copied().unwrap_or(0),
            c1.get("Ip.InHdrErrors").copied().unwrap_or(0),
            csum_changes(&c1, &c2)
        ))
    })
}

/// Linux's side of a TCP test: accepts one connection on `listener` and reads until `want`
/// bytes arrived, at most `limit` in all.
fn linux_reader(
    listener: TcpListener,
    want: usize,
    limit: Duration,
) -> mpsc::Receiver<Result<Vec<u8>, String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = (|| {
            let start = Instant::now();
            listener.set_nonblocking(true).map_err(text)?;
            let (mut s, from) = loop {
                match listener.accept() {
                    Ok(x) => break x,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(format!("accept: {e}")),
                }
                if start.elapsed() > limit {
                    return Err(format!(
                        "Linux's listener accepted no connection within {} s",
                        limit.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            if from != SocketAddr::from((OUR_IP, from.port())) {
                return Err(format!("Linux accepted a connection from {from}"));
            }
            s.set_nonblocking(false).map_err(text)?;
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .map_err(text)?;
            let mut buf = Vec::new();
            let mut chunk = vec![0u8; 65536];
            while buf.len() < want {
                match s.read(&mut chunk) {
                    Ok(0) => {
                        return Err(format!(
                            "the connection closed after {} of {want} bytes",
                            buf.len()
                        ))
                    }
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(e) => return Err(format!("read after {} bytes: {e}", buf.len())),
                }
                if start.elapsed() > limit {
                    return Err(format!(
                        "Linux's socket read {} of {want} bytes within {} s",
                        buf.len(),
                        limit.as_secs()
                    ));
                }
            }
            Ok(buf)
        })();
        let _ = tx.send(r);
    });
    rx
}

/// A connection from our port to a Linux listener, opened with our own SYN.
struct Client {
    us: IpPort,
    flow: Flow,
    /// Segments Linux sent on the connection after the SYN-ACK.
    acks: usize,
}

impl Client {
    /// Sends the SYN (retried each second) and waits for Linux's SYN-ACK, then ACKs it.
    fn connect(mut us: IpPort, peer_mac: MacAddr, port: u16) -> Result<(Client, Seg), String> {
        let ours = End {
            mac: us.mac,
            ip: OUR_IP,
            port: 40002,
        };
        let theirs = End {
            mac: peer_mac,
            ip: PEER_IP,
            port,
        };
        let isn = 0x1000_0000;
        let mut flow = Flow::new(ours, theirs, isn);
        step(format!(
            "TCP: SYN to {PEER_IP}:{port} (checksums by the device)"
        ));
        let start = Instant::now();
        let mut last_syn: Option<Instant> = None;
        let syn_ack = loop {
            if last_syn.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                flow.snd_nxt = isn;
                let syn = flow.syn();
                us.send_offloaded(&syn, None)?;
                last_syn = Some(Instant::now());
            }
            if let Some(seg) = us.poll()?.iter().find_map(|f| flow.parse(f)) {
                break seg;
            }
            if start.elapsed() > WAIT {
                return Err(format!(
                    "no SYN-ACK from Linux within {} s (SYNs sent with 0xdead checksums and TCP_CSUM|IP_CSUM)",
                    WAIT.as_secs()
                ));
            }
        };
        flow.on_syn_ack(&syn_ack)?;
        let ack = flow.segment(ACK, &[], &[]);
        us.send_offloaded(&ack, None)?;
        Ok((Client { us, flow, acks: 0 }, syn_ack))
    }

    /// Sends one data segment (PSH|ACK) with the checksum offloads.
    fn send_data(&mut self, payload: &[u8]) -> Result<(), String> {
        let f = self.flow.segment(PSH | ACK, &[], payload);
        self.us.send_offloaded(&f, None)
    }

    /// Receives (answering ARP, noting Linux's ACKs and window) until `done` has a result, at
    /// most `limit`.
    fn serve_until<T>(
        &mut self,
        done: &mpsc::Receiver<Result<T, String>>,
        limit: Duration,
    ) -> Result<T, String> {
        let start = Instant::now();
        loop {
            for f in self.us.poll()? {
                if let Some(seg) = self.flow.parse(&f) {
                    if seg.flags & RST != 0 {
                        return Err(format!("Linux reset the connection ({seg:?})"));
                    }
                    if seg.flags & SYN == 0 {
                        self.flow.on_segment(&seg);
                        self.acks += 1;
                    }
                }
            }
            match done.try_recv() {
                Ok(r) => return r,
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err("Linux's reader thread ended without a result".into())
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }
            if start.elapsed() > limit {
                return Err(format!(
                    "Linux's reader gave no result within {} s",
                    limit.as_secs()
                ));
            }
        }
    }

    /// Ends the connection with a RST (Linux then sends nothing more to a port about to close).
    fn reset(&mut self) -> Result<(), String> {
        let f = self.flow.rst();
        let mut p = chain(&self.us.pool, &f)?;
        p.set_tx_offload(tcp::offload(&f, None));
        send_all(&mut self.us.tx, &mut vec![p])
    }
}

/// TCP over IPv4 with the checksum offloads: our SYN, ACK and data segments all carry 0xdead
/// checksums and `TCP_CSUM | IP_CSUM`; Linux accepts the connection and its socket reads every
/// byte in order, while Tcp.InCsumErrors and Ip.InHdrErrors stay put. One segment is a chain of
/// two buffers (header and 64 bytes in the first), so the checksum spans segments. A control
/// segment without the offload, with a bad checksum, is counted by Linux.
pub fn tcp_checksum_offload_kernel_peer(ctx: &Ctx) -> Outcome {
    const PORT: u16 = 7002;
    let (ifname, peer_mac) = match kernel_peer(ctx) {
        Ok(x) => x,
        Err(o) => return o,
    };
    run(|| {
        let us = IpPort::open(ctx)?;
        let _peer = PeerIf::up(&ifname, 1500, Some(us.mac))?;
        let listener = TcpListener::bind((PEER_IP, PORT))
            .map_err(|e| format!("listening on {PEER_IP}:{PORT}: {e}"))?;
        let sizes = [1usize, 17, 100, 536, 1000, 1448, 1448, 700, 1460, 64];
        let data: Vec<u8> = (0..sizes.iter().sum::<usize>())
            .map(|i| (i * 13 + i / 251) as u8)
            .collect();
        let c0 = snmp()?;
        let reader = linux_reader(listener, data.len(), 2 * WAIT);
        let (mut c, syn_ack) = Client::connect(us, peer_mac, PORT)?;
        step(format!(
            "TCP: connected (Linux window {}, scale {}); sending {} segments",
            syn_ack.window,
            c.flow.peer_wscale,
            sizes.len()
        ));
        let mut at = 0;
        for (i, &n) in sizes.iter().enumerate() {
            let payload = &data[at..at + n];
            at += n;
            if i == 5 {
                // A chain: the headers and 10 payload bytes in one buffer, the rest in another.
                let f = c.flow.segment(PSH | ACK, &[], payload);
                let mut p = chain(&c.us.pool, &f[..64])?;
                p.push_segment(chain(&c.us.pool, &f[64..])?);
                p.set_tx_offload(tcp::offload(&f, None));
                c.us.send_packet(p)?;
            } else {
                c.send_data(payload)?;
            }
        }
        let got = c.serve_until(&reader, 3 * WAIT)?;
        if got != data {
            return Err(format!(
                "Linux read {} bytes, {} were sent; {}",
                got.len(),
                data.len(),
                first_difference(&got, &data)
            ));
        }
        let c1 = snmp()?;
        let changed = csum_changes(&c0, &c1);
        if !changed.is_empty() {
            return Err(format!("after the offloaded segments: {changed}"));
        }
        step("control segment without offload, bad TCP checksum");
        let mut bad = c.flow.segment(PSH | ACK, &[], b"control");
        tcp::fill_checksums(&mut bad);
        let good = u16::from_be_bytes([bad[50], bad[51]]);
        let wrong = if good == tcp::BAD_CSUM {
            0xbeef
        } else {
            tcp::BAD_CSUM
        };
        bad[50..52].copy_from_slice(&wrong.to_be_bytes());
        let p = drv::packet(&c.us.pool, &bad)?;
        c.us.send_packet(p)?;
        let caught = wait_counter(&c1, "Tcp.InCsumErrors", 1)?;
        c.reset()?;
        Ok(format!(
            "SYN, ACK and {} data segments ({} bytes, one a 2-buffer chain) with 0xdead checksums and TCP_CSUM|IP_CSUM: Linux read all {} bytes in order ({} segments back from Linux); Tcp.InCsumErrors {} -> {}, Ip.InHdrErrors {} -> {}; a control segment without offload was caught (Tcp.InCsumErrors +{caught})",
            sizes.len(),
            data.len(),
            got.len(),
            c.acks,
            c0.get("Tcp.InCsumErrors").copied().unwrap_or(0),
            c1.get("Tcp.InCsumErrors").copied().unwrap_or(0),
            c0.get("Ip.InHdrErrors").copied().unwrap_or(0),
            c1.get("Ip.InHdrErrors").copied().unwrap_or(0),
        ))
    })
}

/// Sets /proc/sys/net/ipv4/tcp_rmem for the test and puts the old value back on drop.
struct TcpRmem(String);

impl TcpRmem {
    const PATH: &'static str = "/proc/sys/net/ipv4/tcp_rmem";

    fn set(v: &str) -> Result<TcpRmem, String> {
        let old =
            std::fs::read_to_string(Self::PATH).map_err(|e| format!("{}: {e}", Self::PATH))?;
        std::fs::write(Self::PATH, v).map_err(|e| format!("{}: {e}", Self::PATH))?;
        Ok(TcpRmem(old.trim().to_string()))
    }
}

impl Drop for TcpRmem {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, &self.0);
    }
}

/// TSO: after our handshake, one 65,000-byte TCP payload goes as ONE chained packet with
/// `TSO` (MSS 1448); the device cuts it into 45 frames, Linux's interface counts 45 frames and
/// its socket reads exactly those bytes. Our queue counts one packet; the checksum error
/// counters stay put. Linux's listener gets a 1 MiB receive buffer (tcp_rmem) so that its first
/// window (65,535 bytes, unscaled in the SYN-ACK) takes the whole payload.
pub fn tcp_tso_kernel_peer(ctx: &Ctx) -> Outcome {
    const PORT: u16 = 7003;
    let (ifname, peer_mac) = match kernel_peer(ctx) {
        Ok(x) => x,
        Err(o) => return o,
    };
    run(|| {
        let us = IpPort::open(ctx)?;
        let _peer = PeerIf::up(&ifname, 1500, Some(us.mac))?;
        let _rmem = TcpRmem::set("4096 1048576 6291456")?;
        let listener = TcpListener::bind((PEER_IP, PORT))
            .map_err(|e| format!("listening on {PEER_IP}:{PORT}: {e}"))?;
        let data: Vec<u8> = (0..TSO_PAYLOAD).map(|i| (i * 7 + i / 1448) as u8).collect();
        let c0 = snmp()?;
        let reader = linux_reader(listener, data.len(), 3 * WAIT);
        let (mut c, syn_ack) = Client::connect(us, peer_mac, PORT)?;
        if c.flow.peer_window < TSO_PAYLOAD as u32 {
            return Err(format!(
                "Linux's SYN-ACK offers a window of {} bytes (scale {}), less than the {TSO_PAYLOAD}-byte payload; tcp_rmem did not take",
                c.flow.peer_window, c.flow.peer_wscale
            ));
        }
        let frame = c.flow.segment(PSH | ACK, &[], &data);
        let mut p = chain(&c.us.pool, &frame)?;
        let segs = p.segment_count();
        p.set_tx_offload(tcp::offload(&frame, Some(TSO_MSS)));
        let expect = TSO_PAYLOAD.div_ceil(usize::from(TSO_MSS)) as u64;
        let q0 = c.us.tx.stats();
        let s0 = drv::stats(&mut c.us.port)?;
        let (p0, pb0) = (
            if_counter(&ifname, "rx_packets")?,
            if_counter(&ifname, "rx_bytes")?,
        );
        step(format!(
            "TSO: one {}-byte frame in {segs} buffers, MSS {TSO_MSS} (Linux window {}, scale {})",
            frame.len(),
            syn_ack.window,
            c.flow.peer_wscale
        ));
        c.us.send_packet(p)?;
        let got = c.serve_until(&reader, 3 * WAIT)?;
        let (p1, pb1) = (
            if_counter(&ifname, "rx_packets")?,
            if_counter(&ifname, "rx_bytes")?,
        );
        let q1 = c.us.tx.stats();
        let s1 = drv::stats(&mut c.us.port)?;
        if got != data {
            return Err(format!(
                "Linux read {} bytes, {} were sent; {}",
                got.len(),
                data.len(),
                first_difference(&got, &data)
            ));
        }
        let c1 = snmp()?;
        let changed = csum_changes(&c0, &c1);
        if !changed.is_empty() {
            return Err(format!("after the TSO frame: {changed}"));
        }
        let frames = p1 - p0;
        // Each frame: 14 + 20 + 20 header bytes and its payload (Linux counts no CRC).
        let wire_bytes = expect * 54 + TSO_PAYLOAD as u64;
        if frames != expect || pb1 - pb0 != wire_bytes {
            return Err(format!(
                "Linux's {ifname} rx_packets/rx_bytes rose by {frames}/{}, expected {expect}/{wire_bytes} (a {TSO_PAYLOAD}-byte payload at MSS {TSO_MSS})",
                pb1 - pb0
            ));
        }
        // The Intel rings hand the device one packet; other drivers (virtio) cut it in
        // software first (devices::offload::soft), and their queues count the segments.
        let driver = c.us.port.info().driver;
        let hw_tso = matches!(driver, "igb" | "ixgbe");
        let (qp, qb) = (q1.packets - q0.packets, q1.bytes - q0.bytes);
        let want_q = if hw_tso {
            (1, frame.len() as u64)
        } else {
            (expect, wire_bytes)
        };
        if (qp, qb) != want_q || q1.dropped != q0.dropped {
            return Err(format!(
                "our {driver} transmit queue counted {qp} packets, {qb} bytes, {} dropped; expected {} packets of {} bytes in all ({} TSO)",
                q1.dropped - q0.dropped,
                want_q.0,
                want_q.1,
                if hw_tso { "hardware" } else { "software" }
            ));
        }
        let names = drv::counter_names(driver);
        let t = deltas(&s0, &s1, &names.tx)?;
        c.reset()?;
        Ok(format!(
            "one {}-byte TSO packet ({segs} buffers, MSS {TSO_MSS}) left as {frames} frames ({} bytes at Linux's {ifname}); Linux read all {TSO_PAYLOAD} bytes in order ({} segments back from Linux); our {driver} queue ({} TSO): {qp} packets, {qb} bytes; device {:?} +{t:?}; Tcp.InCsumErrors {} -> {}, Ip.InHdrErrors {} -> {}",
            frame.len(),
            pb1 - pb0,
            c.acks,
            if hw_tso { "hardware" } else { "software" },
            names.tx,
            c0.get("Tcp.InCsumErrors").copied().unwrap_or(0),
            c1.get("Tcp.InCsumErrors").copied().unwrap_or(0),
            c0.get("Ip.InHdrErrors").copied().unwrap_or(0),
            c1.get("Ip.InHdrErrors").copied().unwrap_or(0),
        ))
    })
}
