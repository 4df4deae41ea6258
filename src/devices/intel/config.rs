//! The configuration of an Intel port, and the checks both drivers make on it.
//!
//! The 82576 and the 82599 take the same settings (queues, rings, pool, promiscuous mode, MTU,
//! loopback, timeouts, initial VLAN state); only their limits differ. So there is one struct,
//! [`IntelConfig`], parameterised by the chip, and each driver names it (`IgbConfig`,
//! `IxgbeConfig`). The reasoning behind every check lives here once.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::platform::dma::PoolConfig;

/// A chip family's limits, which parameterise [`IntelConfig`].
/// Sealed: only this crate's chips implement it (see `src/sealed.rs`).
pub trait Chip:
    crate::sealed::Sealed + Clone + Copy + Debug + Default + PartialEq + Eq + Send + Sync + 'static
{
    /// The limits of this chip.
    const LIMITS: Limits;
}

/// How to open an Intel port (82576 or 82599). Register names in the field docs are given for
/// both chips where they differ (82576 / 82599).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntelConfig<C: Chip> {
    /// Receive queues (1 to the chip's maximum). More than one turns RSS on.
    pub rx_queues: u16,
    /// Transmit queues (1 to the chip's maximum).
    pub tx_queues: u16,
    /// Descriptors per receive ring (power of two, 32 to the chip's maximum).
    pub rx_ring: usize,
    /// Descriptors per transmit ring (power of two, 32 to the chip's maximum).
    pub tx_ring: usize,
    /// Layout of each receive queue's pool (one pool per queue). The receive buffer size
    /// programmed into the device is the buffer room (`buf_size - headroom`) in whole KB.
    pub pool: PoolConfig,
    /// Accept every unicast and multicast frame (RCTL.UPE|MPE / FCTRL.UPE|MPE).
    pub promiscuous: bool,
    /// Largest IP packet; above 1500 long frames are enabled (RCTL.LPE + RLPML /
    /// HLREG0.JUMBOEN + MAXFRS). A frame longer than a receive buffer arrives as a chain
    /// ([`Packet::is_chained`](crate::platform::dma::Packet::is_chained)).
    pub mtu: u16,
    /// MAC loopback: transmitted frames come back on the same port, no cable needed.
    pub loopback: bool,
    /// How long `open` waits for the link; a link still down after it is a warning, not an
    /// error (a cable may be unplugged), and `Port::link` reports it.
    pub link_timeout: Duration,
    /// How long any other register poll (reset done, queue enable, MDIC) may take.
    pub reg_timeout: Duration,
    /// Strip VLAN tags from the start (CTRL.VME, port-wide / RXDCTL.VME on every queue).
    pub rx_strip: bool,
    /// VLAN filtering on from the start (RCTL.VFE / VLNCTRL.VFE); the table is `vlans`.
    pub vlan_filter: bool,
    /// VLAN ids in the filter table from the start (VID 0 is always in it).
    pub vlans: Vec<u16>,
    /// The TPID recognised on receive and inserted on transmit (VET / VLNCTRL.VET + DMATXCTL.VT).
    pub tpid: u16,
    /// Interrupt mode: each receive queue gets an MSI-X vector of its own, so that it can sleep
    /// until frames arrive (`RxQueue::wait`). Off by default: the queues are polled.
    pub interrupts: Option<IrqConfig>,
    /// The chip the limits come from.
    pub chip: PhantomData<C>,
}

impl<C: Chip> Default for IntelConfig<C> {
    /// One queue pair, 512-descriptor rings, the default pool, promiscuous, MTU 1500.
    fn default() -> Self {
        IntelConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_ring: 512,
            tx_ring: 512,
            pool: PoolConfig::default(),
            promiscuous: true,
            mtu: 1500,
            loopback: false,
            link_timeout: Duration::from_secs(10),
            reg_timeout: Duration::from_secs(1),
            rx_strip: false,
            vlan_filter: false,
            vlans: Vec::new(),
            tpid: 0x8100,
            interrupts: None,
            chip: PhantomData,
        }
    }
}

/// Interrupt mode's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqConfig {
    /// The least time between two interrupts of one vector, microseconds (EITR.INTERVAL, 0 to
    /// 8191; 0 is taken as the least interval EITR holds, 1 us on the 82576 and 2 us on the
    /// 82599, as Linux's igb floors it in `igb_write_itr`; a vector masks itself when it
    /// fires anyway). Frames arriving meanwhile wait for the interval's end, so a busy queue
    /// interrupts at most 1 / interval times a second. (Linux's igb starts at
    /// EITR = 648, an interval of 162 us or about 6,000 a second, and adapts it to the load;
    /// `IGB_START_ITR` in igb.h, QEMU's `IGB_START_EITR`.)
    pub throttle_us: u16,
}

impl Default for IrqConfig {
    /// 50 us between interrupts: at most 20,000 a second per queue, a wake-up latency of at
    /// most 50 us added by the throttle.
    fn default() -> Self {
        IrqConfig { throttle_us: 50 }
    }
}

impl<C: Chip> IntelConfig<C> {
    /// The DMA memory a port opened with this configuration allocates, one length per
    /// allocation: each receive queue's pool and descriptor ring, each transmit queue's ring
    /// (a transmit queue's bounce pool comes later, and only for packets of pools the device
    /// cannot reach). What the locked-memory limit must allow (`platform::memlock`).
    pub fn dma_allocations(&self) -> Vec<usize> {
        let desc = super::desc::DESC_SIZE;
        let rx = [self.pool.buffers * self.pool.buf_size, self.rx_ring * desc];
        (0..self.rx_queues)
            .flat_map(|_| rx)
            .chain((0..self.tx_queues).map(|_| self.tx_ring * desc))
            .collect()
    }

