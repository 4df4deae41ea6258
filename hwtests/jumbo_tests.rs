//! Jumbo frames as packet chains on the device, checked against independent receivers.
//!
//! With MTU 9000 and the pool's 2 KiB buffers, a 9014-byte frame never fits one buffer: it
//! leaves as a chain (one transmit descriptor per segment) and arrives as one (receive
//! scatter). The unit tests prove the rings' bookkeeping on simulated devices; only a device
//! proves that the descriptors we write are the ones it walks. So:
//!
//! - against Linux's igb (kernel-peer layout, MTU 9000 on both ends), our chains arrive
//!   byte-identical at a Linux packet socket ([`super::linux_peer`]) and Linux's 9014-byte
//!   frames arrive at our port as chains of 5 segments;
//! - between our two ports (vfio layout), frames of sizes around the buffer boundaries, up to
//!   9014 bytes, arrive byte-identical in the right number of segments.
//!
//! Both count on the device's counters and Linux's as well as on the bytes. Receive scatter
//! and the jumbo MTU are the Intel rings'; a virtio port skips these tests.

use std::time::{Duration, Instant};

use vfio_nic::device::{MacAddr, Port, RxQueue};
use vfio_nic::devices::{self, AnyPort, AnyRx, AnyTx};
use vfio_nic::platform::dma::{Packet, Pool};
use vfio_nic::platform::packet::{PacketRx, PacketTx};
use vfio_nic::platform::pci::PciAddress;

use super::drv::{
    self, chain, deltas, drain, first_difference, frame, run, send_all, text, TEST_ETHERTYPE, WAIT,
};
use super::linux_peer::{kernel_peer, peer_socket, rx_counts, socket_recv, socket_send, PeerIf};
use super::{step, Ctx, Outcome};

/// The jumbo MTU and the largest untagged frame it allows.
const JUMBO_MTU: u16 = 9000;
const JUMBO_LEN: usize = JUMBO_MTU as usize + 14;
/// Jumbo frames sent each way.
const JUMBO_FRAMES: usize = 4;
/// Why a virtio port skips these tests.
const NOT_VIRTIO: &str =
    "receive scatter and jumbo MTU are the Intel rings' (igb/ixgbe); not a virtio port's";

/// Opens a port with `mtu` (the suite's usual rings and pool: 2 KiB buffers).
fn open_mtu(addr: PciAddress, mtu: u16) -> Result<AnyPort, String> {
    let mut cfg = drv::config(false);
    cfg.igb.mtu = mtu;
    cfg.ixgbe.mtu = mtu;
    step(format!("opening {addr} with MTU {mtu}"));
    devices::open(&addr.to_string(), &cfg).map_err(|e| format!("{addr}: open: {e}"))
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
        return Outcome::Skip(NOT_VIRTIO.into());
    }
    run(|| {
        let _peer = PeerIf::up(&ifname, JUMBO_MTU, None)?;
        let mut port = open_mtu(ctx.ports[0], JUMBO_MTU)?;
        let mac = port.info().mac;
        let (mut rx, mut tx) = port.take_queues().map_err(text)?;
        let (mut prx, mut ptx) = peer_socket(&ifname)?;
        drain(&mut rx[0], Duration::from_millis(50))?;
        while prx.rx_next().is_some() {}
        let s0 = drv::stats(&mut port)?;
        let (p0, pb0) = rx_counts(&ifname)?;
        let pool = rx[0].pool().clone();
        let segs_sent = jumbo_to_linux(&mut tx[0], &pool, &mut prx, mac, peer_mac)?;
        let (p1, pb1) = rx_counts(&ifname)?;
        let segs_recv = jumbo_from_linux(&mut ptx, &mut rx[0], mac, peer_mac)?;

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
        drv::rx_errors_quiet(&s0, &s1, names.rx_errors, "our receive error counter")?;
        Ok(format!(
            "MTU {JUMBO_MTU} both ends: {JUMBO_FRAMES} x {JUMBO_LEN} B ours -> Linux ({segs_sent}-segment chains; {:?} +{t:?}; {ifname} rx_packets +{}, rx_bytes +{}) and Linux -> ours ({segs_recv}-segment chains), byte-identical",
            names.tx,
            p1 - p0,
            pb1 - pb0
        ))
    })
}

