//! Transmit offloads on the device (kernel-peer layout), checked by an independent receiver:
//! Linux's igb driver and network stack on the peer port.
//!
//! - Checksums: UDP and TCP over IPv4 with 0xdead in every checksum field and the device asked
//!   to write them (`TxOffload`). Linux's sockets receive every datagram and every byte, and
//!   its checksum error counters (/proc/net/snmp) stay put; control frames sent without the
//!   offload, with a bad checksum, make those counters move, so the check can fail.
//! - TSO: one 65,000-byte TCP payload handed over as ONE chained packet (32 buffers) with
//!   MSS 1448; the device cuts it into 45 frames, and Linux's socket reads the bytes in order.
//!
//! Our side is hwtests/ip_port.rs (the port, ARP answers, the TCP client over hwtests/tcp.rs);
//! Linux's is hwtests/linux_peer.rs (its addresses, counters and sockets). The peer learns our
//! MAC from a static ARP entry, and our receive loop answers ARP as well. Note: QEMU's igb
//! computes every transmit checksum from scratch when asked (`net_tx_pkt_do_sw_csum`), so these
//! tests prove the driver asks (context descriptor, POPTS, TSE, segment lengths), not the
//! pseudo-header preparation a real 82576 relies on (the software 82599 checks that on the
//! host).

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use vfio_nic::device::{MacAddr, Port, QueueStats, TxQueue};

use super::drv::{self, chain, deltas, drain, first_difference, run, WAIT};
use super::ip_port::{Client, IpPort};
use super::linux_peer::{
    before_after, csum_changes, csum_quiet, kernel_peer, linux_reader, listen, rx_counts,
    settled_rx_counts, snmp, udp_socket, wait_counter, PeerIf, Reader, Snmp, TcpRmem, OUR_IP,
    PEER_IP,
};
use super::tcp::{self, End, Seg, ACK, PSH};
use super::{step, Ctx, Outcome};

/// TSO: payload and MSS (65,000 bytes stay below QEMU 10's limit of 0xffff - IP header).
const TSO_PAYLOAD: usize = 65_000;
const TSO_MSS: u16 = 1448;
/// The UDP test's ports: Linux's socket and ours.
const UDP_PEER_PORT: u16 = 7001;
const UDP_OUR_PORT: u16 = 40001;

/// Runs `test` with the Linux peer's interface name and MAC, or skips without a peer.
fn with_kernel_peer(
    ctx: &Ctx,
    test: impl FnOnce(&str, MacAddr) -> Result<String, String>,
) -> Outcome {
    match kernel_peer(ctx) {
        Ok((ifname, peer_mac)) => run(|| test(&ifname, peer_mac)),
        Err(o) => o,
    }
}

/// UDP/IPv4 datagrams with 0xdead in both checksum fields and `UDP_CSUM | IP_CSUM` asked of
/// the device: Linux's UDP socket receives all of them and no checksum error counter moves;
/// then two control datagrams without the offload (one with a bad UDP checksum, one with a
/// bad IP header checksum) are dropped by Linux and counted.
pub fn udp_checksum_offload_kernel_peer(ctx: &Ctx) -> Outcome {
    const N: usize = 32;
    with_kernel_peer(ctx, |ifname, peer_mac| {
        let mut us = IpPort::open(ctx)?;
        let _peer = PeerIf::up(ifname, 1500, Some(us.mac))?;
        let sock = udp_socket(UDP_PEER_PORT)?;
        drain(&mut us.rx, Duration::from_millis(50))?;
        let ours = End {
            mac: us.mac,
            ip: OUR_IP,
            port: UDP_OUR_PORT,
        };
        let theirs = End {
            mac: peer_mac,
            ip: PEER_IP,
            port: UDP_PEER_PORT,
        };
        let c0 = snmp()?;
        step(format!(
            "sending {N} UDP datagrams with checksum offload and 0xdead checksums"
        ));
        for i in 0..N {
            let f = tcp::udp_frame(&ours, &theirs, 0x100 + i as u16, &datagram(i));
            us.send_offloaded(&f, None)?;
        }
        let bytes = receive_datagrams(&mut us, &sock, N, &c0)?;
        let c1 = snmp()?;
        csum_quiet(&c0, &c1, "offloaded datagrams")?;
        let (udp_caught, ip_caught) = udp_controls(&mut us, &sock, &ours, &theirs, &c1)?;
        let c2 = snmp()?;
        Ok(format!(
            "{N} datagrams ({bytes} payload bytes) sent with 0xdead checksums and UDP_CSUM|IP_CSUM all received by Linux; {} over them; controls without offload caught: Udp.InCsumErrors +{udp_caught}, Ip.InHdrErrors +{ip_caught} ({})",
            before_after(&c0, &c1, &["Udp.InCsumErrors", "Ip.InHdrErrors"]),
            csum_changes(&c1, &c2)
        ))
    })
}

