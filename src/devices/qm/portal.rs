//! The driver's side of one QBMan software portal (memory-backed, QMan 5.0): the enqueue ring,
//! pull commands, release commands and the acquire management command.
//!
//! The portal's state is the driver's copy of what the hardware also counts: the enqueue
//! ring's producer index and valid bit (read from EQCR_PI at init, not assumed), the free
//! entries last seen (EQCR_CI is read again only when they run out, as in DPDK's
//! `qbman_swp_enqueue_multiple_mem_back`), and the management response's valid bit.
//!
//! Ordering: entries and commands are written as plain 32-bit stores to the CENA area (a
//! burst's enqueue entries, each whole, as one block per stretch of the ring, from the
//! driver's copy of the ring ([`EqRun`]); a pull command as one block; the other commands'
//! verb word last); the doorbell or read trigger goes through [`Mmio::doorbell`], whose
//! [`dma_wmb`](crate::platform::barrier::dma_wmb) orders every earlier store before it (DPDK's
//! `dma_wmb()` before the CINH write); a management response is read after its valid bit was
//! seen and [`dma_rmb`]. On real DPAA2 silicon the CENA area is cacheable memory the portal
//! stashes into, and Linux and DPDK flush and prefetch its cache lines around these accesses
//! (`dccvac`, `dcivac`); the model's CENA is an [`Mmio`] window, so this driver has no cache
//! operations, and a port to a real portal needs them beside the barriers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::layout::{acquire, cena, eq, pull, release, Fd, BUFS_PER_CMD, EQCR_SIZE, RT, VALID_BIT};
use crate::error::{Error, Result};
use crate::platform::barrier::dma_rmb;
use crate::platform::mmio::Mmio;
use crate::platform::regs::qbman as r;

/// How long the driver waits for the portal's answer to a management command.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(1);

/// What the driver writes to CFG: memory-backed (CPBS), VDQCR and CR read-triggered (VPM,
/// CPM), EQCR in ring mode with a PI doorbell (EPM 0), discrete consumption (DCM 2), release
/// array mode (RPM 3), write non-allocating, stashing bits as Linux sets them, a DQRR of 8
/// (Linux `qbman_swp_init` for QMan 5.0).
pub const CFG: u32 =
    8 << 20 | 1 << 16 | 1 << 15 | 1 << 14 | 3 << 12 | 2 << 10 | 1 << 7 | 1 << 6 | 0x3c;

const PI_MASK: u32 = 2 * EQCR_SIZE - 1;

/// One software portal.
pub struct SwPortal<M: Mmio> {
    cena: Arc<M>,
    cinh: Arc<M>,
    name: String,
    /// Next enqueue entry, with its wrap bit.
    pi: u32,
    /// Valid bit of the next enqueue entry.
    vb: u32,
    /// Entries free at the last look.
    available: u32,
    /// Valid bit the next management response will carry.
    mr_vb: u32,
    /// The driver's copy of the enqueue ring's entries, which [`EqRun`] fills and copies to
    /// the portal: the words an entry never changes (the zero command words, FRC, CTRL, FLC)
    /// stay as they are here, the target FQID is written when it changes, and only the verb
    /// and the FD's first four words are written per entry.
    eq_copy: Box<[[u32; eq::WORDS]; EQCR_SIZE as usize]>,
    /// The target FQID in `eq_copy`'s entries (0: none yet).
    eq_copy_fqid: u32,
}

