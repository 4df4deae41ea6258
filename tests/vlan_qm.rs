//! VLAN modes on the queue-manager device (`qm`, inline model): the rows of docs/vlan-rules.md
//! that apply to one device, run in each receive mode the device has (Software and Deferred: a
//! DPNI has no strip), with the results compared across modes byte for byte. The same tests as
//! `tests/vlan_sim.rs`, on the other device family; the filter runs in the DPNI's table. Two of
//! the sim's are not here: hardware against software insertion (a DPNI has no insertion: the
//! software frames are checked against `tx_wire_frame` instead) and queues of one port in
//! different modes (one queue per qm port).

use vfio_nic::device::{Port, RxQueue, TxQueue};
use vfio_nic::devices::qm::model::QmDevice;
use vfio_nic::devices::qm::{QmConfig, QmPort, QmRx, QmTx};
use vfio_nic::platform::bus::Bus;
use vfio_nic::platform::dma::{Packet, Pool, PoolConfig};
use vfio_nic::vlan::{
    tx_wire_frame, PacketVlan, RxMode, Tci, Tpid, TxMode, VlanConfig, VlanControl, VlanFilter,
    VlanRx, VlanTx,
};

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

fn rx_cfg(mode: RxMode) -> VlanConfig {
    VlanConfig {
        rx_mode: mode,
        ..VlanConfig::default()
    }
}

/// An untagged test frame: broadcast, ethertype 0x88b5, sequence number, pattern.
fn base(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x42]);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend((f.len()..len).map(|i| (i as u32).wrapping_mul(7).wrapping_add(seq) as u8));
    f
}

