//! [`QmRx`]: receive by pull dequeue, with one pull always in flight.
//!
//! The queue owns a storage array of two halves of 32 results (64 bytes each) in DMA memory.
//! A burst reads the results of the pull issued by the burst before (the first word of each,
//! then `dma_rmb`: a nonzero token means the device wrote it), turns each frame
//! descriptor into a packet, zeroes the token, and once the pull's last result (EXPIRED) is
//! read issues the next pull into the other half before it returns (DPDK's
//! `dpaa2_dev_prefetch_rx`). When a burst finds nothing and its pull is complete, it issues
//! and reads one more, so that on the inline model a frame sent is a frame received in one
//! call; on a device that answers later the second look just finds nothing yet.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::config::{QmConfig, QmStats};
use super::layout::{dq, Fd, BUFS_PER_CMD};
use super::portal::SwPortal;
use super::shared::Shared;
use super::QmBus;
use crate::device::{QueueError, QueueStats, RxQueue};
use crate::error::Result;
use crate::platform::barrier::dma_rmb;
use crate::platform::dma::{DmaMemory, LentBuffers, Meta, NotLent, Packet, Pool, TakeBacks};
use crate::platform::mmio::Mmio;
use crate::platform::regs::qbman as r;

/// Results per storage half.
const HALF: usize = super::layout::pull::MAX_FRAMES;
/// Idle bursts between looks at a register, to notice a device that is gone.
const GONE_CHECK: u32 = 64;
/// How long dropping the queue waits for its last pull's results.
const DRAIN: Duration = Duration::from_millis(200);

/// The pull whose results the queue is reading.
#[derive(Clone, Copy, Debug)]
struct Active {
    /// Byte offset of its storage half.
    base: usize,
    tok: u8,
    /// The next result to read.
    next: usize,
}

/// A receive queue of a qm port.
pub struct QmRx<B: QmBus> {
    portal: SwPortal<B::Mmio>,
    /// The pull results' storage; `None` only once a queue dropped while the device might
    /// still write into it has given it up for good (see `Drop`).
    storage: Option<DmaMemory>,
    /// The pool's lending table (the shared one, kept here for the burst's take-backs).
    lent: Arc<LentBuffers>,
    fqid: u32,
    pull: usize,
    active: Option<Active>,
    half: usize,
    tok: u8,
    target: usize,
    idle: u32,
    stats: QueueStats,
    qm: QmStats,
    shared: Arc<Shared<B>>,
}

impl<B: QmBus> QmRx<B> {
    pub(super) fn new(shared: Arc<Shared<B>>, config: &QmConfig) -> Result<QmRx<B>> {
        let (cena, cinh) = shared
            .bus
            .portal(0)
            .ok_or_else(|| crate::Error::DeviceState {
                device: shared.name.clone(),
                what: "the bus offers no software portal 0 for the receive queue".into(),
            })?;
        let portal = SwPortal::init(cena, cinh, shared.name.clone())?;
        let storage = DmaMemory::allocate(2 * HALF * dq::SIZE, shared.bus.dma_mapper())?;
        let mut q = QmRx {
            portal,
            storage: Some(storage),
            lent: shared.lender.table.clone(),
            fqid: shared.rx_fqid,
            pull: config.pull,
            active: None,
            half: 0,
            tok: 0,
            target: config.hw_buffers,
            idle: 0,
            stats: QueueStats::default(),
            qm: QmStats::default(),
            shared,
        };
        q.top_up();
        Ok(q)
    }

    #[inline(always)]
    fn storage(&self) -> &DmaMemory {
        self.storage
            .as_ref()
            .expect("the storage goes only in Drop")
    }

    /// What the queue counted of the device's mistakes.
    pub fn qm_stats(&self) -> QmStats {
        self.qm
    }

    /// Buffers of the queue's pool the device holds now (in its pool, queued frames, or
    /// frames in flight).
    pub fn lent(&self) -> usize {
        self.lent.lent()
    }

    /// Issues the next pull into the other storage half.
    fn issue(&mut self) {
        self.tok = self.tok.wrapping_add(1).max(1);
        let base = self.half * HALF * dq::SIZE;
        self.half ^= 1;
        let at = self.storage().iova() + base as u64;
        self.portal.pull(at, self.fqid, self.pull, self.tok);
        self.active = Some(Active {
            base,
            tok: self.tok,
            next: 0,
        });
    }