/// The payload of datagram `i` (1 + 45 i bytes).
fn datagram(i: usize) -> Vec<u8> {
    (0..1 + i * 45).map(|j| (i * 31 + j * 7) as u8).collect()
}

/// Reads `n` datagrams from Linux's `sock` while `us` answers ARP, each from our port and
/// with [`datagram`]'s payload, at most [`WAIT`]. Returns the payload bytes.
fn receive_datagrams(
    us: &mut IpPort,
    sock: &UdpSocket,
    n: usize,
    c0: &Snmp,
) -> Result<usize, String> {
    let mut buf = vec![0u8; 4096];
    let start = Instant::now();
    let mut got = 0;
    let mut bytes = 0;
    while got < n {
        if start.elapsed() > WAIT {
            return Err(format!(
                "Linux's UDP socket received {got} of {n} datagrams within {} s (checksum counters: {})",
                WAIT.as_secs(),
                csum_changes(c0, &snmp()?)
            ));
        }
        us.poll()?;
        let Ok((len, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let want = datagram(got);
        if from != SocketAddr::from((OUR_IP, UDP_OUR_PORT)) || buf[..len] != want[..] {
            return Err(format!(
                "datagram {got}: {len} bytes from {from}, expected {} from {OUR_IP}:{UDP_OUR_PORT}",
                want.len()
            ));
        }
        got += 1;
        bytes += len;
    }
    Ok(bytes)
}

/// The controls, without offloads: a datagram with a bad UDP checksum and one with a bad IP
/// header checksum, each of which Linux must count (from `c1`) and keep from `sock`. Returns
/// how far Udp.InCsumErrors and Ip.InHdrErrors rose.
fn udp_controls(
    us: &mut IpPort,
    sock: &UdpSocket,
    ours: &End,
    theirs: &End,
    c1: &Snmp,
) -> Result<(u64, u64), String> {
    step("control datagrams without offload: bad UDP checksum, bad IP header checksum");
    let mut bad_udp = tcp::udp_frame(ours, theirs, 0x200, b"bad udp checksum");
    tcp::spoil_l4_checksum(&mut bad_udp);
    us.send_packet(drv::packet(&us.pool, &bad_udp)?)?;
    let udp_caught = wait_counter(c1, "Udp.InCsumErrors", 1)?;
    let mut bad_ip = tcp::udp_frame(ours, theirs, 0x201, b"bad ip checksum");
    tcp::fill_checksums(&mut bad_ip);
    bad_ip[24] ^= 0x5a;
    us.send_packet(drv::packet(&us.pool, &bad_ip)?)?;
    let ip_caught = wait_counter(c1, "Ip.InHdrErrors", 1)?;
    std::thread::sleep(Duration::from_millis(200));
    let mut buf = vec![0u8; 4096];
    if let Ok((n, from)) = sock.recv_from(&mut buf) {
        return Err(format!(
            "a control datagram with a bad checksum reached the socket ({n} bytes from {from})"
        ));
    }
    Ok((udp_caught, ip_caught))
}

/// What both TCP tests start from: the Linux peer set up, Linux's reader waiting on its
/// listener, and our connection to it open. Dropping it closes our port, then puts tcp_rmem
/// and the peer's interface back.
struct TcpTest {
    c: Client,
    syn_ack: Seg,
    reader: Reader,
    /// Linux's counters before the connection.
    c0: Snmp,
    _rmem: Option<TcpRmem>,
    _peer: PeerIf,
}

impl TcpTest {
    /// Opens our port, sets the peer up (and tcp_rmem to `rmem`, when given), listens on
    /// `port` for `want` bytes (read within `read_limit`) and connects.
    fn open(
        ctx: &Ctx,
        (ifname, peer_mac): (&str, MacAddr),
        port: u16,
        rmem: Option<&str>,
        want: usize,
        read_limit: Duration,
    ) -> Result<TcpTest, String> {
        let us = IpPort::open(ctx)?;
        let peer = PeerIf::up(ifname, 1500, Some(us.mac))?;
        let rmem = rmem.map(TcpRmem::set).transpose()?;
        let listener = listen(port)?;
        let c0 = snmp()?;
        let reader = linux_reader(listener, want, read_limit);
        let (c, syn_ack) = Client::connect(us, peer_mac, port)?;
        Ok(TcpTest {
            c,
            syn_ack,
            reader,
            c0,
            _rmem: rmem,
            _peer: peer,
        })
    }

    /// Serves the connection until Linux's reader has all it waited for, at most 3 x [`WAIT`].
    fn read(&mut self) -> Result<Vec<u8>, String> {
        self.c.serve_until(&self.reader, 3 * WAIT)
    }

    /// Checks that Linux read exactly `data` and that no checksum error counter moved after
    /// the `sent` frames; returns Linux's counters now.
    fn check(&self, got: &[u8], data: &[u8], sent: &str) -> Result<Snmp, String> {
        if got != data {
            return Err(format!(
                "Linux read {} bytes, {} were sent; {}",
                got.len(),
                data.len(),
                first_difference(got, data)
            ));
        }
        let c1 = snmp()?;
        csum_quiet(&self.c0, &c1, sent)?;
        Ok(c1)
    }

    /// The TCP and IP checksum error counters before the connection and at `c1`.
    fn counters(&self, c1: &Snmp) -> String {
        before_after(&self.c0, c1, &["Tcp.InCsumErrors", "Ip.InHdrErrors"])
    }
}

/// TCP over IPv4 with the checksum offloads: our SYN, ACK and data segments all carry 0xdead
/// checksums and `TCP_CSUM | IP_CSUM`; Linux accepts the connection and its socket reads every
/// byte in order, while Tcp.InCsumErrors and Ip.InHdrErrors stay put. One segment is a chain of
/// two buffers (header and 64 bytes in the first), so the checksum spans segments. A control
/// segment without the offload, with a bad checksum, is counted by Linux.
pub fn tcp_checksum_offload_kernel_peer(ctx: &Ctx) -> Outcome {
    const PORT: u16 = 7002;
    with_kernel_peer(ctx, |ifname, peer_mac| {
        let sizes = [1usize, 17, 100, 536, 1000, 1448, 1448, 700, 1460, 64];
        let data: Vec<u8> = (0..sizes.iter().sum::<usize>())
            .map(|i| (i * 13 + i / 251) as u8)
            .collect();
        let peer = (ifname, peer_mac);
        let mut t = TcpTest::open(ctx, peer, PORT, None, data.len(), 2 * WAIT)?;
        step(format!(
            "TCP: connected (Linux window {}, scale {}); sending {} segments",
            t.syn_ack.window,
            t.c.flow.peer_wscale,
            sizes.len()
        ));
        send_segments(&mut t.c, &data, &sizes)?;
        let got = t.read()?;
        let c1 = t.check(&got, &data, "offloaded segments")?;
        step("control segment without offload, bad TCP checksum");
        let mut bad = t.c.flow.segment(PSH | ACK, &[], b"control");
        tcp::spoil_l4_checksum(&mut bad);
        let p = drv::packet(&t.c.us.pool, &bad)?;
        t.c.us.send_packet(p)?;
        let caught = wait_counter(&c1, "Tcp.InCsumErrors", 1)?;
        t.c.reset()?;
        Ok(format!(
            "SYN, ACK and {} data segments ({} bytes, one a 2-buffer chain) with 0xdead checksums and TCP_CSUM|IP_CSUM: Linux read all {} bytes in order ({} segments back from Linux); {}; a control segment without offload was caught (Tcp.InCsumErrors +{caught})",
            sizes.len(),
            data.len(),
            got.len(),
            t.c.acks,
            t.counters(&c1),
        ))
    })
}

/// Sends `data` cut at `sizes` as data segments with the checksum offloads; the sixth is a
/// chain, the headers and 10 payload bytes in one buffer and the rest in another.
fn send_segments(c: &mut Client, data: &[u8], sizes: &[usize]) -> Result<(), String> {
    let mut at = 0;
    for (i, &n) in sizes.iter().enumerate() {
        let payload = &data[at..at + n];
        at += n;
        if i == 5 {
            let f = c.flow.segment(PSH | ACK, &[], payload);
            let mut p = chain(&c.us.pool, &f[..64])?;
            p.push_segment(chain(&c.us.pool, &f[64..])?);
            p.set_tx_offload(tcp::offload(&f, None));
            c.us.send_packet(p)?;
        } else {
            c.send_data(payload)?;
        }
    }
    Ok(())
}

/// TSO: after our handshake, one 65,000-byte TCP payload goes as ONE chained packet with
/// `TSO` (MSS 1448); the device cuts it into 45 frames, Linux's interface counts 45 frames and
/// its socket reads exactly those bytes. Our queue counts one packet; the checksum error
/// counters stay put. Linux's listener gets a 1 MiB receive buffer (tcp_rmem) so that its first
/// window (65,535 bytes, unscaled in the SYN-ACK) takes the whole payload.
pub fn tcp_tso_kernel_peer(ctx: &Ctx) -> Outcome {
    const PORT: u16 = 7003;
    const RMEM: &str = "4096 1048576 6291456";
    with_kernel_peer(ctx, |ifname, peer_mac| {
        let data: Vec<u8> = (0..TSO_PAYLOAD).map(|i| (i * 7 + i / 1448) as u8).collect();
        let peer = (ifname, peer_mac);
        let mut t = TcpTest::open(ctx, peer, PORT, Some(RMEM), data.len(), 3 * WAIT)?;
        let flow = &t.c.flow;
        if flow.peer_window < TSO_PAYLOAD as u32 {
            return Err(format!(
                "Linux's SYN-ACK offers a window of {} bytes (scale {}), less than the {TSO_PAYLOAD}-byte payload; tcp_rmem did not take",
                flow.peer_window, flow.peer_wscale
            ));
        }
        let frame = t.c.flow.segment(PSH | ACK, &[], &data);
        let mut p = chain(&t.c.us.pool, &frame)?;
        let segs = p.segment_count();
        p.set_tx_offload(tcp::offload(&frame, Some(TSO_MSS)));
        let expect = TSO_PAYLOAD.div_ceil(usize::from(TSO_MSS)) as u64;
        let q0 = t.c.us.tx.stats();
        let s0 = drv::stats(&mut t.c.us.port)?;
        let (p0, pb0) = settled_rx_counts(ifname)?;
        step(format!(
            "TSO: one {}-byte frame in {segs} buffers, MSS {TSO_MSS} (Linux window {}, scale {})",
            frame.len(),
            t.syn_ack.window,
            t.c.flow.peer_wscale
        ));
        t.c.us.send_packet(p)?;
        let got = t.read()?;
        let (p1, pb1) = rx_counts(ifname)?;
        let q1 = t.c.us.tx.stats();
        let s1 = drv::stats(&mut t.c.us.port)?;
        let c1 = t.check(&got, &data, "TSO frame")?;
        let frames = p1 - p0;
        // Each frame: 14 + 20 + 20 header bytes and its payload (Linux counts no CRC).
        let wire_bytes = expect * 54 + TSO_PAYLOAD as u64;
        if frames != expect || pb1 - pb0 != wire_bytes {
            return Err(format!(
                "Linux's {ifname} rx_packets/rx_bytes rose by {frames}/{}, expected {expect}/{wire_bytes} (a {TSO_PAYLOAD}-byte payload at MSS {TSO_MSS})",
                pb1 - pb0
            ));
        }
        let driver = t.c.us.port.info().driver;
        let sent = (expect, wire_bytes);
        let (qp, qb, tso) = check_tso_queue(driver, &q0, &q1, frame.len() as u64, sent)?;
        let names = drv::counter_names(driver);
        let tx = deltas(&s0, &s1, &names.tx)?;
        t.c.reset()?;
        Ok(format!(
            "one {}-byte TSO packet ({segs} buffers, MSS {TSO_MSS}) left as {frames} frames ({} bytes at Linux's {ifname}); Linux read all {TSO_PAYLOAD} bytes in order ({} segments back from Linux); our {driver} queue ({tso} TSO): {qp} packets, {qb} bytes; device {:?} +{tx:?}; {}",
            frame.len(),
            pb1 - pb0,
            t.c.acks,
            names.tx,
            t.counters(&c1),
        ))
    })
}

/// Checks what our transmit queue counted for the TSO packet from `q0` to `q1`: the Intel
/// rings hand the device one packet of `frame_len` bytes; other drivers (virtio) cut it in
/// software first (devices::offload::soft), and their queues count the `wire` frames and
/// bytes. Returns the packets and bytes counted and "hardware" or "software".
fn check_tso_queue(
    driver: &str,
    q0: &QueueStats,
    q1: &QueueStats,
    frame_len: u64,
    wire: (u64, u64),
) -> Result<(u64, u64, &'static str), String> {
    let hw_tso = matches!(driver, "igb" | "ixgbe");
    let tso = if hw_tso { "hardware" } else { "software" };
    let (qp, qb) = (q1.packets - q0.packets, q1.bytes - q0.bytes);
    let want_q = if hw_tso { (1, frame_len) } else { wire };
    if (qp, qb) != want_q || q1.dropped != q0.dropped {
        return Err(format!(
            "our {driver} transmit queue counted {qp} packets, {qb} bytes, {} dropped; expected {} packets of {} bytes in all ({tso} TSO)",
            q1.dropped - q0.dropped,
            want_q.0,
            want_q.1,
        ));
    }
    Ok((qp, qb, tso))
}
