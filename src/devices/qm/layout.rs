//! The queue manager's memory formats, as typed views over words: the software portal's
//! cache-enabled (CENA) area, the 32-byte frame descriptor, the 64-byte dequeue result, and the
//! enqueue, pull, release and acquire commands. Driver and model both use these, the way the
//! Intel driver and the software 82599 share a register map.
//!
//! Every view is a plain value (`[u32; N]` words, little-endian as on the wire and on arm64):
//! the driver copies words out of device-written memory with atomic loads and decodes the copy,
//! so no Rust reference to memory the device may write is ever made.
//!
//! Sources (checked in `docs/dpaa2-facts.md`, sections 1-8): Linux
//! `include/soc/fsl/dpaa2-fd.h`, `dpaa2-global.h`, `drivers/soc/fsl/dpio/qbman-portal.{c,h}`;
//! DPDK `drivers/bus/fslmc/qbman/` (`qbman_portal.c`, `fsl_qbman_base.h`,
//! `fsl_qbman_portal.h`) and `drivers/net/dpaa2/base/dpaa2_hw_dpni_annot.h`.

/// Byte offsets in the CENA area of a QMan 5.0 memory-backed portal (`QBMAN_CENA_SWP_*_MEM`).
pub mod cena {
    /// Enqueue ring entry `n` (64 bytes; 32 entries).
    pub const fn eqcr(n: u32) -> usize {
        (n as usize) * 64
    }
    /// Release ring entry `n` (64 bytes; 8 entries).
    pub const fn rcr(n: u32) -> usize {
        0x1400 + (n as usize) * 64
    }
    /// The management command (`_CR_MEM`).
    pub const CR: usize = 0x1600;
    /// The management response, one slot (`_RR_MEM`).
    pub const RR: usize = 0x1680;
    /// The volatile dequeue command (`_VDQCR_MEM`).
    pub const VDQCR: usize = 0x1780;
    /// The enqueue ring's consumer index, as the portal writes it back (`_EQCR_CI_MEMBACK`).
    pub const EQCR_CI: usize = 0x1840;
    /// Bytes of the area the model implements (the real one is 64 KiB; the rest is unused).
    pub const SIZE: usize = 0x2000;
}

/// Entries of the enqueue ring in memory-backed mode.
pub const EQCR_SIZE: u32 = 32;
/// Entries of the release ring.
pub const RCR_SIZE: u32 = 8;
/// The valid bit of command verbs (`QB_VALID_BIT`).
pub const VALID_BIT: u32 = 0x80;
/// The read-trigger value of the `*_RT` registers and the EQCR_PI doorbell (`QB_RT_BIT`).
pub const RT: u32 = 0x100;
/// Buffers per release command or acquire (`DPAA2_ETH_BUFS_PER_CMD`).
pub const BUFS_PER_CMD: usize = 7;

/// A 32-byte frame descriptor (`struct dpaa2_fd`), single-buffer format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fd(pub [u32; 8]);

impl Fd {
    /// Pool id mask in word 3 (`FD_BPID_MASK`).
    pub const BPID_MASK: u32 = 0x3fff;
    /// Invalid pool: do not release the buffer after transmit (DPDK `DPAA2_SET_FD_IVP`).
    pub const IVP: u32 = 1 << 14;
    /// The frame-annotation-status valid bit of FRC (`DPAA2_FD_FRC_FASV`).
    pub const FRC_FASV: u32 = 0x8000;
    /// Control word: pass-through annotation present (`DPAA2_FD_CTRL_PTA`).
    pub const CTRL_PTA: u32 = 0x0080_0000;
    /// Control word: the error bits (`FD_CTRL_ERR_MASK`).
    pub const CTRL_ERR_MASK: u32 = 0xff;

    /// A single-buffer descriptor: buffer at `addr`, frame `offset` bytes in, `len` long,
    /// released to pool `bpid` after transmit.
    pub fn simple(addr: u64, len: u32, bpid: u16, offset: u16) -> Fd {
        let mut w = [0u32; 8];
        w[0] = addr as u32;
        w[1] = (addr >> 32) as u32;
        w[2] = len;
        w[3] = u32::from(bpid) & Self::BPID_MASK | (u32::from(offset) & 0xfff) << 16;
        Fd(w)
    }

    /// The descriptor as a device writes it, four little-endian 64-bit words (a dequeue
    /// result's FD, read with one load per word).
    #[inline(always)]
    pub fn from_u64s(w: [u64; 4]) -> Fd {
        let lo = |k: usize| w[k] as u32;
        let hi = |k: usize| (w[k] >> 32) as u32;
        Fd([lo(0), hi(0), lo(1), hi(1), lo(2), hi(2), lo(3), hi(3)])
    }

    /// Whether a descriptor whose 64-bit words 1 and 2 (as a device writes them, see
    /// [`from_u64s`](Self::from_u64s)) are `w1` and `w2` is a single-buffer frame without
    /// error bits: what [`ctrl`](Self::ctrl) and [`format`](Self::format) say, in one test.
    #[inline(always)]
    pub fn plain_u64s(w1: u64, w2: u64) -> bool {
        // FMT (word 3 bits 29:28) moved onto CTRL's error byte (word 5 bits 7:0): one test of
        // that byte. (Word 3 bits 31:30, a reserved bit and the short-length flag, land there
        // too: a frame with either is not called plain here, and the careful path decides.)
        ((w1 >> 28 | w2) >> 32) as u8 & (Self::CTRL_ERR_MASK as u8) == 0
    }

