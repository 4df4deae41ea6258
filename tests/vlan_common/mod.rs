//! The VLAN conformance tests every device runs, unchanged: each row of docs/vlan-rules.md that
//! applies to one device, run in each receive mode the device has, with the results compared
//! across modes byte for byte (untagged frame and TCI), not just counted. A device's test file
//! builds its wired pair as a [`Bed`] and calls each of these with its receive modes
//! (`tests/vlan_sim.rs`: the software 82599; `tests/vlan_qm.rs`: the queue-manager device).

// Each test crate that includes this module uses all of it; the helpers are `pub` for them.
#![allow(dead_code)]

use vfio_nic::device::{RxQueue, TxQueue};
use vfio_nic::platform::dma::{Packet, Pool};
use vfio_nic::vlan::{
    PacketVlan, RxMode, SwVlanTx, Tci, Tpid, VlanConfig, VlanControl, VlanFilter, VlanHardware,
    VlanRx, VlanTx,
};

/// The shared tests as `#[test]` functions of the including crate: `conformance!(make,
/// MODES)` with the crate's bed constructor and its receive modes.
#[macro_export]
macro_rules! conformance {
    ($make:expr, $modes:expr) => {
        #[test]
        fn tagged_untagged_priority_and_double_tagged_frames_agree_across_modes() {
            vlan_common::tagged_untagged_priority_and_double_tagged_frames_agree_across_modes(
                $make, &$modes,
            );
        }
        #[test]
        fn extended_mode_acts_on_the_inner_tag_in_every_mode() {
            vlan_common::extended_mode_acts_on_the_inner_tag_in_every_mode($make, &$modes);
        }
        #[test]
        fn runt_frames_are_dropped_by_the_device_in_every_mode() {
            vlan_common::runt_frames_are_dropped_by_the_device_in_every_mode($make, &$modes);
        }
        #[test]
        fn filter_on_off_add_remove_at_every_table_boundary() {
            vlan_common::filter_on_off_add_remove_at_every_table_boundary($make, &$modes);
        }
        #[test]
        fn tpid_88a8_is_recognised_only_once_configured() {
            vlan_common::tpid_88a8_is_recognised_only_once_configured($make, &$modes);
        }
        #[test]
        fn tpid_change_on_a_running_port() {
            vlan_common::tpid_change_on_a_running_port($make, &$modes);
        }
        #[test]
        fn switching_receive_modes_under_traffic_never_double_strips_or_loses_a_tag() {
            vlan_common::switching_receive_modes_under_traffic_never_double_strips_or_loses_a_tag(
                $make, &$modes,
            );
        }
    };
}

/// A wired pair: A transmits through a VLAN transmit wrapper, B receives through a VLAN receive
/// wrapper with its own control handle.
pub trait Bed {
    /// Sends raw wire frames from A (no tag requested) and returns what B's application sees.
    fn exchange(&mut self, frames: &[Vec<u8>]) -> Seen;
    /// A frame arrives at B straight from the wire.
    fn inject(&mut self, frame: &[u8]);
    /// One receive burst of B into `got`.
    fn rx_burst(&mut self, got: &mut Vec<Packet>);
    /// Runs `f` with B's VLAN control and B's port.
    fn ctl<T>(&mut self, f: impl FnOnce(&VlanControl, &mut dyn VlanHardware) -> T) -> T;
}

pub fn rx_cfg(mode: RxMode) -> VlanConfig {
    VlanConfig {
        rx_mode: mode,
        ..VlanConfig::default()
    }
}

/// An untagged test frame: broadcast, ethertype 0x88b5, sequence number, pattern.
pub fn base(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x42]);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend((f.len()..len).map(|i| (i as u32).wrapping_mul(7).wrapping_add(seq) as u8));
    f
}

