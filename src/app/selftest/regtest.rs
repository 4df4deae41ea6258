//! Register read/write self-test, in the style of Linux's `ethtool -t` "Register test (offline)".
//!
//! Shared by the on-device suite (`hwtests/`) and `vfio-nic selftest`, so both run the same tables.
//!
//! # What it proves
//!
//! For every register instance in a table the test writes a few bit patterns and reads them back.
//! A pass shows that BAR0 is mapped at the right place and length, that our offsets address the
//! registers we think they do (including the legacy queue-0..3 aliases on the 82576), and that
//! every bit we claim is writable can be both set and cleared: a wrong BAR, an offset typo, a
//! mapping that reads back all-ones (surprise removal) or all-zeros (an emulator that ignores the
//! register) all fail here, before any DMA is attempted.
//!
//! # Where the tables come from
//!
//! The register sets, masks and write masks are taken from the Linux drivers:
//! `reg_test_82576` in `drivers/net/ethernet/intel/igb/igb_ethtool.c` and `reg_test_82599` in
//! `drivers/net/ethernet/intel/ixgbe/ixgbe_ethtool.c` (offsets from `igb/e1000_regs.h` and
//! `ixgbe/ixgbe_type.h`). The 82576 table must also pass on QEMU's `-device igb` (CI runs it
//! there), so every kept entry was checked against QEMU 10's `hw/net/igb_core.c`
//! (`igb_macreg_writeops`/`igb_macreg_readops`, the `igb_set_*` handlers and the alias table
//! `mac_reg_access`) and `hw/net/igb_regs.h`: a write to it must do nothing but store the value
//! (possibly masked), and the test mask must only cover bits that QEMU keeps. Each entry names the
//! QEMU handler it was checked against.
//!
//! # What it deliberately leaves out
//!
//! * Registers whose write has side effects: CTRL (reset bits), RCTL/TCTL (Linux's SET_READ
//!   checks; QEMU's `igb_set_rx_control` recomputes receive state), STATUS (Linux's special
//!   "toggle" check; QEMU's `igb_set_status` clears PHYRA), interrupt cause/mask registers.
//! * Ring head/tail registers and the RXDCTL enable/disable dance Linux wraps around RDT:
//!   QEMU's `igb_set_rdt`/`igb_set_tdt` start receive/transmit processing (DMA), and
//!   head/tail writes on real hardware move the rings. The ixgbe RDT entry is skipped for the
//!   same reason (it needs RXDCTL.ENABLE written around it, which a table entry cannot express).
//! * Receive address entry 0 on the 82576: it holds the station MAC address and QEMU's handler
//!   for RAH\[0\] (`igb_mac_setmacaddr`) republishes it.
//! * Whether a value takes effect (filtering, flow control): that is what the traffic tests do.
//!
//! Unlike Linux (which resets the adapter after its test), [`run`] puts every register back to the
//! value it read before touching it, so the device is left exactly as found.
//!
//! # Precondition
//!
//! Run it on a quiesced device: after reset, with receive and transmit disabled (igb RCTL.EN and
//! TCTL.EN clear; ixgbe RXCTRL.RXEN and DMATXCTL.TE clear) and no rings handed to the device,
//! with nothing else touching the BAR. The ring base/length registers briefly hold test patterns.

#![forbid(unsafe_code)]

use crate::platform::mmio::Mmio;

/// How a register is exercised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// For each of 0x5A5A5A5A, 0xA5A5A5A5, 0x00000000 and 0xFFFFFFFF: write `p & write_mask`, read
    /// back, and compare `read & mask` with `p & write_mask & mask`.
    Pattern,
    /// Write `write_mask` once, read back, and compare `read & mask` with `write_mask & mask`
    /// (Linux's SET_READ_TEST).
    SetRead,
}

/// One register (or array of equally spaced registers) to test.
#[derive(Clone, Copy, Debug)]
pub struct RegTest {
    /// Register name for messages.
    pub name: &'static str,
    /// Byte offset of instance 0 in BAR0.
    pub offset: u32,
    /// Number of instances.
    pub count: u32,
    /// Bytes between instances (ignored when `count` is 1).
    pub stride: u32,
    /// Bits that must read back what was written.
    pub mask: u32,
    /// Bits that are written (the rest are written as 0).
    pub write_mask: u32,
    /// How the register is exercised.
    pub kind: Kind,
}

