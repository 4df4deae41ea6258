//! Transmit offloads of the software 82599: checksum insertion (POPTS.IXSM/TXSM) and TCP
//! segmentation (DCMD.TSE), from the advanced context descriptor a frame names.
//!
//! Why a module of its own: the transmit walk (`tx.rs`) only gathers buffers and puts frames
//! on the wire; what the device does to a frame's bytes on the way is decided here from two
//! inputs, the context slot (kept from the context descriptor) and the frame's first data
//! descriptor, so that it can be read (and tested) against the datasheet in one place.
//!
//! # Descriptor fields (82599 datasheet, advanced transmit context and data descriptors; the
//! bit positions as Linux `ixgbe_type.h` `IXGBE_ADVTXD_*` and `IXGBE_TXD_*` define them)
//! - Context descriptor (DTYP 0010): dword 0 VLAN_MACIP_LENS = IPLEN bits 8:0, MACLEN bits 15:9,
//!   VLAN bits 31:16 (`IXGBE_ADVTXD_MACLEN_SHIFT` 9, `IXGBE_ADVTXD_VLAN_SHIFT` 16); dword 2
//!   TYPE_TUCMD_MLHL = TUCMD.IPV4 bit 10, TUCMD.L4T bits 12:11 (00 UDP, 01 TCP, 10 SCTP:
//!   `IXGBE_ADVTXD_TUCMD_L4T_*`), DTYP bits 23:20, DEXT bit 29; dword 3 MSS_L4LEN_IDX = IDX bits
//!   6:4, L4LEN bits 15:8, MSS bits 31:16 (`IXGBE_ADVTXD_L4LEN_SHIFT` 8, `IXGBE_ADVTXD_MSS_SHIFT`
//!   16). The model keeps two slots per queue (IDX bit 4), as the part has.
//! - Data descriptor (DTYP 0011): the frame's first descriptor decides: DCMD.TSE (bit 31),
//!   olinfo POPTS.IXSM (bit 8) and TXSM (bit 9), IDX (bits 6:4) and PAYLEN (bits 31:14:
//!   `IXGBE_ADVTXD_PAYLEN_SHIFT` 14). The check-context bit (CC, bit 7) is not needed to use a
//!   slot: Linux sets it only with the Tx switch of SR-IOV (`IXGBE_TX_FLAGS_CC`).
//!
//! # Checksum insertion (no TSE)
//! IXSM: the IPv4 header at MACLEN, IPLEN bytes long, gets its checksum (field at +10 zeroed,
//! then filled). TXSM: the L4 checksum field (TCP +16, UDP +6 from MACLEN + IPLEN, by L4T) holds
//! what the driver put there: the pseudo-header sum, folded but not complemented, with the L4
//! length (Linux `ixgbe_tx_csum` hands CHECKSUM_PARTIAL frames over as the stack made them:
//! `csum_tcpudp_magic(..., len, ...)` complemented back; DPDK `rte_ipv4_phdr_cksum`). The
//! device sums from the L4 start to the end of the frame, over that field as it is, and writes
//! the complement. A UDP result of 0 is written as 0xFFFF (0 means "no checksum", RFC 768;
//! QEMU's `net_tx_pkt_do_sw_csum` does the same with `net_checksum_finish_nozero`). TCP is
//! written as computed. SCTP's CRC-32c is not modelled (logged once; the frame goes as it is).
//!
//! # TSO (TSE)
//! The gathered buffers are one header of MACLEN + IPLEN + L4LEN bytes followed by PAYLEN bytes
//! of payload; the device sends ceil(PAYLEN / MSS) frames, each the header and up to MSS bytes
//! (82599 datasheet, TCP segmentation; the I210 datasheet's 7.2.4.7 and the 82598's 3.5.3.4.7
//! word it the same way): IPv4 total length
//! per segment, identification +1 per segment after the first (16-bit wrap), header checksum
//! recomputed when IXSM is set (Linux `ixgbe_tso` zeroes `tot_len` and `check` and sets IXSM for
//! IPv4); IPv6 payload length per segment (TUCMD.IPV4 clear); TCP sequence number advanced by
//! the payload sent before; the TCP flags ANDed with DTXTCPFLGL bits 11:0 (first segment), bits
//! 27:16 (middle ones) or DTXTCPFLGH bits 11:0 (last; a frame of one segment takes this one),
//! reset values 0xFF6 / 0xFF6 / 0xF7F (FreeBSD commit eea2e089f8da, read from an 82599: FIN and
//! PSH only on the last segment, CWR not on it); the TCP checksum computed per segment: under
//! TSO the driver leaves the pseudo-header sum WITHOUT the length in the field (Linux
//! `ixgbe_tso`: `csum_replace_by_diff(&l4.tcp->check, htonl(paylen))`), and the device adds
//! each segment's L4 length. The checksum is computed under TSE whether or not TXSM is set
//! (Linux sets it with every TSO frame; a segment with the driver's partial sum in it would be
//! malformed). Only TCP is segmented (L4T = 01): the 82599 offers TCP segmentation only (Linux
//! `ixgbe_tso` refuses SKB_GSO_UDP_L4 on it; DPDK's `ixgbe` advertises TCP_TSO, not UDP_TSO).
//!
//! # Malformed requests
//! The datasheets we could read do not say what the part sends for a TSE frame with MSS 0, a
//! frame whose header does not match MACLEN + IPLEN + L4LEN (the IPv4 IHL, the TCP data offset,
//! the IP version, or gathered bytes other than header + PAYLEN), or offsets past the frame's
//! end. The model never sends a malformed frame silently: it drops it, counts it
//! ([`SimCounters::tx_malformed`](super::SimCounters::tx_malformed)) and warns once per reason.

