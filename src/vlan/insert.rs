//! Software tag insertion on transmit: the VLAN layer's extension of [`TxQueue`].
//!
//! The core [`TxQueue`] knows nothing of VLANs. [`VlanTx`](super::VlanTx) in software mode asks
//! the queue below it for [`SwVlanTx::tx_burst_sw_vlan`]: by default one pass over the batch
//! ([`insert_all`]) and then `tx_burst`. A driver that looks at every packet's flags anyway
//! overrides it and calls [`insert_front`] where its transmit loop stops for a tagged packet, so
//! that a burst without tagged packets costs nothing extra (the Intel ring does,
//! `devices/intel/tx.rs`). Either way the bytes are [`tx_wire_frame`](super::tx_wire_frame)'s.

use super::packet::PacketVlan;
use super::tag::{Tci, Tpid};
use crate::device::{QueueError, TxQueue};
use crate::platform::dma::{Meta, Packet};

/// What transmit bursts with software tag insertion did ([`SwVlanTx::tx_burst_sw_vlan`] adds
/// to it; passed by reference, so that a burst that inserted nothing returns in registers).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwVlanCounts {
    /// Tags pushed into frames.
    pub inserted: u64,
    /// Packets dropped because their frame could not take the tag (shorter than 12 bytes, or
    /// no 4 bytes to spare in the buffer): never sent untagged onto the wrong VLAN.
    pub malformed: u64,
}

/// A transmit queue that can take packets whose tag is still to be pushed into the frame.
pub trait SwVlanTx: TxQueue {
    /// [`tx_burst`](TxQueue::tx_burst) with software VLAN insertion: every packet marked
    /// [`Meta::TX_VLAN`] gets its tag pushed into the frame (TPID `tpid`) and the mark cleared
    /// before it is queued; a packet that cannot take it is dropped. Dropped packets leave the
    /// batch too. Adds the tags inserted and the packets dropped to `counts`; returns how many
    /// were queued.
    #[inline]
    fn tx_burst_sw_vlan(
        &mut self,
        batch: &mut Vec<Packet>,
        tpid: Tpid,
        counts: &mut SwVlanCounts,
    ) -> Result<usize, QueueError> {
        let (inserted, malformed) = insert_all(batch, tpid);
        counts.inserted += inserted;
        counts.malformed += malformed;
        self.tx_burst(batch)
    }
}

/// Software insertion over a whole batch (the default of
/// [`SwVlanTx::tx_burst_sw_vlan`]): pushes the tag of every packet marked
/// [`Meta::TX_VLAN`] and clears the mark; drops (and counts) the packets that cannot take it.
/// Returns (inserted, malformed).
#[inline]
pub fn insert_all(batch: &mut Vec<Packet>, tpid: Tpid) -> (u64, u64) {
    if !any_tag(batch) {
        return (0, 0);
    }
    insert_tags(batch, tpid)
}

/// [`insert_all`] once a packet asks for a tag (out of line: the usual batch asks for none).
#[inline(never)]
fn insert_tags(batch: &mut Vec<Packet>, tpid: Tpid) -> (u64, u64) {
    let mut inserted = 0;
    let mut failed = 0u64;
    for p in batch.iter_mut() {
        if p.meta.flags & Meta::TX_VLAN != 0 {
            if p.push_vlan(tpid, Tci::from_raw(p.meta.vlan_tci)) {
                p.meta.flags &= !Meta::TX_VLAN;
                inserted += 1;
            } else {
                failed += 1;
            }
        }
    }
    if failed > 0 {
        tracing::debug!(
            failed,
            "VLAN: dropping frames that cannot take their transmit tag"
        );
        batch.retain(|p| p.meta.flags & Meta::TX_VLAN == 0);
    }
    (inserted, failed)
}

/// Whether a packet of `batch` asks for a transmit tag: the flags of four packets ORed
/// together per step, one test per four (the usual batch asks for none).
#[inline(always)]
fn any_tag(batch: &[Packet]) -> bool {
    let fours = batch.chunks_exact(4);
    let rest = fours.remainder();
    for q in fours {
        let f = q[0].meta.flags | q[1].meta.flags | q[2].meta.flags | q[3].meta.flags;
        if f & Meta::TX_VLAN != 0 {
            return true;
        }
    }
    rest.iter().any(|p| p.meta.flags & Meta::TX_VLAN != 0)
}

/// Software insertion for the packets at the front of `batch` (at most `n`) that ask for a
/// transmit tag, up to the first that does not: pushes each tag into its frame and clears the
/// request. Stops at a frame that cannot take its tag (left unchanged) and says so. Returns the
/// tags inserted and whether it stopped at such a frame. The hook a driver's transmit loop
/// calls where it stops for a tagged packet; out of line, so that loop stays small.
#[inline(never)]
pub fn insert_front(batch: &mut [Packet], n: usize, tpid: Tpid) -> (u64, bool) {
    let mut inserted = 0;
    for p in batch.iter_mut().take(n) {
        if p.meta.flags & Meta::TX_VLAN == 0 {
            break;
        }
        if !p.push_vlan(tpid, Tci::from_raw(p.meta.vlan_tci)) {
            return (inserted, true);
        }
        p.meta.flags &= !Meta::TX_VLAN;
        inserted += 1;
    }
    (inserted, false)
}
