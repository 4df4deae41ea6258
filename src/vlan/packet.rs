//! The per-packet VLAN calls, as an extension trait on [`Packet`].
//!
//! The one call applications need is [`PacketVlan::take_vlan`]: "what is this packet's tag, and
//! leave me the untagged frame". It answers from the metadata flags first and reads the frame
//! only when no one has yet:
//!
//! | flags on entry | meaning | work |
//! |---|---|---|
//! | `VLAN_STRIPPED` | the device or the burst removed the tag, TCI in `meta.vlan_tci` | one flag test |
//! | `VLAN_HANDLED` | the frame was examined and had no tag to remove | one flag test |
//! | neither | Deferred mode, or a frame the device left alone | find + strip now, set the flags |
//!
//! That order is what makes the answer the same in every mode and makes a second call free and
//! harmless: a packet is stripped at most once, by whoever first sees it without a flag, and
//! everyone after reads the flags. It is also what makes a mode switch under traffic safe (see
//! [`VlanControl`](super::VlanControl)).
//!
//! Per-packet cost, in the order of the table: a load and a branch; the same; and for a tagged
//! frame one 2-byte compare at offset 12 (16 in extended mode), a 12- (16-) byte move and two
//! 16-bit stores. No allocation, no atomics, no locks: the TPID arrives in the `Copy`
//! [`VlanRxCtx`] the queue handed out with the burst.

use crate::platform::dma::{Meta, Packet};

use super::frame::{self, Lookup, VlanRxCtx, MAC_LEN, TAG_LEN};
use super::tag::{ReservedVid, Tci, Tpid};

/// VLAN operations on a [`Packet`]. Sealed: only `Packet` implements it (see `src/sealed.rs`).
pub trait PacketVlan: crate::sealed::Sealed {
    /// Reports the packet's receive tag and leaves the frame untagged (strips now if no one has
    /// yet). Same answer and same bytes in every receive mode; calling it again changes nothing.
    fn take_vlan(&mut self, ctx: VlanRxCtx) -> Option<Tci>;

    /// Reports the receive tag without changing the frame (in Deferred mode the tag stays in it).
    fn peek_vlan(&self, ctx: VlanRxCtx) -> Option<Tci>;

    /// Whether the frame was found malformed (a tag ethertype, too short for the tag): meaningful
    /// once `take_vlan` ran or the burst examined the frame.
    fn vlan_malformed(&self) -> bool;

    /// Asks the transmit path to send the frame with `tci` as a new outermost tag
    /// ([`Meta::TX_VLAN`]). Refuses VID 4095. The metadata has one TCI slot, so this ends the
    /// receive-side report: read the receive tag first.
    fn set_tx_vlan(&mut self, tci: Tci) -> Result<(), ReservedVid>;

    /// The transmit tag requested, if any.
    fn tx_vlan(&self) -> Option<Tci>;

    /// Cancels a transmit tag request.
    fn clear_tx_vlan(&mut self);

    /// Pushes a new outermost tag into the frame now (software insertion): takes 4 bytes of
    /// headroom and moves the 12 MAC bytes (without headroom, grows at the tail and moves the
    /// whole frame). Returns false, changing nothing, when the frame is shorter than 12 bytes or
    /// the buffer has no 4 bytes to spare. Metadata untouched.
    fn push_vlan(&mut self, tpid: Tpid, tci: Tci) -> bool;

    /// Removes the tag that counts under `ctx` now, whatever the flags say, and returns what was
    /// found; metadata untouched. The raw building block of `take_vlan`.
    fn pop_vlan(&mut self, ctx: VlanRxCtx) -> Lookup;

    /// The frame as it is or was on the wire, into `out` (cleared first): a stripped receive tag
    /// re-inserted where it was, or a pending transmit tag pushed with `ctx.push_tpid()`. A
    /// capture written from this is byte-identical whatever the modes.
    fn wire_frame_into(&self, ctx: VlanRxCtx, out: &mut Vec<u8>);

    /// Like `wire_frame_into` into a caller's buffer; `None` when it is too small.
    fn wire_frame_to_slice(&self, ctx: VlanRxCtx, out: &mut [u8]) -> Option<usize>;
}

/// Finds and strips the tag that counts, and records the outcome in the flags.
#[inline]
pub(crate) fn strip_now(p: &mut Packet, ctx: VlanRxCtx) -> Lookup {
    let found = frame::find_tag(p.data(), ctx);
    match found {
        Lookup::Tagged(tci) => {
            p.data_mut().copy_within(0..ctx.tag_offset(), TAG_LEN);
            p.pull_front(TAG_LEN);
            p.meta.vlan_tci = tci.raw();
            p.meta.flags |= Meta::VLAN_STRIPPED;
        }
        Lookup::Untagged => p.meta.flags |= Meta::VLAN_HANDLED,
        Lookup::Malformed => p.meta.flags |= Meta::VLAN_HANDLED | Meta::VLAN_MALFORMED,
    }
    found
}

