//! The burst paths of a virtio-net queue on a packed ring ([`super::packed`]): what
//! [`super::queue`] does on a split ring, with one descriptor word per returned buffer instead
//! of a used entry, an available entry and a descriptor.
//!
//! - Receive: while the device returns buffers in the order they were posted (QEMU does), the
//!   used element at slot `s` names buffer `s` (slot `s`'s of [`RxSlots`]): a run is checked
//!   with one masked compare per element (its id and the pass's used flags), its length, and
//!   that the device held the buffer, harvested ([`RxSlots::harvest`]) and each buffer posted
//!   again at the driver's next slot, in the same pass. Anything else ends the run and goes
//!   through the careful path of one element.
//! - Transmit: pair `k` at slots `2k` (the shared zeroed header) and `2k + 1` (the frame),
//!   buffer id `k`, written per frame, the frame's descriptor before the header's; a used
//!   element naming the oldest pair in flight (the FIFO's head) just moves the head, any other
//!   is checked and marked done as on the split ring.

use std::cell::Cell;

use super::packed::{
    held, used_key, w_id, w_len, word1, PackedRing, DESC_F_WRAP, FLAGS_MASK, USED_MASK,
};
use super::queue::{RxDone, NET_HDR_LEN, PAD_TX_LEN};
use super::ring::{DESC_F_NEXT, DESC_F_WRITE};
use crate::device::QueueError;
use crate::platform::dma::{Meta, Packet, RxSlots, TxSlots};

/// One receive burst on a packed ring: up to `want` frames into `batch` (the slots' reserve
/// covers them), every buffer taken posted again, and the publish; see the module doc.
#[inline(always)]
pub(super) fn rx(
    ring: &mut PackedRing,
    slots: &mut RxSlots,
    batch: &mut Vec<Packet>,
    want: usize,
    desc_len: u32,
) -> Result<RxDone, QueueError> {
    let fast = u32::from(slots.fast_len());
    let hdr = NET_HDR_LEN as u64;
    let (mut got, mut bytes, mut dropped) = (0usize, 0u64, 0u64);
    let (v, st) = ring.burst()?;
    let size = usize::from(st.size());
    while got + (dropped as usize) < want {
        let first = usize::from(st.next_used);
        // Every buffer is posted again as soon as it is taken, so the driver's next slot is
        // the device's (all of them in flight or queued): a buffer goes back into the slot it
        // came from. A run stays within the pass (the flags flip at the wrap).
        let run = if usize::from(st.next_avail) == first {
            (want - got - dropped as usize)
                .min(usize::from(st.in_flight()))
                .min(size - first)
        } else {
            0
        };
        // What the run reads and writes, as values: the used element expected at `first + i`
        // (buffer `first + i`, this pass's used flags), the second word each buffer is posted
        // again with (its id added), whether the first is withheld until the publish.
        let key = used_key(first as u16, st.used_flags);
        let avail = word1(desc_len, 0, st.avail_flags | DESC_F_WRITE);
        let hold = st.hold_first();
        let epoch = st.epoch;
        let states = Cell::from_mut(&mut st.state[first..first + run]).as_slice_of_cells();
        let k = Cell::new(0usize);
        let (n, b) = slots.harvest(
            first,
            states,
            batch,
            |s| {
                let i = k.get();
                let w = v.word(first + i);
                let frame = w_len(w).wrapping_sub(NET_HDR_LEN as u32);
                if (w >> 32) & USED_MASK != key + i as u64 || frame > fast || !held(s.get(), epoch)
                {
                    return None;
                }
                // The buffer is the driver's, and queued again at once (below).
                s.set(epoch);
                k.set(i + 1);
                Some((frame as u16, Meta::default()))
            },
            |_, new| {
                let i = k.get() - 1;
                let slot = first + i;
                v.set_addr(slot, new - hdr);
                let w = avail | ((first + i) as u64) << 32;
                v.set_word(slot, if hold && i == 0 { w & !FLAGS_MASK } else { w });
            },
        );
        st.used_moved(n as u16);
        st.avail_moved(n as u16, avail | (first as u64) << 32);
        got += n;
        bytes += b;
        if n == run && n > 0 {
            continue;
        }
        // The careful path: one used element.
        let Some(w) = st.used(&v) else { break };
        let id = match st.take_used(w, 1) {
            Ok(id) => id,
            // The frames already taken are delivered; the broken ring refuses the next call.
            Err(e) if got == 0 && dropped == 0 => return Err(e),
            Err(_) => break,
        };
        let len = w_len(w) as usize;
        let mut at = slots.data_iova(usize::from(id));
        let taken = len <= desc_len as usize
            && len >= NET_HDR_LEN
            && slots.take(
                usize::from(id),
                (len - NET_HDR_LEN) as u16,
                Meta::default(),
                batch,
                |new| at = new,
            );
        // Posted again: with a fresh buffer, or (a length the buffer cannot have, or no
        // buffer to swap in: the frame is dropped) as it was.
        st.post(&v, id, &[(at - hdr, desc_len, DESC_F_WRITE)]);
        if taken {
            got += 1;
            bytes += (len - NET_HDR_LEN) as u64;
        } else {
            dropped += 1;
        }
    }
    Ok((got, bytes, dropped, ring.publish()))
}

