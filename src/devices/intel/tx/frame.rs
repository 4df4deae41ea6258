//! The transmit ring's slow path for frames the fast path does not take: a chain (one data
//! descriptor per segment, EOP on the last) and a frame with offload requests (a context
//! descriptor in slot 1, then TSE, POPTS and the slot in the first data descriptor), with the
//! limits the chips put on them. Kept apart from `tx.rs`, whose fast path a reader of the
//! forwarding loop needs; nothing here runs for a plain frame.

use std::sync::atomic::Ordering::Relaxed;

use super::super::desc::{TxContext, TxData, TxSegment};
use super::super::offload::prepare;
use super::{pad_short, Burst, Tagged, TxRing, MIN_TX_LEN};
use crate::devices::offload::Request;
use crate::platform::dma::{Meta, Packet, Pool, TxOffload};
use crate::platform::mmio::Mmio;

/// The most data descriptors one frame may take: the 82599's limit (DPDK's `IXGBE_TX_MAX_SEG`,
/// 40; the 82576 takes more). A longer chain is linearized if it fits a buffer, else dropped.
pub const MAX_TX_SEGS: usize = 40;

/// The longest frame sent without TSO: 16 KiB, above the largest MTU either chip takes (the
/// 82599's 9710, `ixgbe::MAX_MTU`) and within what its transmit path gathers (the software
/// 82599 gathers as much); a longer chain is refused rather than handed to the device.
pub const MAX_TX_FRAME: usize = 16 * 1024;

impl<M: Mmio> TxRing<M> {
    /// Drops the frame at the front of `batch` for `why` (counted; logged once per queue).
    #[cold]
    fn refuse(&mut self, batch: &mut Vec<Packet>, b: &mut Burst, why: &dyn std::fmt::Display) {
        if !self.refusal_logged {
            self.refusal_logged = true;
            tracing::warn!(reason = %why, "transmit: frame dropped, counted in the queue's `dropped` (logged once per queue)");
        }
        self.drop_front(batch, b);
    }

    /// Makes the frame at the front of `batch` one the descriptors can carry: no empty segment
    /// (a zero-length data descriptor hangs the 82599), at most [`MAX_TX_SEGS`] segments and at
    /// least [`MIN_TX_LEN`] bytes (linearized, then padded, when not). Returns false when it
    /// cannot be (dropped and counted).
    fn shape_chain(&mut self, batch: &mut Vec<Packet>, b: &mut Burst) -> bool {
        let p = &mut batch[0];
        if p.tail_segments().iter().any(Packet::is_empty) {
            let segs = p.take_segments();
            let (keep, empty): (Vec<Packet>, Vec<Packet>) =
                segs.into_iter().partition(|s| !s.is_empty());
            Pool::free_bulk(empty);
            for s in keep {
                p.push_segment(s);
            }
        }
        if p.segment_count() > MAX_TX_SEGS || p.frame_len() < MIN_TX_LEN {
            let (len, segs) = (p.frame_len(), p.segment_count());
            if p.linearize().is_err() {
                let why = format!("a {len}-byte frame in {segs} segments: the chips take at most {MAX_TX_SEGS} descriptors per frame and it does not fit one buffer");
                self.refuse(batch, b, &why);
                return false;
            }
        }
        if batch[0].len() < MIN_TX_LEN && !pad_short(&mut batch[0]) {
            self.drop_front(batch, b);
            return false;
        }
        let p = &batch[0];
        let tso = p.tx_offload().flags & TxOffload::TSO != 0;
        if !tso && p.frame_len() > MAX_TX_FRAME {
            let why = format!("a {}-byte frame without TSO: the chips send frames of at most {MAX_TX_FRAME} bytes (ask for TSO, or send smaller frames)", p.frame_len());
            self.refuse(batch, b, &why);
            return false;
        }
        true
    }

    /// Queues the frame at the front of `batch` that the fast path does not take: a chain (one
    /// data descriptor per segment, EOP on the last) or a frame with offloads (a context
    /// descriptor in slot 1 unless the one there is the same, then the data descriptors with
    /// TSE, POPTS and the slot in the first). Hardware tag insertion goes through the same
    /// context (slot 1) for frames with offloads, through slot 0 for the others.
    #[cold]
    #[inline(never)]
    pub(super) fn put_frame(&mut self, batch: &mut Vec<Packet>, b: &mut Burst) -> Tagged {
        if !self.shape_chain(batch, b) {
            return Tagged::Dropped;
        }
        let p = &batch[0];
        if !std::iter::once(p)
            .chain(p.tail_segments())
            .all(|s| self.slots.reaches(s))
        {
            // A segment of a pool the device cannot reach: copy the frame into bounce buffers
            // first (before any descriptor is written).
            return match self.bounce(batch) {
                Ok(true) => self.put_frame(batch, b),
                Ok(false) => Tagged::NoRoom,
                Err(e) => {
                    self.refuse(batch, b, &e);
                    Tagged::Dropped
                }
            };
        }
        let req = match Request::of(&batch[0]) {
            Ok(r) => r,
            Err(e) => {
                self.refuse(batch, b, &e);
                return Tagged::Dropped;
            }
        };
        let p = &batch[0];
        let segs = p.segment_count();
        // The context descriptor (if one is written) and every segment's.
        if self.left(b) < segs + 1 {
            return Tagged::NoRoom;
        }
        let vle = p.meta.flags & Meta::TX_VLAN != 0;
        let tci = p.meta.vlan_tci;
        let frame_len = p.frame_len() as u32;
        let (cmd, olinfo) = match req {
            Some(r) => {
                let pr = prepare(&mut batch[0], &r, vle);
                let words = pr.ctx.words();
                if self.ctx_offload != Some(words) {
                    self.put_context(words);
                    self.ctx_offload = Some(words);
                }
                (pr.cmd, pr.olinfo)
            }
            None => {
                if vle && self.ctx_tci != Some(tci) {
                    self.put_context(TxContext { vlan_tci: tci }.words());
                    self.ctx_tci = Some(tci);
                }
                (0, frame_len << TxData::PAYLEN_SHIFT)
            }
        };
        let cmd =
            cmd | TxData::DTYP | TxData::DEXT | TxData::IFCS | if vle { TxData::VLE } else { 0 };
        let (at, mask, descs) = (self.next, self.mask, self.desc.descs());
        let taken = self.slots.send_segments(batch, |i, s| {
            let d = &descs[(at + i) & mask];
            let [w0, w1] = TxSegment {
                addr: s.data_iova(),
                len: s.len() as u32,
                cmd: cmd | if i + 1 == segs { TxData::EOP } else { 0 },
                olinfo: if i == 0 { olinfo } else { 0 },
            }
            .words();
            d.store(0, w0, Relaxed);
            d.store(1, w1, Relaxed);
        });
        // The FIFO holds a buffer per descriptor and every segment's pool is reachable
        // (checked above), so the segments were taken.
        assert!(taken, "transmit FIFO and descriptor ring out of step");
        self.next = (at + segs) & self.mask;
        Tagged::Sent(frame_len)
    }