impl crate::sealed::Sealed for Packet {}

impl PacketVlan for Packet {
    #[inline]
    fn take_vlan(&mut self, ctx: VlanRxCtx) -> Option<Tci> {
        let f = self.meta.flags;
        if f & Meta::VLAN_STRIPPED != 0 {
            return Some(Tci::from_raw(self.meta.vlan_tci));
        }
        if f & Meta::VLAN_HANDLED != 0 {
            return None;
        }
        strip_now(self, ctx).tci()
    }

    #[inline]
    fn peek_vlan(&self, ctx: VlanRxCtx) -> Option<Tci> {
        let f = self.meta.flags;
        if f & Meta::VLAN_STRIPPED != 0 {
            return Some(Tci::from_raw(self.meta.vlan_tci));
        }
        if f & Meta::VLAN_HANDLED != 0 {
            return None;
        }
        frame::find_tag(self.data(), ctx).tci()
    }

    #[inline]
    fn vlan_malformed(&self) -> bool {
        self.meta.flags & Meta::VLAN_MALFORMED != 0
    }

    #[inline]
    fn set_tx_vlan(&mut self, tci: Tci) -> Result<(), ReservedVid> {
        if tci.is_reserved() {
            return Err(ReservedVid);
        }
        self.meta.vlan_tci = tci.raw();
        self.meta.flags =
            (self.meta.flags & !Meta::VLAN_STRIPPED) | Meta::TX_VLAN | Meta::VLAN_HANDLED;
        Ok(())
    }

    #[inline]
    fn tx_vlan(&self) -> Option<Tci> {
        self.meta
            .has(Meta::TX_VLAN)
            .then_some(Tci::from_raw(self.meta.vlan_tci))
    }

    #[inline]
    fn clear_tx_vlan(&mut self) {
        self.meta.flags &= !Meta::TX_VLAN;
    }

    #[inline]
    fn push_vlan(&mut self, tpid: Tpid, tci: Tci) -> bool {
        let len = self.len();
        if len < MAC_LEN {
            return false;
        }
        let pushed = if self.headroom() >= TAG_LEN {
            match self.push_front(TAG_LEN) {
                Some(buf) => frame::insert_in_place(buf, tpid, tci),
                None => false,
            }
        } else {
            push_vlan_at_tail(self, tpid, tci)
        };
        if pushed && !self.is_plain() {
            move_offload_headers(self);
        }
        pushed
    }

    #[inline]
    fn pop_vlan(&mut self, ctx: VlanRxCtx) -> Lookup {
        let found = frame::strip_in_place(self.data_mut(), ctx);
        if let Lookup::Tagged(_) = found {
            self.pull_front(TAG_LEN);
        }
        found
    }

    fn wire_frame_into(&self, ctx: VlanRxCtx, out: &mut Vec<u8>) {
        head_wire_frame_into(self, ctx, out);
        // A chained frame's tag is in its head: the other segments follow as they are.
        for s in self.tail_segments() {
            out.extend_from_slice(s.data());
        }
    }

    fn wire_frame_to_slice(&self, ctx: VlanRxCtx, out: &mut [u8]) -> Option<usize> {
        let mut n = head_wire_frame_to_slice(self, ctx, out)?;
        for s in self.tail_segments() {
            out.get_mut(n..n + s.len())?.copy_from_slice(s.data());
            n += s.len();
        }
        Some(n)
    }
}

/// [`VlanPacket::wire_frame_into`] of the head segment.
fn head_wire_frame_into(p: &Packet, ctx: VlanRxCtx, out: &mut Vec<u8>) {
    let f = p.meta.flags;
    let tci = Tci::from_raw(p.meta.vlan_tci);
    if f & Meta::VLAN_STRIPPED != 0 {
        frame::rx_wire_frame_into(p.data(), Some(tci), ctx, out);
    } else if f & Meta::TX_VLAN != 0 {
        if !frame::tx_wire_frame_into(p.data(), ctx.push_tpid(), Some(tci), out) {
            // Too short to tag: neither transmit path sends a tag for it.
            out.extend_from_slice(p.data());
        }
    } else {
        out.clear();
        out.extend_from_slice(p.data());
    }
}

