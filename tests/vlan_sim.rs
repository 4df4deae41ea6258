//! VLAN modes on the software 82599 (inline mode): the conformance tests every device runs
//! (`tests/vlan_common/`: each row of docs/vlan-rules.md that applies to one device, in each
//! receive mode, results compared ACROSS modes byte for byte), here in all three receive modes;
//! Hardware mode goes through the driver's strip, filter, TPID and insertion registers as the
//! model implements them. Then what only this device has: hardware insertion, and queues of
//! one port in different modes.

use std::time::Duration;

use vfio_nic::device::{Port, RxQueue, TxQueue};
use vfio_nic::devices::ixgbe::{IxgbeConfig, IxgbePort, IxgbeRx, IxgbeTx};
use vfio_nic::devices::sim::{SimConfig, SimPort};
use vfio_nic::platform::bus::Bus;
use vfio_nic::platform::dma::{Packet, Pool, PoolConfig};
use vfio_nic::vlan::{
    tx_wire_frame, PacketVlan, RxMode, Tci, Tpid, TxMode, VlanConfig, VlanControl, VlanHardware,
    VlanRx, VlanTx,
};

mod vlan_common;
use vlan_common::{base, rx_cfg, tag, Seen};

const RING: usize = 128;
const MODES: [RxMode; 3] = [RxMode::Hardware, RxMode::Software, RxMode::Deferred];

fn cfg() -> IxgbeConfig {
    IxgbeConfig {
        rx_ring: RING,
        tx_ring: RING,
        pool: PoolConfig {
            buffers: 4 * RING,
            ..PoolConfig::default()
        },
        link_timeout: Duration::from_millis(200),
        reg_timeout: Duration::from_millis(200),
        // Jumbo frames arrive as chains of the pool's 2 KiB buffers.
        mtu: 9000,
        ..IxgbeConfig::default()
    }
}

/// A wired pair: A transmits through a VLAN transmit wrapper, B receives through a VLAN receive
/// wrapper, each with its own control handle.
struct Bed {
    // Fields drop in order: queues before the ports that own the devices.
    tx: VlanTx<IxgbeTx<SimPort>>,
    rx: VlanRx<IxgbeRx<SimPort>>,
    pool: Pool,
    b_ctl: VlanControl,
    b: IxgbePort<SimPort>,
    /// Kept so the transmitting port and its VLAN settings live as long as the bed.
    _a_ctl: VlanControl,
    _a: IxgbePort<SimPort>,
    sim_a: SimPort,
}

fn bed(rx: &VlanConfig, tx: &VlanConfig, sim: SimConfig) -> Bed {
    let (sa, sb) = SimPort::pair(sim);
    let mut a = IxgbePort::open(sa.clone(), cfg()).unwrap();
    let mut b = IxgbePort::open(sb, cfg()).unwrap();
    let a_ctl = VlanControl::new(&mut a, tx).unwrap();
    let b_ctl = VlanControl::new(&mut b, rx).unwrap();
    let (_, mut atx) = a.take_queues().unwrap();
    let (mut brx, _) = b.take_queues().unwrap();
    let pool = Pool::new(
        PoolConfig {
            buffers: 1024,
            ..PoolConfig::default()
        },
        sa.dma_mapper(),
    )
    .unwrap();
    Bed {
        tx: a_ctl.wrap_tx(atx.remove(0)),
        rx: b_ctl.wrap_rx(brx.remove(0)),
        pool,
        b_ctl,
        b,
        _a_ctl: a_ctl,
        _a: a,
        sim_a: sa,
    }
}

/// The bed every shared test gets: no tag requested on transmit, the model as it comes.
fn plain(rx: &VlanConfig) -> Bed {
    bed(rx, &VlanConfig::default(), SimConfig::default())
}

conformance!(plain, MODES);

#[test]
fn chained_frames_keep_their_tags_in_every_mode() {
    vlan_common::chained_frames_keep_their_tags_in_every_mode(plain, &MODES);
}

