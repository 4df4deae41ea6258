//! The engines' state: what the receive and transmit engines of a software 82599 port keep
//! between register writes (under the port's `rx` and `tx` locks), apart from their logic in
//! `rx.rs` (with `rx_config.rs`, `rx_ring.rs` and `source.rs`) and `tx.rs`, so that the register
//! file (`regs.rs`) can hold it without the engines and the register file importing each other.

use crate::platform::dma::{DmaRing, DmaWindow};

/// Largest number of queues the transmit engine keeps state for.
const TX_QUEUES: usize = 128;

/// A frame on the wire (no FCS bytes; `fcs_ok` says whether the sender appended a valid one).
#[derive(Clone, Debug)]
pub(super) struct WireFrame {
    pub(super) data: Vec<u8>,
    pub(super) fcs_ok: bool,
}

/// The built-in traffic source's state.
#[derive(Debug)]
pub(super) struct SourceState {
    pub(super) frame: Vec<u8>,
    pub(super) remaining: Option<u64>,
}

/// Receive-side state of a port (held under its `rx` lock).
#[derive(Debug, Default)]
pub(super) struct RxEngine {
    pub(super) source: Option<SourceState>,
    pub(super) scratch: Vec<u8>,
    /// The frame at the head of the inbound queue already counted as waiting (RNBC).
    pub(super) blocked: bool,
    /// Counts of this service run, added to the registers once at its end.
    pub(super) tally: RxTally,
    /// Frames already parsed and checksum-verified, by a hash of their bytes (direct-mapped,
    /// [`ANALYSES`] entries): a traffic source repeats one frame, and forwarded traffic cycles
    /// through a few, so each is analysed once. An entry is used only for the exact bytes and
    /// TPIDs it was made for.
    pub(super) analyses: Vec<Option<Analysis>>,
    /// Buffers of the frames this run received, given back to the sender at its end.
    pub(super) used: Vec<Vec<u8>>,
    /// Frames taken from the inbound FIFO in one go; empty between runs (kept for its
    /// capacity).
    pub(super) pending: std::collections::VecDeque<WireFrame>,
    /// The registers' snapshot (`rx_config.rs`), kept from run to run until a register other
    /// than a tail is written (or the device is reset).
    pub(super) config: Option<RxConfig>,
    /// The ring being filled (`rx_ring.rs`); dropped with the snapshot.
    pub(super) cursor: Option<RingCursor>,
    /// The RSS key of the snapshot (with RSS on).
    pub(super) rss_key: RssKey,
}

/// Entries of [`RxEngine::analyses`].
pub(super) const ANALYSES: usize = 256;

/// A frame's parse and checksum verification, which depend only on its bytes and the TPIDs.
#[derive(Debug)]
pub(super) struct Analysis {
    pub(super) frame: Vec<u8>,
    pub(super) tpids: [u16; 2],
    pub(super) headers: Option<super::frame::Headers>,
    pub(super) csum: super::frame::Csum,
    /// The frame's whole verdict and the register epoch (`SimRegs::config_epoch`) it was
    /// judged under: valid while no register but a tail has been written since.
    pub(super) verdict: Option<(u64, Verdict)>,
}

/// Receive counters gathered during one run of the engine and flushed once at its end (one
/// atomic add per counter and run instead of a dozen per frame). Every run ends with a flush
/// before the `rx` lock is released, so a reader sees whole runs, as with the real part's
/// counters, which are also updated behind the frames.
#[derive(Debug, Default)]
pub(super) struct RxTally {
    /// Frames placed (GPRC, RXDGPC, the model's rx_frames).
    pub(super) frames: u32,
    /// Their bytes on the wire, FCS included (GORC).
    pub(super) wire: u64,
    /// Their bytes as written (the model's rx_bytes).
    pub(super) delivered: u64,
    pub(super) bucket: [u32; 6],
    pub(super) bcast: u32,
    pub(super) mcast: u32,
    /// Per statistics counter (RQSMR map): frames and delivered bytes (QPRC, QBRC).
    pub(super) q_frames: [u32; 16],
    pub(super) q_bytes: [u64; 16],
    /// Frames whose fate is final, and their wire bytes (TPR, TORL).
    pub(super) total: u32,
    pub(super) total_wire: u64,
}

impl RxEngine {
    pub(super) fn new(source: Option<SourceState>) -> RxEngine {
        RxEngine {
            source,
            ..RxEngine::default()
        }
    }

    /// A device reset forgets what was in flight; the traffic source is part of the wire and
    /// keeps its state.
    pub(super) fn reset(&mut self) {
        self.blocked = false;
        self.forget_config();
    }

    /// Drops the register snapshot and the ring cursor: the next frame reads them afresh.
    pub(super) fn forget_config(&mut self) {
        self.config = None;
        self.cursor = None;
    }
}

/// One transmit queue's state.
#[derive(Debug, Default)]
pub(super) struct TxQueue {
    /// Context slots 0 and 1 (`tx_offload.rs`).
    pub(super) ctx: [super::tx_offload::TxContext; 2],
    pub(super) frame: Vec<u8>,
    pub(super) in_frame: bool,
    pub(super) vle: bool,
    pub(super) idx: usize,
    /// The offloads the frame's first data descriptor asked for (`tx_offload.rs`).
    pub(super) offload: super::tx_offload::Offload,
    /// Bytes the frame may gather at most (`MAX_FRAME`, or the TSO limit with TSE).
    pub(super) limit: usize,
    pub(super) bad: bool,
    /// A zero-length data descriptor was fetched: the queue's DMA is hung (the part needs a
    /// reset); cleared by a reset or by disabling the queue.
    pub(super) hung: bool,
}

