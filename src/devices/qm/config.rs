//! [`QmConfig`], how a qm port is opened, and [`QmStats`], what its receive queue counts of
//! the device's mistakes.

use crate::platform::dma::PoolConfig;

/// Configuration of a qm port.
#[derive(Clone, Debug)]
pub struct QmConfig {
    /// The receive queue's pool (its buffers' headroom is where the device writes the frame,
    /// behind the 64-byte annotation).
    pub pool: PoolConfig,
    /// Buffers kept with the device (Linux's `DPAA2_ETH_NUM_BUFS` is 1280); the queue tops the
    /// hardware pool up when fewer than this minus 7 are there.
    pub hw_buffers: usize,
    /// Frames per pull (1 to 32; DPDK pulls 32 on an LX2160A).
    pub pull: usize,
    /// Largest frame received, FCS included (DPDK sets MTU + 14 + 4 for a tag + 4 FCS).
    pub max_frame: u16,
    /// Tail drop of the receive frame queue, in frames.
    pub taildrop: u32,
    /// Queue pairs (only 1: flow distribution is not modelled).
    pub queues: u16,
}

impl Default for QmConfig {
    fn default() -> Self {
        QmConfig {
            pool: PoolConfig::default(),
            hw_buffers: 1280,
            pull: 32,
            max_frame: 1522,
            taildrop: 1024,
            queues: 1,
        }
    }
}

/// What a qm receive queue counted of the device's mistakes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QmStats {
    /// Dequeue results whose token was not the pull's (ignored; their buffers are not taken).
    pub stale_results: u64,
    /// Frame descriptors naming a buffer the device was not lent (refused).
    pub refused_fds: u64,
    /// Frames with error bits in their descriptor (dropped).
    pub error_frames: u64,
}
