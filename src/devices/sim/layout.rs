//! Where the software 82599's registers are, what each one is to the model, and their reset
//! values.
//!
//! Every access is classified by offset into a [`Kind`] with a `match` over address blocks (no
//! table walk on the doorbell path). The register map in `regs/ixgbe.toml` stays the source of
//! truth for names and offsets: the model uses its generated constants, and the unit test at the
//! bottom checks that every register in the map is classified as something other than unknown.
//!
//! Alias addresses answer like the datasheet says: SRRCTL and DCA_RXCTRL of queues 0..15 at
//! 0x2100/0x2200 + 4n as well as in the queue block (0x1014/0x100C + 0x40n), RAL/RAH of entries
//! 0..15 at 0x5400 + 8n as well as 0xA200 + 8n. Each alias pair has one storage word.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::platform::regs::ixgbe as r;

/// Per-queue receive registers (the 0x40-byte queue block at 0x1000 / 0xD000).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RxReg {
    Bal,
    Bah,
    Len,
    Dca,
    Head,
    Srrctl,
    Tail,
    Dctl,
}

/// Per-queue transmit registers (the 0x40-byte queue block at 0x6000).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TxReg {
    Bal,
    Bah,
    Len,
    Dca,
    Head,
    Tail,
    Dctl,
    WbLo,
    WbHi,
}

/// What a register is to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Ctrl,
    Status,
    CtrlExt,
    Eec,
    Eerd,
    Eicr,
    Eics,
    Eims,
    Eimc,
    Rx(RxReg, u8),
    Tx(TxReg, u8),
    /// RQSMR / TQSM: queue-to-statistics-counter maps (4 queues per register).
    StatMap,
    /// A 32-bit read-to-clear counter kept in its own storage word.
    Count,
    /// Low / high half of 64-bit counter number `n` (see [`WIDE`]).
    Lo(u8),
    Hi(u8),
    Rdrxctl,
    Rxctrl,
    /// SECRXCTRL (stored; RX_DIS makes SECRXSTAT report ready) and SECRXSTAT (read-only).
    Secrxctrl,
    Secrxstat,
    /// SWSM: a read that finds SMBI clear sets it (the EEPROM semaphore).
    Swsm,
    /// SW_FW_SYNC: stored; AUTOC may be written only while its SW_MAC_CSR_SM bit is held.
    SwFwSync,
    Hlreg0,
    Maxfrs,
    Autoc,
    Links,
    Dmatxctl,
    Rttdcs,
    Rxcsum,
    Exvet,
    Fctrl,
    Vlnctrl,
    Mrqc,
    Reta,
    Rah,
    /// Tables the receive path reads whole (MTA, VFTA, RSSRK, RAL).
    Table,
    /// Interrupt routing and moderation the model acts on (EIAC, EITR 0-23, IVAR, EIAM_EX):
    /// storage
    /// read by `irq.rs`. IVAR's transmit entries and EITR's low-latency bits are stored without
    /// effect and, unlike other unmodelled bits, not logged (drivers write them routinely).
    Irq,
    /// GPIE: MSI-X mode and auto-mask (EIAME) are modelled (PBA support is accepted: the model
    /// keeps no pending-bit array to read), the rest is reported.
    Gpie,
    /// Known and stored; no observable function in a memory model (thresholds, packet buffer
    /// sizes, PCIe and DCA hints).
    Harmless,
    /// Known and stored, but the function is not modelled (interrupt routing and moderation,
    /// VMDq pools): nonzero writes are logged once.
    Storage,
    Unknown,
}

impl Kind {
    /// Registers the driver can only read (status, counters, the security-block status):
    /// writes to them are ignored and reported. [`unmodelled_bits`] lists the same kinds in
    /// its exhaustive match (acting on none of their bits).
    pub(super) fn is_read_only(self) -> bool {
        matches!(
            self,
            Kind::Status
                | Kind::Eec
                | Kind::Links
                | Kind::Count
                | Kind::Lo(_)
                | Kind::Hi(_)
                | Kind::Secrxstat
        )
    }
}

/// RQSMR(n) (receive queue statistic mapping) at 0x2300 + 4n, TQSM(n) at 0x8600 + 4n; not in
/// the register map, modelled because they decide which QPRC/QPTC a queue counts into.
pub(super) const RQSMR: usize = 0x2300;
pub(super) const TQSM: usize = 0x8600;

