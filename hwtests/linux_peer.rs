//! The Linux side of the chain and offload tests (kernel-peer layout): Linux's igb driver and
//! network stack are the independent receiver that judges what our port sent.
//!
//! - [`PeerIf`] sets the peer's netdev up for one test (MTU, address, a static ARP entry for
//!   our port) and puts it back when the test ends, whatever way it ends.
//! - Counters: the netdev's own (/sys/class/net/IF/statistics) for frames and bytes on the
//!   wire, and the stack's (/proc/net/snmp, /proc/net/netstat) for the checksum errors Linux
//!   found. Reading the stack's counters is how a test knows that a frame Linux dropped was
//!   dropped for its checksum and not for anything else.
//! - Sockets: a packet socket for whole Ethernet frames (the jumbo test), a UDP socket, and a
//!   TCP listener read on a thread of its own while our port drives the connection.
//!   [`TcpRmem`] widens Linux's receive buffer for the TSO test.
//!
//! The addresses ([`PEER_IP`] Linux, [`OUR_IP`] ours, untagged) live only inside the test guest.

use std::collections::HashMap;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use vfio_nic::device::MacAddr;
use vfio_nic::platform::packet::{self, PacketRx, PacketSocket, PacketTx, RingGeometry};

use super::drv::{text, TEST_ETHERTYPE, WAIT};
use super::peer::sh;
use super::{step, Ctx, Outcome};

/// Linux's address and ours in the checksum and TSO tests.
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 1);
pub const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 98, 0, 2);

/// The Linux peer's interface and MAC, or the reason to skip.
pub fn kernel_peer(ctx: &Ctx) -> Result<(String, MacAddr), Outcome> {
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
pub struct PeerIf {
    ifname: String,
    ip: bool,
}

impl PeerIf {
    /// Brings `ifname` up with `mtu`; with `our_mac`, also gives it [`PEER_IP`]/24 and a
    /// static ARP entry for [`OUR_IP`] at `our_mac`.
    pub fn up(ifname: &str, mtu: u16, our_mac: Option<MacAddr>) -> Result<PeerIf, String> {
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

/// The frames and bytes the peer interface received so far (rx_packets, rx_bytes; Linux
/// counts no CRC).
pub fn rx_counts(ifname: &str) -> Result<(u64, u64), String> {
    Ok((
        if_counter(ifname, "rx_packets")?,
        if_counter(ifname, "rx_bytes")?,
    ))
}

/// [`rx_counts`] once they have stopped moving (two reads 20 ms apart agree, within 1 s): a
/// frame sent just before, such as the last ACK of a TCP handshake, reaches Linux's counters
/// later (QEMU's virtio-net transmits from its own queue handler, Linux counts in NAPI), and
/// counted in the next window it looked like an extra frame of that window (seen in the
/// noiommu-virtio layout: 46 frames for 45, the extra one 60 bytes).
pub fn settled_rx_counts(ifname: &str) -> Result<(u64, u64), String> {
    let deadline = Instant::now() + Duration::from_secs(1);
    let mut last = rx_counts(ifname)?;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let now = rx_counts(ifname)?;
        if now == last {
            return Ok(now);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{ifname}'s rx_packets/rx_bytes were still moving after 1 s ({last:?} -> {now:?}): something else sends to it"
            ));
        }
        last = now;
    }
}

/// A snapshot of Linux's IP, UDP and TCP counters, by "Udp.InCsumErrors"-style names.
pub type Snmp = HashMap<String, u64>;

