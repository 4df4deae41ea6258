//! The advanced descriptor formats of the 82576 and the 82599, as typed views of their words.
//!
//! Both chips use the same 16-byte advanced descriptors (docs/intel-nics.md section 3; 82599
//! datasheet 7.1.6 and 7.2.3, 82576 datasheet 7.1.5 and 7.2.2). A descriptor lives in device
//! memory and is read and written only as two atomic 64-bit words
//! ([`Desc`](crate::platform::dma::Desc)); these types are what a word *means*, built from or
//! into a `u64` by value, so no Rust reference to device-written memory ever exists.
//!
//! Every accessor is a `const fn` of one shift and mask: the views cost nothing (the instruction
//! count of `bench/instructions` checks that). Hand-written rather than generated with the
//! `bitfield` crate: its getters are not `const fn`, go through a generic `BitRange` trait, and
//! take a range syntax that reads no better than the one-line bodies below (regs/README.md says
//! the same for register fields).
//!
//! | type | words | who writes it |
//! |---|---|---|
//! | [`RxRead`] | packet address, header address | driver |
//! | [`RxInfo`], [`RxStatus`] | write-back word 0 (packet type, RSS) and word 1 (status, errors, length, VLAN) | device |
//! | [`TxData`] | buffer address, command/length/offload word | driver |
//! | [`TxContext`] | VLAN and header lengths, context type | driver |
//! | [`TxDone`] | the data descriptor's status dword after write-back | device |

/// Descriptor size in bytes (both directions, both chips).
pub const DESC_SIZE: usize = 16;

/// Receive descriptor, read format (what the driver writes to hand a buffer over): the packet
/// buffer's bus address, and a header buffer address of 0 (one buffer per frame; writing it
/// also clears the previous write-back's DD bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxRead {
    /// Bus address of the packet buffer.
    pub pkt_addr: u64,
}

impl RxRead {
    /// The two words, in order.
    #[inline(always)]
    pub const fn words(self) -> [u64; 2] {
        [self.pkt_addr, 0]
    }
}

/// Receive write-back, word 0: packet type and RSS hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxInfo(pub u64);

impl RxInfo {
    /// pkt_info bit 9 (82599): the packet is UDP.
    const PKT_UDP: u64 = 1 << 9;

    /// Whether the device classified the packet as UDP (82599 packet type).
    #[inline(always)]
    pub const fn is_udp(self) -> bool {
        self.0 & Self::PKT_UDP != 0
    }
}

/// Receive write-back, word 1: extended status (bits 19:0), extended errors (31:20), packet
/// length (47:32) and VLAN tag (63:48). The word the driver polls for DD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxStatus(pub u64);

// `len` is the descriptor's length field, not the size of a container: no `is_empty`.
#[allow(clippy::len_without_is_empty)]
impl RxStatus {
    /// Descriptor done.
    pub const DD: u32 = 1 << 0;
    /// End of packet.
    pub const EOP: u32 = 1 << 1;
    /// VLAN packet (82576: stripped; 82599: a tag matching VET was seen).
    pub const VP: u32 = 1 << 3;
    /// L4 (UDP) checksum computed.
    pub const UDPCS: u32 = 1 << 4;
    /// L4 (TCP/UDP) checksum computed.
    pub const L4CS: u32 = 1 << 5;
    /// IPv4 header checksum computed.
    pub const IPCS: u32 = 1 << 6;

    /// Status and error bits (the low dword).
    #[inline(always)]
    pub const fn bits(self) -> u32 {
        self.0 as u32
    }

    /// The low status byte (DD, EOP, VP, UDPCS, L4CS, IPCS): what the receive flag table is
    /// indexed by.
    #[inline(always)]
    pub const fn status_byte(self) -> u8 {
        self.0 as u8
    }

    /// The descriptor was written back.
    #[inline(always)]
    pub const fn done(self) -> bool {
        self.bits() & Self::DD != 0
    }

    /// The frame ends in this descriptor.
    #[inline(always)]
    pub const fn eop(self) -> bool {
        self.bits() & Self::EOP != 0
    }

    /// Bytes written to this descriptor's buffer.
    #[inline(always)]
    pub const fn len(self) -> u16 {
        (self.0 >> 32) as u16
    }

    /// The VLAN tag field (the stripped tag's TCI when the device stripped it).
    #[inline(always)]
    pub const fn vlan_tci(self) -> u16 {
        (self.0 >> 48) as u16
    }