use super::frame::be16;
use crate::platform::checksum::{checksum_add, checksum_finish};

/// TUCMD.IPV4 (context dword 2 bit 10).
const TUCMD_IPV4: u32 = 1 << 10;
/// L4T (context dword 2 bits 12:11).
const L4T_UDP: u8 = 0;
const L4T_TCP: u8 = 1;
const L4T_SCTP: u8 = 2;
/// POPTS.IXSM and TXSM (data olinfo bits 8 and 9).
const IXSM: u32 = 1 << 8;
const TXSM: u32 = 1 << 9;
/// DCMD.TSE (data dword 2 bit 31).
const TSE: u32 = 1 << 31;

/// Bytes of payload a TSO frame may carry: PAYLEN is 18 bits (olinfo 31:14), 256 KiB - 1.
const MAX_PAYLEN: usize = (1 << 18) - 1;
/// The largest header a context can describe: MACLEN 127 + IPLEN 511 + L4LEN 255.
const MAX_HEADER: usize = 127 + 511 + 255;
/// Bytes a TSE frame may gather at most (the bound on its buffers in `tx.rs`).
pub(super) const TSO_MAX: usize = MAX_HEADER + MAX_PAYLEN;

/// One context slot: what a context descriptor said, for the frames that name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct TxContext {
    pub(super) vlan: u16,
    pub(super) maclen: usize,
    pub(super) iplen: usize,
    /// TUCMD.IPV4: the IP header is IPv4 (else IPv6).
    pub(super) ipv4: bool,
    /// TUCMD.L4T.
    pub(super) l4t: u8,
    pub(super) l4len: usize,
    pub(super) mss: usize,
}

impl TxContext {
    /// The slot a context descriptor fills: qword 0 (dword 0 VLAN_MACIP_LENS), dword 2 `cmd`
    /// (TYPE_TUCMD_MLHL) and dword 3 `olinfo` (MSS_L4LEN_IDX).
    #[inline]
    pub(super) fn from_desc(qw0: u64, cmd: u32, olinfo: u32) -> TxContext {
        let d0 = qw0 as u32;
        TxContext {
            vlan: (d0 >> 16) as u16,
            maclen: ((d0 >> 9) & 0x7f) as usize,
            iplen: (d0 & 0x1ff) as usize,
            ipv4: cmd & TUCMD_IPV4 != 0,
            l4t: ((cmd >> 11) & 3) as u8,
            l4len: ((olinfo >> 8) & 0xff) as usize,
            mss: (olinfo >> 16) as usize,
        }
    }
}

/// What a frame's first data descriptor asks of the device beyond VLAN insertion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Offload {
    pub(super) ixsm: bool,
    pub(super) txsm: bool,
    pub(super) tse: bool,
    /// PAYLEN (olinfo bits 31:14): with TSE, the payload bytes after the header.
    pub(super) paylen: usize,
}