/// `frame` with a tag pushed as the new outermost one.
pub fn tag(frame: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&tpid.to_be_bytes());
    f.extend_from_slice(&tci.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

/// What the application sees: the TCI `take_vlan` reports and the frame left afterwards.
pub type Seen = Vec<(Option<u16>, Vec<u8>)>;

/// [`Bed::exchange`] for any pair of queues: frames from `pool` out of `tx`, everything B
/// receives (until four empty bursts in a row) read back through `take_vlan`.
pub fn exchange<R: RxQueue, T: SwVlanTx>(
    tx: &mut VlanTx<T>,
    rx: &mut VlanRx<R>,
    pool: &Pool,
    frames: &[Vec<u8>],
) -> Seen {
    // A frame longer than a buffer goes as a chain.
    let mut batch: Vec<Packet> = frames
        .iter()
        .map(|f| pool.packet_from(f).unwrap())
        .collect();
    while !batch.is_empty() {
        tx.tx_burst(&mut batch).unwrap();
    }
    let mut got = Vec::new();
    let mut idle = 0;
    while idle < 4 {
        let n = rx.rx_burst(&mut got, 32).unwrap();
        idle = if n == 0 { idle + 1 } else { 0 };
    }
    let ctx = rx.ctx();
    got.into_iter()
        .map(|mut p| {
            let first = p.take_vlan(ctx).map(Tci::raw);
            // Asking twice gives the same answer and never strips twice.
            assert_eq!(p.take_vlan(ctx).map(Tci::raw), first);
            (first, p.to_vec())
        })
        .collect()
}

/// Runs `frames` through a fresh bed in every receive mode and checks all modes agree; returns
/// the common result.
pub fn same_in_every_mode<B: Bed>(
    make: &impl Fn(&VlanConfig) -> B,
    modes: &[RxMode],
    frames: &[Vec<u8>],
    cfg: impl Fn(RxMode) -> VlanConfig,
) -> Seen {
    let mut results = Vec::new();
    for &mode in modes {
        let mut bed = make(&cfg(mode));
        results.push((mode, bed.exchange(frames)));
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

/// `tagged_untagged_priority_and_double_tagged_frames_agree_across_modes`
pub fn tagged_untagged_priority_and_double_tagged_frames_agree_across_modes<B: Bed>(
    make: impl Fn(&VlanConfig) -> B,
    modes: &[RxMode],
) {
    let plain = base(1, 64);
    let frames = vec![
        plain.clone(),
        tag(&plain, 0x8100, 0xa064), // PCP 5, VID 100
        tag(&plain, 0x8100, 0x3000), // priority tag: PCP 1, VID 0
        tag(&plain, 0x8100, 0x1ffe), // DEI set, VID 4094
        tag(&tag(&plain, 0x8100, 0x0005), 0x88a8, 0x0007), // S-tag over C-tag
        tag(&tag(&plain, 0x8100, 0x0005), 0x8100, 0x0009), // two C-tags
    ];
    let seen = same_in_every_mode(&make, modes, &frames, rx_cfg);
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

/// `chained_frames_keep_their_tags_in_every_mode`: 9000-byte frames (chains of 2 KiB buffers
/// both ways; the tag is in the head segment) give the answers of short ones.
pub fn chained_frames_keep_their_tags_in_every_mode<B: Bed>(
    make: impl Fn(&VlanConfig) -> B,
    modes: &[RxMode],
) {
    let plain = base(3, 9000);
    let frames = vec![
        plain.clone(),
        tag(&plain, 0x8100, 0xa064),
        tag(&tag(&plain, 0x8100, 0x0005), 0x8100, 0x0009),
    ];
    let seen = same_in_every_mode(&make, modes, &frames, rx_cfg);
    let expect: Seen = vec![
        (None, plain.clone()),
        (Some(0xa064), plain.clone()),
        (Some(0x0009), tag(&plain, 0x8100, 0x0005)),
    ];
    assert_eq!(seen, expect);
}

/// `extended_mode_acts_on_the_inner_tag_in_every_mode`
pub fn extended_mode_acts_on_the_inner_tag_in_every_mode<B: Bed>(
    make: impl Fn(&VlanConfig) -> B,
    modes: &[RxMode],
) {
    let plain = base(2, 80);
    let qinq = tag(&tag(&plain, 0x8100, 0x2064), 0x88a8, 0x0007);
    let single = tag(&plain, 0x8100, 0x2064);
    let seen = same_in_every_mode(
        &make,
        modes,
        &[qinq.clone(), single.clone(), plain.clone()],
        |mode| VlanConfig {
            rx_mode: mode,
            extended: true,
            outer_tpid: Tpid::S_TAG,
            ..VlanConfig::default()
        },
    );
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

/// `runt_frames_are_dropped_by_the_device_in_every_mode`
pub fn runt_frames_are_dropped_by_the_device_in_every_mode<B: Bed>(
    make: impl Fn(&VlanConfig) -> B,
    modes: &[RxMode],
) {
    // A "tagged" frame too short to hold tag and ethertype never reaches the application on
    // this device: the MAC drops frames under 60 bytes before any VLAN handling.
    let mut runt = base(3, 16);
    runt[12..14].copy_from_slice(&[0x81, 0x00]);
    for &mode in modes {
        let mut bed = make(&rx_cfg(mode));
        bed.inject(&runt);
        let mut got = Vec::new();
        bed.rx_burst(&mut got);
        assert!(got.is_empty(), "{mode}: a runt was delivered");
    }
}

/// `filter_on_off_add_remove_at_every_table_boundary`
pub fn filter_on_off_add_remove_at_every_table_boundary<B: Bed>(
    make: impl Fn(&VlanConfig) -> B,
    modes: &[RxMode],
) {
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
    let seen = same_in_every_mode(&make, modes, &frames, filtered);
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
    for &mode in modes {
        let mut bed = make(&filtered(mode));
        let t32 = tag(&plain, 0x8100, 32);
        assert_eq!(
            bed.exchange(std::slice::from_ref(&t32)).len(),
            1,
            "{mode}: VID 32 in the table"
        );
        bed.ctl(|c, p| c.remove_vlan(p, 32)).unwrap();
        assert!(
            bed.exchange(std::slice::from_ref(&t32)).is_empty(),
            "{mode}: VID 32 removed"
        );
        bed.ctl(|c, p| c.add_vlan(p, 32)).unwrap();
        assert_eq!(
            bed.exchange(std::slice::from_ref(&t32)).len(),
            1,
            "{mode}: VID 32 back"
        );
        let t33 = tag(&plain, 0x8100, 33);
        assert!(
            bed.exchange(std::slice::from_ref(&t33)).is_empty(),
            "{mode}: VID 33 not in it"
        );
        bed.ctl(|c, p| c.set_filter(p, false)).unwrap();
        assert_eq!(
            bed.exchange(&[t33]).len(),
            1,
            "{mode}: filter off passes all"
        );
        assert!(
            bed.ctl(|c, p| c.add_vlan(p, 4095)).is_err(),
            "VID 4095 is refused"
        );
    }
}

/// `tpid_88a8_is_recognised_only_once_configured`
pub fn tpid_88a8_is_recognised_only_once_configured<B: Bed>(
    make: impl Fn(&VlanConfig) -> B,
    modes: &[RxMode],
) {
    let plain = base(5, 64);
    let s_tagged = tag(&plain, 0x88a8, 0x0123);
    let c_tagged = tag(&plain, 0x8100, 0x0456);
    let before = same_in_every_mode(&make, modes, &[s_tagged.clone(), c_tagged.clone()], rx_cfg);
    assert_eq!(
        before,
        vec![(None, s_tagged.clone()), (Some(0x0456), plain.clone())]
    );
    let after = same_in_every_mode(&make, modes, &[s_tagged, c_tagged.clone()], |mode| {
        VlanConfig {
            rx_mode: mode,
            tpid: Tpid::S_TAG,
            ..VlanConfig::default()
        }
    });
    assert_eq!(after, vec![(Some(0x0123), plain), (None, c_tagged)]);
}

/// `tpid_change_on_a_running_port`
pub fn tpid_change_on_a_running_port<B: Bed>(make: impl Fn(&VlanConfig) -> B, modes: &[RxMode]) {
    for &mode in modes {
        let mut bed = make(&rx_cfg(mode));
        let plain = base(6, 64);
        let s = tag(&plain, 0x88a8, 0x0042);
        assert_eq!(
            bed.exchange(std::slice::from_ref(&s)),
            vec![(None, s.clone())]
        );
        bed.ctl(|c, p| c.set_tpid(p, Tpid::S_TAG)).unwrap();
        assert_eq!(bed.exchange(&[s]), vec![(Some(0x0042), plain)], "{mode}");
    }
}

/// `switching_receive_modes_under_traffic_never_double_strips_or_loses_a_tag`
pub fn switching_receive_modes_under_traffic_never_double_strips_or_loses_a_tag<B: Bed>(
    make: impl Fn(&VlanConfig) -> B,
    modes: &[RxMode],
) {
    let mut bed = make(&rx_cfg(RxMode::Software));
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
    let mut checked = 0;
    for round in 0..60 {
        let mode = modes[round % modes.len()];
        bed.ctl(|c, p| c.set_rx_mode(p, mode)).unwrap();
        // Frames in flight from before the switch meet the new mode in the same burst.
        let batch: Vec<Vec<u8>> = (0..24).map(|i| frames[(i + round) % 3].clone()).collect();
        let seen = bed.exchange(&batch);
        for (i, s) in seen.iter().enumerate() {
            let want = &expected[(i + round) % 3];
            assert_eq!(s, want, "round {round} ({mode}) packet {i}");
            checked += 1;
        }
    }
    assert!(checked >= 60 * 20, "too few frames got through: {checked}");
}