    /// The receive buffer size in KB for SRRCTL.BSIZEPKT: the pool's buffer room rounded down
    /// (the device must never write past a buffer), at most 16 KB.
    pub fn rx_buffer_kb(&self) -> Result<u32> {
        rx_buffer_kb(&C::LIMITS, &self.pool)
    }

    /// Checks every setting against the chip's limits.
    pub fn check(&self) -> Result<()> {
        let l = &C::LIMITS;
        check_queues(l, "rx_queues", self.rx_queues, l.max_rx_queues)?;
        check_queues(l, "tx_queues", self.tx_queues, l.max_tx_queues)?;
        check_rings_and_mtu(l, self.rx_ring, self.tx_ring, &self.pool, self.mtu)?;
        for &vid in &self.vlans {
            crate::vlan::Vid::new(vid)?;
        }
        if let Some(irq) = self.interrupts {
            if irq.throttle_us > l.max_throttle_us {
                return Err(Error::InvalidConfig(format!(
                    "{}: an interrupt throttle of {} us is beyond what the {}'s EITR holds; use 0 to {} us",
                    l.family, irq.throttle_us, l.chip, l.max_throttle_us
                )));
            }
        }
        Ok(())
    }
}

/// The limits of one chip, for messages and checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Driver family for messages ("igb", "ixgbe").
    pub family: &'static str,
    /// Chip for messages ("82576", "82599").
    pub chip: &'static str,
    /// Largest ring in descriptors.
    pub max_ring: usize,
    /// Largest MTU.
    pub max_mtu: u16,
    /// Receive queues usable with RSS.
    pub max_rx_queues: u16,
    /// Transmit queues usable.
    pub max_tx_queues: u16,
    /// The longest interrupt throttle interval EITR holds, microseconds.
    pub max_throttle_us: u16,
}

/// The receive buffer size in KB for SRRCTL.BSIZEPKT: the pool's buffer room rounded down
/// (the device must never write past a buffer), at most 16 KB.
pub(crate) fn rx_buffer_kb(l: &Limits, pool: &PoolConfig) -> Result<u32> {
    let room = pool.buf_size.saturating_sub(pool.headroom);
    // SRRCTL.BSIZEPKT: the buffer size in 1 KB units (up to 127 KB on both chips,
    // docs/intel-nics.md); the drivers here give at most 16 KB, as Linux's ixgbe does
    // (IXGBE_MAX_RXBUFFER, "largest size for a single descriptor").
    if !(1024..=16 * 1024).contains(&room) {
        return Err(Error::InvalidConfig(format!(
            "the {} receives 1 to 16 KB into one descriptor: the pool's buffer room ({} - {} = {room} bytes) must be 1024 to 16384 bytes (longer frames become chains); set pool.buf_size (--buf-size) in that range",
            l.chip, pool.buf_size, pool.headroom
        )));
    }
    Ok((room / 1024) as u32)
}

/// Queue counts against `1..=max`.
pub(crate) fn check_queues(l: &Limits, what: &str, n: u16, max: u16) -> Result<()> {
    if !(1..=max).contains(&n) {
        return Err(Error::InvalidConfig(format!(
            "{}: {what} {n} must be between 1 and {max}",
            l.family
        )));
    }
    Ok(())
}

/// Buffers a receive pool needs beyond its ring (the rule of every family:
/// [`crate::devices::pool_rule`]).
pub use crate::devices::pool_rule::MIN_RX_SPARE;

/// Ring sizes, pool size, MTU, and a buffer size the device can be given.
pub(crate) fn check_rings_and_mtu(
    l: &Limits,
    rx_ring: usize,
    tx_ring: usize,
    pool: &PoolConfig,
    mtu: u16,
) -> Result<()> {
    for (what, n) in [("rx_ring", rx_ring), ("tx_ring", tx_ring)] {
        check_ring_size(n)?;
        if n > l.max_ring {
            return Err(Error::InvalidConfig(format!(
                "{}: {what} {n} is larger than the {}'s {} descriptors",
                l.family, l.chip, l.max_ring
            )));
        }
    }
    crate::devices::pool_rule::check_rx_pool(l.family, "rx_ring", rx_ring, pool.buffers)?;
    if !(68..=l.max_mtu).contains(&mtu) {
        return Err(Error::InvalidConfig(format!(
            "{}: MTU {mtu} must be between 68 and {}",
            l.family, l.max_mtu
        )));
    }
    // A frame larger than one buffer spans descriptors and the ring gathers it into a chain
    // (`super::rx`), so any buffer of at least 1 KB takes any MTU.
    rx_buffer_kb(l, pool)?;
    Ok(())
}

/// The smallest ring: one write-back group of the transmit ring ([`RS_INTERVAL`]).
pub const MIN_RING: usize = RS_INTERVAL;

/// Transmit descriptors between two write-back requests (the transmit ring asks for one at the
/// end of a burst once this many went out); here, with the ring size check that depends on it.
pub const RS_INTERVAL: usize = 32;

/// Checks a ring size: a power of two (hence a multiple of 8, the 128-byte DMA length
/// granularity), at least [`MIN_RING`], at most 32768.
pub fn check_ring_size(n: usize) -> Result<()> {
    if !n.is_power_of_two() || !(MIN_RING..=32768).contains(&n) {
        return Err(Error::InvalidConfig(format!(
            "ring size {n} must be a power of two between {MIN_RING} and 32768"
        )));
    }
    Ok(())
}