/// [`VlanPacket::wire_frame_to_slice`] of the head segment.
fn head_wire_frame_to_slice(p: &Packet, ctx: VlanRxCtx, out: &mut [u8]) -> Option<usize> {
    let f = p.meta.flags;
    let tci = Tci::from_raw(p.meta.vlan_tci);
    let data = p.data();
    if f & Meta::VLAN_STRIPPED != 0 {
        frame::rx_wire_frame_to_slice(data, Some(tci), ctx, out)
    } else if f & Meta::TX_VLAN != 0 && data.len() >= MAC_LEN {
        let n = data.len() + TAG_LEN;
        let out = out.get_mut(..n)?;
        out[..MAC_LEN].copy_from_slice(&data[..MAC_LEN]);
        frame::write_tag(&mut out[MAC_LEN..MAC_LEN + TAG_LEN], ctx.push_tpid(), tci);
        out[MAC_LEN + TAG_LEN..].copy_from_slice(&data[MAC_LEN..]);
        Some(n)
    } else {
        frame::rx_wire_frame_to_slice(data, None, ctx, out)
    }
}

/// After a tag was pushed into `p`: an offload request's L2 header now holds it.
#[cold]
fn move_offload_headers(p: &mut Packet) {
    let mut t = p.tx_offload();
    if t.flags != 0 {
        t.l2_len = t.l2_len.saturating_add(TAG_LEN as u8);
        p.set_tx_offload(t);
    }
}

/// The slow path of `push_vlan` when the headroom is used up: grow at the tail and move the
/// bytes behind the MAC addresses back by 4.
#[cold]
fn push_vlan_at_tail(p: &mut Packet, tpid: Tpid, tci: Tci) -> bool {
    let len = p.len();
    if !p.set_len(len + TAG_LEN) {
        return false;
    }
    let d = p.data_mut();
    d.copy_within(MAC_LEN..len, MAC_LEN + TAG_LEN);
    frame::write_tag(&mut d[MAC_LEN..MAC_LEN + TAG_LEN], tpid, tci);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::dma::{IdentityMapper, Pool, PoolConfig};
    use std::sync::Arc;

    fn pool() -> Pool {
        Pool::new(
            PoolConfig {
                buffers: 8,
                ..PoolConfig::default()
            },
            Arc::new(IdentityMapper),
        )
        .unwrap()
    }

    fn tagged() -> Vec<u8> {
        let mut f: Vec<u8> = (1..=12).collect();
        f.extend_from_slice(&[0x81, 0x00, 0xa0, 0x64, 0x08, 0x00]);
        f.extend(0..46u8);
        f
    }

    #[test]
    fn take_is_idempotent_and_peek_does_not_strip() {
        let pool = pool();
        let mut p = pool.alloc().unwrap();
        let f = tagged();
        assert!(p.set_data(&f));
        let c = VlanRxCtx::default();
        assert_eq!(p.peek_vlan(c), Some(Tci::from_raw(0xa064)));
        assert_eq!(p.data(), &f[..]);
        assert_eq!(p.take_vlan(c), Some(Tci::from_raw(0xa064)));
        let untagged = p.data().to_vec();
        assert_eq!(untagged.len(), f.len() - 4);
        assert_eq!(p.take_vlan(c), Some(Tci::from_raw(0xa064)));
        assert_eq!(p.data(), &untagged[..]);
        assert_eq!(p.peek_vlan(c), Some(Tci::from_raw(0xa064)));
        let mut w = Vec::new();
        p.wire_frame_into(c, &mut w);
        assert_eq!(w, f);
    }

    #[test]
    fn tx_tag_refuses_4095_and_overrides_rx_report() {
        let pool = pool();
        let mut p = pool.alloc().unwrap();
        assert!(p.set_data(&tagged()));
        let c = VlanRxCtx::default();
        p.take_vlan(c);
        assert_eq!(p.set_tx_vlan(Tci::from_raw(0x0fff)), Err(ReservedVid));
        assert_eq!(p.tx_vlan(), None);
        p.set_tx_vlan(Tci::from_raw(7)).unwrap();
        assert_eq!(p.tx_vlan(), Some(Tci::from_raw(7)));
        assert_eq!(p.take_vlan(c), None);
        p.clear_tx_vlan();
        assert_eq!(p.tx_vlan(), None);
    }

    #[test]
    fn push_without_headroom_grows_at_the_tail() {
        let pool = pool();
        let mut p = pool.alloc().unwrap();
        let f: Vec<u8> = (0..60).collect();
        assert!(p.set_data(&f));
        let h = p.headroom();
        p.push_front(h);
        p.pull_front(h);
        // Use up the headroom entirely: frame now starts at the buffer start.
        assert!(p.push_front(p.headroom()).is_some());
        let whole = p.data().to_vec();
        assert_eq!(p.headroom(), 0);
        let tci = Tci::from_raw(42);
        assert!(p.push_vlan(Tpid::C_TAG, tci));
        assert_eq!(
            p.data(),
            &frame::tx_wire_frame(&whole, Tpid::C_TAG, Some(tci)).unwrap()[..]
        );
        assert_eq!(p.pop_vlan(VlanRxCtx::default()), Lookup::Tagged(tci));
        assert_eq!(p.data(), &whole[..]);
    }
}
