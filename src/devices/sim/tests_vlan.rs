//! VLAN behaviour of the software 82599: strip, VP, filter, TPID, extended (double) VLAN and
//! transmit insertion, checked against notes section 4.2 and docs/vlan-rules.md.

use super::testkit::*;
use super::SimConfig;
use crate::platform::bus::Bus;
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe as r;

const VP: u32 = 1 << 3;
const VEXT: u32 = 1 << 9;

fn tagged(f: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let mut t = f.to_vec();
    super::frame::insert_tag(&mut t, tpid, tci);
    t
}

/// Sends `frame` from A and returns what B received (None if dropped).
fn through(rig: &mut PairRig, frame: &[u8]) -> Option<Got> {
    rig.a_tx.send(&rig.a, frame, None);
    rig.b_rx.recv(&rig.b)
}

#[test]
fn strip_reports_tci_and_vp_without_strip_keeps_the_tag() {
    let mut rig = pair_rig(SimConfig::default());
    let plain = udp(rig.b.mac().0, 1, 100);
    let f = tagged(&plain, 0x8100, 0xa064); // PCP 5, DEI 0, VID 100
    let got = through(&mut rig, &f).unwrap();
    assert_eq!(got.data, f, "no strip: the tag stays");
    assert_eq!(
        (got.last().status & VP, got.last().vlan),
        (VP, 0),
        "VP without strip (82599)"
    );
    rig.b_rx.rxdctl(&rig.b, 0, r::rxdctl::VME.bit());
    let got = through(&mut rig, &f).unwrap();
    assert_eq!(got.data, plain, "stripped");
    assert_eq!(got.last().len, 100);
    assert_eq!((got.last().status & VP, got.last().vlan), (VP, 0xa064));
    let got = through(&mut rig, &plain).unwrap();
    assert_eq!(
        (got.last().status & VP, got.last().vlan),
        (0, 0),
        "untagged"
    );
}

#[test]
fn filter_accepts_listed_vids_and_untagged_frames() {
    let mut rig = pair_rig(SimConfig::default());
    let plain = udp(rig.b.mac().0, 1, 100);
    let m = rig.b.regs().clone();
    m.modify(r::VLNCTRL, 0, r::vlnctrl::VFE.bit());
    for vid in [1u32, 31, 32, 4094] {
        m.write(
            r::VFTA.at(vid >> 5),
            m.read(r::VFTA.at(vid >> 5)) | 1 << (vid & 31),
        );
    }
    for vid in [1u16, 31, 32, 4094] {
        assert!(
            through(&mut rig, &tagged(&plain, 0x8100, vid | 0xe000)).is_some(),
            "VID {vid}"
        );
    }
    assert!(
        through(&mut rig, &tagged(&plain, 0x8100, 33)).is_none(),
        "VID 33 not listed"
    );
    assert!(
        through(&mut rig, &plain).is_some(),
        "untagged always received"
    );
    assert!(
        through(&mut rig, &tagged(&plain, 0x8100, 0)).is_none(),
        "VID 0 needs VFTA bit 0"
    );
    m.write(r::VFTA.at(0), 1 | 1 << 1);
    assert!(through(&mut rig, &tagged(&plain, 0x8100, 0x2000)).is_some());
    m.write(r::VFTA.at(0), 1);
    assert!(
        through(&mut rig, &tagged(&plain, 0x8100, 1)).is_none(),
        "removed VID drops"
    );
    m.modify(r::VLNCTRL, r::vlnctrl::VFE.bit(), 0);
    assert!(
        through(&mut rig, &tagged(&plain, 0x8100, 33)).is_some(),
        "filter off"
    );
    assert_eq!(rig.b.counters().rx_filtered, 3);
}

#[test]
fn tpid_decides_what_is_a_tag() {
    let mut rig = pair_rig(SimConfig::default());
    rig.b_rx.rxdctl(&rig.b, 0, r::rxdctl::VME.bit());
    let plain = udp(rig.b.mac().0, 1, 100);
    let c = tagged(&plain, 0x8100, 7);
    let s = tagged(&plain, 0x88a8, 7);
    assert_eq!(
        through(&mut rig, &s).unwrap().data,
        s,
        "0x88a8 is no tag by default"
    );
    rig.b.regs().modify(r::VLNCTRL, 0xffff, 0x88a8);
    let got = through(&mut rig, &s).unwrap();
    assert_eq!((got.data.clone(), got.last().vlan), (plain.clone(), 7));
    let got = through(&mut rig, &c).unwrap();
    assert_eq!((got.data.clone(), got.last().status & VP), (c, 0));
    // Double-tagged, extended mode off: strip acts on the outer tag.
    rig.b.regs().modify(r::VLNCTRL, 0xffff, 0x8100);
    let qinq = tagged(&tagged(&plain, 0x8100, 20), 0x8100, 10);
    let got = through(&mut rig, &qinq).unwrap();
    assert_eq!(got.last().vlan, 10);
    assert_eq!(got.data, tagged(&plain, 0x8100, 20));
}