/// Enqueue entries written in one pass ([`SwPortal::eq_run`]): each [`push`](Self::push)
/// fills the next entry in the driver's copy of the ring, and when the run ends
/// ([`finish`](Self::finish)) the entries it filled go to the portal as at most two [`Mmio::write_block`]s (one per
/// contiguous stretch of the ring), whole (64 bytes each), as DPDK's
/// `qbman_swp_enqueue_multiple_mem_back` writes each entry whole. The producer index moves
/// then too; [`SwPortal::eq_doorbell`] hands them to the portal.
///
/// The run keeps its place in the ring, the verb with its valid bit and its count as values
/// of its own (a loop holds them in registers) and writes the portal's state back when it
/// ends.
pub struct EqRun<'a, M: Mmio> {
    cena: &'a M,
    copy: &'a mut [[u32; eq::WORDS]; EQCR_SIZE as usize],
    /// The portal's producer index, valid bit and free entries, moved when the run ends.
    at: (&'a mut u32, &'a mut u32, &'a mut u32),
    /// The ring slot of the next entry, and the verb it gets (the valid bit of its pass).
    slot: usize,
    verb: u32,
    /// Entries filled.
    n: u32,
}

impl<M: Mmio> EqRun<'_, M> {
    /// Fills the next entry: frame `len` bytes long at `offset` in the buffer at `buf`,
    /// released to pool `bpid` after transmit (a single-buffer FD, as [`Fd::simple`]), to the
    /// run's frame queue. The caller checked the room ([`SwPortal::eq_room`]): at most the
    /// free entries are pushed in one run.
    #[inline(always)]
    pub fn push(&mut self, buf: u64, len: u32, bpid: u16, offset: u16) {
        let e = &mut self.copy[self.slot];
        // The target FQID is in every entry of the copy already (`eq_run`).
        e[0] = self.verb;
        let fd = Fd::simple(buf, len, bpid, offset);
        e[eq::FD_WORD..eq::FD_WORD + 4].copy_from_slice(&fd.0[..4]);
        self.slot = (self.slot + 1) % EQCR_SIZE as usize;
        if self.slot == 0 {
            // The ring wraps: the next pass's entries carry the other valid bit.
            self.verb ^= VALID_BIT;
        }
        self.n += 1;
    }
}

impl<M: Mmio> EqRun<'_, M> {
    /// Ends the run: copies the entries filled to the portal and moves the producer index
    /// past them. (Not a `Drop`: a run left on a panic writes nothing, and its buffers stay
    /// lent, leaked; and a loop whose run has no drop glue keeps the run in registers.)
    #[inline]
    pub fn finish(self) {
        let n = self.n;
        if n == 0 {
            return;
        }
        debug_assert!(n <= *self.at.2, "an enqueue run beyond the free entries");
        let pi = *self.at.0;
        let from = (pi & (EQCR_SIZE - 1)) as usize;
        let to = from + n as usize;
        let ring = self.copy.as_flattened();
        let size = EQCR_SIZE as usize;
        self.cena.write_block(
            cena::eqcr(from as u32),
            &ring[from * eq::WORDS..to.min(size) * eq::WORDS],
        );
        if to > size {
            self.cena
                .write_block(cena::eqcr(0), &ring[..(to - size) * eq::WORDS]);
        }
        *self.at.0 = (pi + n) & PI_MASK;
        *self.at.1 = self.verb & VALID_BIT;
        *self.at.2 -= n;
    }
}

