//! VLAN modes on the queue-manager device (`qm`, inline model): the rows of docs/vlan-rules.md
//! that apply to one device, run in each receive mode the device has (Software and Deferred: a
//! DPNI has no strip): the conformance tests of `tests/vlan_common/`, the same the software
//! 82599 runs, unchanged; the filter runs in the DPNI's table. Then what differs here: the
//! hardware modes refused by name, and software insertion checked against `tx_wire_frame` (a
//! DPNI has no insertion to compare it with). One queue per qm port, so the sim's test of
//! queues in different modes has no counterpart.

use vfio_nic::device::{Port, RxQueue, TxQueue};
use vfio_nic::devices::qm::model::QmDevice;
use vfio_nic::devices::qm::{QmConfig, QmPort, QmRx, QmTx};
use vfio_nic::platform::bus::Bus;
use vfio_nic::platform::dma::{Packet, Pool, PoolConfig};
use vfio_nic::vlan::{
    tx_wire_frame, PacketVlan, RxMode, Tci, Tpid, TxMode, VlanConfig, VlanControl, VlanHardware,
    VlanRx, VlanTx,
};

mod vlan_common;
use vlan_common::{base, rx_cfg, tag, Seen};

const MODES: [RxMode; 2] = [RxMode::Software, RxMode::Deferred];

fn cfg() -> QmConfig {
    QmConfig {
        pool: PoolConfig {
            buffers: 512,
            ..PoolConfig::default()
        },
        hw_buffers: 256,
        ..QmConfig::default()
    }
}

/// A wired pair: A transmits through a VLAN transmit wrapper, B receives through a VLAN receive
/// wrapper, each with its own control handle.
struct Bed {
    // Fields drop in order: queues before the ports.
    tx: VlanTx<QmTx<QmDevice>>,
    rx: VlanRx<QmRx<QmDevice>>,
    pool: Pool,
    b_ctl: VlanControl,
    b: QmPort<QmDevice>,
    _a_ctl: VlanControl,
    _a: QmPort<QmDevice>,
    dev_b: QmDevice,
}

fn bed(rx: &VlanConfig, tx: &VlanConfig) -> Bed {
    let (da, db) = QmDevice::pair();
    let mut a = QmPort::open(da.clone(), cfg()).unwrap();
    let mut b = QmPort::open(db.clone(), cfg()).unwrap();
    let a_ctl = VlanControl::new(&mut a, tx).unwrap();
    let b_ctl = VlanControl::new(&mut b, rx).unwrap();
    let (_, mut atx) = a.take_queues().unwrap();
    let (mut brx, _) = b.take_queues().unwrap();
    let pool = Pool::new(
        PoolConfig {
            buffers: 1024,
            ..PoolConfig::default()
        },
        da.dma_mapper(),
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
        dev_b: db,
    }
}

/// The bed every shared test gets: no tag requested on transmit.
fn plain(rx: &VlanConfig) -> Bed {
    bed(rx, &VlanConfig::default())
}

conformance!(plain, MODES);

impl vlan_common::Bed for Bed {
    fn exchange(&mut self, frames: &[Vec<u8>]) -> Seen {
        vlan_common::exchange(&mut self.tx, &mut self.rx, &self.pool, frames)
    }
    fn inject(&mut self, frame: &[u8]) {
        self.dev_b.inject(frame);
    }
    fn rx_burst(&mut self, got: &mut Vec<Packet>) {
        self.rx.rx_burst(got, 32).unwrap();
    }
    fn ctl<T>(&mut self, f: impl FnOnce(&VlanControl, &mut dyn VlanHardware) -> T) -> T {
        f(&self.b_ctl, &mut self.b)
    }
}

#[test]
fn hardware_modes_are_refused_by_name_and_software_insertion_is_exact() {
    let (da, _db) = QmDevice::pair();
    let mut port = QmPort::open(da, cfg()).unwrap();
    for bad in [
        rx_cfg(RxMode::Hardware),
        VlanConfig {
            tx_mode: TxMode::Hardware,
            ..VlanConfig::default()
        },
    ] {
        let e = VlanControl::new(&mut port, &bad).unwrap_err().to_string();
        assert!(e.contains("qm:0") && e.contains("mode hw"), "{e}");
    }
    drop(port);
    // Software insertion: B receives in Deferred mode and looks at the raw frames, which are
    // the wire frames (no strip in the device, none in the burst).
    let tcis = [0x0064u16, 0xa064, 0x3000, 0x1ffe];
    let plain = base(7, 100);
    let already_tagged = tag(&plain, 0x8100, 0x0005);
    let tx = VlanConfig {
        tx_mode: TxMode::Software,
        ..VlanConfig::default()
    };
    let mut bed = bed(&rx_cfg(RxMode::Deferred), &tx);
    let mut batch = Vec::new();
    let mut expect = Vec::new();
    for (i, &t) in tcis.iter().enumerate() {
        let mut p = bed.pool.alloc().unwrap();
        let src = if i % 2 == 0 { &plain } else { &already_tagged };
        assert!(p.set_data(src));
        p.set_tx_vlan(Tci::from_raw(t)).unwrap();
        batch.push(p);
        expect.push(tx_wire_frame(src, Tpid::C_TAG, Some(Tci::from_raw(t))).unwrap());
    }
    while !batch.is_empty() {
        bed.tx.tx_burst(&mut batch).unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..4 {
        bed.rx.rx_burst(&mut got, 32).unwrap();
    }
    let wire: Vec<Vec<u8>> = got.iter().map(|p| p.data().to_vec()).collect();
    assert_eq!(wire, expect);
}