#[test]
fn extended_mode_acts_on_the_inner_tag() {
    let mut rig = pair_rig(SimConfig::default());
    let m = rig.b.regs().clone();
    m.modify(r::CTRL_EXT, 0, r::ctrl_ext::EXTENDED_VLAN.bit());
    m.write(r::EXVET, r::exvet::VET_EXT.val(0x88a8));
    rig.b_rx.rxdctl(&rig.b, 0, r::rxdctl::VME.bit());
    m.modify(r::VLNCTRL, 0, r::vlnctrl::VFE.bit());
    m.write(r::VFTA.at(0), 1 << 20);
    let plain = udp(rig.b.mac().0, 1, 1400);
    let inner = tagged(&plain, 0x8100, 20);
    let qinq = tagged(&inner, 0x88a8, 10);
    let got = through(&mut rig, &qinq).unwrap();
    assert_eq!(
        got.data,
        tagged(&plain, 0x88a8, 10),
        "inner stripped, outer kept"
    );
    assert_eq!(got.last().vlan, 20);
    assert_eq!(got.last().status & (VP | VEXT), VP | VEXT);
    let other = tagged(&tagged(&plain, 0x8100, 21), 0x88a8, 10);
    assert!(
        through(&mut rig, &other).is_none(),
        "filter on the inner VID"
    );
    let single = tagged(&plain, 0x8100, 20);
    let got = through(&mut rig, &single).unwrap();
    assert_eq!(
        (got.data.clone(), got.last().status & VP),
        (single, 0),
        "no outer tag: untagged"
    );
}

#[test]
fn tagged_frames_get_four_more_bytes() {
    let mut rig = pair_rig(SimConfig::default());
    let plain = udp(rig.b.mac().0, 1, 1514);
    assert!(
        through(&mut rig, &tagged(&plain, 0x8100, 5)).is_some(),
        "1522 at MTU 1500"
    );
    let long = udp(rig.b.mac().0, 1, 1515);
    assert!(through(&mut rig, &tagged(&long, 0x8100, 5)).is_none());
    assert!(
        through(&mut rig, &tagged(&plain, 0x88a8, 5)).is_none(),
        "not a tag: oversize"
    );
}

#[test]
fn transmit_inserts_the_context_tag_with_dmatxctl_vt() {
    let mut rig = pair_rig(SimConfig {
        capture: 8,
        ..SimConfig::default()
    });
    let plain = udp(rig.b.mac().0, 1, 100);
    rig.a_tx.context(0x6005, 0);
    rig.a_tx.context(0x0009, 1);
    rig.a_tx.send(&rig.a, &plain, Some(0));
    assert_eq!(
        rig.b_rx.recv(&rig.b).unwrap().data,
        tagged(&plain, 0x8100, 0x6005)
    );
    rig.a_tx.send(&rig.a, &plain, Some(1));
    assert_eq!(
        rig.b_rx.recv(&rig.b).unwrap().data,
        tagged(&plain, 0x8100, 9)
    );
    // Contexts persist; the TPID comes from DMATXCTL.VT.
    rig.a.regs().modify(
        r::DMATXCTL,
        r::dmatxctl::VT.mask(),
        r::dmatxctl::VT.val(0x88a8),
    );
    rig.a_tx.send(&rig.a, &plain, Some(0));
    assert_eq!(
        rig.b_rx.recv(&rig.b).unwrap().data,
        tagged(&plain, 0x88a8, 0x6005)
    );
    // Inserting into a tagged frame pushes a new outermost tag.
    let inner = tagged(&plain, 0x8100, 3);
    rig.a_tx.send(&rig.a, &inner, Some(1));
    assert_eq!(
        rig.b_rx.recv(&rig.b).unwrap().data,
        tagged(&inner, 0x88a8, 9)
    );
    // Without VLE the frame leaves untouched.
    rig.a_tx.send(&rig.a, &plain, None);
    assert_eq!(rig.b_rx.recv(&rig.b).unwrap().data, plain);
    assert_eq!(rig.a.take_captured().len(), 5);
}

#[test]
fn multi_descriptor_transmit_uses_the_first_descriptor_flags() {
    let mut rig = pair_rig(SimConfig::default());
    let plain = udp(rig.b.mac().0, 1, 300);
    rig.a_tx.context(0x0042, 0);
    let (x, y) = plain.split_at(100);
    let ax = rig.a_tx.stage(x);
    let ay = rig.a_tx.stage(y);
    rig.a_tx.put(ax, DATA | VLE | x.len() as u32, 300 << 14);
    let last = rig.a_tx.put(ay, DATA | EOP | RS | y.len() as u32, 0);
    rig.a_tx.kick(&rig.a);
    assert!(rig.a_tx.done(last));
    assert_eq!(
        rig.b_rx.recv(&rig.b).unwrap().data,
        tagged(&plain, 0x8100, 0x42)
    );
    assert_eq!(rig.a.regs().read(r::TDH.at(0)) as usize, rig.a_tx.tail);
}