impl vlan_common::Bed for Bed {
    fn exchange(&mut self, frames: &[Vec<u8>]) -> Seen {
        vlan_common::exchange(&mut self.tx, &mut self.rx, &self.pool, frames)
    }
    fn inject(&mut self, frame: &[u8]) {
        self.sim_a.peer().unwrap().inject_frame(frame);
    }
    fn rx_burst(&mut self, got: &mut Vec<Packet>) {
        self.rx.rx_burst(got, 32).unwrap();
    }
    fn ctl<T>(&mut self, f: impl FnOnce(&VlanControl, &mut dyn VlanHardware) -> T) -> T {
        f(&self.b_ctl, &mut self.b)
    }
}

#[test]
fn hardware_and_software_insertion_put_identical_frames_on_the_wire() {
    let tcis = [0x0064u16, 0xa064, 0x3000, 0x1ffe];
    let plain = base(7, 100);
    let already_tagged = tag(&plain, 0x8100, 0x0005);
    let jumbo = base(8, 9000);
    let mut wires = Vec::new();
    // Extended mode is software insertion only on the 82599 (hardware insertion there is
    // refused until a card confirms its TPID): the software frames must still be exact.
    for (tx_mode, extended) in [
        (TxMode::Hardware, false),
        (TxMode::Software, false),
        (TxMode::Software, true),
    ] {
        let tx = VlanConfig {
            tx_mode,
            extended,
            ..VlanConfig::default()
        };
        let mut bed = bed(
            &rx_cfg(RxMode::Deferred),
            &tx,
            SimConfig {
                capture: 64,
                ..SimConfig::default()
            },
        );
        let mut batch = Vec::new();
        for (i, &t) in tcis.iter().enumerate() {
            let mut p = bed.pool.alloc().unwrap();
            let src = if i % 2 == 0 { &plain } else { &already_tagged };
            assert!(p.set_data(src));
            p.set_tx_vlan(Tci::from_raw(t)).unwrap();
            batch.push(p);
        }
        // A packet without a tag leaves untagged in both modes.
        let mut p = bed.pool.alloc().unwrap();
        assert!(p.set_data(&plain));
        batch.push(p);
        // A 9000-byte chain takes its tag in its head segment in both modes.
        let mut p = bed.pool.packet_from(&jumbo).unwrap();
        assert!(p.is_chained());
        p.set_tx_vlan(Tci::from_raw(0xa064)).unwrap();
        batch.push(p);
        while !batch.is_empty() {
            bed.tx.tx_burst(&mut batch).unwrap();
        }
        let wire = bed.sim_a.take_captured();
        let push = if extended { Tpid::S_TAG } else { Tpid::C_TAG };
        let mut expect: Vec<Vec<u8>> = tcis
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let src = if i % 2 == 0 { &plain } else { &already_tagged };
                tx_wire_frame(src, push, Some(Tci::from_raw(t))).unwrap()
            })
            .collect();
        expect.push(plain.clone());
        expect.push(tx_wire_frame(&jumbo, push, Some(Tci::from_raw(0xa064))).unwrap());
        assert_eq!(wire, expect, "{tx_mode} extended {extended}: wire frames");
        wires.push(wire);
    }
    assert_eq!(wires[0], wires[1], "hardware and software insertion differ");
    // The 82599 refuses hardware insertion in extended mode (which TPID it inserts there is
    // unconfirmed) with an error naming the device, and keeps taking software insertion.
    let (a, _b) = SimPort::pair(SimConfig::default());
    let mut port = vfio_nic::devices::ixgbe::IxgbePort::open(a, cfg()).unwrap();
    let qinq = |tx_mode| VlanConfig {
        tx_mode,
        extended: true,
        ..VlanConfig::default()
    };
    let e = VlanControl::new(&mut port, &qinq(TxMode::Hardware)).unwrap_err();
    assert!(
        e.to_string().contains("sim:") && e.to_string().contains("extended (QinQ)"),
        "{e}"
    );
    VlanControl::new(&mut port, &qinq(TxMode::Software)).unwrap();
}