    /// The frame offset of a descriptor whose 64-bit word 1 is `w1` ([`offset`](Self::offset)).
    #[inline(always)]
    pub fn offset_u64(w1: u64) -> u16 {
        (w1 >> 48 & 0xfff) as u16
    }

    /// Buffer bus address.
    pub fn addr(&self) -> u64 {
        u64::from(self.0[0]) | u64::from(self.0[1]) << 32
    }
    /// Frame length.
    pub fn len(&self) -> u32 {
        self.0[2]
    }
    /// Whether the frame is empty.
    pub fn is_empty(&self) -> bool {
        self.0[2] == 0
    }
    /// Buffer pool id.
    pub fn bpid(&self) -> u16 {
        (self.0[3] & Self::BPID_MASK) as u16
    }
    /// Whether IVP is set (the buffer is not released to a pool).
    pub fn ivp(&self) -> bool {
        self.0[3] & Self::IVP != 0
    }
    /// Sets IVP.
    pub fn set_ivp(&mut self) {
        self.0[3] |= Self::IVP;
    }
    /// Frame offset in the buffer (bits 27:16 of word 3).
    pub fn offset(&self) -> u16 {
        (self.0[3] >> 16 & 0xfff) as u16
    }
    /// Format (0 single buffer, 1 frame list, 2 scatter/gather).
    pub fn format(&self) -> u8 {
        (self.0[3] >> 28 & 3) as u8
    }
    /// Frame context (FRC).
    pub fn frc(&self) -> u32 {
        self.0[4]
    }
    /// Control word.
    pub fn ctrl(&self) -> u32 {
        self.0[5]
    }
    /// Flow context (FLC).
    pub fn flc(&self) -> u64 {
        u64::from(self.0[6]) | u64::from(self.0[7]) << 32
    }
}

/// The 64-byte dequeue result (`struct dpaa2_dq`): the first 64-bit word holds verb, stat and
/// token; the frame descriptor is at byte 32.
pub mod dq {
    /// Response type mask of the verb.
    pub const VERB_MASK: u8 = 0x7f;
    /// A dequeue response (`QBMAN_RESULT_DQ`).
    pub const VERB_DQ: u8 = 0x60;
    /// The frame queue became empty.
    pub const STAT_FQEMPTY: u8 = 0x80;
    /// The result carries a frame.
    pub const STAT_VALIDFRAME: u8 = 0x10;
    /// A volatile (pull) dequeue.
    pub const STAT_VOLATILE: u8 = 0x02;
    /// The last result of its pull command.
    pub const STAT_EXPIRED: u8 = 0x01;
    /// Byte offset of the FQID (le32).
    pub const FQID: usize = 8;
    /// Byte offset of the frame descriptor.
    pub const FD: usize = 32;
    /// Bytes per result.
    pub const SIZE: usize = 64;

    /// The first word: verb (byte 0), stat (byte 1), token (byte 7).
    pub const fn word0(verb: u8, stat: u8, tok: u8) -> u64 {
        verb as u64 | (stat as u64) << 8 | (tok as u64) << 56
    }
    /// The mask and value of a usual first word of pull `tok`'s results: a dequeue response
    /// (verb) with a frame (VALIDFRAME), not the pull's last (EXPIRED clear), with that token.
    /// Anything else (not written yet, stale, no frame, the last) differs under the mask.
    pub const fn usual(tok: u8) -> (u64, u64) {
        let mask = word0(VERB_MASK, STAT_VALIDFRAME | STAT_EXPIRED, 0xff);
        (mask, word0(VERB_DQ, STAT_VALIDFRAME, tok))
    }
    /// The verb of a first word.
    pub const fn verb(w0: u64) -> u8 {
        w0 as u8
    }
    /// The stat byte of a first word.
    pub const fn stat(w0: u64) -> u8 {
        (w0 >> 8) as u8
    }
    /// The token of a first word (0 until the device writes the result).
    pub const fn tok(w0: u64) -> u8 {
        (w0 >> 56) as u8
    }
}

/// The enqueue command (`struct qbman_eq_desc`): 32 bytes of command, then the FD.
pub mod eq {
    /// Verb: enqueue, rejects to the FQ, no order restoration, FQ target (DPDK TX's
    /// `set_no_orp(0)` + `set_fq`).
    pub const VERB_REJECTS_TO_FQ: u32 = 0x02;
    /// Verb bit 4: the target is a queuing destination, not a frame queue.
    pub const VERB_TARGET_QD: u32 = 0x10;
    /// Word of the target FQID (byte 8).
    pub const TGTID_WORD: usize = 2;
    /// Word where the FD starts (byte 32).
    pub const FD_WORD: usize = 8;
    /// Words of an entry: the command and the FD (64 bytes).
    pub const WORDS: usize = 16;
}