/// The patterns of [`Kind::Pattern`], in the order Linux uses them.
const PATTERNS: [u32; 4] = [0x5A5A_5A5A, 0xA5A5_A5A5, 0x0000_0000, 0xFFFF_FFFF];

const fn pat(
    name: &'static str,
    offset: u32,
    count: u32,
    stride: u32,
    mask: u32,
    write_mask: u32,
) -> RegTest {
    RegTest {
        name,
        offset,
        count,
        stride,
        mask,
        write_mask,
        kind: Kind::Pattern,
    }
}

/// The qm device's software portal (CINH registers, `regs/qbman.toml`): the interrupt enable,
/// status-disable and inhibit registers, whose writes only change which portal events would
/// interrupt. The masks are the six interrupt sources Linux names (`QBMAN_SWP_INTERRUPT_*`)
/// and IIR's inhibit bit; no driver has a portal register test to take them from, and only a
/// board can confirm that every other bit reads back zero. SDQCR and CFG are left out: a
/// write starts push dequeues or reconfigures the portal.
pub const QBMAN_PORTAL: &[RegTest] = &[
    pat("IER", 0xe40, 1, 0, 0x0000_003F, 0x0000_003F),
    pat("ISDR", 0xe80, 1, 0, 0x0000_003F, 0x0000_003F),
    pat("IIR", 0xec0, 1, 0, 0x0000_0001, 0x0000_0001),
];