/// 64-bit counters read as L then H: GORC, GOTC, TOR, QBRC(0..16), QBTC(0..16).
pub(super) const WIDE: usize = 3 + 16 + 16;
pub(super) const W_GORC: usize = 0;
pub(super) const W_GOTC: usize = 1;
pub(super) const W_TOR: usize = 2;
pub(super) const W_QBRC: usize = 3;
pub(super) const W_QBTC: usize = 19;

/// Byte offset of receive queue `q`'s register block.
pub(super) const fn rxq(q: usize) -> usize {
    if q < 64 {
        0x1000 + 0x40 * q
    } else {
        0xD000 + 0x40 * (q - 64)
    }
}

/// Byte offset of transmit queue `q`'s register block.
pub(super) const fn txq(q: usize) -> usize {
    0x6000 + 0x40 * q
}

/// The storage word of `off` (aliases share one).
pub(super) fn canonical(off: usize) -> usize {
    match off {
        0x2100..=0x213F => rxq((off - 0x2100) / 4) + 0x14,
        0x2200..=0x223F => rxq((off - 0x2200) / 4) + 0x0C,
        0xA200..=0xA27F => 0x5400 + (off - 0xA200),
        _ => off,
    }
}

fn rx_block(rel: usize, first: usize, stats: bool) -> Kind {
    let q = first + rel / 0x40;
    match rel % 0x40 {
        0x00 => Kind::Rx(RxReg::Bal, q as u8),
        0x04 => Kind::Rx(RxReg::Bah, q as u8),
        0x08 => Kind::Rx(RxReg::Len, q as u8),
        0x0C => Kind::Rx(RxReg::Dca, q as u8),
        0x10 => Kind::Rx(RxReg::Head, q as u8),
        0x14 => Kind::Rx(RxReg::Srrctl, q as u8),
        0x18 => Kind::Rx(RxReg::Tail, q as u8),
        0x28 => Kind::Rx(RxReg::Dctl, q as u8),
        // QPRC(n) at 0x1030 + 0x40n, QPRDC(n) at 0x1430 + 0x40n (queues 16..31 of the block).
        0x30 if stats && q < 32 => Kind::Count,
        0x34 if stats && q < 16 => Kind::Lo((W_QBRC + q) as u8),
        0x38 if stats && q < 16 => Kind::Hi((W_QBRC + q) as u8),
        _ => Kind::Unknown,
    }
}

fn tx_block(rel: usize) -> Kind {
    let q = (rel / 0x40) as u8;
    match rel % 0x40 {
        0x00 => Kind::Tx(TxReg::Bal, q),
        0x04 => Kind::Tx(TxReg::Bah, q),
        0x08 => Kind::Tx(TxReg::Len, q),
        0x0C => Kind::Tx(TxReg::Dca, q),
        0x10 => Kind::Tx(TxReg::Head, q),
        0x18 => Kind::Tx(TxReg::Tail, q),
        0x28 => Kind::Tx(TxReg::Dctl, q),
        0x30 if q < 16 => Kind::Count,
        0x38 => Kind::Tx(TxReg::WbLo, q),
        0x3C => Kind::Tx(TxReg::WbHi, q),
        _ => Kind::Unknown,
    }
}