    /// Reads the active pull's results into `batch` until it holds `limit` packets, a result
    /// is not written yet, or the pull is over.
    ///
    /// The usual result (this pull's token, a dequeue response with a frame, not the pull's
    /// last, a single-buffer FD without error bits) is one mask and one compare of its first
    /// word, then [`dma_rmb`] (a nonzero token means the device wrote it, and the rest is read
    /// after it), and one test of the FD's format and error bits; a run of them is taken back
    /// in one pass ([`TakeBacks::take_run`]: every buffer checked, the packets built in the
    /// batch). Anything else, and the pull's last result, goes through the careful path of
    /// one result (its first word, then `dma_rmb`). The storage half is checked once per
    /// burst; the take-backs and the queue's counters are counted once per burst. Kept out of
    /// line on arm64, so that `scripts/arm64 barriers` finds its `dma_rmb` in the disassembly.
    #[cfg_attr(target_arch = "aarch64", inline(never))]
    fn harvest(&mut self, batch: &mut Vec<Packet>, limit: usize) {
        let Some(mut a) = self.active else { return };
        // `None` only once `Drop` gave the storage up, and then nothing is active.
        let Some(storage) = self.storage.as_ref() else {
            return;
        };
        // The pull's storage half, checked once: each result is then words `8 * next..` (a
        // power of two of them, so the index is masked, never tested again).
        let results = storage.words::<u64>(a.base, HALF * dq::SIZE / 8);
        let mut back = self.lent.take_backs();
        let mut c = Counts::default();
        let start = batch.len();
        let (mask, usual) = dq::usual(a.tok);
        let over = loop {
            let n = limit.saturating_sub(batch.len()).min(self.pull - a.next);
            if n == 0 {
                break a.next == self.pull;
            }
            let first = a.next;
            let run = back.take_run(batch, n, |k| {
                let at = (first + k) * dq::SIZE / 8;
                let w0 = results.load(at, Relaxed);
                if w0 & mask != usual {
                    return None;
                }
                // The token seen: the rest of the result is read after it.
                dma_rmb();
                let [addr, w1, w2] = [0, 1, 2].map(|j| results.load(at + dq::FD / 8 + j, Relaxed));
                if !Fd::plain_u64s(w1, w2) {
                    return None;
                }
                results.store(at, 0, Relaxed);
                Some((addr, Fd::offset_u64(w1), w1 as u32))
            });
            a.next += run.decoded;
            c.bytes += run.bytes;
            if let Some(e) = run.refused {
                refused(&self.shared.name, e, &mut c);
            }
            if run.decoded == n || run.refused.is_some() {
                continue;
            }
            // The careful path: one result.
            let at = a.next * dq::SIZE / 8;
            let w0 = results.load(at, Relaxed);
            // The token first, the rest of the result after it.
            dma_rmb();
            let tok = dq::tok(w0);
            if tok == 0 {
                break false;
            }
            results.store(at, 0, Relaxed);
            let stat = dq::stat(w0);
            if tok != a.tok || dq::verb(w0) & dq::VERB_MASK != dq::VERB_DQ {
                c.stale += 1;
            } else if stat & dq::STAT_VALIDFRAME != 0 {
                let fd = Fd::from_u64s(std::array::from_fn(|k| {
                    results.load(at + dq::FD / 8 + k, Relaxed)
                }));
                if let Err(e) = take(&mut back, fd, batch, &mut c) {
                    refused(&self.shared.name, e, &mut c);
                }
            }
            a.next += 1;
            if stat & dq::STAT_EXPIRED != 0 || a.next == self.pull {
                break true;
            }
        };
        drop(back);
        self.active = if over { None } else { Some(a) };
        // Every packet the burst added is one taken (`take` adds nothing else).
        self.stats.packets += (batch.len() - start) as u64;
        self.stats.bytes += c.bytes;
        self.stats.dropped += c.errors + c.refused;
        self.qm.stale_results += c.stale;
        self.qm.error_frames += c.errors;
        self.qm.refused_fds += c.refused;
    }