    /// Whether the bits of `mask` read exactly `DD | EOP`: done, whole frame, and none of the
    /// other bits of `mask` (error bits, long-length bits) set. The receive fast path's test.
    #[inline(always)]
    pub const fn is_plain(self, mask: u64) -> bool {
        self.0 & mask == (Self::DD | Self::EOP) as u64
    }
}

/// Transmit data descriptor (advanced, DTYP 0011): one buffer of a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxData {
    /// Bus address of the buffer.
    pub addr: u64,
    /// Buffer (and, with one buffer per frame, payload) length.
    pub len: u32,
    /// Command bits of cmd_type_len: [`TxData::CMD`] plus [`TxData::VLE`] / [`TxData::RS`].
    pub cmd: u32,
}

impl TxData {
    /// cmd_type_len: end of packet.
    pub const EOP: u32 = 1 << 24;
    /// cmd_type_len: insert FCS.
    pub const IFCS: u32 = 1 << 25;
    /// cmd_type_len: report status (write DD back).
    pub const RS: u32 = 1 << 27;
    /// cmd_type_len: advanced descriptor.
    pub const DEXT: u32 = 1 << 29;
    /// cmd_type_len: insert the VLAN tag of the context in use.
    pub const VLE: u32 = 1 << 30;
    /// cmd_type_len: descriptor type "data" (0011 in bits 23:20).
    pub const DTYP: u32 = 0x3 << 20;
    /// The command bits of every data descriptor of a one-buffer frame.
    pub const CMD: u32 = Self::DTYP | Self::DEXT | Self::IFCS | Self::EOP;
    /// olinfo_status: PAYLEN shift.
    pub const PAYLEN_SHIFT: u32 = 14;

    /// The two words: address; cmd_type_len (command | length) and olinfo_status (PAYLEN).
    #[inline(always)]
    pub const fn words(self) -> [u64; 2] {
        [
            self.addr,
            (self.cmd | self.len) as u64 | (self.len as u64) << (32 + Self::PAYLEN_SHIFT),
        ]
    }
}

/// Transmit context descriptor (advanced, DTYP 0010) carrying a VLAN tag for the data
/// descriptors with VLE that follow, and no checksum offload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxContext {
    /// The TCI to insert.
    pub vlan_tci: u16,
}

impl TxContext {
    /// cmd_type_len: descriptor type "context" (0010 in bits 23:20).
    pub const DTYP: u32 = 0x2 << 20;
    /// type_tucmd_mlhl: L4 type "reserved" (no checksum offload).
    const L4T_RSV: u32 = 0x3 << 11;
    /// vlan_macip_lens: MACLEN shift (a 14-byte MAC header).
    const MACLEN_SHIFT: u32 = 9;

    /// The two words: vlan_macip_lens (TCI in bits 31:16, MACLEN 14); type_tucmd_mlhl.
    #[inline(always)]
    pub const fn words(self) -> [u64; 2] {
        [
            (self.vlan_tci as u64) << 16 | 14 << Self::MACLEN_SHIFT,
            (Self::DTYP | TxData::DEXT | Self::L4T_RSV) as u64,
        ]
    }
}

/// Transmit context descriptor (advanced, DTYP 0010) for checksum offload and TSO, in context
/// slot `idx`, with the VLAN tag of the data descriptors that name it. Fields as the 82599
/// datasheet (7.2.3.2.3) and the 82576's (7.2.2.3.x) lay them out, which Linux's `ixgbe_tso`
/// / `igb_tso` and QEMU's igb (`igb_regs.h`, E1000_ADVTXD_*) agree with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxOffloadContext {
    /// The TCI for data descriptors with VLE.
    pub vlan_tci: u16,
    /// Bytes of the MAC header (MACLEN, 7 bits).
    pub maclen: u8,
    /// Bytes of the IP header (IPLEN, 9 bits).
    pub iplen: u16,
    /// TUCMD.IPV4: the L3 header is IPv4.
    pub ipv4: bool,
    /// L4T: 1 TCP, 0 UDP; `None` for no L4 checksum (L4T reserved).
    pub tcp: Option<bool>,
    /// Bytes of the L4 header (L4LEN, TSO only).
    pub l4len: u8,
    /// TSO's MSS (0 without TSO).
    pub mss: u16,
    /// Context slot (IDX, 0 or 1).
    pub idx: u8,
}

