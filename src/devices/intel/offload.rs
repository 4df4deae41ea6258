//! Transmit offloads on the 82576 and the 82599: a checked request ([`Request`]) turned into the
//! frame edits the chips want, a context descriptor and the first data descriptor's olinfo.
//!
//! The chips' rule for the L4 checksum field (82599 datasheet 7.2.4.7 and 7.2.5; the same on
//! the 82576; Linux's `ixgbe_tso`/`igb_tso` and `ixgbe_tx_csum`/`igb_tx_csum` follow it):
//! - checksum only (POPTS.TXSM): the device sums the L4 header and payload, the field
//!   included, and writes the complement; so the driver leaves the pseudo-header sum in the
//!   field, L4 length included (what Linux's stack leaves for CHECKSUM_PARTIAL);
//! - TSO (DCMD.TSE): the device adds each segment's own L4 length, so the field holds the
//!   pseudo-header sum without a length, and the IPv4 total length (or IPv6 payload length) is
//!   0 (Linux: `csum_replace_by_diff(..., htonl(paylen))`, `tot_len = 0`);
//! - the IPv4 header checksum (POPTS.IXSM) is written over a zeroed field.
//!
//! QEMU's igb ignores these fields and computes every checksum from scratch
//! (`net_tx_pkt_do_sw_csum`), so the test bed cannot check the rule; the software 82599 does
//! (`devices::sim`), and only a card can confirm it.

use super::desc::{TxOffloadContext, TxSegment};
use crate::devices::offload::soft::pseudo_header;
use crate::devices::offload::{Request, L4};
use crate::platform::checksum::checksum_fold;
use crate::platform::dma::Packet;

/// The context slot offload contexts use; slot 0 holds the VLAN-only context of hardware tag
/// insertion, so tagged frames without offloads do not evict it.
pub const OFFLOAD_SLOT: u8 = 1;

/// What a frame with offloads needs from the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The context descriptor.
    pub ctx: TxOffloadContext,
    /// Command bits for every data descriptor of the frame (TSE).
    pub cmd: u32,
    /// olinfo_status of the frame's first data descriptor.
    pub olinfo: u32,
}

/// Prepares `p` (whose request is `r`) for the chips: edits its headers as the rule in the
/// module doc says and returns the context and descriptor bits. The VLAN tag goes in the
/// context when the packet asks for hardware insertion (`vle`).
pub fn prepare(p: &mut Packet, r: &Request, vle: bool) -> Prepared {
    let frame_len = p.frame_len();
    let (ip, l4_at) = (r.l2, r.l2 + r.l3);
    let d = p.data_mut();
    let mut popts = 0;
    if r.ip_csum {
        d[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
        popts |= TxSegment::IXSM;
    }
    let mut cmd = 0;
    let mut paylen = frame_len as u32;
    if let Some(proto) = r.l4_csum {
        popts |= TxSegment::TXSM;
        let l4_len = if r.tso.is_some() {
            0
        } else {
            frame_len - l4_at
        };
        if r.tso.is_some() {
            cmd = TxSegment::TSE;
            paylen = (frame_len - r.header_len()) as u32;
            let len_field = if r.ipv4 { ip + 2 } else { ip + 4 };
            d[len_field..len_field + 2].copy_from_slice(&[0, 0]);
        }
        let sum = checksum_fold(pseudo_header(d, ip, r.ipv4, proto.protocol(), l4_len));
        let field = l4_at + proto.csum_offset();
        d[field..field + 2].copy_from_slice(&sum.to_be_bytes());
    }
    let ctx = TxOffloadContext {
        vlan_tci: if vle { p.meta.vlan_tci } else { 0 },
        maclen: r.l2 as u8,
        iplen: r.l3 as u16,
        ipv4: r.ipv4,
        tcp: r.l4_csum.map(|l| l == L4::Tcp),
        l4len: if r.tso.is_some() { r.l4 as u8 } else { 0 },
        mss: r.tso.unwrap_or(0),
        idx: OFFLOAD_SLOT,
    };
    Prepared {
        ctx,
        cmd,
        olinfo: TxSegment::olinfo(paylen, popts, OFFLOAD_SLOT),
    }
}

/// Whether `p` asks for offloads (the ring's slow path).
pub fn asks_offload(p: &Packet) -> bool {
    p.tx_offload().flags & crate::platform::dma::TxOffload::ALL != 0
}