#[test]
fn queues_of_one_port_in_different_receive_modes() {
    use vfio_nic::platform::mmio::Mmio;
    use vfio_nic::platform::regs::ixgbe as r;
    let (sa, sb) = SimPort::pair(SimConfig::default());
    let mut a = IxgbePort::open(sa.clone(), cfg()).unwrap();
    let two = IxgbeConfig {
        rx_queues: 2,
        ..cfg()
    };
    let mut b = IxgbePort::open(sb.clone(), two).unwrap();
    let a_ctl = VlanControl::new(&mut a, &VlanConfig::default()).unwrap();
    let b_ctl = VlanControl::new(&mut b, &rx_cfg(RxMode::Software)).unwrap();
    let (_, mut atx) = a.take_queues().unwrap();
    let (brx, _) = b.take_queues().unwrap();
    let mut tx = a_ctl.wrap_tx(atx.remove(0));
    let mut rxq: Vec<_> = brx
        .into_iter()
        .enumerate()
        .map(|(q, inner)| b_ctl.wrap_rx_queue(q as u16, inner))
        .collect();
    let pool = Pool::new(PoolConfig::default(), sa.dma_mapper()).unwrap();
    // Queue 0 strips in the NIC, queue 1 defers; the port's mode (sw) applies to neither.
    b_ctl
        .set_queue_rx_mode(&mut b, 0, Some(RxMode::Hardware))
        .unwrap();
    b_ctl
        .set_queue_rx_mode(&mut b, 1, Some(RxMode::Deferred))
        .unwrap();
    assert_eq!(b_ctl.queue_rx_mode(0), RxMode::Hardware);
    assert_eq!(b_ctl.queue_rx_mode(1), RxMode::Deferred);
    // A handed-out queue switches its strip bit itself, at its next burst.
    let mut got = Vec::new();
    for q in &mut rxq {
        q.rx_burst(&mut got, 32).unwrap();
    }
    let vme = |q| r::rxdctl::VME.is_set(sb.regs().read(r::RXDCTL.at(q)));
    assert!(
        vme(0) && !vme(1),
        "RXDCTL.VME: queue 0 {}, queue 1 {}",
        vme(0),
        vme(1)
    );
    // Non-IP frames have no RSS hash: they all land in queue 0, stripped by the NIC.
    let plain = base(9, 64);
    let mut batch = vec![{
        let mut p = pool.alloc().unwrap();
        assert!(p.set_data(&tag(&plain, 0x8100, 0x4042)));
        p
    }];
    tx.tx_burst(&mut batch).unwrap();
    rxq[0].rx_burst(&mut got, 32).unwrap();
    assert_eq!(got.len(), 1);
    let ctx = rxq[0].ctx();
    assert_eq!(got[0].take_vlan(ctx).map(Tci::raw), Some(0x4042));
    assert_eq!(got[0].data(), &plain[..]);
    assert_eq!(
        rxq[0].vlan_stats().stripped,
        0,
        "the NIC stripped it, not the burst"
    );
    // Back to the port's mode (software): the bit goes off and the burst strips.
    b_ctl.set_queue_rx_mode(&mut b, 0, None).unwrap();
    got.clear();
    rxq[0].rx_burst(&mut got, 32).unwrap();
    assert!(!vme(0), "queue 0 still strips in the NIC");
    let mut batch = vec![{
        let mut p = pool.alloc().unwrap();
        assert!(p.set_data(&tag(&plain, 0x8100, 0x4042)));
        p
    }];
    tx.tx_burst(&mut batch).unwrap();
    rxq[0].rx_burst(&mut got, 32).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].take_vlan(rxq[0].ctx()).map(Tci::raw), Some(0x4042));
    assert_eq!(got[0].data(), &plain[..]);
    assert_eq!(rxq[0].vlan_stats().stripped, 1, "the burst stripped it");
    drop((got, rxq, tx));
}
