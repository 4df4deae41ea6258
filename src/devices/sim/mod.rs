//! The software 82599 ("sim"): a register-level model of the Intel 82599 that the unchanged
//! ixgbe driver runs on, in memory.
//!
//! It exists so that the driver's init sequence, rings, VLAN modes and RSS can be tested on any
//! machine, and so that benchmarks have a device that writes descriptors from another core the
//! way DMA does. It models what a driver following the notes' init order (section 1.4) touches,
//! and logs what it does not: every write of bits the model does not act on (or to an offset it
//! does not know) is reported once per register with `tracing::warn!`, so gaps are visible
//! instead of silently "working".
//!
//! # Ports and wiring
//! A [`SimPort`] is a cheap `Clone` handle (an `Arc` inside) implementing [`Bus`](crate::platform::bus::Bus): the driver
//! gets one clone, a test keeps another to inject faults and read the model's own counters
//! ([`SimCounters`]). Ports are wired in pairs ([`SimPort::pair`]): a frame transmitted by one
//! arrives at the other. [`SimPort::open_named`] keeps a process-wide registry of `sim:N` ports:
//! ports 2k and 2k+1 are wired to each other (whichever is opened second finds the first);
//! opening a live index again returns a handle to the same device (its first configuration
//! wins). A port may also carry a built-in traffic [`Source`] that feeds its receive side.
//! All sim ports share one software IOMMU ([`SoftIommu`](crate::platform::dma::SoftIommu)), as all VFIO devices share one
//! container, so a buffer from one port's pool can be sent through another port.
//!
//! # When work happens
//! - [`Mode::Inline`] (tests, deterministic): inside the driver's register writes. A TDT write
//!   runs that queue's transmit engine and delivers each frame to the peer's (or, with MAC
//!   loopback, its own) receive engine before the write returns. An RDT write runs the receive
//!   engine, which also lets the traffic source fill the free descriptors. A frame that finds no
//!   free descriptor is dropped and counted at once. No port lock is held while another port's
//!   lock is taken (frames are handed over through the peer's inbound FIFO), so two driver
//!   threads on the two ports of a pair cannot deadlock.
//! - [`Mode::Threaded`] (benchmarks): one device thread per port polls the enabled transmit
//!   tails, the inbound FIFO and the source, and does the same work. Frames that find the ring
//!   full wait in the inbound FIFO (the packet buffer: RXPBSIZE(0) bytes, 512 KiB at reset)
//!   unless the queue has SRRCTL.DROP_EN; when the FIFO overflows they are dropped (MPC). The
//!   thread ends when the last handle to the device is dropped; idle, it spins briefly, then
//!   yields, then sleeps.
//!
//! # Registers (reset values in parentheses)
//! - CTRL.RST (b26) or CTRL.LNK_RST (b3): a full reset, synchronous inside the write; both bits
//!   read back clear. Every register returns to its reset value, except MTA, VFTA, VLVF and
//!   VLVFB, which a reset does not promise to clear (drivers clear them). Ring state, context
//!   slots, counters and the inbound FIFO are cleared; the link goes down. Reset values: RAL0/RAH0
//!   = the port's MAC with AV; EEC = PRES|ARD (0x300); RDRXCTL = CRCSTRIP|DMAIDONE (0xA);
//!   HLREG0 = TXCRCEN|RXCRCSTRP|TXPADEN (0x403); MAXFRS.MFS = 1518; AUTOC.LMS = 100 (KX4/KX/KR
//!   autonegotiation) (0x8000); DMATXCTL.VT = 0x8100 (0x81000000); VLNCTRL.VET = 0x8100;
//!   EXVET.VET_EXT = 0x8100 (0x81000000); SRRCTL(n) = BSIZEPKT 2 KB, BSIZEHDR 256 (0x402);
//!   DCA_RXCTRL(n) = bit 12 (0x1000); RXPBSIZE(0) = 512 KiB; TXPBSIZE(0) = 160 KiB;
//!   DTXMXSZRQ = 0x10; everything else 0 (RXDCTL/TXDCTL disabled, RXCTRL.RXEN and DMATXCTL.TE
//!   off, FCTRL 0, LINKS down, all counters 0).
//! - STATUS: LAN_ID = port index & 1, GIO master enable (b19) unless CTRL.GIO_DIS, LinkUp (b7).
//!   EERD: a START read completes at once; words 0..2 are the MAC, the rest 0xFFFF.
//! - Link: writing AUTOC with AN_RESTART (b12, self-clearing) or FLU (b0) brings the link up;
//!   after a reset it is down until then. With [`SimConfig::link_up_after_reads`] = N, the first
//!   N reads of LINKS after that still see it down (deterministic "training"). Up, LINKS reads
//!   UP (b30) | KX_AN_COMP (b31) | speed 10G (b29:28 = 11; 1G when AUTOC.LMS is 000, 010 or
//!   101). [`SimPort::link_down`] drops it until [`SimPort::link_restore`]. EICR.LSC is raised
//!   on every change.
//! - Enable bits (RXDCTL/TXDCTL.ENABLE, RXCTRL.RXEN, DMATXCTL.TE) are storage: they read back
//!   at once. Disabling a transmit queue discards a half-gathered frame and its contexts.
//! - Errata the model checks ([`SimCounters::errata`], each logged): RXCTRL.RXEN may change only
//!   while SECRXCTRL.RX_DIS is set (SECRXSTAT.SECRX_RDY reads 1 as soon as it is: the model's
//!   security block is always idle); DMATXCTL.TE may be set only while TXPBTHRESH(0) fits
//!   TXPBSIZE(0) (threshold <= size in KB - 10; reset values 150 and 160 KB); AUTOC may be
//!   written only while SW_FW_SYNC.SW_MAC_CSR_SM is held (SWSM.SMBI is set by the read that
//!   finds it clear, as on the part; the model has no firmware, so nothing else holds it).
//! - Statistics are read-to-clear: GPRC, GPTC, TPR, TPT, BPRC, MPRC, BPTC, MPTC, PRC64..1522,
//!   PTC64..1522, RUC, ROC, CRCERRS, MPC(0), RNBC(0), QPRC(n), QPTC(n), QPRDC(n), RXDGPC, TXDGPC.
//!   64-bit pairs (GORCL/H, GOTCL/H, TORL/H, QBRC_L/H, QBTC_L/H): reading L returns the low 32
//!   bits, clears the counter and latches the high bits; reading H returns the latch and clears
//!   it. So "L then H", as Linux and ixy read them, gives the full value. TPR/TORL count every
//!   frame whose fate is final (delivered or dropped after RX was found enabled). Octet counters count
//!   the frame with its 4 FCS bytes (and any tag). Per-queue counters follow RQSMR(n)
//!   (0x2300 + 4n) and TQSM(n) (0x8600 + 4n), which map every queue to counter 0 at reset, as
//!   on the real part.
//! - EICR (read-to-clear, write-1-to-clear), EICS (sets EICR bits), EIMS/EIMC (set/clear the
//!   mask); with interrupts routed ([`Bus::enable_interrupts`](crate::platform::bus::Bus::enable_interrupts))
//!   and GPIE.MSIX_MODE, receive write-backs raise their IVAR vector's cause and unmasked
//!   causes signal the vector's eventfd, EIAC auto-clears, EIAM_EX auto-masks (GPIE.EIAME),
//!   EITR throttles: see `irq.rs`.
//! - RX: see `rx.rs` for the order of decisions; a frame longer than one buffer is scattered
//!   over as many descriptors as it needs, all or nothing (`rx_scatter.rs`). VLAN: a tag is recognised when the ethertype at 12 is
//!   VLNCTRL.VET; in extended mode (CTRL_EXT b26) the outer tag must carry EXVET.VET_EXT and the
//!   inner one VLNCTRL.VET: filter (VLNCTRL.VFE + VFTA, VID 0 included, as on the part) and
//!   strip (RXDCTL.VME, per queue) act on the inner tag and the outer stays in the buffer. VP
//!   (b3) is set whenever a recognised tag was seen, stripped or not (82599 behaviour); the
//!   descriptor's VLAN field holds the TCI only when stripped. VEXT (b9) marks double-tagged
//!   frames in extended mode. Max frame: 1518, or MAXFRS.MFS with HLREG0.JUMBOEN, + 4 per
//!   recognised tag, FCS included. Frames under 60 bytes are dropped (RUC).
//! - FCS: frames on our wire carry none. With HLREG0.RXCRCSTRP clear the receiver appends the
//!   real CRC-32 of the frame as received (4 bytes, counted in the length), as the part would
//!   deliver it. RDRXCTL.CRCSTRIP must match and is not consulted. A sender with HLREG0.TXCRCEN
//!   clear sends no FCS: the receiver drops the frame (CRCERRS).
//! - RSS: MRQC.MRQE = 0001 with the hash-field bits 16..23; Toeplitz over source/destination
//!   address (and ports for TCP/UDP) with RSSRK (byte 4i in bits 7:0 of RSSRK(i)); queue =
//!   RETA entry (hash & 0x7F), bits 3:0. Frames no enabled field matches go to queue 0. The
//!   hash is written back (bytes 4..7) when RXCSUM.PCSD is set, with the RSS type in bits 3:0
//!   and the packet type (IPv4 b4, IPv6 b6, TCP b8, UDP b9) in pkt_info.
//! - Checksums: IPv4 header (IPCS b6, IPE b31) and TCP/UDP over IPv4/IPv6 (L4CS b5, UDPCS b4,
//!   TCPE b30) are always verified, as the 82599 does. A UDP/IPv4 frame whose checksum field
//!   is 0 (no checksum) gets L4CS and TCPE: the 82599's zero-checksum erratum, which the part
//!   shows only sometimes and the model always (Linux and DPDK ignore TCPE for UDP there).
//! - MAC loopback (HLREG0.LPBK): transmitted frames come back into this port's receive path
//!   instead of the wire, link or not.
//! - No free descriptor: inline mode drops at once; threaded mode waits in the FIFO (RNBC(0)
//!   counts the wait) unless SRRCTL.DROP_EN. Drops count QPRDC(map(q)) with DROP_EN, else
//!   MPC(0) and RNBC(0).
//! - TX: see `tx.rs`; checksum insertion (POPTS.IXSM/TXSM) and TSO (DCMD.TSE, segments masked
//!   by DTXTCPFLGL/H: reset 0x0FF6_0FF6 and 0x0F7F) in `tx_offload.rs`. Bus mastering off (the default until the driver enables it through
//!   [`Bus::enable_bus_master`](crate::platform::bus::Bus::enable_bus_master)) means no DMA at all.
//!
//! # Not modelled (logged once when a driver touches it)
//! Interrupt auto-mask through EIAM (EIAM_EX(0) is modelled), the "other" and transmit causes' vectors (IVAR's transmit
//! entries and EITR's low-latency bits are stored without a log), MSI and INTx, flow control, DCB,
//! VMDq/SR-IOV pools (VLVF, VLVFB, RAH pool bits, MRQC modes other than RSS), header split and
//! legacy receive descriptors (SRRCTL.DESCTYPE other than 001 is treated as one buffer), RSC,
//! CFI filtering (VLNCTRL.CFIEN), the 82598-only VLNCTRL.VME, SCTP CRC insertion on transmit,
//! legacy transmit descriptors (sent as plain buffers), IPv6 extension-header
//! parsing for RSS and checksums, MCSTCTRL (the MTA hash always uses bits 47:36), the PHY
//! (every AUTOC value is accepted) and the flash/EEPROM beyond the MAC words.
//!
//! # Fault injection (on the handle)
//! [`SimPort::inject_rx_errors`], [`SimPort::split_rx`], [`SimPort::link_down`] /
//! [`SimPort::link_restore`], [`SimPort::surprise_remove`], and DMA faults, which any bad
//! address the driver programs produces by itself: every device access goes through the
//! software IOMMU, a refused one is counted ([`SimCounters::dma_faults`]) and stops the engine's
//! work on that frame. Injected faults are not undone by a device reset (only by their own
//! counters running out, or [`SimPort::link_restore`]).

