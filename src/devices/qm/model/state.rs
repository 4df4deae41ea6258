//! The model's state: DPNIs (network interfaces), DPBPs (buffer pools with their BMan free
//! lists), frame queues and the software portals' register state. One lock guards all of it
//! (see the module documentation of [`super`] for why).

use std::collections::VecDeque;
// The words a driver thread and the device thread hand work over with (`Hot`): loom's in the
// model-checking build (`--cfg loom`, `hot_loom.rs`), the standard ones otherwise.
#[cfg(loom)]
use loom::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicBool, AtomicU32};

use crate::device::MacAddr;
use crate::devices::qm::layout::{Fd, EQCR_SIZE, RCR_SIZE, VALID_BIT};

/// Receive FQID of DPNI `d` (our numbering; a real MC assigns them at creation).
pub const fn rx_fqid(d: usize) -> u32 {
    0x100 + 2 * d as u32
}
/// Transmit FQID of DPNI `d`.
pub const fn tx_fqid(d: usize) -> u32 {
    0x101 + 2 * d as u32
}
/// BMan pool id of DPBP `b` (our numbering; 0 is never used).
pub const fn bpid_of(b: usize) -> u16 {
    b as u16 + 1
}

/// Entries in a DPNI's VLAN filter table (`vlan_filter_entries`; a DPNI's is set when it is
/// created, ours is this).
pub const VLAN_ENTRIES: usize = 32;
/// Frames on the wire are at least this long: the MAC pads (as the Intel MACs do).
pub const MIN_FRAME: usize = 60;
/// The largest receive frame at creation, FCS included (our value: standard frames plus a
/// tag; DPDK's `DPAA2_MAX_RX_PKT_LEN` allows up to 10 KiB once configured).
pub const DEFAULT_MAX_FRAME: u16 = 1522;

/// Counters of one DPNI, as `DPNI_GET_STATISTICS` pages 0-2 report them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DpniCounters {
    /// Page 0: frames and bytes received, multicast, broadcast.
    pub ingress: [u64; 6],
    /// Page 1: frames and bytes sent, multicast, broadcast.
    pub egress: [u64; 6],
    /// Page 2: ingress filtered, ingress discarded, no-buffer discards, egress discarded,
    /// egress confirmed.
    pub drops: [u64; 5],
}

/// One DPNI.
#[derive(Debug)]
pub struct Dpni {
    pub mac: MacAddr,
    pub enabled: bool,
    /// `(dpbp id, buffer size)` from `DPNI_SET_POOLS`.
    pub pool: Option<(usize, u16)>,
    /// Receive head room behind the 64-byte annotation.
    pub head_room: u16,
    pub max_frame: u16,
    pub vlan_filter: bool,
    pub vids: Vec<u16>,
    /// The receive frame queue.
    pub rx_fq: VecDeque<Fd>,
    /// A built-in traffic source: this frame arrives whenever a pull finds the queue short
    /// (benchmarks; `None` for none).
    pub source: Option<Vec<u8>>,
    /// Tail-drop threshold of the receive queue in frames (`None`: off).
    pub taildrop: Option<u32>,
    pub link_up: bool,
    pub counters: DpniCounters,
    /// The DPNI wired to this one.
    pub peer: Option<usize>,
    /// Bus mastering: nothing is written to or read from memory while it is off.
    pub master: bool,
}

impl Dpni {
    pub fn new(mac: MacAddr, peer: Option<usize>) -> Dpni {
        Dpni {
            mac,
            enabled: false,
            pool: None,
            head_room: 0,
            max_frame: DEFAULT_MAX_FRAME,
            vlan_filter: false,
            vids: Vec::new(),
            rx_fq: VecDeque::new(),
            source: None,
            taildrop: None,
            link_up: true,
            counters: DpniCounters::default(),
            peer,
            master: false,
        }
    }

    /// `DPNI_RESET`: back to the state after creation (the MAC and the wiring stay). Frames
    /// still queued go back to their pools (returned by the caller).
    pub fn reset(&mut self) -> Vec<Fd> {
        let frames = self.rx_fq.drain(..).collect();
        *self = Dpni {
            counters: self.counters,
            master: self.master,
            source: self.source.take(),
            ..Dpni::new(self.mac, self.peer)
        };
        frames
    }
}

