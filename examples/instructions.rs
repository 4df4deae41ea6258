//! The harness of `bench/instructions`: forwards a fixed number of packets with the ixgbe driver
//! on the software 82599 in INLINE mode (deterministic: the model runs inside the driver's
//! register writes, on this thread, and every run executes the same instructions), so that
//! valgrind's callgrind can count the driver's own instructions per forwarded packet.
//!
//!     valgrind --tool=callgrind --collect-atstart=no \
//!         --toggle-collect='instructions::measured' \
//!         --toggle-collect='*SimRegs*as*Mmio*write32' --toggle-collect='*SimRegs*as*Mmio*read32' \
//!         target/release/examples/instructions deferred sw untagged fwd 20000
//!
//! Collection is on only inside [`measured`] (the forwarding loop: receive + transmit + buffer
//! pool + the VLAN wrappers) and off again inside the model's register entry points, which
//! are `#[inline(never)]` for this purpose; the model's work (descriptors, frames, counters)
//! is therefore excluded. `bench/instructions` reads the inclusive cost of `measured` with
//! `callgrind_annotate` and divides by the packets it forwarded (printed here).
//!
//! Arguments: RX (hw|sw|deferred) TX (hw|sw) TRAFFIC (untagged|tagged) WORK (fwd|l2|jumbo)
//! PACKETS [DEVICE]. WORK `jumbo` forwards 9000-byte frames (MTU 9000, 2 KiB buffers: each
//! frame a chain of 5 segments, received by scatter and sent one descriptor per segment). DEVICE `qm` runs the qm driver on the queue-manager model instead (inline too,
//! its built-in source feeding A, B sending into the void; receive hw and transmit hw do not
//! exist there); its register entry points are `QmRegion`'s `read32`/`write32`, toggled off
//! the same way (`bench/instructions --device qm`).
//! Warm-up: one full pass over the ring and the pool (not measured) before `measured` runs.
//!
//! DEVICE `afp` forwards between two af_packet ports (`bench/instructions --device afp`): the
//! harness moves itself into a network namespace of its own (it needs root; the namespace and
//! its interfaces go when it exits) with two veth pairs, `src`-`rx-a` and `tx-b`-`sink`; A is
//! `afp:rx-a`, B `afp:tx-b`, a third af_packet port on `src` is the traffic source and a fourth
//! on `sink` counts what arrived. Callgrind
//! counts user-space instructions only, so the kernel's side is excluded by construction. The
//! kernel delivers frames asynchronously, so a poll could find 32 frames or 5; to make every
//! measured burst do the same work, the harness forwards burst by burst: it writes 32 frames
//! into `src`, waits until A's ring holds them and B's ring has 32 free frames, and only then
//! calls [`measured_burst`], the one function toggled on (`--toggle-collect=
//! instructions::measured_burst`; the source and the waits run with collection off, on the same
//! thread). The harness prints the queues' system calls over the measured bursts.

#[path = "common/out.rs"]
mod out;

use std::sync::Arc;
use std::time::Duration;

use vfio_nic::app::forward::{forward_burst, FwdStats};
use vfio_nic::device::{MacAddr, Port, RxQueue, TxQueue};
use vfio_nic::devices::afpacket::{AfPacketConfig, AfPacketPort, AfpRx, AfpTx};
use vfio_nic::devices::ixgbe::{IxgbeConfig, IxgbePort};
use vfio_nic::devices::null::{NullConfig, NullPort};
use vfio_nic::devices::qm::model::{Mode as QmMode, QmSoc, QmSocConfig};
use vfio_nic::devices::qm::{QmConfig, QmPort};
use vfio_nic::devices::sim::{Mode, SimConfig, SimPort, Source};
use vfio_nic::devices::virtio::model::{ModelConfig, VirtioModel};
use vfio_nic::devices::virtio::{VirtioConfig, VirtioPort};
use vfio_nic::platform::dma::{Packet, Pool, PoolConfig, SoftIommu};
use vfio_nic::vlan::{
    PacketVlan, RxMode, SwVlanTx, TxMode, VlanConfig, VlanControl, VlanHardware, VlanRx, VlanTx,
};

const BURST: usize = 32;
const RING: usize = 512;
/// The frame of WORK `jumbo`: 9000 bytes (an MTU-9000 frame is at most 9014).
const JUMBO: usize = 9000;

