//! The invariants the VLAN fuzz targets check on every input, shared by the libFuzzer target
//! (`fuzz_targets/vlan_frames.rs`, run with `cargo fuzz`) and the bounded stable-Rust harness
//! (`bounded.rs`, the `vlan-fuzz` example of the main crate).
//!
//! For a frame, a receive context and a TCI, every VLAN operation must: not panic; read nothing
//! past the frame (checked by running each packet operation twice, with the buffer's tailroom
//! filled with tag-like bytes and with zeros, and requiring identical results, and by checking
//! that the headroom in front of the frame is never written); and agree with the reference
//! model below and with each other (strip = find + move; take = strip once; wire view of a
//! stripped frame = the original; push then pop = identity).

use vfio_nic::platform::dma::{Packet, Pool};
use vfio_nic::vlan::frame::{
    rx_wire_frame_into, rx_wire_frame_to_slice, strip_in_place, tx_wire_frame_into,
};
use vfio_nic::vlan::{find_tag, Lookup, PacketVlan, Tci, Tpid, VlanRxCtx};

/// The reference model of `find_tag`, written from docs/vlan-rules.md and the module docs.
pub fn model(frame: &[u8], ctx: VlanRxCtx) -> Lookup {
    let n = frame.len();
    let field = |i: usize| (i + 2 <= n).then(|| u16::from_be_bytes([frame[i], frame[i + 1]]));
    let off = if ctx.is_extended() { 16 } else { 12 };
    if let Some(outer) = ctx.outer_tpid() {
        if field(12) != Some(outer.get()) {
            return Lookup::Untagged;
        }
        if n < 18 {
            return Lookup::Malformed;
        }
    }
    if field(off) != Some(ctx.tpid().get()) {
        return Lookup::Untagged;
    }
    if n < off + 6 {
        return Lookup::Malformed;
    }
    Lookup::Tagged(Tci::from_raw(field(off + 2).unwrap()))
}

/// Decodes a fuzz input: byte 0 picks the context, bytes 1-2 the TCI, the rest is the frame.
pub fn decode(data: &[u8]) -> (VlanRxCtx, Tci, &[u8]) {
    let sel = data.first().copied().unwrap_or(0);
    let tci = Tci::from_raw(match data.get(1..3) {
        Some(&[a, b]) => u16::from_be_bytes([a, b]),
        _ => 0,
    });
    let frame = data.get(3..).unwrap_or(&[]);
    (context(sel), tci, frame)
}

/// One of the contexts that matter, by number.
pub fn context(sel: u8) -> VlanRxCtx {
    let tpids = [
        Tpid::C_TAG,
        Tpid::S_TAG,
        Tpid::new(0x9100).unwrap(),
        Tpid::C_TAG,
    ];
    let tpid = tpids[(sel & 3) as usize];
    let outer = tpids[((sel >> 2) & 3) as usize];
    if sel & 0x10 != 0 {
        VlanRxCtx::extended(tpid, outer)
    } else {
        VlanRxCtx::new(tpid)
    }
}

/// Loads `frame` into `p` with `fill` in the tailroom and a canary in the headroom. Returns
/// false when the frame does not fit the buffer.
fn load(p: &mut Packet, frame: &[u8], fill: u8) -> bool {
    p.reset_for_rx();
    let h = p.headroom();
    p.push_front(h);
    let cap = p.capacity();
    if frame.len() + h > cap {
        return false;
    }
    p.set_len(cap);
    for (i, b) in p.data_mut().iter_mut().enumerate() {
        *b = if i < h {
            0xc5
        } else {
            fill ^ ((i as u8 & 1) * 0x81)
        };
    }
    p.pull_front(h);
    p.set_len(frame.len());
    p.data_mut().copy_from_slice(frame);
    true
}

/// Whether the `h` bytes of headroom in front of the frame still hold the canary.
fn headroom_intact(p: &mut Packet, h: usize) -> bool {
    let before = p.headroom();
    if before < h {
        return false;
    }
    p.push_front(before);
    let ok = p.data()[..h].iter().all(|&b| b == 0xc5);
    p.pull_front(before);
    ok
}

/// Everything observable from the packet-level operations, for the tailroom comparison.
#[derive(Debug, PartialEq)]
struct Outcome {
    take: Option<Tci>,
    after_take: Vec<u8>,
    wire: Vec<u8>,
    pushed: Option<Vec<u8>>,
    popped: Option<(Lookup, Vec<u8>)>,
}