/// One DPBP and its BMan pool.
#[derive(Debug, Default)]
pub struct Dpbp {
    pub enabled: bool,
    /// Free buffer addresses (the pool's fill is their count), used last-in first-out.
    pub bufs: Vec<u64>,
}

/// What the driver's hot path and the device meet on, outside the lock: the doorbells and
/// read triggers, the enqueue ring's consumer index and the release slots. The words the
/// driver writes, the one the device writes, and the release slots (both write) sit on cache
/// lines of their own, and each portal's on its own lines, so that the device thread polling
/// a portal does not pull a line from under a driver writing another word.
#[derive(Debug, Default)]
pub struct Hot {
    /// Written by the driver.
    pub driver: DriverWords,
    /// Written by the device.
    pub device: DeviceWords,
    /// Taken by the driver, freed by the device.
    pub slots: SlotWords,
}

/// The release command ring's handover, lock-free between the driver's thread and the device
/// thread (threaded mode): the driver takes a slot (RAR), writes its command and rings
/// RCR_AM_RT(slot); the device thread takes the rung slots, reads their commands and frees
/// them. A slot is reused only after the device freed it, so the device's reads of a command
/// come before the driver's next writes of that slot (Release on the free, AcqRel on the take).
impl Hot {
    /// RAR: the next release slot, taken, as RAR reads it (SUCCESS, the slot's valid bit and
    /// index); 0 when its last command is not done yet (the driver tries again later).
    pub fn rar(&self) -> u32 {
        let i = self.slots.next.load(Relaxed);
        let slot = i & (RCR_SIZE - 1);
        if self.slots.busy.fetch_or(1 << slot, AcqRel) & 1 << slot != 0 {
            return 0;
        }
        self.slots.next.store((i + 1) & (2 * RCR_SIZE - 1), Relaxed);
        let vb = if i & RCR_SIZE == 0 { VALID_BIT } else { 0 };
        crate::platform::regs::qbman::rar::SUCCESS.bit() | vb | slot
    }

    /// RCR_AM_RT(slot) in threaded mode: the slot's command is noted for the device thread
    /// (after the command's words: Release).
    pub fn ring_release(&self, slot: u32) {
        self.driver.rcr.fetch_or(1 << slot, Release);
    }

    /// The device thread takes the slots rung since its last look (a bit each), the commands'
    /// words visible (Acquire); 0 without touching the word when none was.
    pub fn take_releases(&self) -> u32 {
        if self.driver.rcr.load(Relaxed) == 0 {
            return 0;
        }
        self.driver.rcr.swap(0, Acquire)
    }

    /// The device is done with the slot's command: the driver may take the slot again.
    pub fn free_slot(&self, slot: u32) {
        self.slots.busy.fetch_and(!(1 << slot), Release);
    }
}

/// Written by the driver, read by the device.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct DriverWords {
    /// The producer index of the last EQCR_PI doorbell (with its wrap bit).
    pub pi: AtomicU32,
    /// A pull command is waiting (threaded mode).
    pub vdq: AtomicBool,
    /// A management command is waiting (threaded mode).
    pub cr: AtomicBool,
    /// Release slots whose command is waiting (threaded mode).
    pub rcr: AtomicU32,
    /// The portal was initialised since its last CFG write ([`Portal::init`] complete): until
    /// then its doorbells are refused.
    pub ready: AtomicBool,
}

/// Written by the device, read by the driver.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct DeviceWords {
    /// Next enqueue entry the portal consumes, with its wrap bit (0..2*EQCR_SIZE).
    pub ci: AtomicU32,
}

/// The release slots: allocated by the driver (RAR), freed by the device.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct SlotWords {
    /// Release slots handed out by RAR and not done yet.
    pub busy: AtomicU32,
    /// Next release slot RAR hands out, with its wrap bit (0..16).
    pub next: AtomicU32,
}

/// The register state of one software portal (its memory and its hot words are outside the
/// lock).
#[derive(Debug)]
pub struct Portal {
    /// The valid bit of the next management response.
    pub rr_vb: u32,
    pub cfg: u32,
    pub sdqcr: u32,
    pub ier: u32,
    pub isdr: u32,
    pub iir: u32,
    pub isr: u32,
    pub dqpi: u32,
    /// The initialisation writes seen since the last CFG write ([`INIT_EQCR`], [`INIT_RCR`],
    /// [`INIT_SDQCR`]).
    pub init: u32,
}