/// Classifies a (4-byte aligned) offset.
pub(super) fn classify(off: usize) -> Kind {
    use Kind::*;
    match off {
        0x1000..=0x1FFF => rx_block(off - 0x1000, 0, true),
        0xD000..=0xDFFF => rx_block(off - 0xD000, 64, false),
        0x6000..=0x7FFF => tx_block(off - 0x6000),
        0x0000 => Ctrl,
        0x0008 => Status,
        0x0018 => CtrlExt,
        0x10010 => Eec,
        0x10014 => Eerd,
        0x0800 => Eicr,
        0x0808 => Eics,
        0x0880 => Eims,
        0x0888 => Eimc,
        0x0898 => Gpie,
        0x0810 | 0x0820..=0x087F | 0x0900..=0x09FF | 0x0AD0..=0x0AD7 => Irq,
        0x2100..=0x213F => Rx(RxReg::Srrctl, ((off - 0x2100) / 4) as u8),
        0x2200..=0x223F => Rx(RxReg::Dca, ((off - 0x2200) / 4) as u8),
        0x2300..=0x237F | 0x8600..=0x867F => StatMap,
        0x2F00 => Rdrxctl,
        0x3000 => Rxctrl,
        0x4240 => Hlreg0,
        0x4268 => Maxfrs,
        0x42A0 => Autoc,
        0x42A4 => Links,
        0x4A80 => Dmatxctl,
        0x4900 => Rttdcs,
        0x5000 => Rxcsum,
        0x5078 => Exvet,
        0x5080 => Fctrl,
        0x5088 => Vlnctrl,
        0x5818 => Mrqc,
        0x5C00..=0x5C7F => Reta,
        0x5200..=0x53FF | 0x5C80..=0x5CA7 | 0xA000..=0xA1FF => Table,
        0x5400..=0x547F | 0xA200..=0xA5FF if off % 8 == 0 => Table,
        0x5400..=0x547F | 0xA200..=0xA5FF => Rah,
        0x4088 => Lo(W_GORC as u8),
        0x408C => Hi(W_GORC as u8),
        0x4090 => Lo(W_GOTC as u8),
        0x4094 => Hi(W_GOTC as u8),
        0x40C0 => Lo(W_TOR as u8),
        0x40C4 => Hi(W_TOR as u8),
        0x8700..=0x877F => {
            let n = W_QBTC + (off - 0x8700) / 8;
            if off % 8 == 0 {
                Lo(n as u8)
            } else {
                Hi(n as u8)
            }
        }
        0x3FA0..=0x3FDF | 0x4000..=0x40F7 | 0x2F50 | 0x87A0 => match in_map(off) {
            Some((i, _))
                if r::MAP.registers[i].access == crate::platform::regs::Access::ReadClear =>
            {
                Count
            }
            _ => Unknown,
        },
        0x8D00 => Secrxctrl,
        0x8D04 => Secrxstat,
        0x10140 => Swsm,
        0x10160 => SwFwSync,
        0x3C00..=0x3C1F | 0xCC00..=0xCC1F | 0x4950..=0x496F | 0x8100 => Harmless,
        _ => match in_map(off) {
            Some(_) => Storage,
            None => Unknown,
        },
    }
}

/// The register map entry (index in `MAP.registers`, instance) answering at `off`, from an
/// index built once (the map's own lookup walks every register).
pub(super) fn in_map(off: usize) -> Option<(usize, u32)> {
    static INDEX: OnceLock<HashMap<u32, (usize, u32)>> = OnceLock::new();
    let index = INDEX.get_or_init(|| {
        let mut m = HashMap::new();
        for (i, info) in r::MAP.registers.iter().enumerate() {
            for (o, n) in info.addresses() {
                m.entry(o).or_insert((i, n));
            }
        }
        m
    });
    index.get(&(off as u32)).copied()
}

