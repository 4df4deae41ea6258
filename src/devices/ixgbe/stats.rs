//! The 82599's statistics registers, accumulated to 64 bits.
//!
//! The counters clear on read and are 32 bits wide (octet counters 36 bits, split into L and H
//! halves that must be read L first); the accumulation is shared with the igb driver
//! ([`crate::devices::intel::stats`]), this file holds the 82599's table.
//!
//! Per-queue drop counters (QPRDC) count per *statistics index*, and queues map to indices
//! through RQSMR; init maps queue q to index q (queues 0..15), so QPRDCq is queue q's.

use crate::devices::intel::stats::{CounterTable, HwStats, QueueDrops, Src};
use crate::platform::regs::ixgbe::{self as r};

/// The totals reported, by datasheet name, in this order.
const COUNTERS: CounterTable = &[
    ("GPRC", Src::One(r::GPRC)),
    ("GPTC", Src::One(r::GPTC)),
    ("GORC", Src::Wide(r::GORCL, r::GORCH)),
    ("GOTC", Src::Wide(r::GOTCL, r::GOTCH)),
    ("TPR", Src::One(r::TPR)),
    ("TPT", Src::One(r::TPT)),
    ("TOR", Src::Wide(r::TORL, r::TORH)),
    ("BPRC", Src::One(r::BPRC)),
    ("MPRC", Src::One(r::MPRC)),
    ("BPTC", Src::One(r::BPTC)),
    ("MPTC", Src::One(r::MPTC)),
    ("MPC", Src::Sum(r::MPC)),
    ("RNBC", Src::Sum(r::RNBC)),
    ("CRCERRS", Src::One(r::CRCERRS)),
    ("ILLERRC", Src::One(r::ILLERRC)),
    ("ERRBC", Src::One(r::ERRBC)),
    ("RLEC", Src::One(r::RLEC)),
    ("RUC", Src::One(r::RUC)),
    ("RFC", Src::One(r::RFC)),
    ("ROC", Src::One(r::ROC)),
    ("RJC", Src::One(r::RJC)),
    ("MLFC", Src::One(r::MLFC)),
    ("MRFC", Src::One(r::MRFC)),
    ("RXDGPC", Src::One(r::RXDGPC)),
    ("TXDGPC", Src::One(r::TXDGPC)),
];

/// Names of the per-queue drop counters.
static DROP_NAMES: [&str; 16] = [
    "QPRDC0", "QPRDC1", "QPRDC2", "QPRDC3", "QPRDC4", "QPRDC5", "QPRDC6", "QPRDC7", "QPRDC8",
    "QPRDC9", "QPRDC10", "QPRDC11", "QPRDC12", "QPRDC13", "QPRDC14", "QPRDC15",
];

/// The port's counters, starting from zero.
pub(crate) fn hw_stats() -> HwStats {
    HwStats::new(
        COUNTERS,
        QueueDrops {
            regs: r::QPRDC,
            names: &DROP_NAMES,
        },
    )
}