/// EQCR_PI was written with RT (the enqueue ring is read-triggered).
pub const INIT_EQCR: u32 = 1;
/// RCR_PI was written with RT (the release ring is read-triggered).
pub const INIT_RCR: u32 = 2;
/// SDQCR was written 0 (no static dequeue).
pub const INIT_SDQCR: u32 = 4;
/// Every initialisation write of a memory-backed portal (Linux and DPDK `qbman_swp_init`).
pub const INIT_ALL: u32 = INIT_EQCR | INIT_RCR | INIT_SDQCR;

impl Default for Portal {
    fn default() -> Portal {
        Portal {
            rr_vb: VALID_BIT,
            cfg: 0,
            sdqcr: 0,
            ier: 0,
            isdr: 0,
            iir: 0,
            isr: 0,
            dqpi: 0,
            init: 0,
        }
    }
}

impl Portal {
    /// The valid bit of the enqueue entry at index `i` (with its wrap bit): 0x80 on the first
    /// pass after reset, flipping on every wrap. (That EQCR_PI reads VB = 1 after reset is
    /// our assumption; the drivers read it rather than assume it.)
    pub fn eqcr_vb(i: u32) -> u32 {
        if i & EQCR_SIZE == 0 {
            VALID_BIT
        } else {
            0
        }
    }
}

/// Which object a token opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Obj {
    Dpni(usize),
    Dpbp(usize),
}

/// Everything the model knows, behind one lock.
#[derive(Debug)]
pub struct SocState {
    pub dpnis: Vec<Dpni>,
    pub dpbps: Vec<Dpbp>,
    /// Two per DPNI: receive (2d) and transmit (2d + 1).
    pub portals: Vec<Portal>,
    pub tokens: Vec<(u16, Obj)>,
    pub next_token: u16,
    pub faults: Faults,
    /// The transmit engine's frame buffer (reused, so that sending allocates nothing).
    pub scratch: Vec<u8>,
}

/// Faults armed by a test, and what the model counted of the driver's mistakes.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// The next pull's results carry a token that is not the pull's.
    pub stale_token_next: bool,
    /// The next management command on a DPNI answers this status instead.
    pub fail_next_command: Option<u8>,
    /// Device accesses the software IOMMU refused.
    pub dma_faults: u64,
    /// Commands whose valid bit was not the expected one (ignored).
    pub stale_commands: u64,
    /// Release or enqueue commands the model could not act on (bad count, unknown pool or
    /// FQ, disabled pool).
    pub bad_commands: u64,
    /// Doorbells and triggers of a portal not initialised since its CFG write (refused).
    pub uninitialised: u64,
}

impl SocState {
    pub fn new(macs: &[MacAddr], peers: &[Option<usize>]) -> SocState {
        debug_assert_eq!(macs.len(), peers.len());
        let n = macs.len();
        SocState {
            dpnis: (0..n).map(|d| Dpni::new(macs[d], peers[d])).collect(),
            dpbps: (0..n).map(|_| Dpbp::default()).collect(),
            portals: (0..2 * n).map(|_| Portal::default()).collect(),
            tokens: Vec::new(),
            next_token: 1,
            faults: Faults::default(),
            scratch: Vec::with_capacity(16 * 1024),
        }
    }

    /// The object `token` opens.
    pub fn object(&self, token: u16) -> Option<Obj> {
        self.tokens.iter().find(|t| t.0 == token).map(|t| t.1)
    }

    /// A new token for `obj`.
    pub fn open(&mut self, obj: Obj) -> u16 {
        let t = self.next_token;
        self.next_token = self.next_token.wrapping_add(1).max(1);
        self.tokens.push((t, obj));
        t
    }

    /// The DPBP whose pool is `bpid`.
    pub fn dpbp_of(&mut self, bpid: u16) -> Option<&mut Dpbp> {
        let b = usize::from(bpid).checked_sub(1)?;
        self.dpbps.get_mut(b)
    }

    /// Returns a buffer to pool `bpid`; false when there is no such enabled pool.
    pub fn release(&mut self, bpid: u16, addr: u64) -> bool {
        match self.dpbp_of(bpid) {
            Some(p) if p.enabled => {
                p.bufs.push(addr);
                true
            }
            _ => {
                self.faults.bad_commands += 1;
                false
            }
        }
    }
}