impl<M: Mmio> SwPortal<M> {
    /// Takes the portal over: configures it, initialises its rings' triggers and its static
    /// dequeue (EQCR_PI and RCR_PI to RT, SDQCR to 0), checks that it is clean, reads where
    /// its enqueue ring stands and clears its memory.
    pub fn init(cena_: Arc<M>, cinh: Arc<M>, name: impl Into<String>) -> Result<SwPortal<M>> {
        let name = name.into();
        let gone = || Error::DeviceGone {
            device: name.clone(),
        };
        cinh.write(r::CFG, CFG);
        match cinh.read(r::CFG) {
            u32::MAX => return Err(gone()),
            0 => {
                return Err(Error::DeviceState {
                    device: name,
                    what: "the software portal is not enabled (CFG reads 0); enable its DPIO"
                        .into(),
                })
            }
            _ => {}
        }
        // Memory-backed mode: the enqueue and release rings' producer indices are read
        // triggered (RT), and no channel is dequeued from (SDQCR 0, "or else the QMan HW will
        // indicate an error"): Linux `qbman_swp_init` (drivers/soc/fsl/dpio/qbman-portal.c)
        // and DPDK `qbman_swp_sys_init` (drivers/bus/fslmc/qbman/qbman_sys.h) write RT to
        // EQCR_PI and RCR_PI right after CFG for QMan 5, and both `qbman_swp_init`s SDQCR = 0.
        cinh.write(r::EQCR_PI, RT);
        cinh.write(r::RCR_PI, RT);
        cinh.write(r::SDQCR, 0);
        let dqpi = cinh.read(r::DQPI);
        if r::dqpi::PI.get(dqpi) != 0 {
            return Err(Error::DeviceState {
                device: name,
                what: format!(
                    "the software portal is not clean (DQPI = {dqpi:#x}): a program before this one \
                     did not shut it down; reset its DPIO (or the DPRC) and open the port again"
                ),
            });
        }
        for w in (0..cena::SIZE).step_by(4) {
            cena_.write32(w, 0);
        }
        SwPortal::attach(cena_, cinh, name)
    }

    /// Takes over a portal for a port's teardown: as it stands ([`attach`](Self::attach)) when
    /// it was configured (CFG reads nonzero: a queue of this program initialised it), else
    /// initialised first ([`init`](Self::init): the port's queues were never taken, and a
    /// portal used without its initialisation is not to be trusted).
    pub fn take_over(cena: Arc<M>, cinh: Arc<M>, name: impl Into<String>) -> Result<SwPortal<M>> {
        match cinh.read(r::CFG) {
            0 => SwPortal::init(cena, cinh, name),
            _ => SwPortal::attach(cena, cinh, name),
        }
    }

    /// Takes over a portal this program configured before (with [`init`](Self::init), which
    /// ends here), as it stands: where its enqueue ring is, read from EQCR_PI and EQCR_CI;
    /// its memory is not cleared, so commands written there and not yet acted on are kept (a
    /// port's teardown after its receive queue is gone).
    pub fn attach(cena: Arc<M>, cinh: Arc<M>, name: impl Into<String>) -> Result<SwPortal<M>> {
        let name = name.into();
        let eqcr_pi = cinh.read(r::EQCR_PI);
        if eqcr_pi == u32::MAX {
            return Err(Error::DeviceGone { device: name });
        }
        let ci = cinh.read(r::EQCR_CI) & PI_MASK;
        let pi = eqcr_pi & PI_MASK;
        Ok(SwPortal {
            cena,
            cinh,
            name,
            pi,
            vb: eqcr_pi & VALID_BIT,
            available: EQCR_SIZE.saturating_sub(pi.wrapping_sub(ci) & PI_MASK),
            mr_vb: VALID_BIT,
            eq_copy: Box::new([[0; eq::WORDS]; EQCR_SIZE as usize]),
            eq_copy_fqid: 0,
        })
    }

    /// The portal's CINH registers.
    pub fn cinh(&self) -> &M {
        &self.cinh
    }

    /// Free enqueue entries, reading EQCR_CI again when the last look found fewer than
    /// `want`. An all-ones CI is the device gone.
    #[inline]
    pub fn eq_room(&mut self, want: u32) -> Result<u32, crate::device::QueueError> {
        if self.available < want {
            let ci = self.cinh.read(r::EQCR_CI);
            if ci == u32::MAX {
                return Err(crate::device::QueueError::DeviceGone);
            }
            // A device reporting more entries in flight than the ring holds leaves no room.
            self.available = EQCR_SIZE.saturating_sub(self.pi.wrapping_sub(ci & PI_MASK) & PI_MASK);
        }
        Ok(self.available)
    }