/// The pull (volatile dequeue) command (`struct qbman_pull_desc`).
pub mod pull {
    /// Verb: DCT priority (1), DT frame queue (2 << 2), results to storage (RLS, bit 4).
    pub const VERB_FQ_TO_STORAGE: u32 = 0x01 | 2 << 2 | 1 << 4;
    /// Word 1: the FQID to dequeue from.
    pub const DQ_SRC_WORD: usize = 1;
    /// Words 2-3: the storage bus address.
    pub const RSP_ADDR_WORD: usize = 2;
    /// The most frames one pull asks for (DPDK's LX2160A pull size; Linux documents 16).
    pub const MAX_FRAMES: usize = 32;

    /// Word 0: verb with the valid bit, frames - 1, token.
    pub const fn word0(verb_vb: u32, frames: u32, tok: u8) -> u32 {
        verb_vb | (frames - 1) << 8 | (tok as u32) << 16
    }
}

/// The release command (`struct qbman_release_desc`): verb, bpid at byte 2, up to 7 buffer
/// addresses from byte 8.
pub mod release {
    /// Verb: release command valid (`1 << 5`); the count goes in bits 2:0.
    pub const VERB: u32 = 0x20;
}

/// The acquire management command (`QBMAN_MC_ACQUIRE`), and its result.
pub mod acquire {
    /// Verb of the command and of its result (`& 0x7f`).
    pub const VERB: u32 = 0x30;
    /// The result's OK code (`QBMAN_MC_RSLT_OK`), byte 1.
    pub const RSLT_OK: u32 = 0xf0;
}

/// The 64-byte hardware annotation in front of a received frame.
pub mod hwa {
    /// Bytes of annotation at the buffer's start (`DPAA2_ETH_RX_HWA_SIZE`).
    pub const SIZE: usize = 64;
    /// Frame annotation status, le32 (`struct dpaa2_fas` status).
    pub const FAS_STATUS: usize = 0x04;
    /// The parse result's first word, le64 (L2 bits).
    pub const FAPR_WORD: usize = 0x10;
    /// The byte giving the offset of the first VLAN TCI from the frame's start.
    pub const VLAN_TCI_OFFSET_1: usize = 0x22;
    /// FAPR word bit: an Ethernet MAC header was parsed.
    pub const ETH_MAC_PRESENT: u64 = 1 << 21;
    /// FAPR word bit: unicast destination.
    pub const MAC_UNICAST: u64 = 1 << 20;
    /// FAPR word bit: multicast destination.
    pub const MAC_MULTICAST: u64 = 1 << 19;
    /// FAPR word bit: broadcast destination.
    pub const MAC_BROADCAST: u64 = 1 << 18;
    /// FAPR word bit: one VLAN tag present (`L2_VLAN_1_PRESENT`).
    pub const VLAN_1_PRESENT: u64 = 1 << 10;
    /// FAPR word bit: more than one VLAN tag present (`L2_VLAN_N_PRESENT`).
    pub const VLAN_N_PRESENT: u64 = 1 << 9;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_descriptor_reads_back_what_was_put_in() {
        let mut fd = Fd::simple(0x1_2345_6780, 60, 0x1234, 128);
        assert_eq!(fd.addr(), 0x1_2345_6780);
        assert_eq!(fd.len(), 60);
        assert_eq!(fd.bpid(), 0x1234);
        assert_eq!(fd.offset(), 128);
        assert_eq!(fd.format(), 0);
        assert!(!fd.ivp());
        fd.set_ivp();
        assert!(fd.ivp());
        assert_eq!(fd.bpid(), 0x1234, "IVP is beside the pool id, not in it");
        // DPDK's 32-bit view: OFFSET = bits 27:16 of the bpid_offset word.
        assert_eq!(fd.0[3] & 0x0fff_0000, 128 << 16);
        assert_eq!(Fd::simple(0, 0, 0xffff, 0x1fff).bpid(), 0x3fff);
        assert_eq!(Fd::simple(0, 0, 0, 0x1fff).offset(), 0xfff);
    }

    #[test]
    fn a_dequeue_results_first_word_holds_verb_stat_and_token() {
        let w = dq::word0(
            dq::VERB_DQ | 0x80,
            dq::STAT_VALIDFRAME | dq::STAT_EXPIRED,
            7,
        );
        assert_eq!(dq::verb(w) & dq::VERB_MASK, dq::VERB_DQ);
        assert_eq!(dq::stat(w), 0x11);
        assert_eq!(dq::tok(w), 7);
        assert_eq!(w.to_le_bytes()[7], 7, "the token is byte 7");
    }

    #[test]
    fn portal_offsets_are_the_memory_backed_ones() {
        assert_eq!(
            cena::eqcr(EQCR_SIZE),
            0x800,
            "32 entries end where DQRR_MEM starts"
        );
        assert_eq!(cena::rcr(0), 0x1400);
        assert_eq!(pull::VERB_FQ_TO_STORAGE, 0x19);
        assert_eq!(pull::word0(0x99, 32, 3), 0x0003_1f99);
    }
}
