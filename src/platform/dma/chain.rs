//! Frames longer than one buffer: a [`Packet`] chain; and the per-buffer [`TxOffload`]
//! lengths.
//!
//! Why it looks like this: a jumbo frame received with 2 KiB buffers, or a 64 KiB TCP send
//! handed to TSO, spans several pool buffers. The head [`Packet`] keeps the first segment and
//! the frame's metadata; its further segments are ordinary packets, each owning one buffer, kept
//! in a vector beside the head's buffer (its `Ext`, one per buffer in the pool; DPDK's mbuf
//! chain, with the segment list in one place instead of a linked list). The `Ext` also holds
//! the packet's [`TxOffload`] request. The head's pool pointer says "look at the `Ext`" in its
//! low bit, so a packet stays 32 bytes and a plain frame costs nothing: the receive path never
//! sets the bit, and the transmit loop, which compares each packet's pool pointer with its
//! run's anyway, stops at it (a chain or a request takes its slow path). A 40-byte packet with a
//! segment pointer cost the forwarding path 3 instructions per packet, the mark in the length
//! word 1 to 6 (`bench/instructions`).
//!
//! Rules the methods keep:
//! - segments are never chained themselves (appending a chain appends its segments);
//! - [`Packet::data`] and [`Packet::len`] are the head segment, the part a device's header
//!   parsing and the VLAN layer work on; [`Packet::frame_len`] and [`Packet::segments`] are the
//!   whole frame;
//! - dropping the head frees every segment; [`super::Pool::free_bulk`] does too.
//!
//! Soundness: a buffer's `Ext` is reached only through the packet that owns the buffer (`&self`
//! for reading, `&mut self` for writing), so it is as exclusively owned as the buffer's bytes;
//! it lives in host memory no device can write.

use super::pool::{Ext, Packet, Pool, TxOffload};
use crate::error::{Error, Result};

impl Packet {
    /// This buffer's `Ext`.
    fn ext_ptr(&self) -> *mut Ext {
        // SAFETY: a packet keeps its pool's `Shared` alive.
        let shared = unsafe { self.shared_ptr().as_ref() };
        shared.ext[self.off() as usize / shared.buf_size].get()
    }

    fn ext(&self) -> &Ext {
        // SAFETY: the `Ext` of a buffer is reached only through the packet that owns the buffer
        // (module doc), and `&self` borrows that packet: no `&mut` to it exists meanwhile.
        unsafe { &*self.ext_ptr() }
    }

    fn ext_mut(&mut self) -> &mut Ext {
        // SAFETY: as in `ext`, with `&mut self` making the access exclusive.
        unsafe { &mut *self.ext_ptr() }
    }

    /// Whether the packet is a frame of one buffer with no offload request: what every device
    /// sends as it is (one bit test).
    #[inline(always)]
    pub fn is_plain(&self) -> bool {
        !self.has_ext()
    }

    /// Whether the frame spans more than one buffer.
    #[inline(always)]
    pub fn is_chained(&self) -> bool {
        self.has_ext() && !self.ext().segs.is_empty()
    }

    /// A buffer keeps its last owner's `Ext`: its request is stale and its segment vector
    /// empty (every path that frees a buffer takes or forgets its segments first), with room
    /// kept for the next chain.
    fn clean_ext(&mut self) {
        let e = self.ext_mut();
        debug_assert!(e.segs.is_empty(), "a free buffer kept segments");
        e.segs.clear();
        e.tx = TxOffload::default();
    }

    /// Sets or clears the pool pointer's mark as the `Ext` says.
    fn mark_ext(&mut self) {
        let e = self.ext();
        let used = !e.segs.is_empty() || e.tx.flags & TxOffload::ALL != 0;
        self.set_ext(used);
    }

    /// Buffers the frame spans (1 for a frame of one buffer).
    pub fn segment_count(&self) -> usize {
        1 + self.tail_segments().len()
    }

    /// The whole frame's length: every segment's bytes.
    #[inline]
    pub fn frame_len(&self) -> usize {
        self.len() + self.tail_segments().iter().map(Packet::len).sum::<usize>()
    }

    /// The segments after the head, in order (empty for a frame of one buffer).
    pub fn tail_segments(&self) -> &[Packet] {
        if self.has_ext() {
            &self.ext().segs
        } else {
            &[]
        }
    }