/// Bits of a write to a register of kind `k` that the model does not act on and that have a
/// function on the real part (logged once per register).
pub(super) fn unmodelled_bits(k: Kind, v: u32) -> u32 {
    let acted = match k {
        Kind::Ctrl => r::ctrl::RST.bit() | r::ctrl::LNK_RST.bit() | r::ctrl::GIO_DIS.bit(),
        // NS_DIS, RO_DIS, PFRSTD, DRV_LOAD: PCIe attributes and driver handshakes.
        Kind::CtrlExt => r::ctrl_ext::EXTENDED_VLAN.bit() | 0x1003_4000,
        Kind::Eerd => r::eerd::START.bit() | r::eerd::ADDR.mask(),
        Kind::Eicr | Kind::Eics | Kind::Eims | Kind::Eimc | Kind::Table => u32::MAX,
        Kind::Irq => u32::MAX,
        Kind::Gpie => r::gpie::MSIX_MODE.bit() | r::gpie::PBA_SUPPORT.bit() | r::gpie::EIAME.bit(),
        Kind::Rx(RxReg::Bal, _) | Kind::Tx(TxReg::Bal, _) => 0xFFFF_FF80,
        Kind::Rx(RxReg::Len, _) | Kind::Tx(TxReg::Len, _) => 0x000F_FF80,
        Kind::Rx(RxReg::Head | RxReg::Tail, _) | Kind::Tx(TxReg::Head | TxReg::Tail, _) => 0xFFFF,
        Kind::Rx(RxReg::Bah | RxReg::Dca, _) | Kind::Tx(TxReg::Bah | TxReg::Dca, _) => u32::MAX,
        Kind::Tx(TxReg::WbLo | TxReg::WbHi, _) => u32::MAX,
        // Thresholds (b22:0) have no function without a prefetch model.
        Kind::Rx(RxReg::Dctl, _) => r::rxdctl::ENABLE.bit() | r::rxdctl::VME.bit() | 0x007F_7F7F,
        Kind::Tx(TxReg::Dctl, _) => r::txdctl::ENABLE.bit() | 0x007F_7F7F,
        Kind::Rx(RxReg::Srrctl, _) => {
            // BSIZEPKT, BSIZEHDR (no header split: unused), RDMTS (no interrupts), DROP_EN, and
            // DESCTYPE only when it says "advanced one buffer" (001).
            let desc = if r::srrctl::DESCTYPE.get(v) == 1 {
                r::srrctl::DESCTYPE.mask()
            } else {
                0
            };
            r::srrctl::BSIZEPKT.mask()
                | r::srrctl::BSIZEHDR.mask()
                | r::srrctl::RDMTS.mask()
                | r::srrctl::DROP_EN.bit()
                | desc
        }
        Kind::StatMap => 0x0F0F_0F0F,
        Kind::Rdrxctl => {
            r::rdrxctl::CRCSTRIP.bit()
                | r::rdrxctl::DMAIDONE.bit()
                | r::rdrxctl::RSCFRSTSIZE.mask()
                | r::rdrxctl::RSCACKC.bit()
                | r::rdrxctl::FCOE_WRFIX.bit()
        }
        Kind::Rxctrl => r::rxctrl::RXEN.bit() | r::rxctrl::DMBYPS.bit(),
        Kind::Secrxctrl => r::secrxctrl::RX_DIS.bit(),
        Kind::Swsm => r::swsm::SMBI.bit() | r::swsm::SWESMBI.bit(),
        Kind::SwFwSync => u32::MAX,
        Kind::Hlreg0 => {
            use r::hlreg0::*;
            TXCRCEN.bit()
                | RXCRCSTRP.bit()
                | JUMBOEN.bit()
                | TXPADEN.bit()
                | LPBK.bit()
                | MDCSPD.bit()
                | CONTMDC.bit()
                | PREPEND.mask()
                | RXLNGTHERREN.bit()
                | 0x2000
        }
        Kind::Maxfrs => r::maxfrs::MFS.mask(),
        // The PHY is not modelled: every AUTOC bit is accepted; AN_RESTART and FLU bring the link up.
        Kind::Autoc => u32::MAX,
        Kind::Dmatxctl => {
            r::dmatxctl::TE.bit()
                | r::dmatxctl::NS.bit()
                | r::dmatxctl::GDV.bit()
                | r::dmatxctl::VT.mask()
        }
        Kind::Rttdcs => r::rttdcs::ARBDIS.bit(),
        Kind::Rxcsum => r::rxcsum::PCSD.bit() | r::rxcsum::IPPCSE.bit(),
        Kind::Exvet => r::exvet::VET_EXT.mask(),
        Kind::Fctrl => {
            use r::fctrl::*;
            MPE.bit()
                | UPE.bit()
                | BAM.bit()
                | SBP.bit()
                | PMCF.bit()
                | DPF.bit()
                | RPFCE.bit()
                | RFCE.bit()
        }
        Kind::Vlnctrl => r::vlnctrl::VET.mask() | r::vlnctrl::VFE.bit(),
        Kind::Mrqc => {
            let mode = if r::mrqc::MRQE.get(v) <= 1 {
                r::mrqc::MRQE.mask()
            } else {
                0
            };
            mode | 0x00FF_0000
        }
        Kind::Reta => 0x0F0F_0F0F,
        Kind::Rah => r::rah::RAH.mask() | r::rah::AV.bit(),
        Kind::Harmless => u32::MAX,
        Kind::Status
        | Kind::Eec
        | Kind::Links
        | Kind::Count
        | Kind::Lo(_)
        | Kind::Hi(_)
        | Kind::Secrxstat => 0,
        Kind::Storage | Kind::Unknown => 0,
    };
    v & !acted
}

/// Registers a software reset leaves alone: MTA, VFTA, VLVF, VLVFB (the datasheet does not
/// promise to clear them; drivers clear them at init).
pub(super) fn kept_by_reset(off: usize) -> bool {
    matches!(off, 0x5200..=0x53FF | 0xA000..=0xA1FF | 0xF100..=0xF2FF)
}

