//! Tag operations on plain byte slices: find, strip, insert, and the frame "as on the wire".
//!
//! Everything here is a pure function of its arguments, total over every input: it never panics
//! and never indexes past the slice it is given (every access is a checked `get` or is guarded
//! by a length test right before it). The [`Packet`](crate::platform::dma::Packet) operations in
//! [`packet`](super::packet) are these functions applied to a packet's frame, so the fuzz
//! harness and the property tests exercise both.
//!
//! Layout, with `off` = [`VlanRxCtx::tag_offset`] (12, or 16 in extended mode):
//!
//! ```text
//! normal:   dst(6) src(6) | TPID(2) TCI(2) | ethertype ...            off = 12
//! extended: dst(6) src(6) | outer TPID(2) TCI(2) | TPID(2) TCI(2) | ethertype ...   off = 16
//! ```
//!
//! Short frames. A frame counts as tagged only if it holds the whole tag *and* the ethertype
//! behind it: `off + 6` bytes (18, or 22 in extended mode). A frame whose TPID field matches but
//! which is shorter is [`Lookup::Malformed`]: it is delivered as is, reported untagged, and the
//! queue counts it under `malformed`. A frame too short to hold the TPID field at all (under 14
//! bytes, or an extended-mode frame whose outer TPID does not match) is simply untagged: it makes
//! no claim to be tagged.
//!
//! Extended (QinQ) mode follows the 82599's double-VLAN mode: the frame must start with an outer
//! tag carrying the outer TPID, and the tag the layer reports, filters on and strips is the
//! *inner* one at offset 16 (it must carry the TPID). A frame with only a C-tag, or only an
//! S-tag, has no inner tag and is reported untagged in extended mode. With extended mode off, a
//! double-tagged frame is handled on its outer tag and the inner one stays in the frame.

use super::tag::{Tci, Tpid};

/// Bytes of MAC addresses in front of the first tag.
pub const MAC_LEN: usize = 12;
/// Bytes of one tag (TPID + TCI).
pub const TAG_LEN: usize = 4;

/// What the receive path needs to know to find a tag: the TPID and the extended (QinQ) setting.
///
/// Small and `Copy` (three 16-bit words): the receive wrapper takes a snapshot once per burst
/// (one atomic load) and hands it out with [`VlanRx::ctx`](super::VlanRx::ctx), so that the
/// per-packet call [`take_vlan`](super::PacketVlan::take_vlan) gets it in registers instead of
/// reading shared state per packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VlanRxCtx {
    tpid: u16,
    outer_tpid: u16,
    extended: bool,
}

impl Default for VlanRxCtx {
    /// TPID 0x8100, extended mode off.
    fn default() -> Self {
        VlanRxCtx::new(Tpid::C_TAG)
    }
}

impl VlanRxCtx {
    /// Single tags with this TPID.
    pub const fn new(tpid: Tpid) -> VlanRxCtx {
        VlanRxCtx {
            tpid: tpid.get(),
            outer_tpid: tpid.get(),
            extended: false,
        }
    }

    /// Extended (QinQ) mode: an outer tag with `outer`, then the tag that counts, with `tpid`.
    pub const fn extended(tpid: Tpid, outer: Tpid) -> VlanRxCtx {
        VlanRxCtx {
            tpid: tpid.get(),
            outer_tpid: outer.get(),
            extended: true,
        }
    }

    /// The TPID of the tag that is reported, filtered and stripped.
    #[inline(always)]
    pub const fn tpid(self) -> Tpid {
        Tpid::from_raw_unchecked(self.tpid)
    }

    /// The outer TPID in extended mode (`None` when extended mode is off).
    #[inline(always)]
    pub const fn outer_tpid(self) -> Option<Tpid> {
        if self.extended {
            Some(Tpid::from_raw_unchecked(self.outer_tpid))
        } else {
            None
        }
    }

    /// Whether extended (QinQ) mode is on.
    #[inline(always)]
    pub const fn is_extended(self) -> bool {
        self.extended
    }