impl TxOffloadContext {
    /// type_tucmd_mlhl: TUCMD.IPV4.
    pub const IPV4: u32 = 1 << 10;
    /// type_tucmd_mlhl: L4T = TCP.
    pub const L4T_TCP: u32 = 1 << 11;
    /// type_tucmd_mlhl: L4T reserved (no L4 checksum).
    pub const L4T_RSV: u32 = 0x3 << 11;

    /// The two words: vlan_macip_lens (and a zero seqnum_seed); type_tucmd_mlhl and
    /// mss_l4len_idx (IDX bits 6:4, L4LEN 15:8, MSS 31:16).
    pub const fn words(self) -> [u64; 2] {
        let lens = (self.iplen as u64 & 0x1ff)
            | (self.maclen as u64 & 0x7f) << 9
            | (self.vlan_tci as u64) << 16;
        let l4t = match self.tcp {
            Some(true) => Self::L4T_TCP,
            Some(false) => 0,
            None => Self::L4T_RSV,
        };
        let ipv4 = if self.ipv4 { Self::IPV4 } else { 0 };
        let tucmd = TxContext::DTYP | TxData::DEXT | l4t | ipv4;
        let mss = (self.idx as u64 & 0x7) << 4 | (self.l4len as u64) << 8 | (self.mss as u64) << 16;
        [lens, tucmd as u64 | mss << 32]
    }
}

/// One data descriptor of a frame that may span several (a chain, or a frame with offloads):
/// the buffer, its command bits (EOP on the last only), and the olinfo_status word, which only
/// the frame's first descriptor carries (PAYLEN, POPTS, CC, IDX; Linux's `ixgbe_tx_map` writes
/// 0 in the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxSegment {
    /// Bus address of the buffer.
    pub addr: u64,
    /// Bytes in this buffer.
    pub len: u32,
    /// cmd_type_len's command bits.
    pub cmd: u32,
    /// olinfo_status.
    pub olinfo: u32,
}

impl TxSegment {
    /// olinfo_status: insert the IPv4 header checksum (POPTS.IXSM).
    pub const IXSM: u32 = 1 << 8;
    /// olinfo_status: insert the L4 checksum (POPTS.TXSM).
    pub const TXSM: u32 = 1 << 9;
    /// olinfo_status: check the context named by IDX (CC).
    pub const CC: u32 = 1 << 7;
    /// cmd_type_len: TCP segmentation (DCMD.TSE).
    pub const TSE: u32 = 1 << 31;

    /// olinfo_status of a frame's first descriptor: PAYLEN, POPTS and the context slot.
    pub const fn olinfo(paylen: u32, popts: u32, idx: u8) -> u32 {
        paylen << TxData::PAYLEN_SHIFT | popts | Self::CC | (idx as u32 & 0x7) << 4
    }

    /// The two words: address; cmd_type_len (command | length) and olinfo_status.
    pub const fn words(self) -> [u64; 2] {
        [
            self.addr,
            (self.cmd | (self.len & 0xffff)) as u64 | (self.olinfo as u64) << 32,
        ]
    }
}

/// A transmit descriptor's status dword (dword 3) after the device wrote it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxDone(pub u32);

impl TxDone {
    /// Descriptor done.
    pub const DD: u32 = 1 << 0;

    /// The device finished the descriptor.
    #[inline(always)]
    pub const fn done(self) -> bool {
        self.0 & Self::DD != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_where_the_datasheet_puts_them() {
        let wb = RxStatus(0x0064_003c_0000_0073);
        assert!(wb.done() && wb.eop());
        assert_eq!(
            (wb.len(), wb.vlan_tci(), wb.status_byte()),
            (60, 0x64, 0x73)
        );
        assert!(wb.is_plain(0xff00_0000_0000_0003 | 0xe000_0000));
        assert!(!RxStatus(0x0000_003c_2000_0003).is_plain(0xe000_0003));
        assert!(RxInfo(0x210).is_udp() && !RxInfo(0x110).is_udp());
        let d = TxData {
            addr: 0x1000,
            len: 60,
            cmd: TxData::CMD,
        };
        assert_eq!(d.words(), [0x1000, 0x2330_003c | 60 << 46]);
        assert_eq!(
            TxContext { vlan_tci: 200 }.words(),
            [200 << 16 | 14 << 9, 0x2020_1800]
        );
        assert!(TxDone(1).done() && !TxDone(0).done());
    }
}