mod engine;
mod frame;
mod irq;
mod layout;
mod msix;
mod port;
mod regs;
mod rx;
mod rx_config;
mod rx_quick;
mod rx_ring;
mod rx_scatter;
mod source;
mod tx;
mod tx_offload;
mod tx_void;

#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_offload;
#[cfg(test)]
mod tests_scatter;
#[cfg(test)]
mod tests_vlan;

pub use crate::devices::worker::{pin_current_thread, DeviceThread};
pub use port::{Mode, SimConfig, SimPort, Source, WorkerWatch};
pub use regs::{SimRegs, BAR_LEN};

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A model-side counter.
#[derive(Debug, Default)]
struct Ctr(AtomicU64);

impl Ctr {
    fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }
    fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// The model's own counters of one port (not registers: reading them clears nothing).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct SimCounters {
            $($(#[$doc])* pub $name: u64,)*
        }

        /// Written by the engines on every frame: kept on its own cache lines, away from the
        /// flags the driver's register accesses read.
        #[derive(Debug, Default)]
        #[repr(align(64))]
        struct Counters {
            $($name: Ctr,)*
        }

        impl Counters {
            fn snapshot(&self) -> SimCounters {
                SimCounters { $($name: self.$name.get(),)* }
            }
        }
    };
}