/// Nonzero reset values (every other register resets to 0). RAL0/RAH0 come from the MAC.
pub(super) fn nonzero_defaults() -> impl Iterator<Item = (usize, u32)> {
    let fixed = [
        (r::EEC.offset(), r::eec::PRES.bit() | r::eec::ARD.bit()),
        (
            r::RDRXCTL.offset(),
            r::rdrxctl::CRCSTRIP.bit() | r::rdrxctl::DMAIDONE.bit(),
        ),
        (
            r::HLREG0.offset(),
            r::hlreg0::TXCRCEN.bit() | r::hlreg0::RXCRCSTRP.bit() | r::hlreg0::TXPADEN.bit(),
        ),
        (r::MAXFRS.offset(), r::maxfrs::MFS.val(1518)),
        (r::AUTOC.offset(), r::autoc::LMS.val(4)),
        (r::DMATXCTL.offset(), r::dmatxctl::VT.val(0x8100)),
        (r::VLNCTRL.offset(), r::vlnctrl::VET.val(0x8100)),
        (r::EXVET.offset(), r::exvet::VET_EXT.val(0x8100)),
        (r::RXPBSIZE.at(0).offset(), 0x0008_0000),
        (r::TXPBSIZE.at(0).offset(), 0x0002_8000),
        // 160 KB - 10 KB: the threshold of the reset layout (Linux's ixgbe_set_rxpba_generic
        // computes the same for one TC); to be confirmed against the datasheet's reset value.
        (r::TXPBTHRESH.at(0).offset(), 150),
        (r::DTXMXSZRQ.offset(), 0x10),
        // TSO flag masks (`tx_offload.rs`): first and middle 0xFF6 (FIN and PSH cleared), last
        // 0xF7F (CWR cleared), as read from an 82599 (FreeBSD commit eea2e089f8da, D44258).
        (r::DTXTCPFLGL.offset(), 0x0FF6_0FF6),
        (r::DTXTCPFLGH.offset(), 0x0000_0F7F),
    ];
    let per_queue = (0..128).flat_map(|q| {
        [
            // BSIZEPKT = 2 KB, BSIZEHDR = 256 bytes.
            (rxq(q) + 0x14, 0x0000_0402),
            // DCA_RXCTRL: bit 12 is set at reset (ixy clears it).
            (rxq(q) + 0x0C, 0x0000_1000),
        ]
    });
    fixed.into_iter().chain(per_queue)
}

pub(super) const RX_BUCKETS: [crate::platform::regs::Reg; 6] = [
    r::PRC64,
    r::PRC127,
    r::PRC255,
    r::PRC511,
    r::PRC1023,
    r::PRC1522,
];
pub(super) const TX_BUCKETS: [crate::platform::regs::Reg; 6] = [
    r::PTC64,
    r::PTC127,
    r::PTC255,
    r::PTC511,
    r::PTC1023,
    r::PTC1522,
];

/// The size bucket (index into [`RX_BUCKETS`] / [`TX_BUCKETS`]) of a frame of `len` bytes (FCS
/// included).
pub(super) fn bucket_index(len: u64) -> usize {
    match len {
        ..=64 => 0,
        65..=127 => 1,
        128..=255 => 2,
        256..=511 => 3,
        512..=1023 => 4,
        _ => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_register_of_the_map_is_known_and_queues_decode() {
        for info in r::MAP.registers {
            for (off, n) in info.addresses() {
                let k = classify(off as usize);
                assert_ne!(k, Kind::Unknown, "{} at {off:#x}", info.instance_name(n));
            }
        }
        assert_eq!(classify(r::RDT.at(70).offset()), Kind::Rx(RxReg::Tail, 70));
        assert_eq!(
            classify(r::TDT.at(127).offset()),
            Kind::Tx(TxReg::Tail, 127)
        );
        assert_eq!(
            classify(r::SRRCTL.at(3).offset()),
            Kind::Rx(RxReg::Srrctl, 3)
        );
        assert_eq!(canonical(r::SRRCTL.at(3).offset()), rxq(3) + 0x14);
        assert_eq!(canonical(r::SRRCTL.at(20).offset()), rxq(20) + 0x14);
        assert_eq!(classify(r::QPRDC.at(2).offset()), Kind::Count);
        assert_eq!(classify(r::GORCH.offset()), Kind::Hi(W_GORC as u8));
        assert_eq!(classify(r::RAH.at(20).offset()), Kind::Rah);
        assert_eq!(classify(0x1_F000), Kind::Unknown);
    }
}
