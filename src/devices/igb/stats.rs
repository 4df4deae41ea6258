//! The 82576's statistics registers, accumulated to 64 bits by the shared accumulator
//! ([`crate::devices::intel::stats`]); this file holds the table.
//!
//! What QEMU's model maintains (notes 5.6): the good/total packet and octet counters, size
//! buckets, broadcast/multicast and RUC for runts it padded; octet counters include 4 bytes of
//! (fake) CRC per frame. MPC, RNBC, ROC and the error counters stay 0 there; on real hardware
//! they count.

use crate::devices::intel::stats::{CounterTable, HwStats, QueueDrops, Src};
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
static DROP_NAMES: [&str; 16] = [
    "RQDPC0", "RQDPC1", "RQDPC2", "RQDPC3", "RQDPC4", "RQDPC5", "RQDPC6", "RQDPC7", "RQDPC8",
    "RQDPC9", "RQDPC10", "RQDPC11", "RQDPC12", "RQDPC13", "RQDPC14", "RQDPC15",
];

/// The port's counters, starting from zero.
pub(crate) fn hw_stats() -> HwStats {
    HwStats::new(
        COUNTERS,
        QueueDrops {
            regs: r::RQDPC,
            names: &DROP_NAMES,
        },
    )
}