/// `frame` with a tag pushed as the new outermost one.
fn tag(frame: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&tpid.to_be_bytes());
    f.extend_from_slice(&tci.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

/// What the application sees: the TCI `take_vlan` reports and the frame left afterwards.
type Seen = Vec<(Option<u16>, Vec<u8>)>;

/// Sends raw wire frames from A (no tag requested) and returns what B's application sees.
fn exchange(bed: &mut Bed, frames: &[Vec<u8>]) -> Seen {
    let mut batch: Vec<Packet> = frames
        .iter()
        .map(|f| {
            let mut p = bed.pool.alloc().unwrap();
            assert!(p.set_data(f));
            p
        })
        .collect();
    while !batch.is_empty() {
        bed.tx.tx_burst(&mut batch).unwrap();
    }
    let mut got = Vec::new();
    let mut idle = 0;
    while idle < 4 {
        let n = bed.rx.rx_burst(&mut got, 32).unwrap();
        idle = if n == 0 { idle + 1 } else { 0 };
    }
    let ctx = bed.rx.ctx();
    got.into_iter()
        .map(|mut p| {
            let first = p.take_vlan(ctx).map(Tci::raw);
            // Asking twice gives the same answer and never strips twice.
            assert_eq!(p.take_vlan(ctx).map(Tci::raw), first);
            (first, p.data().to_vec())
        })
        .collect()
}

/// Runs `frames` through a fresh bed in every receive mode and checks all modes agree; returns
/// the common result.
fn same_in_every_mode(frames: &[Vec<u8>], cfg: impl Fn(RxMode) -> VlanConfig) -> Seen {
    let mut results = Vec::new();
    for mode in MODES {
        let mut bed = bed(&cfg(mode), &VlanConfig::default());
        results.push((mode, exchange(&mut bed, frames)));
    }
    for (mode, seen) in &results[1..] {
        assert_eq!(
            seen, &results[0].1,
            "receive mode {mode} disagrees with {}",
            results[0].0
        );
    }
    results.remove(0).1
}

#[test]
fn tagged_untagged_priority_and_double_tagged_frames_agree_across_modes() {
    let plain = base(1, 64);
    let frames = vec![
        plain.clone(),
        tag(&plain, 0x8100, 0xa064), // PCP 5, VID 100
        tag(&plain, 0x8100, 0x3000), // priority tag: PCP 1, VID 0
        tag(&plain, 0x8100, 0x1ffe), // DEI set, VID 4094
        tag(&tag(&plain, 0x8100, 0x0005), 0x88a8, 0x0007), // S-tag over C-tag
        tag(&tag(&plain, 0x8100, 0x0005), 0x8100, 0x0009), // two C-tags
    ];
    let seen = same_in_every_mode(&frames, rx_cfg);
    let expect: Seen = vec![
        (None, plain.clone()),
        (Some(0xa064), plain.clone()),
        (Some(0x3000), plain.clone()),
        (Some(0x1ffe), plain.clone()),
        // 0x88a8 is not the TPID: untagged, frame untouched.
        (None, frames[4].clone()),
        // Outer tag reported and removed; the inner one stays in the frame.
        (Some(0x0009), tag(&plain, 0x8100, 0x0005)),
    ];
    assert_eq!(seen, expect);
}

#[test]
fn runt_frames_are_dropped_by_the_device_in_every_mode() {
    // A "tagged" frame too short to hold tag and ethertype never reaches the application on
    // this device: the modelled MAC drops frames under 60 bytes before any VLAN handling.
    let mut runt = base(3, 16);
    runt[12..14].copy_from_slice(&[0x81, 0x00]);
    for mode in MODES {
        let mut bed = bed(&rx_cfg(mode), &VlanConfig::default());
        bed.dev_b.inject(&runt);
        let mut got = Vec::new();
        bed.rx.rx_burst(&mut got, 32).unwrap();
        assert!(got.is_empty(), "{mode}: a runt was delivered");
    }
}

#[test]
fn filter_on_off_add_remove_at_every_table_boundary() {
    let random = 1 + (std::process::id() % 4093) as u16; // 1..=4093, differs per run
    let table = [1u16, 31, 32, 4094, random];
    let probe: Vec<u16> = vec![0, 1, 2, 30, 31, 32, 33, 4093, 4094, random, random + 1];
    let plain = base(4, 64);
    let mut frames = vec![plain.clone()];
    frames.extend(probe.iter().map(|&v| tag(&plain, 0x8100, v)));
    let filtered = |mode| VlanConfig {
        rx_mode: mode,
        filter: true,
        table: VlanFilter::with(table).unwrap(),
        ..VlanConfig::default()
    };
    let seen = same_in_every_mode(&frames, filtered);
    let mut expect: Vec<Option<u16>> = vec![None, Some(0)];
    expect.extend(
        probe
            .iter()
            .copied()
            .filter(|v| table.contains(v))
            .map(Some),
    );
    expect.sort();
    expect.dedup();
    let mut got: Vec<Option<u16>> = seen.iter().map(|s| s.0).collect();
    got.sort();
    got.dedup();
    assert_eq!(
        got, expect,
        "untagged and VID 0 always pass, table members pass, others drop"
    );

    // Remove, re-add and switch off, on one running bed per mode.
    for mode in MODES {
        let mut bed = bed(&filtered(mode), &VlanConfig::default());
        let t32 = tag(&plain, 0x8100, 32);
        assert_eq!(
            exchange(&mut bed, std::slice::from_ref(&t32)).len(),
            1,
            "{mode}: VID 32 in the table"
        );
        bed.b_ctl.remove_vlan(&mut bed.b, 32).unwrap();
        assert!(
            exchange(&mut bed, std::slice::from_ref(&t32)).is_empty(),
            "{mode}: VID 32 removed"
        );
        bed.b_ctl.add_vlan(&mut bed.b, 32).unwrap();
        assert_eq!(
            exchange(&mut bed, std::slice::from_ref(&t32)).len(),
            1,
            "{mode}: VID 32 back"
        );
        let t33 = tag(&plain, 0x8100, 33);
        assert!(
            exchange(&mut bed, std::slice::from_ref(&t33)).is_empty(),
            "{mode}: VID 33 not in it"
        );
        bed.b_ctl.set_filter(&mut bed.b, false).unwrap();
        assert_eq!(
            exchange(&mut bed, &[t33]).len(),
            1,
            "{mode}: filter off passes all"
        );
        assert!(
            bed.b_ctl.add_vlan(&mut bed.b, 4095).is_err(),
            "VID 4095 is refused"
        );
    }
}

#[test]
fn switching_receive_modes_under_traffic_never_double_strips_or_loses_a_tag() {
    let mut bed = bed(&rx_cfg(RxMode::Software), &VlanConfig::default());
    let plain = base(8, 64);
    // Alternate tagged, double-tagged and untagged frames; a frame whose inner tag got stripped
    // by mistake, or whose tag went unreported, would not match its expected view.
    let frames = [
        tag(&plain, 0x8100, 0x2007),
        tag(&tag(&plain, 0x8100, 0x0003), 0x8100, 0x0011),
        plain.clone(),
    ];
    let expected = [
        (Some(0x2007), plain.clone()),
        (Some(0x0011), tag(&plain, 0x8100, 0x0003)),
        (None, plain.clone()),
    ];
    let modes = [RxMode::Deferred, RxMode::Software];
    let mut checked = 0;
    for round in 0..60 {
        let mode = modes[round % modes.len()];
        bed.b_ctl.set_rx_mode(&mut bed.b, mode).unwrap();
        // Frames in flight from before the switch meet the new mode in the same burst.
        let batch: Vec<Vec<u8>> = (0..24).map(|i| frames[(i + round) % 3].clone()).collect();
        let seen = exchange(&mut bed, &batch);
        for (i, s) in seen.iter().enumerate() {
            let want = &expected[(i + round) % 3];
            assert_eq!(s, want, "round {round} ({mode}) packet {i}");
            checked += 1;
        }
    }
    assert!(checked >= 60 * 20, "too few frames got through: {checked}");
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

#[test]
fn extended_mode_acts_on_the_inner_tag_in_every_mode() {
    let plain = base(2, 80);
    let qinq = tag(&tag(&plain, 0x8100, 0x2064), 0x88a8, 0x0007);
    let single = tag(&plain, 0x8100, 0x2064);
    let seen = same_in_every_mode(&[qinq.clone(), single.clone(), plain.clone()], |mode| {
        VlanConfig {
            rx_mode: mode,
            extended: true,
            outer_tpid: Tpid::S_TAG,
            ..VlanConfig::default()
        }
    });
    assert_eq!(
        seen,
        vec![
            // Inner tag reported and removed, outer tag left in place.
            (Some(0x2064), tag(&plain, 0x88a8, 0x0007)),
            // A single tag is not a double tag: untagged in extended mode.
            (None, single),
            (None, plain),
        ]
    );
}

#[test]
fn tpid_88a8_is_recognised_only_once_configured() {
    let plain = base(5, 64);
    let s_tagged = tag(&plain, 0x88a8, 0x0123);
    let c_tagged = tag(&plain, 0x8100, 0x0456);
    let before = same_in_every_mode(&[s_tagged.clone(), c_tagged.clone()], rx_cfg);
    assert_eq!(
        before,
        vec![(None, s_tagged.clone()), (Some(0x0456), plain.clone())]
    );
    let after = same_in_every_mode(&[s_tagged, c_tagged.clone()], |mode| VlanConfig {
        rx_mode: mode,
        tpid: Tpid::S_TAG,
        ..VlanConfig::default()
    });
    assert_eq!(after, vec![(Some(0x0123), plain), (None, c_tagged)]);
}

#[test]
fn tpid_change_on_a_running_port() {
    for mode in MODES {
        let mut bed = bed(&rx_cfg(mode), &VlanConfig::default());
        let plain = base(6, 64);
        let s = tag(&plain, 0x88a8, 0x0042);
        assert_eq!(
            exchange(&mut bed, std::slice::from_ref(&s)),
            vec![(None, s.clone())]
        );
        bed.b_ctl.set_tpid(&mut bed.b, Tpid::S_TAG).unwrap();
        assert_eq!(
            exchange(&mut bed, &[s]),
            vec![(Some(0x0042), plain)],
            "{mode}"
        );
    }
}