impl Offload {
    /// From the first data descriptor's `cmd` (dword 2) and `olinfo` (dword 3).
    #[inline]
    pub(super) fn from_desc(cmd: u32, olinfo: u32) -> Offload {
        Offload {
            ixsm: olinfo & IXSM != 0,
            txsm: olinfo & TXSM != 0,
            tse: cmd & TSE != 0,
            paylen: (olinfo >> 14) as usize,
        }
    }

    /// Whether the device changes the frame's bytes (other than a tag and padding).
    #[inline]
    pub(super) fn any(&self) -> bool {
        self.ixsm || self.txsm || self.tse
    }
}

/// Why an offload request was refused (each is warned about once, `tx.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Malformed {
    MssZero,
    NotTcp,
    HeaderMismatch,
    LengthMismatch,
    SegmentTooLong,
    OutOfFrame,
}

impl Malformed {
    pub(super) fn what(self) -> &'static str {
        match self {
            Malformed::MssZero => "malformed transmit request dropped: TSE with MSS 0",
            Malformed::NotTcp => "malformed transmit request dropped: TSE with L4T other than TCP (the 82599 segments TCP only)",
            Malformed::HeaderMismatch => "malformed transmit request dropped: TSO header does not match MACLEN + IPLEN + L4LEN (IP version, IHL or TCP data offset)",
            Malformed::LengthMismatch => "malformed transmit request dropped: TSO buffers are not header + PAYLEN bytes",
            Malformed::SegmentTooLong => "malformed transmit request dropped: TSO header + MSS longer than the largest frame",
            Malformed::OutOfFrame => "malformed transmit request dropped: checksum offsets (MACLEN, IPLEN, L4T) reach past the frame",
        }
    }
}