/// Intel 82576 (igb): Linux's `reg_test_82576`, minus every entry that is not plain storage on
/// QEMU 10's igb model (see the module documentation), plus VFTA.
///
/// Queues 0..3 use the legacy addresses Linux uses (0x2800/0x3800 + 0x100 * n); QEMU maps them
/// through its `mac_reg_access` alias table (`RDBAL0_A`... `TDLEN3_A`) onto the same storage as
/// 0xC000/0xE000 + 0x40 * n, so both address forms get exercised.
pub const IGB_82576: &[RegTest] = &[
    // QEMU: igb_mac_writereg (putreg FCAL), read igb_mac_readreg. Plain 32-bit storage.
    pat("FCAL", 0x0028, 1, 0, 0xFFFF_FFFF, 0xFFFF_FFFF),
    // QEMU: igb_set_16bit, keeps bits 15:0 = the mask.
    pat("FCAH", 0x002C, 1, 0, 0x0000_FFFF, 0xFFFF_FFFF),
    // QEMU: igb_set_16bit, keeps bits 15:0 = the mask.
    pat("FCT", 0x0030, 1, 0, 0x0000_FFFF, 0xFFFF_FFFF),
    // QEMU: igb_mac_writereg (putreg VET). Plain 32-bit storage (VET and VET_EXT).
    pat("VET", 0x0038, 1, 0, 0xFFFF_FFFF, 0xFFFF_FFFF),
    // QEMU: igb_set_dbal, stores val & E1000_XDBAL_MASK (0xFFFFFFE0, igb_regs.h); the mask
    // 0xFFFFFF80 is inside that.
    pat("RDBAL[0..4]", 0x2800, 4, 0x100, 0xFFFF_FF80, 0xFFFF_FFFF),
    // QEMU: igb_mac_writereg (putreg RDBAHn). Plain storage.
    pat("RDBAH[0..4]", 0x2804, 4, 0x100, 0xFFFF_FFFF, 0xFFFF_FFFF),
    // QEMU: igb_set_dlen, stores val & 0xFFFF0 = the mask.
    pat("RDLEN[0..4]", 0x2808, 4, 0x100, 0x000F_FFF0, 0x000F_FFFF),
    // Queues 4..15: same handlers as above, no alias.
    pat("RDBAL[4..16]", 0xC100, 12, 0x40, 0xFFFF_FF80, 0xFFFF_FFFF),
    pat("RDBAH[4..16]", 0xC104, 12, 0x40, 0xFFFF_FFFF, 0xFFFF_FFFF),
    pat("RDLEN[4..16]", 0xC108, 12, 0x40, 0x000F_FFF0, 0x000F_FFFF),
    // Linux's RXDCTL enable / RDT pattern / RXDCTL disable entries are left out: igb_set_rdt
    // calls igb_start_recv.
    //
    // QEMU: igb_set_fcrth, stores val & 0xFFF8; the mask 0xFFF0 is inside that.
    pat("FCRTH", 0x2168, 1, 0, 0x0000_FFF0, 0x0000_FFF0),
    // QEMU: igb_set_16bit, keeps bits 15:0 = the mask.
    pat("FCTTV", 0x0170, 1, 0, 0x0000_FFFF, 0x0000_FFFF),
    // QEMU: igb_mac_writereg (putreg TIPG). Plain storage.
    pat("TIPG", 0x0410, 1, 0, 0x3FFF_FFFF, 0x3FFF_FFFF),
    // QEMU: igb_set_dbal (0xFFFFFFE0 kept), igb_mac_writereg, igb_set_dlen (0xFFFF0 kept); the
    // legacy addresses go through the TDBALn_A/TDBAHn_A/TDLENn_A aliases.
    pat("TDBAL[0..4]", 0x3800, 4, 0x100, 0xFFFF_FF80, 0xFFFF_FFFF),
    pat("TDBAH[0..4]", 0x3804, 4, 0x100, 0xFFFF_FFFF, 0xFFFF_FFFF),
    pat("TDLEN[0..4]", 0x3808, 4, 0x100, 0x000F_FFF0, 0x000F_FFFF),
    pat("TDBAL[4..16]", 0xE100, 12, 0x40, 0xFFFF_FF80, 0xFFFF_FFFF),
    pat("TDBAH[4..16]", 0xE104, 12, 0x40, 0xFFFF_FFFF, 0xFFFF_FFFF),
    pat("TDLEN[4..16]", 0xE108, 12, 0x40, 0x000F_FFF0, 0x000F_FFFF),
    // Linux's RCTL (three SET_READ checks) and TCTL entries are left out: igb_set_rx_control has
    // side effects and neither is needed to prove the register file works.
    //
    // Receive addresses 1..15 (entry 0 holds the MAC: RAH[0] is igb_mac_setmacaddr in QEMU).
    // QEMU: [RA + 2 ... RA + 31] = igb_mac_writereg, plain 32-bit storage. The RAH mask covers
    // RAH, ASEL, POOLSEL and AV; the saved value (AV included) is written back exactly.
    pat("RAL[1..16]", 0x5408, 15, 8, 0xFFFF_FFFF, 0xFFFF_FFFF),
    pat("RAH[1..16]", 0x540C, 15, 8, 0x83FF_FFFF, 0xFFFF_FFFF),
    // Receive addresses 16..23 (RA2). QEMU: [RA2 ... RA2 + 31] = igb_mac_writereg.
    pat("RAL[16..24]", 0x54E0, 8, 8, 0xFFFF_FFFF, 0xFFFF_FFFF),
    pat("RAH[16..24]", 0x54E4, 8, 8, 0x83FF_FFFF, 0xFFFF_FFFF),
    // QEMU: [MTA ... MTA + E1000_MC_TBL_SIZE - 1] = igb_mac_writereg.
    pat("MTA", 0x5200, 128, 4, 0xFFFF_FFFF, 0xFFFF_FFFF),
    // Not in Linux's table: the VLAN filter table is plain 32-bit RW on the 82576 as well.
    // QEMU: [VFTA ... VFTA + E1000_VLAN_FILTER_TBL_SIZE - 1] = igb_mac_writereg.
    pat("VFTA", 0x5600, 128, 4, 0xFFFF_FFFF, 0xFFFF_FFFF),
];

