//! Statistics registers accumulated to 64 bits, driven by a per-chip table.
//!
//! On both chips the counters clear on read and are 32 bits wide (octet counters are split into
//! L and H halves: read L first; QEMU's 82576 clears both halves when H is read), so the port
//! reads them often enough and adds them to software totals. Only the port reads them: register
//! reads are fine from any thread, and the queues, which may run elsewhere, keep their own
//! software counters. A removed device reads all-ones; those reads are not added.

use crate::platform::mmio::Mmio;
use crate::platform::regs::{Reg, RegArray};

/// Where one total comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Src {
    /// A 32-bit counter.
    One(Reg),
    /// Low then high half of a wide counter.
    Wide(Reg, Reg),
    /// The sum of every instance (per traffic class or per queue).
    Sum(RegArray),
}

/// A chip's counters: datasheet name and source, in the order they are reported.
pub(crate) type CounterTable = &'static [(&'static str, Src)];

/// Reads a counter; an all-ones read (device gone) counts as 0.
pub(crate) fn read_counter<M: Mmio + ?Sized>(m: &M, reg: Reg) -> u64 {
    match m.read(reg) {
        u32::MAX => 0,
        v => u64::from(v),
    }
}

/// Software totals of a counter table.
#[derive(Clone, Debug)]
pub(crate) struct Counters {
    pub(crate) table: CounterTable,
    totals: Vec<u64>,
}

impl Counters {
    /// All totals zero.
    pub(crate) fn new(table: CounterTable) -> Self {
        Counters {
            table,
            totals: vec![0; table.len()],
        }
    }

    /// Reads every counter once (clearing it) and adds it to the totals.
    pub(crate) fn accumulate<M: Mmio + ?Sized>(&mut self, m: &M) {
        for (total, (_, src)) in self.totals.iter_mut().zip(self.table) {
            *total += match *src {
                Src::One(reg) => read_counter(m, reg),
                Src::Wide(lo, hi) => {
                    let l = read_counter(m, lo);
                    l | read_counter(m, hi) << 32
                }
                Src::Sum(a) => (0..a.count()).map(|i| read_counter(m, a.at(i))).sum(),
            };
        }
    }

    /// The totals by datasheet name.
    pub(crate) fn totals(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.table
            .iter()
            .zip(&self.totals)
            .map(|((n, _), &v)| (*n, v))
    }
}

/// A chip's per-queue drop counters: what queue q dropped because its ring was full (82576
/// RQDPC, 82599 QPRDC). With SRRCTL.DROP_EN, which both drivers set, those drops appear nowhere
/// else, so without them they would be invisible.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueueDrops {
    /// The counter of queue q is `regs.at(q)`.
    pub regs: RegArray,
    /// Their names, by queue.
    pub names: &'static [&'static str; 16],
}

/// Software totals of a port's device counters: the chip's table plus its per-queue drops.
#[derive(Clone, Debug)]
pub struct HwStats {
    counters: Counters,
    drops: QueueDrops,
    per_queue: [u64; 16],
}

impl HwStats {
    pub(crate) fn new(table: CounterTable, drops: QueueDrops) -> Self {
        HwStats {
            counters: Counters::new(table),
            drops,
            per_queue: [0; 16],
        }
    }

    /// Reads every counter once (clearing it) and adds it to the totals.
    pub(crate) fn accumulate<M: Mmio + ?Sized>(&mut self, m: &M, rx_queues: u16) {
        self.counters.accumulate(m);
        for q in 0..u32::from(rx_queues.min(16)) {
            self.per_queue[q as usize] += read_counter(m, self.drops.regs.at(q));
        }
    }

    /// Forgets the totals.
    pub(crate) fn clear(&mut self) {
        *self = HwStats::new(self.counters.table, self.drops);
    }

    /// The totals by datasheet name.
    pub(crate) fn totals(&self, rx_queues: u16) -> Vec<(&'static str, u64)> {
        let queues = usize::from(rx_queues.min(16));
        self.counters
            .totals()
            .chain(
                self.drops
                    .names
                    .iter()
                    .copied()
                    .zip(self.per_queue)
                    .take(queues),
            )
            .collect()
    }
}