fn run_packet(p: &mut Packet, frame: &[u8], ctx: VlanRxCtx, tci: Tci, fill: u8) -> Option<Outcome> {
    if !load(p, frame, fill) {
        return None;
    }
    let h = p.headroom();
    let found = model(frame, ctx);
    let peek = p.peek_vlan(ctx);
    assert_eq!(peek, found.tci(), "peek");
    assert_eq!(p.data(), frame, "peek changes nothing");
    let take = p.take_vlan(ctx);
    assert_eq!(take, found.tci(), "take");
    let after_take = p.data().to_vec();
    assert_eq!(p.take_vlan(ctx), take, "take twice");
    assert_eq!(p.data(), &after_take[..], "take twice never strips twice");
    assert_eq!(p.peek_vlan(ctx), take, "peek after take");
    assert_eq!(
        p.vlan_malformed(),
        found == Lookup::Malformed,
        "malformed flag"
    );
    assert!(
        headroom_intact(p, h),
        "headroom in front of the frame written"
    );
    let mut wire = Vec::new();
    p.wire_frame_into(ctx, &mut wire);
    assert_eq!(wire, frame, "wire view of a received frame is the frame");
    let mut buf = vec![0u8; frame.len() + 4];
    let n = p.wire_frame_to_slice(ctx, &mut buf).expect("room enough");
    assert_eq!(&buf[..n], frame);
    if !frame.is_empty() {
        assert_eq!(
            p.wire_frame_to_slice(ctx, &mut buf[..frame.len() - 1]),
            None
        );
    }

    // Transmit: push a new outermost tag, check against the reference, pop it again.
    load(p, frame, fill);
    let tpid = ctx.push_tpid();
    let mut expect = Vec::new();
    let can = tx_wire_frame_into(frame, tpid, Some(tci), &mut expect);
    assert_eq!(can, frame.len() >= 12);
    let pushed = p.push_vlan(tpid, tci);
    assert_eq!(
        pushed, can,
        "push_vlan refuses exactly what the reference refuses"
    );
    let (pushed, popped) = if pushed {
        assert_eq!(p.data(), &expect[..], "push_vlan = tx_wire_frame");
        assert!(
            headroom_intact(p, h - 4),
            "push wrote below the 4 bytes it took"
        );
        let pushed = p.data().to_vec();
        let l = p.pop_vlan(VlanRxCtx::new(tpid));
        if frame.len() >= 14 {
            assert_eq!(l, Lookup::Tagged(tci), "pop after push");
            assert_eq!(p.data(), frame, "push then pop is the identity");
        } else {
            assert_eq!(l, Lookup::Malformed);
        }
        (Some(pushed), Some((l, p.data().to_vec())))
    } else {
        assert_eq!(p.data(), frame, "a refused push changes nothing");
        (None, None)
    };

    // A transmit request shows on the wire view as the reference frame.
    load(p, frame, fill);
    if !tci.is_reserved() {
        p.set_tx_vlan(tci).unwrap();
        let mut w = Vec::new();
        p.wire_frame_into(ctx, &mut w);
        if can {
            assert_eq!(w, expect, "wire view of a pending transmit tag");
        } else {
            assert_eq!(w, frame);
        }
    } else {
        assert!(p.set_tx_vlan(tci).is_err(), "VID 4095 refused");
    }
    Some(Outcome {
        take,
        after_take,
        wire,
        pushed,
        popped,
    })
}

/// Checks every invariant for one frame, context and TCI. Panics on a violation.
pub fn check(frame: &[u8], ctx: VlanRxCtx, tci: Tci, pool: &Pool) {
    // Slice level.
    let found = find_tag(frame, ctx);
    assert_eq!(found, model(frame, ctx), "find_tag vs model");
    let mut s = frame.to_vec();
    assert_eq!(strip_in_place(&mut s, ctx), found);
    if let Lookup::Tagged(t) = found {
        let off = ctx.tag_offset();
        let mut expect = frame[..off].to_vec();
        expect.extend_from_slice(&frame[off + 4..]);
        assert_eq!(&s[4..], &expect[..], "strip moves only the header");
        let mut w = Vec::new();
        rx_wire_frame_into(&s[4..], Some(t), ctx, &mut w);
        assert_eq!(w, frame, "strip + reinsert");
    } else {
        assert_eq!(s, frame, "no tag, no change");
    }
    // The wire view of arbitrary bytes claimed stripped must not panic either.
    let mut w = Vec::new();
    rx_wire_frame_into(frame, Some(tci), ctx, &mut w);
    assert_eq!(w.len(), frame.len() + 4);
    let mut buf = vec![0u8; frame.len() + 4];
    assert_eq!(
        rx_wire_frame_to_slice(frame, Some(tci), ctx, &mut buf),
        Some(frame.len() + 4)
    );
    assert_eq!(buf, w);

    // Packet level, twice with different tailroom contents: the same outcome.
    let mut p = pool.alloc().expect("the fuzz pool has a buffer");
    let a = run_packet(&mut p, frame, ctx, tci, 0x00);
    let b = run_packet(&mut p, frame, ctx, tci, 0x81);
    assert_eq!(a, b, "the outcome depends on bytes past the frame");
}

/// Feeds arbitrary text to the parsers (no panic).
pub fn check_text(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = s.parse::<vfio_nic::vlan::Tci>();
        let _ = s.parse::<vfio_nic::vlan::Tpid>();
        let _ = s.parse::<vfio_nic::vlan::Vid>();
        let _ = s.parse::<vfio_nic::vlan::RxMode>();
        let _ = s.parse::<vfio_nic::vlan::TxMode>();
    }
}