    /// Releases buffers of the pool to the device until it holds the target, when it holds
    /// fewer than the target minus one command's worth.
    fn top_up(&mut self) {
        if self.lent.lent() + BUFS_PER_CMD > self.target {
            return;
        }
        let mut fresh = Vec::with_capacity(BUFS_PER_CMD);
        while self.lent.lent() < self.target {
            let want = (self.target - self.lent.lent()).min(BUFS_PER_CMD);
            if self.lent.pool().alloc_bulk(want, &mut fresh) == 0 {
                self.stats.no_room += 1;
                return;
            }
            // Lent before they are released: from the release on, the device (and a transmit
            // queue acquiring the surplus back) may hand them out.
            let mut addrs = [0u64; BUFS_PER_CMD];
            let n = fresh.len();
            for (a, p) in addrs.iter_mut().zip(fresh.drain(..)) {
                // The pool is the table's: lending cannot fail.
                *a = self.lent.lend(p).unwrap_or_else(|p| p.buf_iova());
            }
            if !self.portal.release(self.shared.lender.bpid, &addrs[..n]) {
                // No release slot now: the buffers come back and wait for the next burst.
                let off = self.lent.pool().headroom() as u16;
                for &a in &addrs[..n] {
                    let _ = self.lent.take_back(a, off, 0, Meta::default());
                }
                return;
            }
        }
    }
}

/// What one [`QmRx::harvest`] counted, added to the queue's counters when it ends.
#[derive(Default)]
struct Counts {
    bytes: u64,
    stale: u64,
    errors: u64,
    refused: u64,
}

/// Turns a received frame descriptor into a packet in `batch`, or counts why not: a frame
/// with error bits or in another format than single-buffer is dropped (its buffer goes back
/// to the pool); a buffer the device was never given is refused by the take-back's checks
/// (the error, which the caller counts).
#[inline(always)]
fn take(
    back: &mut TakeBacks<'_>,
    fd: Fd,
    batch: &mut Vec<Packet>,
    c: &mut Counts,
) -> Result<(), NotLent> {
    if fd.ctrl() & Fd::CTRL_ERR_MASK == 0 && fd.format() == 0 {
        back.take_to(batch, fd.addr(), fd.offset(), fd.len())?;
        c.bytes += u64::from(fd.len());
    } else {
        drop(back.take(fd.addr(), fd.offset(), fd.len(), Meta::default())?);
        c.errors += 1;
    }
    Ok(())
}

/// A frame descriptor the take-back refused (kept out of the receive loop).
#[cold]
#[inline(never)]
fn refused(port: &str, e: NotLent, c: &mut Counts) {
    tracing::debug!(port = %port, error = %e, "frame descriptor refused");
    c.refused += 1;
}

impl<B: QmBus> RxQueue for QmRx<B> {
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        let start = batch.len();
        for round in 0..2 {
            if self.active.is_none() {
                self.issue();
            }
            self.harvest(batch, start.saturating_add(max));
            if batch.len() > start || self.active.is_some() || round == 1 {
                break;
            }
        }
        if self.active.is_none() {
            self.issue();
        }
        let n = batch.len() - start;
        if n == 0 {
            self.idle += 1;
            if self.idle % GONE_CHECK == 0 && self.portal.cinh().read(r::CFG) == u32::MAX {
                return Err(QueueError::DeviceGone);
            }
        }
        self.top_up();
        Ok(n)
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }

    fn pool(&self) -> &Pool {
        self.lent.pool()
    }
}

impl<B: QmBus> Drop for QmRx<B> {
    /// Waits for the last pull's results (the device writes into the storage until then),
    /// and frees their frames.
    fn drop(&mut self) {
        let deadline = Instant::now() + DRAIN;
        let mut frames = Vec::new();
        while self.active.is_some() {
            self.harvest(&mut frames, usize::MAX);
            frames.clear();
            if Instant::now() > deadline || self.portal.cinh().read(r::CFG) == u32::MAX {
                tracing::warn!(port = %self.shared.name, "receive queue dropped with its pull unanswered; its storage is kept");
                // The device may still write into it: never unmapped, never reused.
                std::mem::forget(self.storage.take());
                return;
            }
            std::hint::spin_loop();
        }
    }
}