/// Linux's IP, UDP and TCP counters from /proc/net/snmp and /proc/net/netstat, as
/// "Udp.InCsumErrors", "IpExt.InCsumErrors" and so on (each file is pairs of lines: a header
/// of names, then their values).
pub fn snmp() -> Result<Snmp, String> {
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
fn moved(a: &Snmp, b: &Snmp, name: &str) -> u64 {
    b.get(name).copied().unwrap_or(0) - a.get(name).copied().unwrap_or(0)
}

/// The watched counters that changed, as "NAME +N" text (empty when none did).
pub fn csum_changes(a: &Snmp, b: &Snmp) -> String {
    CSUM_COUNTERS
        .iter()
        .filter(|n| moved(a, b, n) != 0)
        .map(|n| format!("{n} +{}", moved(a, b, n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks that no watched counter changed from `a` to `b`; the error says which did `after`
/// what.
pub fn csum_quiet(a: &Snmp, b: &Snmp, after: &str) -> Result<(), String> {
    let changed = csum_changes(a, b);
    if changed.is_empty() {
        Ok(())
    } else {
        Err(format!("after the {after}: {changed}"))
    }
}

/// `names` in `a` and in `b`, as "NAME A -> B" text joined by commas, for the pass details.
pub fn before_after(a: &Snmp, b: &Snmp, names: &[&str]) -> String {
    let at = |c: &Snmp, n: &str| c.get(n).copied().unwrap_or(0);
    names
        .iter()
        .map(|n| format!("{n} {} -> {}", at(a, n), at(b, n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits (at most [`WAIT`]) until `name` rose by at least `by` since `from`.
pub fn wait_counter(from: &Snmp, name: &str, by: u64) -> Result<u64, String> {
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

/// A packet socket on the Linux peer's interface, with ring frames that take a jumbo frame
/// (or the interface's MTU, if larger).
pub fn peer_socket(ifname: &str) -> Result<(PacketRx, PacketTx), String> {
    let iface = packet::interface(ifname).map_err(text)?;
    let longest = (iface.mtu as usize).max(9000) + 22;
    let ring = RingGeometry::for_frames(longest, 32, packet::page_size()).map_err(text)?;
    let s = PacketSocket::open(iface.index, ring).map_err(|e| format!("{ifname}: {e}"))?;
    Ok(s.split())
}

/// The next test frame (ethertype 0x88b5 from `src`) a packet socket received, whole, or
/// `None` after `limit`. Other frames (IPv6 neighbour discovery of the peer, say) are skipped.
pub fn socket_recv(
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

/// Sends `frame` from a packet socket, waiting (at most [`WAIT`]) for a free ring slot.
pub fn socket_send(tx: &mut PacketTx, frame: &[u8]) -> Result<(), String> {
    let start = Instant::now();
    let slot = loop {
        if let Some(s) = tx.tx_next() {
            break s;
        }
        if start.elapsed() > WAIT {
            return Err("the packet socket's transmit ring stayed full".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    if !slot.send([frame], 0) {
        return Err(format!(
            "a {}-byte frame does not fit the packet socket's ring frame",
            frame.len()
        ));
    }
    tx.kick().map_err(text)
}

/// A UDP socket of Linux's on [`PEER_IP`]:`port`, whose reads give up after 200 ms.
pub fn udp_socket(port: u16) -> Result<UdpSocket, String> {
    let sock = UdpSocket::bind((PEER_IP, port))
        .map_err(|e| format!("binding UDP {PEER_IP}:{port}: {e}"))?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(text)?;
    Ok(sock)
}

/// A TCP listener of Linux's on [`PEER_IP`]:`port`.
pub fn listen(port: u16) -> Result<TcpListener, String> {
    TcpListener::bind((PEER_IP, port)).map_err(|e| format!("listening on {PEER_IP}:{port}: {e}"))
}

/// What Linux's reader thread hands back: every byte its socket read, or why not.
pub type Reader = mpsc::Receiver<Result<Vec<u8>, String>>;

/// Linux's side of a TCP test: accepts one connection on `listener` and reads until `want`
/// bytes arrived, at most `limit` in all, on a thread of its own.
pub fn linux_reader(listener: TcpListener, want: usize, limit: Duration) -> Reader {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        let r = accept(&listener, start, limit).and_then(|s| read_all(s, want, start, limit));
        let _ = tx.send(r);
    });
    rx
}

/// The first connection `listener` accepts (from [`OUR_IP`]), by `start + limit`.
fn accept(listener: &TcpListener, start: Instant, limit: Duration) -> Result<TcpStream, String> {
    listener.set_nonblocking(true).map_err(text)?;
    let (s, from) = loop {
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
    Ok(s)
}

/// Reads `s` until `want` bytes arrived, by `start + limit`.
fn read_all(
    mut s: TcpStream,
    want: usize,
    start: Instant,
    limit: Duration,
) -> Result<Vec<u8>, String> {
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
}

/// Sets /proc/sys/net/ipv4/tcp_rmem for the test and puts the old value back on drop.
pub struct TcpRmem(String);

impl TcpRmem {
    const PATH: &'static str = "/proc/sys/net/ipv4/tcp_rmem";

    pub fn set(v: &str) -> Result<TcpRmem, String> {
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