    /// Writes a context descriptor (`words`) at the next slot.
    fn put_context(&mut self, words: [u64; 2]) {
        let d = self.desc.view().at(self.next);
        d.store(0, words[0], Relaxed);
        d.store(1, words[1], Relaxed);
        self.next = (self.next + 1) & self.mask;
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::tx_ring;
    use super::*;
    use crate::platform::mmio::RecordingMmio;

    #[test]
    fn chains_take_a_descriptor_per_segment_and_offloads_a_context_in_slot_1() {
        use crate::devices::offload::tests::{frame, request, Kind};
        let (mut ring, pool) = tx_ring(64, 128);
        let dword = |r: &TxRing<RecordingMmio>, i, w| r.desc.load_dword(i, w, Relaxed);
        // A 5000-byte TSO request in 3 buffers, an empty segment among them (skipped: a
        // zero-length descriptor hangs the 82599), then a plain frame.
        let f = frame(Kind::Tcp4, 0, 20, 0x18, &[9u8; 4946]);
        let mut p = pool.packet_from(&f).unwrap();
        p.push_segment(pool.alloc().unwrap());
        p.set_tx_offload(request(Kind::Tcp4, 0, 20, TxOffload::TSO, 1448));
        let mut batch = vec![p];
        pool.alloc_bulk_len(1, 60, &mut batch);
        assert_eq!(ring.tx_burst(&mut batch).unwrap(), 2);
        assert_eq!(ring.tail_slot(), 5, "context, 3 data, 1 data");
        let dtyp = |i| dword(&ring, i, 2) & (0xf << 20);
        assert_eq!(dtyp(0), TxContext::DTYP);
        // Context: MACLEN 14, IPLEN 20; TUCMD IPV4 | TCP; MSS 1448, L4LEN 20, slot 1.
        assert_eq!(dword(&ring, 0, 0), 20 | 14 << 9);
        assert_eq!(dword(&ring, 0, 2) & (3 << 10), 3 << 10);
        assert_eq!(dword(&ring, 0, 3), 1448 << 16 | 20 << 8 | 1 << 4);
        let lens: Vec<u32> = (1..4).map(|i| dword(&ring, i, 2) & 0xffff).collect();
        assert_eq!(lens, [2048, 2048, 5000 - 4096]);
        for i in 1..4 {
            assert_eq!(dtyp(i), TxData::DTYP);
            assert_ne!(
                dword(&ring, i, 2) & TxSegment::TSE,
                0,
                "TSE on every descriptor"
            );
            assert_eq!(
                dword(&ring, i, 2) & TxData::EOP != 0,
                i == 3,
                "EOP on the last"
            );
        }
        // olinfo on the first only: PAYLEN 5000 - 54, IXSM | TXSM, CC, slot 1.
        let olinfo = TxSegment::olinfo(5000 - 54, TxSegment::IXSM | TxSegment::TXSM, 1);
        assert_eq!(dword(&ring, 1, 3), olinfo);
        assert_eq!((dword(&ring, 2, 3), dword(&ring, 3, 3)), (0, 0));
        assert_eq!(
            dword(&ring, 4, 2),
            TxData::CMD | 60,
            "the plain frame's fast path"
        );
        // The same request again needs no new context.
        let mut p = pool.packet_from(&f).unwrap();
        p.set_tx_offload(request(Kind::Tcp4, 0, 20, TxOffload::TSO, 1448));
        let mut batch = vec![p];
        assert_eq!(ring.tx_burst(&mut batch).unwrap(), 1);
        assert_eq!(ring.tail_slot(), 8);
        // A frame longer than the chips send without TSO, and a bad request: dropped, counted.
        let mut batch = vec![pool.packet_from(&vec![1u8; MAX_TX_FRAME + 1]).unwrap()];
        let mut bad = pool.packet_from(&f).unwrap();
        bad.set_tx_offload(request(Kind::Tcp4, 0, 20, TxOffload::TSO, 0));
        batch.push(bad);
        assert_eq!(ring.tx_burst(&mut batch).unwrap(), 0);
        assert!(batch.is_empty());
        assert_eq!(ring.stats().dropped, 2);
        assert_eq!(ring.tail_slot(), 8, "nothing written for them");
        drop(ring);
        assert_eq!(pool.stats().in_use, 0);
    }
}