/// The forwarding loop whose instructions are counted: `packets` packets from `rx` to `tx`,
/// bursts of 32, with the `l2` work (read the destination MAC and the tag, send the tag back
/// out) when `l2`.
#[inline(never)]
fn measured<R: RxQueue, T: SwVlanTx>(
    rx: &mut VlanRx<R>,
    tx: &mut VlanTx<T>,
    packets: u64,
    l2: bool,
) -> (FwdStats, u64) {
    let mut batch: Vec<Packet> = Vec::with_capacity(BURST);
    let mut st = FwdStats::default();
    let mut acc = 0u64;
    while st.tx < packets {
        if l2 {
            let n = rx.rx_burst(&mut batch, BURST).expect("rx");
            let ctx = rx.ctx();
            for p in batch.iter_mut() {
                let tci = p.take_vlan(ctx);
                let d = p.data();
                acc = acc.rotate_left(5)
                    ^ u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], 0, 0])
                    ^ u64::from(tci.map_or(0, |t| t.raw()));
                if let Some(t) = tci {
                    let _ = p.set_tx_vlan(t);
                }
            }
            let sent = tx.tx_burst(&mut batch).expect("tx");
            st.rx += n as u64;
            st.tx += sent as u64;
            if !batch.is_empty() {
                st.tx_dropped += batch.len() as u64;
                Pool::free_vec(&mut batch);
            }
        } else {
            forward_burst(rx, tx, &mut batch, BURST, &mut st).expect("forward");
        }
    }
    (st, acc)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device = args.get(5).map_or("sim", String::as_str);
    if !(args.len() == 5 || args.len() == 6 && matches!(device, "qm" | "null" | "afp" | "virtio")) {
        eprintln!("usage: instructions RX(hw|sw|deferred) TX(hw|sw) TRAFFIC(untagged|tagged) WORK(fwd|l2|jumbo) PACKETS [qm|null|afp|virtio]");
        std::process::exit(2);
    }
    let rx_mode = match args[0].as_str() {
        "hw" => RxMode::Hardware,
        "sw" => RxMode::Software,
        "deferred" => RxMode::Deferred,
        m => panic!("unknown receive mode {m}"),
    };
    let tx_mode = match args[1].as_str() {
        "hw" => TxMode::Hardware,
        "sw" => TxMode::Software,
        m => panic!("unknown transmit mode {m}"),
    };
    let tagged = args[2] == "tagged";
    let l2 = args[3] == "l2";
    let size = if args[3] == "jumbo" { JUMBO } else { 64 };
    let packets: u64 = args[4].parse().expect("PACKETS is a number");
    match device {
        "qm" => out::exit("instructions", qm(rx_mode, tx_mode, tagged, l2, packets)),
        "null" => out::exit("instructions", null(rx_mode, tx_mode, tagged, l2, packets)),
        "afp" => out::exit("instructions", afp(rx_mode, tx_mode, tagged, l2, packets)),
        "virtio" => out::exit(
            "instructions",
            virtio(rx_mode, tx_mode, tagged, l2, packets),
        ),
        _ => {}
    }

    let scfg = SimConfig {
        mode: Mode::Inline,
        ..SimConfig::default()
    };
    let src = source(size, tagged);
    let sa = SimPort::with_source(scfg.clone(), src);
    let sb = SimPort::with_source(
        scfg,
        Source::udp(MacAddr([2, 0, 0, 0, 0, 3]), 64).with_count(0),
    );
    let icfg = IxgbeConfig {
        rx_ring: RING,
        tx_ring: RING,
        pool: PoolConfig {
            buffers: 4 * RING,
            ..PoolConfig::default()
        },
        link_timeout: Duration::from_secs(2),
        mtu: if size == JUMBO { 9000 } else { 1500 },
        ..IxgbeConfig::default()
    };
    let a = IxgbePort::open(sa, icfg.clone()).expect("open A");
    let b = IxgbePort::open(sb.clone(), icfg).expect("open B");
    let result = run(
        a,
        b,
        (rx_mode, tx_mode),
        l2,
        packets,
        4 * RING as u64,
        |_| sb.counters().tx_frames,
    );
    out::exit("instructions", result);
}