/// A transmit walk's state for its quick path into the void (`tx_void.rs`): the ring and, once
/// a buffer was seen, the pool's window.
pub(super) struct VoidRun<'v, 'a> {
    pub(super) ring: DmaRing<'v, 'a>,
    pub(super) pool: Option<DmaWindow<'v, 'a>>,
}

/// Transmit-side state of a port (held under its `tx` lock).
#[derive(Debug)]
pub(super) struct TxEngine {
    pub(super) q: Vec<TxQueue>,
    /// Frame buffers that went nowhere (no peer), kept for the next frames: no allocation per
    /// frame in the steady state.
    pub(super) spare: Vec<Vec<u8>>,
    /// The list of frames of a run, kept between runs for its capacity.
    pub(super) out: Vec<WireFrame>,
}

/// Frame buffers kept for reuse at most: a walk of a whole ring (up to 4,096 descriptors; the
/// bench's rings have 512) takes one per frame before any comes back, and each missing one is
/// an allocation.
pub(super) const SPARE: usize = 1024;

impl Default for TxEngine {
    fn default() -> Self {
        TxEngine {
            q: (0..TX_QUEUES).map(|_| TxQueue::default()).collect(),
            spare: Vec::new(),
            out: Vec::new(),
        }
    }
}

/// Transmit counters of one run, flushed once at its end (see `RxTally` in `rx.rs`).
#[derive(Debug, Default)]
pub(super) struct TxTally {
    /// Frames sent (GPTC, TPT, TXDGPC, the model's tx_frames) and their bytes without FCS.
    pub(super) frames: u32,
    pub(super) bytes: u64,
    pub(super) bucket: [u32; 6],
    pub(super) bcast: u32,
    pub(super) mcast: u32,
    pub(super) q_frames: [u32; 16],
    pub(super) q_bytes: [u64; 16],
    pub(super) dropped: u64,
}

impl TxEngine {
    /// A queue was disabled: a frame half gathered is lost, as are its contexts.
    pub(super) fn stop(&mut self, q: usize) {
        self.q[q] = TxQueue::default();
    }
}

/// The receive configuration registers of one batch.
#[derive(Clone, Copy, Debug)]
pub(super) struct RxConfig {
    /// `SimRegs::config_epoch` when the registers were read (before reading them).
    pub(super) epoch: u64,
    /// VLNCTRL.VET.
    pub(super) vet: u16,
    /// EXVET.VET_EXT in extended VLAN mode (CTRL_EXT b26), else `None`.
    pub(super) outer: Option<u16>,
    /// Largest untagged frame, FCS included: 1518, or MAXFRS.MFS with HLREG0.JUMBOEN.
    pub(super) max: usize,
    /// VLNCTRL.VFE.
    pub(super) vfe: bool,
    /// HLREG0.RXCRCSTRP clear: the FCS is delivered.
    pub(super) keep_fcs: bool,
    /// RXCSUM.PCSD: the RSS hash is written back.
    pub(super) pcsd: bool,
    /// MRQC when MRQC.MRQE = 1 (RSS); the key is read with it (`rx_config`).
    pub(super) rss: Option<u32>,
}

/// The RSS key (RSSRK, byte 4i in bits 7:0 of RSSRK(i)).
#[derive(Clone, Copy, Debug)]
pub(super) struct RssKey(pub(super) [u8; 40]);

impl Default for RssKey {
    fn default() -> Self {
        RssKey([0; 40])
    }
}

/// One receive ring as the engine fills it: the geometry of the snapshot, the head the engine
/// advances (written to RDH as it goes) and the tail last read.
#[derive(Clone, Copy, Debug)]
pub(super) struct RingCursor {
    pub(super) q: usize,
    /// Descriptors (RDLEN / 16).
    pub(super) n: usize,
    /// RDBAH:RDBAL.
    pub(super) base: u64,
    pub(super) head: usize,
    pub(super) tail: usize,
    /// Buffer size (SRRCTL.BSIZEPKT, 2 KB when 0).
    pub(super) chunk: usize,
    /// RXDCTL.VME: strip the tag.
    pub(super) vme: bool,
    /// The statistics counter RQSMR maps the queue to.
    pub(super) stat: usize,
}

impl RingCursor {
    /// Free descriptors between head and the tail last read (none if either is out of range).
    pub(super) fn free(&self) -> usize {
        if self.head >= self.n || self.tail >= self.n {
            return 0;
        }
        let d = self.tail + self.n - self.head;
        if d >= self.n {
            d - self.n
        } else {
            d
        }
    }

    /// The ring position `i` descriptors after the head.
    pub(super) fn at(&self, i: usize) -> usize {
        let p = self.head + i;
        if p >= self.n {
            p - self.n
        } else {
            p
        }
    }
}

/// What the receive path decides for a frame's bytes under one register snapshot.
#[derive(Clone, Copy, Debug)]
pub(super) enum Verdict {
    /// Longer than the size limit (ROC).
    Oversize,
    /// Refused by the VLAN or the address filter.
    Filtered,
    Deliver(Delivery),
}

/// Where and how a frame is delivered.
#[derive(Clone, Copy, Debug)]
pub(super) struct Delivery {
    pub(super) q: usize,
    /// Write-back status and errors (DD, checksums, VP, VEXT), without EOP and injected RXE.
    pub(super) staterr: u32,
    /// Write-back qword 0: packet type, RSS type and hash.
    pub(super) lo: u64,
    /// The recognised tag: its offset and TCI (stripped if the queue strips).
    pub(super) tag: Option<(usize, u16)>,
}