/// Intel 82599 (ixgbe): Linux's `reg_test_82599`. Only real cards run it (no emulator).
///
/// Left out: the RXDCTL(0..4) WRITE_NO_TEST entries and the RDT(0..4) pattern they bracket (a
/// queue has to be enabled around the tail test, which a table entry cannot express, and tail
/// writes move the ring), the second `IXGBE_FCRTH(0)` entry (same address, 0x3260, as
/// `IXGBE_FCRTH_82599(0)`, already tested), and the separate STATUS toggle check.
///
/// Linux's ixgbe compares the *unmasked* read value with `p & write & mask` (igb masks it); here
/// every entry uses the masked comparison of [`Kind::Pattern`], except VLNCTRL, whose Linux mask
/// is 0: what Linux really checks there is that the whole register reads 0 after writing 0, which
/// is written as mask 0xFFFFFFFF, write mask 0.
pub const IXGBE_82599: &[RegTest] = &[
    pat("FCRTL[0]", 0x3220, 1, 0, 0x8007_FFF0, 0x8007_FFF0),
    pat("FCRTH[0]", 0x3260, 1, 0, 0x8007_FFF0, 0x8007_FFF0),
    pat("PFCTOP", 0x3008, 1, 0, 0xFFFF_FFFF, 0xFFFF_FFFF),
    pat("VLNCTRL", 0x5088, 1, 0, 0xFFFF_FFFF, 0x0000_0000),
    pat("RDBAL[0..4]", 0x1000, 4, 0x40, 0xFFFF_FF80, 0xFFFF_FF80),
    pat("RDBAH[0..4]", 0x1004, 4, 0x40, 0xFFFF_FFFF, 0xFFFF_FFFF),
    pat("RDLEN[0..4]", 0x1008, 4, 0x40, 0x000F_FF80, 0x000F_FFFF),
    pat("FCTTV[0]", 0x3200, 1, 0, 0xFFFF_FFFF, 0xFFFF_FFFF),
    pat("TDBAL[0..4]", 0x6000, 4, 0x40, 0xFFFF_FF80, 0xFFFF_FFFF),
    pat("TDBAH[0..4]", 0x6004, 4, 0x40, 0xFFFF_FFFF, 0xFFFF_FFFF),
    pat("TDLEN[0..4]", 0x6008, 4, 0x40, 0x000F_FF80, 0x000F_FF80),
    // Sets RXEN for the duration of one write/read, as Linux does; restored right after.
    RegTest {
        name: "RXCTRL",
        offset: 0x3000,
        count: 1,
        stride: 0,
        mask: 0x0000_0001,
        write_mask: 0x0000_0001,
        kind: Kind::SetRead,
    },
    pat("RAL[0..16]", 0x5400, 16, 8, 0xFFFF_FFFF, 0xFFFF_FFFF),
    pat("RAH[0..16]", 0x5404, 16, 8, 0x8001_FFFF, 0x800C_FFFF),
    pat("MTA", 0x5200, 128, 4, 0xFFFF_FFFF, 0xFFFF_FFFF),
];

/// Byte offset of instance `i` of `t`.
fn instance_offset(t: &RegTest, i: u32) -> usize {
    t.offset as usize + i as usize * t.stride as usize
}

/// Writes and checks one register instance; returns the number of checks done.
fn check_instance(m: &dyn Mmio, t: &RegTest, i: u32, off: usize) -> Result<usize, String> {
    let patterns: &[u32] = match t.kind {
        Kind::Pattern => &PATTERNS,
        Kind::SetRead => &[0xFFFF_FFFF],
    };
    for &p in patterns {
        let written = p & t.write_mask;
        let expected = written & t.mask;
        m.write32(off, written);
        let read = m.read32(off);
        if read & t.mask != expected {
            let what = match t.kind {
                Kind::Pattern => format!("pattern {p:#010x}"),
                Kind::SetRead => "set/read".to_string(),
            };
            return Err(format!(
                "register test failed: {} instance {i} at {off:#07x}, {what}: wrote {written:#010x}, \
                 expected {expected:#010x}, read {:#010x} (raw {read:#010x}, mask {:#010x})",
                t.name,
                read & t.mask,
                t.mask
            ));
        }
    }
    Ok(patterns.len())
}