    /// Where the tag that counts starts: 12, or 16 in extended mode.
    #[inline(always)]
    pub const fn tag_offset(self) -> usize {
        if self.extended {
            MAC_LEN + TAG_LEN
        } else {
            MAC_LEN
        }
    }

    /// The TPID a transmit path pushes as the new outermost tag under this setting: the outer
    /// TPID in extended mode, the TPID otherwise.
    #[inline(always)]
    pub const fn push_tpid(self) -> Tpid {
        Tpid::from_raw_unchecked(if self.extended {
            self.outer_tpid
        } else {
            self.tpid
        })
    }
}

/// The answer of [`find_tag`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lookup {
    /// No tag (with this TPID / extended setting).
    Untagged,
    /// A whole tag at [`VlanRxCtx::tag_offset`], with its TCI.
    Tagged(Tci),
    /// The TPID field says "tagged" but the frame is too short to hold the tag and an ethertype.
    /// Treated as untagged, delivered as is, counted.
    Malformed,
}

impl Lookup {
    /// The TCI, if tagged.
    #[inline(always)]
    pub fn tci(self) -> Option<Tci> {
        match self {
            Lookup::Tagged(t) => Some(t),
            _ => None,
        }
    }
}

#[inline(always)]
fn be16(frame: &[u8], at: usize) -> Option<u16> {
    match frame.get(at..at + 2) {
        Some(&[a, b]) => Some(u16::from_be_bytes([a, b])),
        _ => None,
    }
}

/// Finds the tag that counts under `ctx`. Reads at most 22 bytes, never past the frame.
#[inline]
pub fn find_tag(frame: &[u8], ctx: VlanRxCtx) -> Lookup {
    let off = ctx.tag_offset();
    if ctx.extended {
        match be16(frame, MAC_LEN) {
            Some(t) if t == ctx.outer_tpid => {
                if frame.len() < MAC_LEN + TAG_LEN + 2 {
                    return Lookup::Malformed;
                }
            }
            _ => return Lookup::Untagged,
        }
    }
    match be16(frame, off) {
        Some(t) if t == ctx.tpid => match be16(frame, off + 2) {
            Some(tci) if frame.len() >= off + TAG_LEN + 2 => Lookup::Tagged(Tci::from_raw(tci)),
            _ => Lookup::Malformed,
        },
        _ => Lookup::Untagged,
    }
}

/// Strips the tag that counts under `ctx` in place: the `tag_offset` bytes in front of it (the
/// MAC addresses, and the outer tag in extended mode) move forward by 4, so that the untagged
/// frame is `frame[4..]`. Returns what [`find_tag`] found; the slice is changed only for
/// [`Lookup::Tagged`].
#[inline]
pub fn strip_in_place(frame: &mut [u8], ctx: VlanRxCtx) -> Lookup {
    let found = find_tag(frame, ctx);
    if let Lookup::Tagged(_) = found {
        // find_tag checked frame.len() >= off + 6.
        frame.copy_within(0..ctx.tag_offset(), TAG_LEN);
    }
    found
}

/// Inserts a new outermost tag in place: `buf` is 4 free bytes followed by the frame. The 12 MAC
/// bytes move to the front and the tag is written behind them, so the tagged frame is the whole
/// of `buf`. Returns false, changing nothing, when the frame is shorter than the 12 MAC bytes
/// (`buf` shorter than 16).
#[inline]
pub fn insert_in_place(buf: &mut [u8], tpid: Tpid, tci: Tci) -> bool {
    if buf.len() < TAG_LEN + MAC_LEN {
        return false;
    }
    buf.copy_within(TAG_LEN..TAG_LEN + MAC_LEN, 0);
    write_tag(&mut buf[MAC_LEN..MAC_LEN + TAG_LEN], tpid, tci);
    true
}

#[inline(always)]
pub(crate) fn write_tag(dst: &mut [u8], tpid: Tpid, tci: Tci) {
    let t = tpid.get().to_be_bytes();
    let c = tci.raw().to_be_bytes();
    dst.copy_from_slice(&[t[0], t[1], c[0], c[1]]);
}