counters! {
    /// Frames that left the port (to the peer, into loopback, or into an unwired void).
    tx_frames,
    /// Bytes of those frames (no FCS).
    tx_bytes,
    /// Transmitted frames lost: link down, or a buffer the device could not read.
    tx_dropped,
    /// Frames written into a receive ring.
    rx_frames,
    /// Bytes written for them (after strip, with FCS when not stripped).
    rx_bytes,
    /// Received frames dropped because their ring had no free descriptor.
    rx_no_descriptor,
    /// Received frames dropped because the inbound FIFO (packet buffer) was full.
    rx_fifo_overflow,
    /// Received frames dropped by the address or VLAN filter.
    rx_filtered,
    /// Received frames dropped because receive was off (RXEN, queue, link, bus master).
    rx_not_ready,
    /// Received frames dropped as bad (runt, oversize, FCS).
    rx_errors,
    /// Device accesses the software IOMMU refused.
    dma_faults,
    /// Register sequences the real part is documented to hang or misbehave on, which the
    /// model notices (each also logged): RXCTRL.RXEN changed while SECRXCTRL.RX_DIS was clear
    /// (the receive-enable erratum, Linux/DPDK `ixgbe_enable_rx_dma_82599`), transmit
    /// enabled with TXPBTHRESH(0) above TXPBSIZE(0) in KB - 10 (`ixgbe_set_rxpba_generic`), and
    /// AUTOC written without the SW/FW semaphore (`prot_autoc_write_82599`).
    errata,
    /// Transmit queues hung by a data descriptor of length 0 (the part hangs on one).
    tx_hangs,
    /// Transmitted frames dropped because their offload request was malformed (a TSE frame
    /// with MSS 0, a header that does not match MACLEN + IPLEN + L4LEN, checksum offsets past
    /// the frame: `tx_offload.rs`); each reason is also logged once.
    tx_malformed,
    /// Frames the traffic source produced.
    source_frames,
    /// Receive write-backs that carried an injected RXE.
    injected_rx_errors,
    /// Threaded mode: nanoseconds the device thread spent in polls of this port that did work
    /// (the model's own time, on the device core; idle polls are not counted).
    busy_ns,
    /// Threaded mode: the polls counted in `busy_ns` (frames over polls is the batch the
    /// device thread works in).
    busy_polls,
    /// MSI-X messages sent (eventfds signalled; interrupt mode, see `irq.rs`).
    interrupts,
}