/// Runs the table; saves every register before touching it and restores it afterwards (also on
/// failure). Returns the number of (register instance, pattern) checks done, or a message naming
/// the register, instance offset, pattern, expected and read values.
///
/// Registers are handled one instance at a time: read and saved, exercised, written back and
/// checked to read back (under the mask) as saved, so at most one register ever holds a test value.
/// Every offset is validated against the BAR length before anything is written. See the module
/// documentation for the precondition (a quiesced device).
pub fn run(m: &dyn Mmio, table: &[RegTest]) -> Result<usize, String> {
    for t in table {
        for i in 0..t.count {
            let off = instance_offset(t, i);
            if off & 3 != 0 || off + 4 > m.len() {
                return Err(format!(
                    "register test table: {} instance {i} at {off:#07x} is not an aligned register \
                     inside the {:#x}-byte BAR",
                    t.name,
                    m.len()
                ));
            }
        }
    }

    let mut checks = 0;
    for t in table {
        for i in 0..t.count {
            let off = instance_offset(t, i);
            let saved = m.read32(off);
            let result = check_instance(m, t, i, off);
            m.write32(off, saved);
            checks += result?;
            let restored = m.read32(off);
            if (restored ^ saved) & t.mask != 0 {
                return Err(format!(
                    "register test: {} instance {i} at {off:#07x} did not restore: saved \
                     {saved:#010x}, read back {restored:#010x} (mask {:#010x})",
                    t.name, t.mask
                ));
            }
        }
    }
    Ok(checks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Mutex;

    const BAR_LEN: usize = 0x2_0000;

    /// A register file: each write stores `value & writable(offset)`; one register may have bits
    /// stuck at 1 (`stuck.1`) or at 0 (`stuck.2`) when read.
    struct FakeMmio {
        regs: Mutex<Vec<u32>>,
        writable: fn(usize) -> u32,
        stuck: Option<(usize, u32, u32)>,
    }

    fn all_bits(_: usize) -> u32 {
        0xFFFF_FFFF
    }

    /// What QEMU 10's igb handlers keep of a write (`igb_set_16bit`, `igb_set_dbal`,
    /// `igb_set_dlen`, `igb_set_fcrth`); everything else in the table is `igb_mac_writereg`.
    fn qemu_igb_writable(off: usize) -> u32 {
        let queue_reg = |legacy: usize, base: usize| {
            (off >= legacy && off < legacy + 0x400 && (off - legacy) & 0xFF == 0)
                || (off >= base && off < base + 0x400 && (off - base) & 0x3F == 0)
        };
        match off {
            0x002C | 0x0030 | 0x0170 => 0x0000_FFFF, // FCAH, FCT, FCTTV
            0x2168 => 0x0000_FFF8,                   // FCRTH
            _ if queue_reg(0x2800, 0xC000) || queue_reg(0x3800, 0xE000) => 0xFFFF_FFE0, // xDBAL
            _ if queue_reg(0x2808, 0xC008) || queue_reg(0x3808, 0xE008) => 0x000F_FFF0, // xDLEN
            _ => 0xFFFF_FFFF,
        }
    }

    impl FakeMmio {
        fn new(writable: fn(usize) -> u32, stuck: Option<(usize, u32, u32)>) -> Self {
            // Non-trivial, distinct contents that each register could really hold.
            let regs = (0..BAR_LEN / 4)
                .map(|i| {
                    let v = (i as u32).wrapping_mul(0x9E37_79B9) ^ 0x1234_5678;
                    let mut v = v & writable(i * 4);
                    if let Some((off, ones, zeros)) = stuck {
                        if off == i * 4 {
                            v = (v | ones) & !zeros;
                        }
                    }
                    v
                })
                .collect();
            FakeMmio {
                regs: Mutex::new(regs),
                writable,
                stuck,
            }
        }

        fn snapshot(&self) -> Vec<u32> {
            self.regs.lock().unwrap().clone()
        }
    }

    impl Mmio for FakeMmio {
        fn read32(&self, offset: usize) -> u32 {
            let mut v = self.regs.lock().unwrap()[offset / 4];
            if let Some((off, ones, zeros)) = self.stuck {
                if off == offset {
                    v = (v | ones) & !zeros;
                }
            }
            v
        }

        fn write32(&self, offset: usize, value: u32) {
            self.regs.lock().unwrap()[offset / 4] = value & (self.writable)(offset);
        }

        fn len(&self) -> usize {
            BAR_LEN
        }
    }

    fn expected_checks(table: &[RegTest]) -> usize {
        table
            .iter()
            .map(|t| {
                t.count as usize
                    * match t.kind {
                        Kind::Pattern => PATTERNS.len(),
                        Kind::SetRead => 1,
                    }
            })
            .sum()
    }

    #[test]
    fn plain_storage_passes_and_is_restored() {
        for (table, n) in [(IGB_82576, 1620), (IXGBE_82599, 757)] {
            let m = FakeMmio::new(all_bits, None);
            let before = m.snapshot();
            assert_eq!(run(&m, table), Ok(n));
            assert_eq!(n, expected_checks(table));
            assert!(m.snapshot() == before, "registers not restored");
        }
    }

    #[test]
    fn igb_table_passes_with_qemu_write_masks() {
        let m = FakeMmio::new(qemu_igb_writable, None);
        let before = m.snapshot();
        assert_eq!(run(&m, IGB_82576), Ok(expected_checks(IGB_82576)));
        assert!(m.snapshot() == before, "registers not restored");
    }

    #[test]
    fn stuck_bit_fails_naming_the_register_and_restores() {
        // RDLEN of queue 2 (legacy address 0x2A08) with bit 9 stuck at 0.
        let m = FakeMmio::new(all_bits, Some((0x2A08, 0, 1 << 9)));
        let before = m.snapshot();
        let err = run(&m, IGB_82576).unwrap_err();
        assert!(err.contains("RDLEN[0..4]"), "{err}");
        assert!(err.contains("instance 2 at 0x02a08"), "{err}");
        assert!(err.contains("pattern 0x5a5a5a5a"), "{err}");
        assert!(err.contains("expected 0x000a5a50"), "{err}");
        assert!(err.contains("read 0x000a5850"), "{err}");
        assert!(
            m.snapshot() == before,
            "registers not restored after a failure"
        );

        // MTA[5] with bit 0 stuck at 1: fails on the first pattern whose bit 0 is clear.
        let m = FakeMmio::new(all_bits, Some((0x5214, 1, 0)));
        let before = m.snapshot();
        let err = run(&m, IGB_82576).unwrap_err();
        assert!(err.contains("MTA instance 5 at 0x05214"), "{err}");
        assert!(err.contains("pattern 0x5a5a5a5a"), "{err}");
        assert!(err.contains("read 0x5a5a5a5b"), "{err}");
        assert!(
            m.snapshot() == before,
            "registers not restored after a failure"
        );
    }

    #[test]
    fn stuck_bit_outside_the_mask_is_ignored() {
        // FCAH keeps only 16 bits: a stuck upper bit is not a failure.
        let m = FakeMmio::new(all_bits, Some((0x002C, 1 << 20, 0)));
        assert!(run(&m, IGB_82576).is_ok());
    }

    #[test]
    fn set_read_writes_the_write_mask_once() {
        let t = [RegTest {
            name: "X",
            offset: 0x40,
            count: 2,
            stride: 4,
            mask: 0x0000_0003,
            write_mask: 0x0000_0001,
            kind: Kind::SetRead,
        }];
        let m = FakeMmio::new(all_bits, None);
        assert_eq!(run(&m, &t), Ok(2));
        let m = FakeMmio::new(all_bits, Some((0x44, 0, 1)));
        let err = run(&m, &t).unwrap_err();
        assert!(err.contains("X instance 1 at 0x00044, set/read"), "{err}");
    }

    #[test]
    fn out_of_range_entry_is_rejected_before_any_write() {
        let t = [
            pat("OK", 0x0, 1, 0, !0, !0),
            pat("BAD", BAR_LEN as u32 - 8, 3, 4, !0, !0),
        ];
        let m = FakeMmio::new(all_bits, None);
        let mut poisoned = m.snapshot();
        poisoned[0] = 0xDEAD_BEEF;
        *m.regs.lock().unwrap() = poisoned.clone();
        let err = run(&m, &t).unwrap_err();
        assert!(err.contains("BAD instance 2"), "{err}");
        assert!(m.snapshot() == poisoned, "wrote before validating");
    }

    #[test]
    fn tables_are_well_formed() {
        for table in [IGB_82576, IXGBE_82599] {
            let mut seen = HashSet::new();
            for t in table {
                assert!(t.count > 0 && t.mask != 0, "{}", t.name);
                assert!(t.count == 1 || t.stride >= 4, "{}", t.name);
                for i in 0..t.count {
                    let off = instance_offset(t, i);
                    assert_eq!(off & 3, 0, "{}", t.name);
                    assert!(off < BAR_LEN, "{}", t.name);
                    assert!(seen.insert(off), "{} {off:#x} tested twice", t.name);
                }
            }
        }
    }

    #[test]
    fn igb_table_avoids_registers_with_side_effects() {
        let mut forbidden = vec![
            0x0000, // CTRL
            0x0008, // STATUS
            0x0100, // RCTL
            0x0400, // TCTL
            0x5400, // RAL[0]
            0x5404, // RAH[0] (station address)
        ];
        for q in 0..4 {
            for reg in [0x10, 0x18, 0x28] {
                // RDH/RDT/RXDCTL and TDH/TDT/TXDCTL, legacy addresses.
                forbidden.push(0x2800 + q * 0x100 + reg);
                forbidden.push(0x3800 + q * 0x100 + reg);
            }
        }
        for q in 0..16 {
            for reg in [0x10, 0x18, 0x28] {
                forbidden.push(0xC000 + q * 0x40 + reg);
                forbidden.push(0xE000 + q * 0x40 + reg);
            }
        }
        for t in IGB_82576 {
            for i in 0..t.count {
                let off = instance_offset(t, i);
                assert!(!forbidden.contains(&off), "{} touches {off:#x}", t.name);
            }
        }
    }
}