/// Appends to `out` (after clearing it) the frame as it was on the wire before a receive path
/// removed the tag `stripped` (pass `None` for a frame that was not stripped): the tag goes back
/// at `ctx.tag_offset()` with `ctx.tpid()`, the way Linux packet sockets re-insert the tag the
/// NIC removed, so a capture is byte-identical whatever the mode. A frame shorter than the
/// offset (impossible for a frame that really was stripped) gets the tag at its end.
pub fn rx_wire_frame_into(frame: &[u8], stripped: Option<Tci>, ctx: VlanRxCtx, out: &mut Vec<u8>) {
    out.clear();
    match stripped {
        None => out.extend_from_slice(frame),
        Some(tci) => {
            let off = ctx.tag_offset().min(frame.len());
            out.reserve(frame.len() + TAG_LEN);
            out.extend_from_slice(&frame[..off]);
            let mut tag = [0u8; TAG_LEN];
            write_tag(&mut tag, ctx.tpid(), tci);
            out.extend_from_slice(&tag);
            out.extend_from_slice(&frame[off..]);
        }
    }
}

/// Like [`rx_wire_frame_into`], into a caller's buffer. Returns the length written, or `None`
/// (writing nothing) when `out` is too small.
pub fn rx_wire_frame_to_slice(
    frame: &[u8],
    stripped: Option<Tci>,
    ctx: VlanRxCtx,
    out: &mut [u8],
) -> Option<usize> {
    match stripped {
        None => {
            out.get_mut(..frame.len())?.copy_from_slice(frame);
            Some(frame.len())
        }
        Some(tci) => {
            let n = frame.len() + TAG_LEN;
            let out = out.get_mut(..n)?;
            let off = ctx.tag_offset().min(frame.len());
            out[..off].copy_from_slice(&frame[..off]);
            write_tag(&mut out[off..off + TAG_LEN], ctx.tpid(), tci);
            out[off + TAG_LEN..].copy_from_slice(&frame[off..]);
            Some(n)
        }
    }
}

/// The frame a transmitter must put on the wire for `frame` with transmit tag `tci` (or none):
/// `tpid` and the TCI pushed as a new outermost tag right behind the MAC addresses, the rest
/// unchanged. This is the reference both transmit modes are checked against (the software path
/// here, the hardware path on the software 82599 and on real NICs). Clears `out` first; returns
/// false (leaving `out` empty) when a tag is asked for and the frame is shorter than 12 bytes,
/// which neither path can tag.
pub fn tx_wire_frame_into(frame: &[u8], tpid: Tpid, tci: Option<Tci>, out: &mut Vec<u8>) -> bool {
    out.clear();
    let Some(tci) = tci else {
        out.extend_from_slice(frame);
        return true;
    };
    if frame.len() < MAC_LEN {
        return false;
    }
    out.reserve(frame.len() + TAG_LEN);
    out.extend_from_slice(&frame[..MAC_LEN]);
    let mut tag = [0u8; TAG_LEN];
    write_tag(&mut tag, tpid, tci);
    out.extend_from_slice(&tag);
    out.extend_from_slice(&frame[MAC_LEN..]);
    true
}

