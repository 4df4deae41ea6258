//! The af_packet backend against a real kernel: each test makes its own veth pair between two
//! network namespaces of its own, opens `afp:` ports in them, and removes both namespaces
//! when it ends, passed or failed (deleting a namespace deletes its veth end).
//!
//! Needs root (namespaces, packet sockets) and `ip` (iproute2); the ping test also needs
//! `ping` (iputils-ping). Without them a test says why and passes without checking anything:
//! scripts/test-all installs them and runs as root, so CI checks everything.
//!
//! This machine's kernel has no 802.1Q module, so tagged frames are sent as raw bytes through a
//! packet socket (the peer's af_packet port): the kernel of the receiving side takes the outer
//! tag into metadata before any packet socket sees it, which is what the backend must undo.

use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use vfio_nic::device::{Port, RxQueue, TxQueue};
use vfio_nic::devices::{open, AnyPort, PortConfig};
use vfio_nic::platform::dma::Packet;
use vfio_nic::vlan::{PacketVlan, RxMode, Tpid, VlanConfig, VlanControl};
use vfio_nic::Error;

/// How long anything may take.
const PATIENCE: Duration = Duration::from_secs(10);

fn skip(why: &str) -> bool {
    eprintln!("afpacket test skipped: {why}");
    true
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `ip ARGS`, panicking with its error output when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("running ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces joined by a veth pair: side 0 is `ifs[0]` in `ns[0]`, side 1 `ifs[1]` in
/// `ns[1]`. Removed on drop.
struct Net {
    ns: [String; 2],
    ifs: [String; 2],
}

impl Net {
    /// A new pair, or `None` (after saying why) when this machine cannot make one.
    fn new() -> Option<Net> {
        let uid = Command::new("id").arg("-u").output().map(|o| o.stdout);
        let root = uid.is_ok_and(|u| u.trim_ascii() == b"0");
        if !root && skip("not root") {
            return None;
        }
        if !have("ip") && skip("no `ip` (iproute2)") {
            return None;
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{}{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let net = Net {
            ns: [format!("vnic-{id}-a"), format!("vnic-{id}-b")],
            ifs: [format!("vn{id}a"), format!("vn{id}b")],
        };
        for (ns, i) in net.ns.iter().zip(0..) {
            ip(&["netns", "add", ns]);
            // No IPv6 chatter (router solicitations, DAD, MLD) on the test links.
            net.in_ns(i, || {
                for f in ["all", "default"] {
                    let _ =
                        std::fs::write(format!("/proc/sys/net/ipv6/conf/{f}/disable_ipv6"), "1");
                }
            });
        }
        let (a, b) = (&net.ifs[0], &net.ifs[1]);
        ip(&[
            "link", "add", a, "netns", &net.ns[0], "type", "veth", "peer", "name", b, "netns",
            &net.ns[1],
        ]);
        for i in 0..2 {
            ip(&["-n", &net.ns[i], "link", "set", &net.ifs[i], "up"]);
        }
        Some(net)
    }

    /// Runs `f` on a thread in namespace `side`; sockets made there stay in it.
    fn in_ns<T: Send>(&self, side: usize, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.ns[side]);
        std::thread::scope(|s| {
            s.spawn(|| {
                let fd = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET)
                    .unwrap_or_else(|e| panic!("entering {path}: {e}"));
                f()
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// Opens `afp:IFNAME` (with `opts`) on side `side`.
    fn port(&self, side: usize, opts: &str) -> AnyPort {
        let name = format!("afp:{}{opts}", self.ifs[side]);
        self.in_ns(side, || open(&name, &PortConfig::default()))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// Waits until a packet socket is bound in namespace `side` (`/proc/thread-self/net/packet`
    /// lists it with protocol 0003, ETH_P_ALL, once bound).
    fn wait_for_packet_socket(&self, side: usize) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let table = self.in_ns(side, || {
                std::fs::read_to_string("/proc/thread-self/net/packet").unwrap()
            });
            let bound = table
                .lines()
                .skip(1)
                .any(|l| l.split_whitespace().nth(3) == Some("0003"));
            if bound {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no packet socket bound in {}: {table}",
                self.ns[side]
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `ip netns exec` for side `side`.
    fn exec(&self, side: usize, cmd: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[side]]).args(cmd);
        c
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A frame of `len` bytes (with its tag, if any), broadcast, ethertype 0x88b5 (local
/// experimental), its bytes counting from `seed` so that every frame differs.
fn frame(len: usize, seed: u8, tags: &[(u16, u16)]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend([0x02, 0, 0, 0, 0, seed]);
    for &(tpid, tci) in tags {
        f.extend(tpid.to_be_bytes());
        f.extend(tci.to_be_bytes());
    }
    f.extend([0x88, 0xb5]);
    let mut b = seed;
    while f.len() < len {
        f.push(b);
        b = b.wrapping_add(1);
    }
    f
}

fn send(tx: &mut impl TxQueue, pool_of: &impl RxQueue, frames: &[Vec<u8>]) {
    let mut batch: Vec<Packet> = Vec::new();
    for f in frames {
        let mut p = pool_of.pool().alloc().expect("a buffer");
        assert!(p.set_data(f));
        batch.push(p);
    }
    let deadline = Instant::now() + PATIENCE;
    while !batch.is_empty() {
        tx.tx_burst(&mut batch).unwrap();
        assert!(Instant::now() < deadline, "transmit ring stayed full");
    }
}

/// Receives `n` packets (or fails after PATIENCE).
fn recv<R: RxQueue>(rx: &mut R, n: usize) -> Vec<Packet> {
    let mut out = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while out.len() < n {
        if rx.rx_burst(&mut out, 32).unwrap() == 0 {
            assert!(
                Instant::now() < deadline,
                "received {} of {n} frames in {PATIENCE:?}",
                out.len()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    out
}

#[test]
fn frames_cross_byte_identical_both_ways_and_the_counters_agree() {
    let Some(net) = Net::new() else { return };
    let mut ports = [net.port(0, ""), net.port(1, "")];
    let [(mut rx0, mut tx0), (mut rx1, mut tx1)] =
        ports.each_mut().map(|p| p.take_queues().unwrap());
    let sizes = [60usize, 61, 64, 128, 511, 1000, 1514];
    let frames: Vec<Vec<u8>> = (0..140)
        .map(|i| frame(sizes[i % sizes.len()], i as u8, &[]))
        .collect();
    let one_way = |tx: &mut vfio_nic::devices::AnyTx,
                   pool_of: &vfio_nic::devices::AnyRx,
                   rx: &mut vfio_nic::devices::AnyRx,
                   to: usize| {
        send(tx, pool_of, &frames);
        let got = recv(rx, frames.len());
        assert_eq!(got.len(), frames.len());
        for (g, f) in got.iter().zip(&frames) {
            assert_eq!(g.data(), &f[..], "a frame changed on its way to side {to}");
        }
    };
    one_way(&mut tx0[0], &rx0[0], &mut rx1[0], 1);
    one_way(&mut tx1[0], &rx1[0], &mut rx0[0], 0);
    for (i, (rx, tx)) in [(&rx0[0], &tx0[0]), (&rx1[0], &tx1[0])]
        .into_iter()
        .enumerate()
    {
        assert_eq!(rx.stats().packets, 140, "side {i} received");
        assert_eq!(tx.stats().packets, 140, "side {i} sent");
        assert_eq!(tx.stats().dropped, 0);
    }
    for p in &mut ports {
        let s = p.stats().unwrap();
        assert_eq!(s.get("socket_rx_packets"), Some(140), "{s:?}");
        assert_eq!(s.get("socket_rx_drops"), Some(0), "{s:?}");
    }
    let info = ports[0].info();
    assert_eq!((info.driver, info.mtu), ("afpacket", Some(1500)));
    assert!(
        ports[0].link().unwrap().up,
        "asked from a thread outside the namespace"
    );
}

/// A UDP/IPv4 frame of flow number `flow` (its source port), 60 bytes: flows the kernel's
/// fanout hash tells apart.
fn udp_frame(flow: u16) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend([0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let ip_start = f.len();
    f.extend([
        0x45, 0, 0, 46, 0, 0, 0, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2,
    ]);
    let sum = vfio_nic::platform::checksum::checksum(&f[ip_start..]);
    f[ip_start + 10..ip_start + 12].copy_from_slice(&sum.to_be_bytes());
    f.extend(flow.to_be_bytes());
    f.extend(9u16.to_be_bytes());
    f.extend([0, 26, 0, 0]);
    f.resize(60, 0);
    f
}

#[test]
fn queues_share_the_interface_by_flow_and_lose_nothing() {
    let Some(net) = Net::new() else { return };
    let mut a = net.port(0, "");
    let mut b = net.port(1, ",queues=2");
    assert_eq!(b.info().rx_queues, 2);
    let (rx_a, mut tx_a) = a.take_queues().unwrap();
    let (mut rx_b, _) = b.take_queues().unwrap();
    let frames: Vec<Vec<u8>> = (0..200).map(|i| udp_frame(1000 + i)).collect();
    send(&mut tx_a[0], &rx_a[0], &frames);
    let deadline = Instant::now() + PATIENCE;
    let mut got: [Vec<Packet>; 2] = [Vec::new(), Vec::new()];
    while got[0].len() + got[1].len() < frames.len() {
        let mut n = 0;
        for (q, g) in rx_b.iter_mut().zip(got.iter_mut()) {
            n += q.rx_burst(g, 32).unwrap();
        }
        if n == 0 {
            assert!(
                Instant::now() < deadline,
                "{} + {} of 200 received",
                got[0].len(),
                got[1].len()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert!(
        !got[0].is_empty() && !got[1].is_empty(),
        "200 flows all hashed to one queue: {} / {}",
        got[0].len(),
        got[1].len()
    );
    let mut all: Vec<Vec<u8>> = got.iter().flatten().map(|p| p.data().to_vec()).collect();
    let mut sent = frames.clone();
    all.sort();
    sent.sort();
    assert_eq!(all, sent, "every frame once, unchanged");
}

/// The frames of the VLAN test: untagged, 802.1Q VID 100 PCP 5, a priority tag (VID 0, PCP 3),
/// an 802.1ad outer tag alone, and QinQ (802.1ad outer, 802.1Q inner).
fn tagged_frames() -> Vec<Vec<u8>> {
    vec![
        frame(64, 1, &[]),
        frame(64, 2, &[(0x8100, 0xa064)]),
        frame(64, 3, &[(0x8100, 0x6000)]),
        frame(64, 4, &[(0x88a8, 0x00c8)]),
        frame(68, 5, &[(0x88a8, 0x00c8), (0x8100, 0x012c)]),
    ]
}

#[test]
fn tags_are_the_same_in_every_receive_mode_and_the_wire_form_comes_back() {
    let Some(net) = Net::new() else { return };
    let mut tx_port = net.port(0, "");
    let mut rx_port = net.port(1, "");
    let (rx_of_tx, mut tx) = tx_port.take_queues().unwrap();
    let frames = tagged_frames();
    // Plain receive (no VLAN layer): every frame exactly as it was sent.
    {
        let (mut rx, _) = rx_port.take_queues().unwrap();
        send(&mut tx[0], &rx_of_tx[0], &frames);
        let got = recv(&mut rx[0], frames.len());
        for (g, f) in got.iter().zip(&frames) {
            assert_eq!(
                g.data(),
                &f[..],
                "plain receive gives the wire frame, tag put back"
            );
        }
    }
    // Through the VLAN layer, for each TPID: the same answers in every mode.
    for tpid in [Tpid::C_TAG, Tpid::S_TAG] {
        let mut answers = Vec::new();
        for mode in [RxMode::Hardware, RxMode::Software, RxMode::Deferred] {
            let mut port = net.port(1, "");
            let cfg = VlanConfig {
                rx_mode: mode,
                tpid,
                ..VlanConfig::default()
            };
            let ctl = VlanControl::new(&mut port, &cfg).unwrap();
            let (rxq, _) = port.take_queues().unwrap();
            let mut rx = ctl.wrap_rx(rxq.into_iter().next().unwrap());
            send(&mut tx[0], &rx_of_tx[0], &frames);
            let mut got = recv(&mut rx, frames.len());
            let ctx = rx.ctx();
            let seen: Vec<(Option<u16>, Vec<u8>)> = got
                .iter_mut()
                .map(|p| (p.take_vlan(ctx).map(|t| t.raw()), p.data().to_vec()))
                .collect();
            answers.push((mode, seen));
        }
        let (_, first) = &answers[0];
        for (mode, seen) in &answers[1..] {
            assert_eq!(seen, first, "TPID {tpid:?}: {mode} differs from hw");
        }
        let tags: Vec<Option<u16>> = first.iter().map(|a| a.0).collect();
        let expect = if tpid == Tpid::C_TAG {
            // The 802.1ad-tagged frames carry no tag of the port's TPID: untagged to it.
            vec![None, Some(0xa064), Some(0x6000), None, None]
        } else {
            vec![None, None, None, Some(0x00c8), Some(0x00c8)]
        };
        assert_eq!(tags, expect, "TPID {tpid:?}");
        // QinQ with the 802.1ad TPID: the inner 802.1Q tag stays in the frame.
        if tpid == Tpid::S_TAG {
            assert_eq!(&first[4].1, &frame(64, 5, &[(0x8100, 0x012c)]));
        }
    }
}

#[test]
fn transmit_inserts_tags_while_copying_and_refuses_what_the_kernel_would_drop() {
    let Some(net) = Net::new() else { return };
    let mut a = net.port(0, "");
    let mut b = net.port(1, "");
    let ctl = VlanControl::new(&mut a, &VlanConfig::default()).unwrap();
    let (rx_a, tx_a) = a.take_queues().unwrap();
    let (mut rx_b, _) = b.take_queues().unwrap();
    let mut tx = ctl.wrap_tx(tx_a.into_iter().next().unwrap());
    // Hardware insertion is refused: the kernel ignores the ring header's VLAN field.
    let e = ctl
        .set_tx_mode(&mut a, vfio_nic::vlan::TxMode::Hardware)
        .unwrap_err();
    assert!(matches!(e, Error::NotSupported { .. }), "{e}");
    // Software insertion while copying: the frame leaves tagged.
    let mut p = rx_a[0].pool().alloc().unwrap();
    assert!(p.set_data(&frame(60, 9, &[])));
    let vid = vfio_nic::vlan::Vid::new(100).unwrap();
    p.set_tx_vlan(vfio_nic::vlan::Tci::new(vid, 5, false).unwrap())
        .unwrap();
    let mut batch = vec![p];
    assert_eq!(tx.tx_burst(&mut batch).unwrap(), 1);
    let got = recv(&mut rx_b[0], 1);
    assert_eq!(got[0].data(), &frame(64, 9, &[(0x8100, 0xa064)])[..]);
    // Sizes: MTU + 14 always; MTU + 18 only with an 802.1Q ethertype; more never.
    let sizes = [
        (frame(1514, 1, &[]), true),
        (frame(1518, 2, &[(0x8100, 0x0064)]), true),
        (frame(1518, 3, &[(0x88a8, 0x0064)]), false),
        (frame(1515, 4, &[]), false),
        (frame(1522, 5, &[(0x8100, 0x0064)]), false),
    ];
    let mut inner = tx.into_inner();
    let before = inner.stats().dropped;
    let frames: Vec<Vec<u8>> = sizes.iter().map(|s| s.0.clone()).collect();
    send(&mut inner, &rx_a[0], &frames);
    assert_eq!(
        inner.stats().dropped - before,
        3,
        "three refused, and counted"
    );
    let fits: Vec<&Vec<u8>> = sizes.iter().filter(|s| s.1).map(|s| &s.0).collect();
    let got = recv(&mut rx_b[0], fits.len());
    for (g, f) in got.iter().zip(fits) {
        assert_eq!(g.data(), &f[..]);
    }
}

#[test]
fn a_transmit_ring_filled_while_the_link_was_down_sends_once_it_is_up() {
    let Some(net) = Net::new() else { return };
    let mut a = net.port(0, ",frames=64");
    let mut b = net.port(1, "");
    let (rx_a, mut tx_a) = a.take_queues().unwrap();
    let (mut rx_b, _) = b.take_queues().unwrap();
    ip(&["-n", &net.ns[0], "link", "set", &net.ifs[0], "down"]);
    // The kicks fail (ENETDOWN): the ring fills with frames marked for sending.
    let mut batch: Vec<Packet> = Vec::new();
    for i in 0..100u8 {
        let mut p = rx_a[0].pool().alloc().unwrap();
        assert!(p.set_data(&frame(60, i, &[])));
        batch.push(p);
    }
    tx_a[0].tx_burst(&mut batch).unwrap();
    assert!(
        !batch.is_empty(),
        "a 64-frame ring took 100 frames while the link was down"
    );
    drop(batch);
    ip(&["-n", &net.ns[0], "link", "set", &net.ifs[0], "up"]);
    // The next burst finds the ring full and kicks: the waiting frames go, then these.
    let frames: Vec<Vec<u8>> = (0..10).map(|i| frame(60, 200 + i, &[])).collect();
    send(&mut tx_a[0], &rx_a[0], &frames);
    let deadline = Instant::now() + PATIENCE;
    let mut got = Vec::new();
    while !got.iter().any(|p: &Packet| p.data() == &frames[9][..]) {
        if rx_b[0].rx_burst(&mut got, 32).unwrap() == 0 {
            assert!(
                Instant::now() < deadline,
                "nothing after the link came back ({} frames)",
                got.len()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn opening_fails_with_errors_that_say_what_to_do() {
    let Some(net) = Net::new() else { return };
    let e = net
        .in_ns(0, || open("afp:vnic-nonesuch", &PortConfig::default()))
        .err()
        .unwrap();
    assert!(matches!(e, Error::NoSuchInterface { .. }), "{e}");
    ip(&["-n", &net.ns[0], "link", "set", &net.ifs[0], "down"]);
    let name = format!("afp:{}", net.ifs[0]);
    let e = net
        .in_ns(0, || open(&name, &PortConfig::default()))
        .err()
        .unwrap();
    assert!(matches!(e, Error::InterfaceDown { .. }), "{e}");
    assert!(e.to_string().contains("ip link set"), "{e}");
}

/// Sets the MTU of both ends of `net`'s pair.
fn set_mtu(net: &Net, mtu: u32) {
    for i in 0..2 {
        let m = mtu.to_string();
        ip(&["-n", &net.ns[i], "link", "set", &net.ifs[i], "mtu", &m]);
    }
}

#[test]
fn a_jumbo_frame_arrives_whole_as_a_chain_and_is_forwarded_byte_identical() {
    let Some(net) = Net::new() else { return };
    set_mtu(&net, 9000);
    // Default pools: 2 KiB buffers, so a 9000-byte frame takes 5 of them.
    let mut a = net.port(0, "");
    let mut b = net.port(1, "");
    assert_eq!(a.info().mtu, Some(9000));
    let (mut rx_a, mut tx_a) = a.take_queues().unwrap();
    let (mut rx_b, mut tx_b) = b.take_queues().unwrap();
    let room = rx_a[0].pool().buf_size() - rx_a[0].pool().headroom();
    // Untagged, the longest an MTU-9000 link takes, and one with an 802.1Q tag (the kernel
    // takes it into the ring header; the chain gets it back, across its first segment).
    let frames = [
        frame(9000, 1, &[]),
        frame(9014, 2, &[]),
        frame(9018, 3, &[(0x8100, 0xa064)]),
        frame(room + 1, 4, &[]),
        frame(1500, 5, &[]),
    ];
    let mut batch: Vec<Packet> = frames
        .iter()
        .map(|f| rx_a[0].pool().packet_from(f).expect("buffers"))
        .collect();
    assert!(
        batch[0].is_chained(),
        "a 9000-byte frame to send is a chain"
    );
    let deadline = Instant::now() + PATIENCE;
    while !batch.is_empty() {
        tx_a[0].tx_burst(&mut batch).unwrap();
        assert!(Instant::now() < deadline, "transmit ring stayed full");
    }
    assert_eq!(tx_a[0].stats().dropped, 0, "no jumbo frame refused");
    let mut got = recv(&mut rx_b[0], frames.len());
    for (g, f) in got.iter().zip(&frames) {
        assert_eq!(g.frame_len(), f.len());
        assert_eq!(g.is_chained(), f.len() > room, "{} bytes", f.len());
        assert!(g.segments().all(|s| s.len() <= room));
        assert_eq!(
            g.segments().flatten().copied().collect::<Vec<u8>>(),
            *f,
            "a {}-byte frame changed",
            f.len()
        );
    }
    assert_eq!(got[0].segment_count(), 9000usize.div_ceil(room));
    assert_eq!(rx_b[0].stats().dropped, 0);
    // Forwarded back as received (chains gathered into the ring): the same bytes arrive.
    let deadline = Instant::now() + PATIENCE;
    while !got.is_empty() {
        tx_b[0].tx_burst(&mut got).unwrap();
        assert!(Instant::now() < deadline, "transmit ring stayed full");
    }
    let back = recv(&mut rx_a[0], frames.len());
    for (g, f) in back.iter().zip(&frames) {
        assert_eq!(
            g.segments().flatten().copied().collect::<Vec<u8>>(),
            *f,
            "a {}-byte frame changed when forwarded",
            f.len()
        );
    }
    // Longer than the link takes: refused and counted, as at MTU 1500.
    let mut batch = vec![rx_a[0].pool().packet_from(&frame(9015, 6, &[])).unwrap()];
    assert_eq!(tx_a[0].tx_burst(&mut batch).unwrap(), 1);
    assert_eq!(tx_a[0].stats().dropped, 1);
}

/// System calls of an af_packet queue (the counter each keeps).
fn syscalls_rx(q: &vfio_nic::devices::AnyRx) -> u64 {
    match q {
        vfio_nic::devices::AnyRx::AfPacket(q) => q.syscalls(),
        _ => panic!("not an af_packet queue"),
    }
}

fn syscalls_tx(q: &vfio_nic::devices::AnyTx) -> u64 {
    match q {
        vfio_nic::devices::AnyTx::AfPacket(q) => q.syscalls(),
        _ => panic!("not an af_packet queue"),
    }
}

#[test]
fn a_burst_costs_at_most_one_system_call_each_way_and_a_packet_none() {
    let Some(net) = Net::new() else { return };
    let mut a = net.port(0, "");
    let mut b = net.port(1, "");
    let (mut rx_a, mut tx_a) = a.take_queues().unwrap();
    let (mut rx_b, mut tx_b) = b.take_queues().unwrap();
    // Side 1 forwards what it receives back to side 0, burst by burst, while side 0 sends
    // 4,000 frames in bursts of 32 and drains what comes back.
    let total = 4000usize;
    let frames: Vec<Vec<u8>> = (0..32).map(|i| frame(60 + i * 8, i as u8, &[])).collect();
    let (mut sent, mut back) = (0usize, 0usize);
    let (mut tx_bursts, mut rx_bursts) = ([0u64; 2], [0u64; 2]);
    let mut fwd: Vec<Packet> = Vec::new();
    let mut got: Vec<Packet> = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    while back < total {
        assert!(
            Instant::now() < deadline,
            "{back} of {total} frames came back"
        );
        if sent < total {
            let mut batch: Vec<Packet> = frames
                .iter()
                .take(total - sent)
                .map(|f| {
                    let mut p = rx_a[0].pool().alloc().expect("a buffer");
                    assert!(p.set_data(f));
                    p
                })
                .collect();
            sent += tx_a[0].tx_burst(&mut batch).unwrap();
            tx_bursts[0] += 1;
        }
        let n = rx_b[0].rx_burst(&mut fwd, 32).unwrap();
        rx_bursts[1] += 1;
        if n > 0 {
            tx_b[0].tx_burst(&mut fwd).unwrap();
            tx_bursts[1] += 1;
        }
        rx_bursts[0] += 1;
        back += rx_a[0].rx_burst(&mut got, 32).unwrap();
        got.clear();
        if n == 0 {
            std::thread::yield_now();
        }
    }
    assert!(tx_bursts[0] >= (total / 32) as u64 && rx_bursts[1] > 100);
    for side in 0..2 {
        let (rx, tx) = [(&rx_a[0], &tx_a[0]), (&rx_b[0], &tx_b[0])][side];
        assert_eq!(
            syscalls_rx(rx),
            0,
            "side {side}: receiving took system calls"
        );
        assert!(
            syscalls_tx(tx) <= tx_bursts[side] && syscalls_tx(tx) > 0,
            "side {side}: {} system calls in {} transmit bursts",
            syscalls_tx(tx),
            tx_bursts[side]
        );
    }
    // One kick per burst exactly (no ring was ever full): per packet, 1/32 at most on side 0.
    assert_eq!(syscalls_tx(&tx_a[0]), tx_bursts[0]);
    assert!(syscalls_tx(&tx_a[0]) * 31 < total as u64 * 2);
}

#[test]
fn lo_opens_whatever_its_mtu() {
    let Some(net) = Net::new() else { return };
    // A namespace's own lo (MTU 65,536), brought up: the tool opens it and reports the MTU.
    ip(&["-n", &net.ns[0], "link", "set", "lo", "up"]);
    let out = net
        .exec(0, &[env!("CARGO_BIN_EXE_vfio-nic"), "info", "afp:lo"])
        .output()
        .unwrap();
    succeeded(&out, "vfio-nic info afp:lo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("65536"), "info shows lo's MTU: {text}");
    // And a frame of the full 65,550 bytes goes round lo as a chain.
    let mut port = net
        .in_ns(0, || open("afp:lo,frames=16", &PortConfig::default()))
        .unwrap();
    let (mut rx, mut tx) = port.take_queues().unwrap();
    let f = frame(65536 + 14, 7, &[]);
    let mut batch = vec![rx[0].pool().packet_from(&f).unwrap()];
    assert_eq!(tx[0].tx_burst(&mut batch).unwrap(), 1);
    assert_eq!(tx[0].stats().dropped, 0);
    let got = recv(&mut rx[0], 1);
    assert!(got[0].is_chained());
    assert_eq!(got[0].segments().flatten().copied().collect::<Vec<u8>>(), f);
}

#[test]
fn without_cap_net_raw_the_error_says_so() {
    let Some(net) = Net::new() else { return };
    if !have("setpriv") && skip("no `setpriv` (util-linux)") {
        return;
    }
    // The tool as user nobody, without capabilities, in the pair's namespace.
    let port = format!("afp:{}", net.ifs[0]);
    let out = net
        .exec(
            0,
            &[
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                env!("CARGO_BIN_EXE_vfio-nic"),
                "info",
                &port,
            ],
        )
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "opened a packet socket without privilege: {err}"
    );
    assert!(
        err.contains("CAP_NET_RAW") && err.contains("not permitted"),
        "{err}"
    );
}

/// Fails with `what`'s error output unless it succeeded.
fn succeeded(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits for `child` to end, killing it after `limit`; its status and output.
fn wait(mut child: Child, limit: Duration, what: &str) -> std::process::Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what}: still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn captures_are_identical_across_receive_modes() {
    let Some(net) = Net::new() else { return };
    let tool = env!("CARGO_BIN_EXE_vfio-nic");
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for mode in ["hw", "sw", "deferred"] {
        let file = dir.path().join(format!("{mode}.pcap"));
        let cap = net
            .exec(1, &[tool, "capture", &format!("afp:{}", net.ifs[1]), "-w"])
            .arg(&file)
            .args(["--count", "40", "--timestamps", "index", "--vlan-rx", mode])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The capture's socket must be bound before the frames leave (they differ from one
        // another, so a capture that started in the middle would differ).
        net.wait_for_packet_socket(1);
        let out = net
            .exec(
                0,
                &[
                    tool,
                    "gen",
                    &format!("afp:{}", net.ifs[0]),
                    "--count",
                    "40",
                    "--vlan",
                    "100:5",
                ],
            )
            .output()
            .unwrap();
        succeeded(&out, "gen");
        succeeded(&wait(cap, PATIENCE, "capture"), "capture");
        files.push(std::fs::read(&file).unwrap());
    }
    assert!(files[0].len() > 24 + 40 * 16, "40 frames written");
    assert_eq!(files[0], files[1], "hw and sw captures differ");
    assert_eq!(files[0], files[2], "hw and deferred captures differ");
    // The frames are on the file as on the wire: tagged.
    assert_eq!(
        &files[0][24 + 16 + 12..24 + 16 + 16],
        &[0x81, 0x00, 0xa0, 0x64]
    );
}

#[test]
fn respond_answers_a_ping_from_linuxs_own_stack() {
    let Some(net) = Net::new() else { return };
    if !have("ping") && skip("no `ping` (iputils-ping)") {
        return;
    }
    let tool = env!("CARGO_BIN_EXE_vfio-nic");
    ip(&[
        "-n",
        &net.ns[1],
        "addr",
        "add",
        "192.0.2.2/24",
        "dev",
        &net.ifs[1],
    ]);
    let responder = net
        .exec(
            0,
            &[
                tool,
                "respond",
                &format!("afp:{}", net.ifs[0]),
                "--ip",
                "192.0.2.1/24",
                "--duration",
                "20",
                "--stats-period",
                "0",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ping = net
        .exec(
            1,
            &["ping", "-c", "3", "-i", "0.2", "-w", "10", "192.0.2.1"],
        )
        .output()
        .unwrap();
    let mut responder = responder;
    let _ = responder.kill();
    let out = wait(responder, PATIENCE, "respond");
    assert!(
        ping.status.success(),
        "ping from the peer namespace failed: {}\nrespond said: {}",
        String::from_utf8_lossy(&ping.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn short_frames_leave_padded_with_zeros() {
    let Some(net) = Net::new() else { return };
    let mut a = net.port(0, "");
    let mut b = net.port(1, "");
    let (rx_a, mut tx_a) = a.take_queues().unwrap();
    let (mut rx_b, _) = b.take_queues().unwrap();
    // Garbage behind the frames' ends in the ring must not leave: fill the ring once first.
    let long: Vec<Vec<u8>> = (0..300).map(|i| vec![0xee; 200 + i % 7]).collect();
    for _ in 0..2 {
        send(&mut tx_a[0], &rx_a[0], &long);
        recv(&mut rx_b[0], long.len());
    }
    let short: Vec<Vec<u8>> = [14usize, 17, 42, 59, 60]
        .iter()
        .map(|&n| frame(n, n as u8, &[]))
        .collect();
    send(&mut tx_a[0], &rx_a[0], &short);
    let got = recv(&mut rx_b[0], short.len());
    for (g, f) in got.iter().zip(&short) {
        let mut want = f.clone();
        want.resize(60, 0);
        assert_eq!(g.data(), &want[..], "a {}-byte frame", f.len());
    }
}