    /// Whether every enqueued entry has been consumed (or the device is gone).
    pub fn eq_drained(&self) -> bool {
        let ci = self.cinh.read(r::EQCR_CI);
        ci == u32::MAX || ci & PI_MASK == self.pi
    }

    /// Writes one enqueue entry (frame `fd` to frame queue `fqid`);
    /// [`eq_doorbell`](Self::eq_doorbell) hands the entries written to the portal. The caller
    /// checked the room.
    ///
    /// The whole 64-byte entry goes in one [`Mmio::write_block`]: the verb with its valid bit,
    /// the command words (the target FQID at byte 8, the rest zero) and the FD from byte 32.
    /// In memory-backed mode the portal reads no entry beyond the producer index it was told,
    /// so the order of the words within the entry does not matter; the EQCR_PI doorbell's
    /// `dma_wmb` orders them all before it (DPDK's `qbman_swp_enqueue_multiple_mem_back`
    /// copies words 1-15 and then the verb, with no barrier between them, before its
    /// `dma_wmb()` and the EQCR_PI write).
    #[inline]
    pub fn eq_write(&mut self, fqid: u32, fd: &Fd) {
        let at = cena::eqcr(self.pi & (EQCR_SIZE - 1));
        let mut entry = [0u32; eq::WORDS];
        entry[0] = eq::VERB_REJECTS_TO_FQ | self.vb;
        entry[eq::TGTID_WORD] = fqid;
        entry[eq::FD_WORD..].copy_from_slice(&fd.0);
        self.cena.write_block(at, &entry);
        self.pi = (self.pi + 1) & PI_MASK;
        if self.pi & (EQCR_SIZE - 1) == 0 {
            self.vb ^= VALID_BIT;
        }
        self.available -= 1;
    }