/// [`tx_wire_frame_into`] returning a new vector (`None` when the frame cannot be tagged).
pub fn tx_wire_frame(frame: &[u8], tpid: Tpid, tci: Option<Tci>) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    tx_wire_frame_into(frame, tpid, tci, &mut v).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tags: &[(u16, u16)], ethertype: u16, payload: usize) -> Vec<u8> {
        let mut f: Vec<u8> = (1..=12).collect();
        for &(tpid, tci) in tags {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&tci.to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend((0..payload).map(|i| i as u8));
        f
    }

    #[test]
    fn finds_single_and_double_tags() {
        let c = VlanRxCtx::default();
        assert_eq!(find_tag(&frame(&[], 0x0800, 46), c), Lookup::Untagged);
        assert_eq!(
            find_tag(&frame(&[(0x8100, 0xa064)], 0x0800, 42), c),
            Lookup::Tagged(Tci::from_raw(0xa064))
        );
        let qinq = frame(&[(0x88a8, 10), (0x8100, 20)], 0x0800, 38);
        assert_eq!(find_tag(&qinq, c), Lookup::Untagged, "0x88a8 is not 0x8100");
        assert_eq!(
            find_tag(&qinq, VlanRxCtx::new(Tpid::S_TAG)),
            Lookup::Tagged(Tci::from_raw(10))
        );
        let x = VlanRxCtx::extended(Tpid::C_TAG, Tpid::S_TAG);
        assert_eq!(find_tag(&qinq, x), Lookup::Tagged(Tci::from_raw(20)));
        assert_eq!(
            find_tag(&frame(&[(0x8100, 5)], 0x0800, 42), x),
            Lookup::Untagged
        );
        assert_eq!(
            find_tag(&frame(&[(0x88a8, 5)], 0x0800, 42), x),
            Lookup::Untagged
        );
    }

    #[test]
    fn short_frames_are_malformed_or_untagged() {
        let c = VlanRxCtx::default();
        let t = frame(&[(0x8100, 7)], 0x0800, 0); // 18 bytes: just enough
        assert_eq!(find_tag(&t, c), Lookup::Tagged(Tci::from_raw(7)));
        for n in 14..18 {
            assert_eq!(find_tag(&t[..n], c), Lookup::Malformed, "{n}");
        }
        for n in 0..14 {
            assert_eq!(find_tag(&t[..n], c), Lookup::Untagged, "{n}");
        }
        let x = VlanRxCtx::extended(Tpid::C_TAG, Tpid::S_TAG);
        let q = frame(&[(0x88a8, 1), (0x8100, 2)], 0x0800, 0); // 22 bytes
        assert_eq!(find_tag(&q, x), Lookup::Tagged(Tci::from_raw(2)));
        for n in 14..22 {
            assert_eq!(find_tag(&q[..n], x), Lookup::Malformed, "{n}");
        }
    }

    #[test]
    fn strip_and_insert_move_only_the_header() {
        let orig = frame(&[], 0x0800, 10);
        let mut buf = vec![0u8; 4];
        buf.extend_from_slice(&orig);
        let tci = Tci::from_raw(0x2001);
        assert!(insert_in_place(&mut buf, Tpid::C_TAG, tci));
        assert_eq!(buf, tx_wire_frame(&orig, Tpid::C_TAG, Some(tci)).unwrap());
        assert_eq!(buf, frame(&[(0x8100, 0x2001)], 0x0800, 10));
        assert_eq!(
            strip_in_place(&mut buf, VlanRxCtx::default()),
            Lookup::Tagged(tci)
        );
        assert_eq!(&buf[4..], &orig[..]);
        assert!(!insert_in_place(&mut [0u8; 15], Tpid::C_TAG, tci));
        assert_eq!(tx_wire_frame(&[0; 11], Tpid::C_TAG, Some(tci)), None);
        assert_eq!(
            tx_wire_frame(&[0; 11], Tpid::C_TAG, None),
            Some(vec![0; 11])
        );
    }

    #[test]
    fn wire_view_restores_stripped_frames() {
        let x = VlanRxCtx::extended(Tpid::C_TAG, Tpid::S_TAG);
        let orig = frame(&[(0x88a8, 1), (0x8100, 0xe002)], 0x86dd, 20);
        let mut buf = orig.clone();
        let Lookup::Tagged(tci) = strip_in_place(&mut buf, x) else {
            panic!()
        };
        assert_eq!(&buf[4..], &frame(&[(0x88a8, 1)], 0x86dd, 20)[..]);
        let mut out = Vec::new();
        rx_wire_frame_into(&buf[4..], Some(tci), x, &mut out);
        assert_eq!(out, orig);
        let mut s = [0u8; 100];
        let n = rx_wire_frame_to_slice(&buf[4..], Some(tci), x, &mut s).unwrap();
        assert_eq!(&s[..n], &orig[..]);
        assert_eq!(
            rx_wire_frame_to_slice(&buf[4..], Some(tci), x, &mut s[..10]),
            None
        );
    }
}