/// Inserts the checksums a frame without TSE asks for (module doc), in place. `Ok(true)` when
/// SCTP was asked for (not modelled: the caller logs it once).
pub(super) fn insert_checksums(f: &mut [u8], c: &TxContext, o: Offload) -> Result<bool, Malformed> {
    let l3 = c.maclen;
    let l4 = l3 + c.iplen;
    if o.ixsm {
        if c.iplen < 20 || l4 > f.len() {
            return Err(Malformed::OutOfFrame);
        }
        ipv4_checksum(&mut f[l3..l4]);
    }
    if !o.txsm {
        return Ok(false);
    }
    let at = match c.l4t {
        L4T_TCP => l4 + 16,
        L4T_UDP => l4 + 6,
        L4T_SCTP => return Ok(true),
        _ => return Err(Malformed::OutOfFrame),
    };
    if at + 2 > f.len() {
        return Err(Malformed::OutOfFrame);
    }
    let mut sum = checksum_finish(checksum_add(0, &f[l4..]));
    if sum == 0 && c.l4t == L4T_UDP {
        sum = 0xffff;
    }
    f[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    Ok(false)
}

/// Fills the checksum of the IPv4 header `h` (its field zeroed first).
fn ipv4_checksum(h: &mut [u8]) {
    h[10..12].fill(0);
    let c = checksum_finish(checksum_add(0, h));
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

/// A TSE frame checked and ready to be cut into segments (module doc).
#[derive(Clone, Copy, Debug)]
pub(super) struct Tso {
    l3: usize,
    l4: usize,
    hdr: usize,
    mss: usize,
    paylen: usize,
    ipv4: bool,
    ixsm: bool,
    /// DTXTCPFLGL bits 11:0, 27:16 and DTXTCPFLGH bits 11:0.
    masks: [u16; 3],
}

impl Tso {
    /// Checks the gathered frame `f` against its context and first descriptor; `max_frame`
    /// bounds each segment (header + MSS).
    pub(super) fn plan(
        f: &[u8],
        c: &TxContext,
        o: Offload,
        (flgl, flgh): (u32, u32),
        max_frame: usize,
    ) -> Result<Tso, Malformed> {
        if c.mss == 0 {
            return Err(Malformed::MssZero);
        }
        if c.l4t != L4T_TCP {
            return Err(Malformed::NotTcp);
        }
        let (l3, l4) = (c.maclen, c.maclen + c.iplen);
        let hdr = l4 + c.l4len;
        if c.maclen < 14 || c.l4len < 20 || o.paylen == 0 || f.len() < hdr {
            return Err(Malformed::LengthMismatch);
        }
        if f.len() != hdr + o.paylen {
            return Err(Malformed::LengthMismatch);
        }
        let version = f[l3] >> 4;
        let ip_ok = if c.ipv4 {
            version == 4 && usize::from(f[l3] & 0xf) * 4 == c.iplen
        } else {
            version == 6 && c.iplen >= 40
        };
        let doff = usize::from(f[l4 + 12] >> 4) * 4;
        if !ip_ok || doff != c.l4len {
            return Err(Malformed::HeaderMismatch);
        }
        if hdr + c.mss.min(o.paylen) > max_frame {
            return Err(Malformed::SegmentTooLong);
        }
        Ok(Tso {
            l3,
            l4,
            hdr,
            mss: c.mss,
            paylen: o.paylen,
            ipv4: c.ipv4,
            ixsm: o.ixsm,
            masks: [
                flgl as u16 & 0xfff,
                (flgl >> 16) as u16 & 0xfff,
                flgh as u16 & 0xfff,
            ],
        })
    }

    /// Frames the payload is cut into.
    pub(super) fn segments(&self) -> usize {
        self.paylen.div_ceil(self.mss)
    }

    /// Builds segment `i` of frame `f` into `out` (its previous contents replaced).
    pub(super) fn build(&self, f: &[u8], i: usize, out: &mut Vec<u8>) {
        let n = self.segments();
        let start = i * self.mss;
        let len = self.mss.min(self.paylen - start);
        out.clear();
        out.extend_from_slice(&f[..self.hdr]);
        out.extend_from_slice(&f[self.hdr + start..self.hdr + start + len]);
        let (l3, l4) = (self.l3, self.l4);
        let l4_bytes = self.hdr - l4 + len;
        if self.ipv4 {
            let total = (l4 - l3 + l4_bytes) as u16;
            out[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
            let id = be16(f, l3 + 4).unwrap_or(0).wrapping_add(i as u16);
            out[l3 + 4..l3 + 6].copy_from_slice(&id.to_be_bytes());
            if self.ixsm {
                ipv4_checksum(&mut out[l3..l4]);
            }
        } else {
            // IPv6 payload length: extension headers (IPLEN - 40), the TCP header and data.
            let payload = (l4 - l3 - 40 + l4_bytes) as u16;
            out[l3 + 4..l3 + 6].copy_from_slice(&payload.to_be_bytes());
        }
        let seq = u32::from_be_bytes(f[l4 + 4..l4 + 8].try_into().unwrap());
        let seq = seq.wrapping_add(start as u32);
        out[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        let mask = match i {
            _ if i + 1 == n => self.masks[2],
            0 => self.masks[0],
            _ => self.masks[1],
        };
        out[l4 + 12] &= 0xf0 | (mask >> 8) as u8;
        out[l4 + 13] &= mask as u8;
        // The field holds the pseudo-header sum without the length: add this segment's.
        let c = checksum_finish(checksum_add(l4_bytes as u32, &out[l4..]));
        out[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_fields_decode_at_their_bits() {
        let qw0 = 0xABCD_0000u64 | 14 << 9 | 20;
        let cmd = (0x2 << 20) | (1 << 29) | TUCMD_IPV4 | u32::from(L4T_TCP) << 11;
        let c = TxContext::from_desc(qw0, cmd, 1448 << 16 | 32 << 8 | 1 << 4);
        assert_eq!(
            c,
            TxContext {
                vlan: 0xABCD,
                maclen: 14,
                iplen: 20,
                ipv4: true,
                l4t: L4T_TCP,
                l4len: 32,
                mss: 1448,
            }
        );
        let o = Offload::from_desc(TSE | 54, 20_000 << 14 | IXSM | TXSM);
        assert!(o.tse && o.ixsm && o.txsm && o.any());
        assert_eq!(o.paylen, 20_000);
    }

    #[test]
    fn offsets_past_the_frame_are_refused_not_written() {
        let c = TxContext {
            maclen: 14,
            iplen: 20,
            l4t: L4T_TCP,
            ..TxContext::default()
        };
        let o = Offload {
            txsm: true,
            ..Offload::default()
        };
        let mut f = vec![0u8; 40];
        assert_eq!(insert_checksums(&mut f, &c, o), Err(Malformed::OutOfFrame));
        assert_eq!(f, vec![0u8; 40], "nothing written");
    }
}