    /// The frame as slices, head first.
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> + '_ {
        std::iter::once(self.data()).chain(self.tail_segments().iter().map(Packet::data))
    }

    /// Appends `seg` (and its own segments, if it is chained) behind the frame. Its metadata
    /// is dropped: a frame's metadata is its head's.
    pub fn push_segment(&mut self, mut seg: Packet) {
        let more = seg.take_segments();
        if seg.has_ext() {
            // A segment carries nothing of its own.
            seg.set_tx_offload(TxOffload::default());
        }
        if !self.has_ext() {
            self.clean_ext();
        }
        let segs = &mut self.ext_mut().segs;
        segs.push(seg);
        segs.extend(more);
        self.set_ext(true);
    }

    /// Forgets the segments after the head, keeping the vector's room for the buffer's next
    /// chain: their buffers now belong to whoever took their offsets (a transmit FIFO).
    pub(super) fn forget_segments(&mut self) {
        if !self.has_ext() {
            return;
        }
        for s in self.ext_mut().segs.drain(..) {
            std::mem::forget(s);
        }
        self.mark_ext();
    }

    /// Detaches the segments after the head (the head becomes a frame of one buffer).
    pub fn take_segments(&mut self) -> Vec<Packet> {
        if !self.has_ext() {
            return Vec::new();
        }
        let segs = std::mem::take(&mut self.ext_mut().segs);
        self.mark_ext();
        segs
    }

    /// Asks for transmit offloads (`TxOffload::default()` asks for none). Every driver honours
    /// the request, in hardware or in software (`devices::offload`).
    pub fn set_tx_offload(&mut self, request: TxOffload) {
        if !self.has_ext() {
            self.clean_ext();
        }
        self.ext_mut().tx = request;
        self.mark_ext();
    }

    /// The transmit offload request (none unless [`Packet::set_tx_offload`] made one).
    #[inline]
    pub fn tx_offload(&self) -> TxOffload {
        if !self.has_ext() {
            return TxOffload::default();
        }
        self.ext().tx
    }

    /// The whole frame copied into a vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.frame_len());
        for s in self.segments() {
            v.extend_from_slice(s);
        }
        v
    }

    /// Copies `dst.len()` bytes of the frame from byte `at` on, across segments. Returns
    /// false, copying nothing, when that reaches past the frame.
    pub fn read_at(&self, at: usize, dst: &mut [u8]) -> bool {
        if at
            .checked_add(dst.len())
            .is_none_or(|end| end > self.frame_len())
        {
            return false;
        }
        let (mut skip, mut done) = (at, 0);
        for s in self.segments() {
            if done == dst.len() {
                break;
            }
            if skip >= s.len() {
                skip -= s.len();
                continue;
            }
            let n = (s.len() - skip).min(dst.len() - done);
            dst[done..done + n].copy_from_slice(&s[skip..skip + n]);
            done += n;
            skip = 0;
        }
        true
    }

    /// Moves the whole frame into the head buffer and frees the other segments: the frame of
    /// one buffer that code which reads [`Packet::data`] expects. A frame of one buffer is left
    /// as it is. Fails, changing nothing, when the frame is longer than the head buffer holds
    /// behind its headroom (then copy it with [`Packet::to_vec`], or into a pool of larger
    /// buffers with [`Pool::packet_from`]).
    pub fn linearize(&mut self) -> Result<()> {
        if !self.is_chained() {
            return Ok(());
        }
        let total = self.frame_len();
        if total > self.capacity() {
            return Err(Error::InvalidConfig(format!(
                "a {total}-byte frame in {} segments does not fit one {}-byte buffer; copy it with Packet::to_vec or into a pool of larger buffers (Pool::packet_from)",
                self.segment_count(),
                self.capacity()
            )));
        }
        let mut at = self.len();
        let segs = self.take_segments();
        self.set_len(total);
        for s in &segs {
            self.data_mut()[at..at + s.len()].copy_from_slice(s.data());
            at += s.len();
        }
        Pool::free_bulk(segs);
        Ok(())
    }
}

impl Pool {
    /// `bytes` as a frame of this pool: one buffer when it fits behind the headroom, else a
    /// chain of as many as it needs (each segment filled to its buffer's room). `None` when
    /// the pool has too few free buffers (none is kept then).
    pub fn packet_from(&self, bytes: &[u8]) -> Option<Packet> {
        let room = self.buf_size() - self.headroom();
        let n = bytes.len().div_ceil(room).max(1);
        let mut bufs = Vec::with_capacity(n);
        if self.alloc_bulk(n, &mut bufs) < n {
            Pool::free_bulk(bufs);
            return None;
        }
        let mut parts = bytes.chunks(room);
        let mut bufs = bufs.into_iter();
        let mut head = bufs.next().expect("at least one buffer");
        head.set_data(parts.next().unwrap_or(&[]));
        for (mut seg, part) in bufs.zip(parts) {
            seg.set_data(part);
            head.push_segment(seg);
        }
        Some(head)
    }
}

#[cfg(test)]
mod tests {
    use super::super::pool::tests::pool;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_chain_reads_linearizes_and_frees_every_segment() {
        let pool = pool(16);
        let bytes: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let mut p = pool.packet_from(&bytes).unwrap();
        assert_eq!((p.segment_count(), p.frame_len(), p.len()), (3, 5000, 2048));
        assert_eq!(p.to_vec(), bytes);
        let mut mid = [0u8; 100];
        assert!(p.read_at(2000, &mut mid));
        assert_eq!(&mid[..], &bytes[2000..2100]);
        assert!(!p.read_at(4950, &mut mid), "past the frame");
        assert_eq!(pool.stats().in_use, 3);
        assert!(
            p.linearize().is_err(),
            "5000 bytes do not fit a 2 KiB buffer"
        );
        drop(p);
        assert_eq!(pool.stats().in_use, 0, "the head frees its segments");

        let mut p = pool.packet_from(&bytes[..1000]).unwrap();
        let seg = pool.packet_from(&bytes[1000..1500]).unwrap();
        p.push_segment(seg);
        assert!(p.is_chained());
        p.linearize().unwrap();
        assert!(!p.is_chained());
        assert_eq!(p.data(), &bytes[..1500]);
        assert_eq!(pool.stats().in_use, 1);
        let q = pool.packet_from(&bytes).unwrap();
        Pool::free_bulk([p, q]);
        assert_eq!(pool.stats().in_use, 0, "free_bulk frees segments too");
    }

    proptest! {
        #[test]
        fn segments_read_back_as_the_bytes_they_were_made_of(
            len in 0usize..9000,
            at in 0usize..9000,
            n in 0usize..200,
        ) {
            let pool = pool(8);
            let bytes: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let p = pool.packet_from(&bytes).unwrap();
            prop_assert_eq!(p.to_vec(), bytes.clone());
            let mut dst = vec![0u8; n];
            let fits = at + n <= len;
            prop_assert_eq!(p.read_at(at, &mut dst), fits);
            if fits {
                prop_assert_eq!(&dst[..], &bytes[at..at + n]);
            }
        }
    }
}