/// A's traffic on every model: UDP frames of `size` bytes to 02:00:00:00:00:02, tagged
/// 0x8100/0xa064 when `tagged`.
fn source(size: usize, tagged: bool) -> Source {
    let src = Source::udp(MacAddr([0x02, 0, 0, 0, 0, 2]), size);
    if tagged {
        src.with_vlan(0x8100, 0xa064)
    } else {
        src
    }
}

/// Forwards A.rx -> B.tx in the given receive (A) and transmit (B) modes: a warm-up of
/// `warm` packets, then `measured`; checks that the model put exactly what the driver sent
/// on the wire (`model_tx` reads its transmit counter; inline: no frame in flight), with no
/// packet copied.
fn run<A: Port + VlanHardware, B: Port + VlanHardware>(
    mut a: A,
    mut b: B,
    (rx_mode, tx_mode): (RxMode, TxMode),
    l2: bool,
    packets: u64,
    warm: u64,
    model_tx: impl Fn(&B::Tx) -> u64,
) -> vfio_nic::Result<()>
where
    B::Tx: SwVlanTx,
{
    let vcfg = |rx_mode, tx_mode| VlanConfig {
        rx_mode,
        tx_mode,
        ..VlanConfig::default()
    };
    let a_ctl = VlanControl::new(&mut a, &vcfg(rx_mode, TxMode::Software)).expect("A VLAN");
    let b_ctl = VlanControl::new(&mut b, &vcfg(RxMode::Software, tx_mode)).expect("B VLAN");
    let (mut arx, _) = a.take_queues().expect("A queues");
    let (_, mut btx) = b.take_queues().expect("B queues");
    let mut rx = a_ctl.wrap_rx(arx.remove(0));
    let mut tx = b_ctl.wrap_tx(btx.remove(0));

    // Warm-up (not measured): cycles every descriptor and buffer once.
    let mut batch = Vec::with_capacity(BURST);
    let mut st = FwdStats::default();
    while st.tx < warm {
        forward_burst(&mut rx, &mut tx, &mut batch, BURST, &mut st).expect("warm-up");
    }
    let before = model_tx(tx.inner());
    let (st, acc) = measured(&mut rx, &mut tx, packets, l2);
    let sent = model_tx(tx.inner()) - before;
    std::hint::black_box(acc);
    let report = out::line(format_args!(
        "forwarded {} rx {} tx_dropped {} empty_polls {} model_tx {}",
        st.tx, st.rx, st.tx_dropped, st.empty_polls, sent
    ));
    if sent != st.tx || st.tx_dropped != 0 || tx.inner().stats().copied != 0 {
        eprintln!(
            "instructions: the model sent {sent} frames, the driver {}",
            st.tx
        );
        std::process::exit(1);
    }
    report
}

/// The same measurement on the qm driver: A receives from the model's source, B (unwired)
/// sends into the void; both in one set, so no packet is copied.
fn qm(
    rx_mode: RxMode,
    tx_mode: TxMode,
    tagged: bool,
    l2: bool,
    packets: u64,
) -> vfio_nic::Result<()> {
    let soc = QmSoc::build(QmSocConfig {
        ports: 2,
        wired: false,
        mode: QmMode::Inline,
        thread: None,
    })
    .expect("the model");
    let (da, db) = (soc.port(0).expect("A"), soc.port(1).expect("B"));
    let src = source(64, tagged);
    da.set_source(Some(src.frame()));
    let a = QmPort::open(da, QmConfig::default()).expect("open A");
    let b = QmPort::open(db.clone(), QmConfig::default()).expect("open B");
    run(a, b, (rx_mode, tx_mode), l2, packets, 4096, |_| {
        db.counters().egress[0]
    })
}

/// The same measurement on two null ports (DPDK `net_null`): the burst API, the pool and the
/// VLAN wrappers alone. A's receive allocates from its pool, B's transmit frees into it, on
/// this thread (the pool's fast path); B's own counter is what "the device" sent.
fn null(
    rx_mode: RxMode,
    tx_mode: TxMode,
    tagged: bool,
    l2: bool,
    packets: u64,
) -> vfio_nic::Result<()> {
    // Tagged frames would need `copy` (a template written into every frame), which measures a
    // copy, not the path: the null rows are untagged only.
    assert!(!tagged, "null ports carry untagged frames only here");
    let a = NullPort::new(0, NullConfig::default()).expect("open A");
    let b = NullPort::new(1, NullConfig::default()).expect("open B");
    run(a, b, (rx_mode, tx_mode), l2, packets, 4096, |t| {
        t.stats().packets
    })
}