/// Takes back the pairs the device returned on a packed ring: from the FIFO's `head` on, in
/// send order (the head just moves), or marked `done` (one returned before an older one,
/// counted in `early`); `queued` pairs are in the FIFO. Each used element skips its pair's two
/// slots. The pairs keep no states: every pair the FIFO holds was published by the burst that
/// queued it, so a used element must name one of them that has not come back yet; one that
/// does not breaks the ring (what came before it is taken).
#[inline(always)]
pub(super) fn reclaim(
    ring: &mut PackedRing,
    head: &mut usize,
    queued: usize,
    mask: usize,
    done: &mut [bool],
    early: &mut usize,
) -> Result<(), QueueError> {
    let tail = head.wrapping_add(queued);
    let (v, st) = ring.burst()?;
    let size = usize::from(st.size());
    loop {
        let first = usize::from(st.next_used);
        // Pairs in flight, within the device's pass; in send order only while none came back
        // early (then the next in send order is the device's).
        let n = if *early == 0 {
            (usize::from(st.in_flight()) / 2).min((size - first) / 2)
        } else {
            0
        };
        let key = used_key(0, st.used_flags);
        let mut h = *head;
        let mut k = 0;
        while k < n {
            let w = v.word(first + 2 * k);
            if (w >> 32) & USED_MASK != key | (h & mask) as u64 {
                break;
            }
            h = h.wrapping_add(1);
            k += 1;
        }
        *head = h;
        st.used_moved(2 * k as u16);
        if k == n && n > 0 {
            // The device's pass ended (or nothing more in flight): on with the next.
            continue;
        }
        // The careful path: one used element out of send order (or not there yet).
        let Some(w) = st.used(&v) else {
            return Ok(());
        };
        let pair = usize::from(w_id(w));
        let ahead = pair.wrapping_sub(*head) & mask;
        if pair > mask || ahead >= tail.wrapping_sub(*head) || done[pair] {
            return Err(st.not_held(w));
        }
        st.used_moved(2);
        if ahead == 0 {
            *head = head.wrapping_add(1);
        } else {
            done[pair] = true;
            *early += 1;
        }
    }
}

/// Writes the descriptors of the packets at the front of `batch` on a packed ring, the FIFO
/// positions' pairs `pairs` (as the split ring's walk: it stops before a chain, an offload
/// request, a pool the device cannot reach and a frame shorter than 60 bytes); returns how many
/// went and their bytes. Each pair: the frame's descriptor, then the header's, whose flags make
/// the chain the device's. Nothing is withheld until the publish here: a transmit burst reads
/// no used element after it writes (its reclaim runs first), so a pair the device takes at once
/// is taken back in a later burst, when it is held.
#[inline(always)]
pub(super) fn send(
    ring: &mut PackedRing,
    slots: &mut TxSlots,
    batch: &mut Vec<Packet>,
    pairs: &[u16],
) -> Result<(usize, u64), QueueError> {
    let hdr = ring.extra_iova(0);
    let (v, st) = ring.burst()?;
    // The flags of this pass, and of the next for the pairs below the first one's number
    // (past the ring's end).
    let flags = word1(0, 0, st.avail_flags);
    let wrapped = flags ^ word1(0, 0, DESC_F_WRAP);
    let first = st.next_avail / 2;
    let head = word1(NET_HDR_LEN as u32, 0, DESC_F_NEXT);
    let (k, bytes) = slots.send(batch, pairs, move |&pair, p, len| {
        if len < PAD_TX_LEN as u32 {
            return false;
        }
        let f = if pair < first { wrapped } else { flags };
        let id = u64::from(pair) << 32;
        let slot = 2 * usize::from(pair);
        v.set_addr(slot + 1, p.data_iova());
        v.set_word(slot + 1, u64::from(len) | id | f);
        v.set_addr(slot, hdr);
        v.set_word(slot, head | id | f);
        true
    });
    st.avail_moved_visible(2 * k as u16);
    Ok((k, bytes))
}