/// [`JUMBO_FRAMES`] test frames of [`JUMBO_LEN`] bytes from `src` to `dst`, numbered from
/// `seq`.
fn jumbo_frames(dst: MacAddr, src: MacAddr, seq: u32) -> Vec<Vec<u8>> {
    (0..JUMBO_FRAMES)
        .map(|i| frame(dst, src, seq + i as u32, JUMBO_LEN))
        .collect()
}

/// Ours -> Linux: sends [`JUMBO_FRAMES`] jumbo frames as chains of `pool` and checks that
/// Linux's packet socket `prx` gets each byte-identical. Returns the segments a chain had.
fn jumbo_to_linux(
    tx: &mut AnyTx,
    pool: &Pool,
    prx: &mut PacketRx,
    mac: MacAddr,
    peer_mac: MacAddr,
) -> Result<usize, String> {
    let out = jumbo_frames(peer_mac, mac, 0x9a00_0000);
    let mut batch = Vec::new();
    for f in &out {
        let p = chain(pool, f)?;
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
    send_all(tx, &mut batch)?;
    for (i, want) in out.iter().enumerate() {
        let got = socket_recv(prx, mac, WAIT)?.ok_or_else(|| {
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
    Ok(segs_sent)
}

/// Linux -> ours: Linux's packet socket `ptx` sends [`JUMBO_FRAMES`] jumbo frames, which must
/// arrive at `rx` as byte-identical chains with nothing dropped. Returns the segments a chain
/// had.
fn jumbo_from_linux(
    ptx: &mut PacketTx,
    rx: &mut AnyRx,
    mac: MacAddr,
    peer_mac: MacAddr,
) -> Result<usize, String> {
    let back = jumbo_frames(mac, peer_mac, 0x9b00_0000);
    step(format!(
        "Linux sends {JUMBO_FRAMES} {JUMBO_LEN}-byte frames from a packet socket"
    ));
    for f in &back {
        socket_send(ptx, f)?;
    }
    let got = recv_test_frames(rx, peer_mac, JUMBO_FRAMES)?;
    for (i, (p, want)) in got.iter().zip(&back).enumerate() {
        check_chain(p, want, &format!("Linux -> ours frame {i}"))?;
    }
    let segs_recv = got[0].segment_count();
    drop(got);
    let rxs = rx.stats();
    if rxs.dropped != 0 {
        return Err(format!("our receive queue dropped {} frames", rxs.dropped));
    }
    Ok(segs_recv)
}

/// Jumbo chains between our two ports: port A (MTU 1500: transmit takes chains whatever the
/// MTU) sends frames around the 2 KiB buffer boundaries up to 9014 bytes; port B (MTU 9000)
/// receives each byte-identical as a chain of the right number of segments.
pub fn jumbo_vfio_pair(ctx: &Ctx) -> Outcome {
    if ctx.ports.len() < 2 {
        return Outcome::Skip("needs two ports wired to each other".into());
    }
    if drv::is_virtio(ctx.ports[0]) || drv::is_virtio(ctx.ports[1]) {
        return Outcome::Skip(NOT_VIRTIO.into());
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
        let sizes = boundary_sizes(&pool);
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
        drv::rx_errors_quiet(&b0, &b1, names.rx_errors, "B's receive error counter")?;
        Ok(format!(
            "{n} frames of {sizes:?} bytes A -> B byte-identical, in {segs:?} segments; {:?} +{t:?}, {:?} +{r:?}",
            names.tx, names.rx
        ))
    })
}

/// The frame sizes of the two-port test: around the room of one, two and four buffers of
/// `pool`, then [`JUMBO_FRAMES`] of [`JUMBO_LEN`].
fn boundary_sizes(pool: &Pool) -> Vec<usize> {
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
    sizes
}