/// One burst from `rx` to `tx`: what DEVICE `afp` counts (the caller has made sure that the
/// burst is in the receive ring and that the transmit ring has room for it).
#[inline(never)]
fn measured_burst<R: RxQueue, T: SwVlanTx>(
    rx: &mut VlanRx<R>,
    tx: &mut VlanTx<T>,
    batch: &mut Vec<Packet>,
    st: &mut FwdStats,
) {
    forward_burst(rx, tx, batch, BURST, st).expect("forward");
}

/// How long the af_packet harness waits for the kernel (it runs under valgrind: generous).
const AFP_PATIENCE: Duration = Duration::from_secs(30);

/// Runs `ip ARGS` in this process's network namespace.
fn ip(args: &[&str]) -> vfio_nic::Result<()> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| vfio_nic::Error::io("running ip (iproute2)", e))?;
    if !out.status.success() {
        return Err(vfio_nic::Error::InvalidConfig(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Waits until `ready()`, or fails naming `what` after [`AFP_PATIENCE`].
fn wait_for(what: &'static str, mut ready: impl FnMut() -> bool) -> vfio_nic::Result<()> {
    let deadline = std::time::Instant::now() + AFP_PATIENCE;
    while !ready() {
        if std::time::Instant::now() > deadline {
            return Err(stalled(what));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    Ok(())
}

/// The error of a wait for the kernel that ran out of patience.
fn stalled(what: &'static str) -> vfio_nic::Error {
    vfio_nic::Error::Stalled {
        stage: "the af_packet instruction harness",
        what,
        waited_ms: AFP_PATIENCE.as_millis() as u64,
    }
}

/// Writes one burst of `frame` into the source port, then waits until A's ring holds a
/// burst and B's ring has room for one (collection is off here).
fn feed(
    src: &mut AfpTx,
    src_pool: &Pool,
    frame: &[u8],
    rx: &AfpRx,
    tx: &AfpTx,
) -> vfio_nic::Result<()> {
    let mut batch: Vec<Packet> = (0..BURST)
        .map(|_| {
            let mut p = src_pool
                .alloc()
                .expect("the source's pool has a burst free");
            assert!(p.set_data(frame));
            p
        })
        .collect();
    let deadline = std::time::Instant::now() + AFP_PATIENCE;
    while !batch.is_empty() {
        src.tx_burst(&mut batch).expect("source");
        if std::time::Instant::now() > deadline {
            return Err(stalled("room in the source's transmit ring"));
        }
    }
    wait_for("a burst of frames in A's receive ring", || rx.ready(BURST))?;
    wait_for("a burst of free frames in B's transmit ring", || {
        tx.has_room(BURST)
    })
}

/// The same measurement on two af_packet ports (see the module doc): A.rx -> B.tx over veth
/// pairs in a network namespace of this process's own, burst by burst, untagged, work `fwd`.
fn afp(
    rx_mode: RxMode,
    tx_mode: TxMode,
    tagged: bool,
    l2: bool,
    packets: u64,
) -> vfio_nic::Result<()> {
    assert!(!tagged && !l2, "the afp rows are untagged, work fwd only");
    assert_eq!(
        packets % BURST as u64,
        0,
        "PACKETS is a number of whole bursts"
    );
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| {
        vfio_nic::Error::io(
            "making a network namespace for the veth pairs (the afp family runs as root)",
            std::io::Error::from(e),
        )
    })?;
    // No IPv6 chatter (router solicitations, DAD) on the new links.
    for f in ["all", "default"] {
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{f}/disable_ipv6"), "1");
    }
    ip(&[
        "link", "add", "name", "src", "type", "veth", "peer", "name", "rx-a",
    ])?;
    ip(&[
        "link", "add", "name", "tx-b", "type", "veth", "peer", "name", "sink",
    ])?;
    for i in ["src", "rx-a", "tx-b", "sink"] {
        ip(&["link", "set", i, "up"])?;
    }
    let cfg = AfPacketConfig::default();
    let mut a = AfPacketPort::open("rx-a", cfg.clone())?;
    let mut b = AfPacketPort::open("tx-b", cfg.clone())?;
    let mut g = AfPacketPort::open("src", cfg.clone())?;
    let mut sink = AfPacketPort::open("sink", cfg)?;
    let vcfg = |rx_mode, tx_mode| VlanConfig {
        rx_mode,
        tx_mode,
        ..VlanConfig::default()
    };
    let a_ctl = VlanControl::new(&mut a, &vcfg(rx_mode, TxMode::Software))?;
    let b_ctl = VlanControl::new(&mut b, &vcfg(RxMode::Software, tx_mode))?;
    let (mut arx, _) = a.take_queues()?;
    let (_, mut btx) = b.take_queues()?;
    let (grx, mut gtx) = g.take_queues()?;
    let _sink_queues = sink.take_queues()?;
    let mut rx = a_ctl.wrap_rx(arx.remove(0));
    let mut tx = b_ctl.wrap_tx(btx.remove(0));
    let (src_pool, src) = (grx[0].pool().clone(), &mut gtx[0]);
    let frame = Source::udp(MacAddr([0x02, 0, 0, 0, 0, 2]), 64).frame();

    let mut batch = Vec::with_capacity(BURST);
    let mut st = FwdStats::default();
    // Warm-up (not measured): every ring frame and pool buffer once.
    while st.tx < 4096 {
        feed(src, &src_pool, &frame, rx.inner(), tx.inner())?;
        forward_burst(&mut rx, &mut tx, &mut batch, BURST, &mut st).expect("warm-up");
    }
    let warm = st.tx;
    let syscalls =
        |rx: &VlanRx<AfpRx>, tx: &VlanTx<AfpTx>| (rx.inner().syscalls(), tx.inner().syscalls());
    let before = syscalls(&rx, &tx);
    let mut st = FwdStats::default();
    let bursts = packets / BURST as u64;
    for _ in 0..bursts {
        feed(src, &src_pool, &frame, rx.inner(), tx.inner())?;
        measured_burst(&mut rx, &mut tx, &mut batch, &mut st);
    }
    let after = syscalls(&rx, &tx);
    // What reached the sink (the kernel's count of its socket, ring or dropped).
    let sent = warm + st.tx;
    wait_for("the forwarded frames at the sink", || {
        sink.stats()
            .is_ok_and(|s| s.get("socket_rx_packets").unwrap_or(0) >= sent)
    })?;
    let at_sink = sink.stats()?.get("socket_rx_packets").unwrap_or(0);
    let report = out::line(format_args!(
        "forwarded {} rx {} tx_dropped {} empty_polls {} model_tx {} bursts {} syscalls_rx {} syscalls_tx {}",
        st.tx,
        st.rx,
        st.tx_dropped,
        st.empty_polls,
        at_sink - warm,
        bursts,
        after.0 - before.0,
        after.1 - before.1
    ));
    if at_sink != sent || st.tx != packets || st.tx_dropped != 0 || st.empty_polls != 0 {
        eprintln!(
            "instructions: the sink got {} frames, the driver sent {}",
            at_sink - warm,
            st.tx
        );
        std::process::exit(1);
    }
    report
}

/// The same measurement on the virtio driver: two software virtio-net devices in one DMA
/// domain (one software IOMMU, so B sends A's buffers without a copy), A fed by its source
/// whenever the driver posts receive buffers, B sending into the void. Queues of 256 (QEMU's
/// maximum); receive hw and transmit hw do not exist (no VLAN offload on virtio-net).
fn virtio(
    rx_mode: RxMode,
    tx_mode: TxMode,
    tagged: bool,
    l2: bool,
    packets: u64,
) -> vfio_nic::Result<()> {
    let iommu = Arc::new(SoftIommu::new("instructions virtio"));
    let src = source(64, tagged);
    let da = VirtioModel::new(
        ModelConfig {
            source: Some(src),
            ..ModelConfig::default()
        },
        iommu.clone(),
    );
    let db = VirtioModel::new(ModelConfig::default(), iommu);
    let vcfg = VirtioConfig {
        pool: PoolConfig {
            buffers: 4 * 256,
            ..PoolConfig::default()
        },
        ..VirtioConfig::default()
    };
    let a = VirtioPort::open_model(&da, "virtio:0", vcfg).expect("open A");
    let b = VirtioPort::open_model(&db, "virtio:1", vcfg).expect("open B");
    run(a, b, (rx_mode, tx_mode), l2, packets, 4096, |_| {
        db.counters().tx_frames
    })
}
