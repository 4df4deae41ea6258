//! The forwarding loop shared by the `forward` example, `vfio-nic fwd` and the benchmarks.
//!
//! It is testpmd's io mode: receive a burst, send it out of the other port untouched, free what
//! the transmitter could not take (and count it). Keeping one copy of the loop means the
//! benchmark measures exactly what users run.

use crate::device::{QueueError, RxQueue, TxQueue};
use crate::platform::dma::{Packet, Pool};

/// Counters of one forwarding direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FwdStats {
    /// Packets received.
    pub rx: u64,
    /// Packets handed to the transmitter.
    pub tx: u64,
    /// Packets dropped because the transmitter had no room.
    pub tx_dropped: u64,
    /// Bursts that received nothing.
    pub empty_polls: u64,
}

/// One burst from `rx` to `tx`. `batch` must be empty on entry and is empty on return.
#[inline]
pub fn forward_burst<R: RxQueue + ?Sized, T: TxQueue + ?Sized>(
    rx: &mut R,
    tx: &mut T,
    batch: &mut Vec<Packet>,
    burst: usize,
    stats: &mut FwdStats,
) -> Result<usize, QueueError> {
    forward_burst_with(rx, tx, batch, burst, stats, |_, _| {})
}

/// [`forward_burst`] with application work: `work` sees the receive queue (for state its burst
/// left, such as the VLAN receive context) and the received packets before they are sent (to
/// read headers, take or set VLAN tags, rewrite addresses). Everything else (counting,
/// freeing what the transmitter could not take) is the same loop.
#[inline]
pub fn forward_burst_with<R: RxQueue + ?Sized, T: TxQueue + ?Sized>(
    rx: &mut R,
    tx: &mut T,
    batch: &mut Vec<Packet>,
    burst: usize,
    stats: &mut FwdStats,
    work: impl FnOnce(&R, &mut [Packet]),
) -> Result<usize, QueueError> {
    let n = rx.rx_burst(batch, burst)?;
    if n == 0 {
        stats.empty_polls += 1;
        return Ok(0);
    }
    work(rx, batch);
    send_or_drop(tx, batch, stats)?;
    stats.rx += n as u64;
    Ok(n)
}

/// Sends `batch` out of `tx` and frees what the transmitter could not take, counting both in
/// `stats` (`tx`, `tx_dropped`); `batch` is empty on return. Returns how many were sent.
#[inline]
pub fn send_or_drop<T: TxQueue + ?Sized>(
    tx: &mut T,
    batch: &mut Vec<Packet>,
    stats: &mut FwdStats,
) -> Result<usize, QueueError> {
    let sent = tx.tx_burst(batch)?;
    stats.tx += sent as u64;
    if !batch.is_empty() {
        stats.tx_dropped += batch.len() as u64;
        Pool::free_vec(batch);
    }
    Ok(sent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Port;
    use crate::devices::null::{NullConfig, NullPort};

    #[test]
    fn forwards_and_counts() {
        let mut a = NullPort::new(0, NullConfig::default()).unwrap();
        let mut b = NullPort::new(1, NullConfig::default()).unwrap();
        let (mut arx, _) = a.take_queues().unwrap();
        let (_, mut btx) = b.take_queues().unwrap();
        let mut batch = Vec::new();
        let mut st = FwdStats::default();
        for _ in 0..10 {
            assert_eq!(
                forward_burst(&mut arx[0], &mut btx[0], &mut batch, 32, &mut st).unwrap(),
                32
            );
        }
        assert_eq!((st.rx, st.tx, st.tx_dropped), (320, 320, 0));
        assert_eq!(arx[0].pool().stats().in_use, 0);
    }
}
