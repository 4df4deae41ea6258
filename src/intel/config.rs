//! Configuration checks both drivers make: ring sizes, pool size and buffer size against the MTU.
//!
//! Each chip's config struct keeps its own limits (queue counts, largest ring, largest MTU) and
//! names; the reasoning is the same and lives here.

use crate::dma::PoolConfig;
use crate::error::{Error, Result};

/// The limits of one chip, for messages and checks.
pub(crate) struct Limits {
    /// Driver family for messages ("igb", "ixgbe").
    pub family: &'static str,
    /// Chip for messages ("82576", "82599").
    pub chip: &'static str,
    /// Largest ring in descriptors.
    pub max_ring: usize,
    /// Largest MTU.
    pub max_mtu: u16,
}

/// The receive buffer size in KB for SRRCTL.BSIZEPKT: the pool's buffer room rounded down
/// (the device must never write past a buffer), at most 16 KB.
pub(crate) fn rx_buffer_kb(l: &Limits, pool: &PoolConfig) -> Result<u32> {
    let room = pool.buf_size.saturating_sub(pool.headroom);
    let kb = (room / 1024).min(16) as u32;
    if kb == 0 {
        return Err(Error::InvalidConfig(format!(
            "the {} receives into whole KB: the pool's buffer room ({} - {} = {room} bytes) must be at least 1024; raise pool.buf_size",
            l.chip, pool.buf_size, pool.headroom
        )));
    }
    Ok(kb)
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

/// Ring sizes, pool size, MTU, and the buffer size the MTU needs.
pub(crate) fn check_rings_and_mtu(
    l: &Limits,
    rx_ring: usize,
    tx_ring: usize,
    pool: &PoolConfig,
    mtu: u16,
) -> Result<()> {
    for (what, n) in [("rx_ring", rx_ring), ("tx_ring", tx_ring)] {
        crate::ring::check_ring_size(n)?;
        if n > l.max_ring {
            return Err(Error::InvalidConfig(format!(
                "{}: {what} {n} is larger than the {}'s {} descriptors",
                l.family, l.chip, l.max_ring
            )));
        }
    }
    if pool.buffers < rx_ring {
        return Err(Error::InvalidConfig(format!(
            "{}: each receive pool needs at least rx_ring = {rx_ring} buffers, not {}; raise pool.buffers",
            l.family, pool.buffers
        )));
    }
    if !(68..=l.max_mtu).contains(&mtu) {
        return Err(Error::InvalidConfig(format!(
            "{}: MTU {mtu} must be between 68 and {}",
            l.family, l.max_mtu
        )));
    }
    // A frame larger than one buffer spans descriptors and the ring drops it, so the buffer
    // must hold the largest frame: header, two VLAN tags, MTU (the CRC is stripped).
    let kb = rx_buffer_kb(l, pool)?;
    let frame = usize::from(mtu) + 14 + 8;
    if frame > kb as usize * 1024 {
        return Err(Error::InvalidConfig(format!(
            "{}: MTU {mtu} needs receive buffers of {frame} bytes but the pool gives {kb} KB; set pool.buf_size to at least {}",
            l.family,
            frame.div_ceil(1024) * 1024 + pool.headroom
        )));
    }
    Ok(())
}
