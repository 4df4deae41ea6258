//! The 82576's statistics registers, accumulated to 64 bits by the shared accumulator
//! ([`crate::devices::intel::stats`]); this file holds the table.
//!
//! What QEMU's model maintains (notes 5.6): the good/total packet and octet counters, size
//! buckets, broadcast/multicast and RUC for runts it padded; octet counters include 4 bytes of
//! (fake) CRC per frame. MPC, RNBC, ROC and the error counters stay 0 there; on real hardware
//! they count.

use crate::devices::intel::stats::{read_counter, CounterTable, Counters, Src};
use crate::platform::mmio::Mmio;
use crate::platform::regs::igb::{self as r};

/// The totals reported, by datasheet name, in this order.
const COUNTERS: CounterTable = &[
    ("GPRC", Src::One(r::GPRC)),
    ("GPTC", Src::One(r::GPTC)),
    ("GORC", Src::Wide(r::GORCL, r::GORCH)),
    ("GOTC", Src::Wide(r::GOTCL, r::GOTCH)),
    ("TPR", Src::One(r::TPR)),
    ("TPT", Src::One(r::TPT)),
    ("TOR", Src::Wide(r::TORL, r::TORH)),
    ("TOT", Src::Wide(r::TOTL, r::TOTH)),
    ("BPRC", Src::One(r::BPRC)),
    ("MPRC", Src::One(r::MPRC)),
    ("BPTC", Src::One(r::BPTC)),
    ("MPTC", Src::One(r::MPTC)),
    ("MPC", Src::One(r::MPC)),
    ("RNBC", Src::One(r::RNBC)),
    ("CRCERRS", Src::One(r::CRCERRS)),
    ("ALGNERRC", Src::One(r::ALGNERRC)),
    ("SYMERRS", Src::One(r::SYMERRS)),
    ("RXERRC", Src::One(r::RXERRC)),
    ("RLEC", Src::One(r::RLEC)),
    ("RUC", Src::One(r::RUC)),
    ("RFC", Src::One(r::RFC)),
    ("ROC", Src::One(r::ROC)),
    ("RJC", Src::One(r::RJC)),
    ("PRC64", Src::One(r::PRC64)),
    ("PRC127", Src::One(r::PRC127)),
    ("PRC255", Src::One(r::PRC255)),
    ("PRC511", Src::One(r::PRC511)),
    ("PRC1023", Src::One(r::PRC1023)),
    ("PRC1522", Src::One(r::PRC1522)),
    ("PTC64", Src::One(r::PTC64)),
    ("PTC127", Src::One(r::PTC127)),
    ("PTC255", Src::One(r::PTC255)),
    ("PTC511", Src::One(r::PTC511)),
    ("PTC1023", Src::One(r::PTC1023)),
    ("PTC1522", Src::One(r::PTC1522)),
    ("TSCTC", Src::One(r::TSCTC)),
];

/// Names of the per-queue drop counters.
const RQDPC_NAMES: [&str; 16] = [
    "RQDPC0", "RQDPC1", "RQDPC2", "RQDPC3", "RQDPC4", "RQDPC5", "RQDPC6", "RQDPC7", "RQDPC8",
    "RQDPC9", "RQDPC10", "RQDPC11", "RQDPC12", "RQDPC13", "RQDPC14", "RQDPC15",
];

/// Software totals of the device counters.
///
/// RQDPC(q) counts what queue q dropped because its ring was full: with SRRCTL.DROP_EN (which
/// the driver sets) those drops appear nowhere else, so without it they would be invisible.
#[derive(Clone, Debug)]
pub(crate) struct HwStats {
    counters: Counters,
    rqdpc: [u64; 16],
}

impl Default for HwStats {
    fn default() -> Self {
        HwStats {
            counters: Counters::new(COUNTERS),
            rqdpc: [0; 16],
        }
    }
}

impl HwStats {
    /// Reads every counter once (clearing it) and adds it to the totals.
    pub(crate) fn accumulate<M: Mmio + ?Sized>(&mut self, m: &M, rx_queues: u16) {
        self.counters.accumulate(m);
        for q in 0..u32::from(rx_queues.min(16)) {
            self.rqdpc[q as usize] += read_counter(m, r::RQDPC.at(q));
        }
    }

    /// Forgets the totals.
    pub(crate) fn clear(&mut self) {
        *self = HwStats::default();
    }

    /// The totals by datasheet name.
    pub(crate) fn totals(&self, rx_queues: u16) -> Vec<(&'static str, u64)> {
        self.counters
            .totals()
            .chain(
                RQDPC_NAMES
                    .iter()
                    .zip(self.rqdpc)
                    .take(usize::from(rx_queues.min(16)))
                    .map(|(n, v)| (*n, v)),
            )
            .collect()
    }
}
