//! Statistics registers accumulated to 64 bits, driven by the chip's table.
//!
//! On both chips the counters clear on read and are 32 bits wide (octet counters are split into
//! L and H halves: read L first; QEMU's 82576 clears both halves when H is read), so the port
//! reads them often enough and adds them to software totals. Only the port reads them: register
//! reads are fine from any thread, and the queues, which may run elsewhere, keep their own
//! software counters. A removed device reads all-ones; those reads are not added.
//!
//! Which counters a chip reports, in which order, is data: the `[stats]` table of its register
//! map (`regs/igb.toml`, `regs/ixgbe.toml`), generated into [`Stats`].

use crate::platform::mmio::Mmio;
use crate::platform::regs::{Counter, Reg, Stats};

/// Reads a counter; an all-ones read (device gone) counts as 0.
fn read_counter<M: Mmio + ?Sized>(m: &M, reg: Reg) -> u64 {
    match m.read(reg) {
        u32::MAX => 0,
        v => u64::from(v),
    }
}

/// Software totals of a port's device counters: the chip's table plus its per-queue drops.
#[derive(Clone, Debug)]
pub struct HwStats {
    stats: &'static Stats,
    totals: Vec<u64>,
    per_queue: Vec<u64>,
}

impl HwStats {
    /// Totals of `stats`, starting from zero.
    pub(crate) fn new(stats: &'static Stats) -> Self {
        HwStats {
            stats,
            totals: vec![0; stats.counters.len()],
            per_queue: vec![0; stats.queue_drop_names.len()],
        }
    }

    /// Reads every counter once (clearing it) and adds it to the totals; the per-queue drop
    /// counters of the first `rx_queues` queues.
    pub(crate) fn accumulate<M: Mmio + ?Sized>(&mut self, m: &M, rx_queues: u16) {
        for (total, (_, src)) in self.totals.iter_mut().zip(self.stats.counters) {
            *total += match *src {
                Counter::One(reg) => read_counter(m, reg),
                Counter::Wide(lo, hi) => {
                    let l = read_counter(m, lo);
                    l | read_counter(m, hi) << 32
                }
                Counter::Sum(a) => (0..a.count()).map(|i| read_counter(m, a.at(i))).sum(),
            };
        }
        let queues = usize::from(rx_queues).min(self.per_queue.len());
        for (q, total) in self.per_queue.iter_mut().enumerate().take(queues) {
            *total += read_counter(m, self.stats.queue_drops.at(q as u32));
        }
    }

    /// Forgets the totals.
    pub(crate) fn clear(&mut self) {
        *self = HwStats::new(self.stats);
    }

    /// The totals by datasheet name, the per-queue drops of the first `rx_queues` queues last.
    pub(crate) fn totals(&self, rx_queues: u16) -> Vec<(&'static str, u64)> {
        let names = self.stats.counters.iter().map(|(n, _)| *n);
        let drops = self
            .stats
            .queue_drop_names
            .iter()
            .copied()
            .zip(self.per_queue.iter().copied());
        names
            .zip(self.totals.iter().copied())
            .chain(drops.take(usize::from(rx_queues)))
            .collect()
    }
}