    /// Enqueue entries to frame queue `fqid`, written in one pass (see [`EqRun`]).
    #[inline(always)]
    pub fn eq_run(&mut self, fqid: u32) -> EqRun<'_, M> {
        if self.eq_copy_fqid != fqid {
            for e in self.eq_copy.iter_mut() {
                e[eq::TGTID_WORD] = fqid;
            }
            self.eq_copy_fqid = fqid;
        }
        let (slot, verb) = (
            (self.pi & (EQCR_SIZE - 1)) as usize,
            eq::VERB_REJECTS_TO_FQ | self.vb,
        );
        EqRun {
            cena: &self.cena,
            copy: &mut self.eq_copy,
            at: (&mut self.pi, &mut self.vb, &mut self.available),
            slot,
            verb,
            n: 0,
        }
    }

    /// The EQCR_PI doorbell: RT, the producer index and the valid bit of the next entry, after
    /// `dma_wmb` ([`Mmio::doorbell`]). Out of line on arm64 only, so that `scripts/arm64
    /// barriers` finds it in the disassembly; inlined where the compiler likes elsewhere.
    #[cfg_attr(target_arch = "aarch64", inline(never))]
    #[cfg_attr(not(target_arch = "aarch64"), inline)]
    pub fn eq_doorbell(&self) {
        self.cinh
            .doorbell(r::EQCR_PI.offset(), RT | self.pi | self.vb);
    }

    /// Issues a pull of up to `frames` frames from `fqid` into the storage at `storage`
    /// (`frames` results of 64 bytes), tagged `tok` (never 0: 0 means "not written yet").
    pub fn pull(&self, storage: u64, fqid: u32, frames: usize, tok: u8) {
        debug_assert!(tok != 0 && (1..=pull::MAX_FRAMES).contains(&frames));
        // The valid bit does not matter under the VDQCR read trigger (VPM); Linux and DPDK
        // still toggle one, and so would a driver for an older portal. We send it set.
        let w0 = pull::word0(pull::VERB_FQ_TO_STORAGE | VALID_BIT, frames as u32, tok);
        let mut cmd = [0u32; 4];
        cmd[0] = w0;
        cmd[pull::DQ_SRC_WORD] = fqid;
        cmd[pull::RSP_ADDR_WORD] = storage as u32;
        cmd[pull::RSP_ADDR_WORD + 1] = (storage >> 32) as u32;
        // One block, the verb word with the rest: under the read trigger the portal reads the
        // command at the VDQCR_RT write, which the doorbell's `dma_wmb` orders after all of it
        // (DPDK's mem-backed pull: the body, the verb, `dma_wmb`, VDQCR_RT).
        self.cena.write_block(cena::VDQCR, &cmd);
        self.cinh.doorbell(r::VDQCR_RT.offset(), RT);
    }

    /// Releases up to 7 buffers to pool `bpid`, when the portal has a release slot (RAR);
    /// returns false, releasing nothing, when it has none now.
    pub fn release(&self, bpid: u16, bufs: &[u64]) -> bool {
        debug_assert!((1..=BUFS_PER_CMD).contains(&bufs.len()));
        let rar = self.cinh.read(r::RAR);
        if rar == u32::MAX || !r::rar::SUCCESS.is_set(rar) {
            return false;
        }
        let slot = r::rar::IDX.get(rar);
        let at = cena::rcr(slot);
        let c = &*self.cena;
        for (k, b) in bufs.iter().enumerate() {
            c.write32(at + 8 + 8 * k, *b as u32);
            c.write32(at + 12 + 8 * k, (*b >> 32) as u32);
        }
        let verb = release::VERB | bufs.len() as u32 | rar & VALID_BIT;
        c.write32(at, verb | u32::from(bpid) << 16);
        self.cinh.doorbell(r::RCR_AM_RT.at(slot).offset(), RT);
        true
    }

    /// Acquires up to 7 buffers from pool `bpid` (an empty pool gives none).
    pub fn acquire(&mut self, bpid: u16, want: usize) -> Result<Vec<u64>> {
        debug_assert!((1..=BUFS_PER_CMD).contains(&want));
        let c = &*self.cena;
        c.write32(cena::CR + 4, want as u32);
        c.write32(cena::CR, acquire::VERB | self.mr_vb | u32::from(bpid) << 16);
        self.cinh.doorbell(r::CR_RT.offset(), RT);
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let w0 = loop {
            let w0 = c.read32(cena::RR);
            if w0 == u32::MAX {
                return Err(Error::DeviceGone {
                    device: self.name.clone(),
                });
            }
            if w0 & VALID_BIT == self.mr_vb && w0 & 0x7f != 0 {
                // Ownership seen: the rest of the response is read after it (`dma_rmb`, as
                // after any valid bit).
                dma_rmb();
                break w0;
            }
            if Instant::now() > deadline {
                // A late answer carries this valid bit: the next command expects the other.
                self.mr_vb ^= VALID_BIT;
                return Err(Error::RegisterTimeout {
                    device: self.name.clone(),
                    register: "the portal's management response (RR)",
                    expect: "to carry the acquire's valid bit".into(),
                    timeout_ms: COMMAND_TIMEOUT.as_millis() as u64,
                    last: w0,
                });
            }
            std::hint::spin_loop();
        };
        self.mr_vb ^= VALID_BIT;
        if w0 & 0x7f != acquire::VERB || w0 >> 8 & 0xff != acquire::RSLT_OK {
            return Err(Error::DeviceState {
                device: self.name.clone(),
                what: format!(
                    "the buffer manager refused an acquire from pool {bpid} (response {w0:#010x}); \
                     check that the pool's DPBP is enabled, or reset the DPRC"
                ),
            });
        }
        let n = (c.read32(cena::RR + 4) & 7) as usize;
        Ok((0..n.min(want))
            .map(|k| {
                u64::from(c.read32(cena::RR + 8 + 8 * k))
                    | u64::from(c.read32(cena::RR + 12 + 8 * k)) << 32
            })
            .collect())
    }
}
