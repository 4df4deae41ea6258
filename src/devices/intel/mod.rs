//! What the 82576 (igb) and 82599 (ixgbe) drivers share: the rings, the queues and the port.
//!
//! The two chips differ in register offsets and in a few semantics (where the VLAN strip bit
//! lives, what VP means, how the link is brought up), but much of a driver around those
//! differences is the same program with other register names. That program lives here once, and
//! each chip fills in what differs through [`IntelChip`] (in `igb/` and `ixgbe/`), so a fix
//! reaches both drivers:
//!
//! | file | what |
//! |---|---|
//! | `port.rs` | [`IntelPort`], the port of both chips (open, link, counters, filters, shutdown), over the per-chip [`IntelChip`] |
//! | `rx.rs`, `tx.rs` | the receive and transmit descriptor rings: one path per direction |
//! | `desc.rs` | the advanced descriptor formats as typed views of their words |
//! | `rxq.rs`, `txq.rs` | [`rxq::IntelRx`] and [`IntelTx`], the queues of both chips, which stop themselves in `Drop` |
//! | `queue.rs` | ring registers, enabling a queue, and stopping it safely before its memory is freed |
//! | `config.rs` | ring, pool and MTU checks shared by both configuration structs |
//! | `stats.rs` | read-to-clear counters accumulated to 64 bits, from the chip's `[stats]` table |
//! | `vlan.rs` | [`VlanShadow`]: the VLAN filter table, TPID and switches kept in software, written back after a reset |
//! | `rss.rs` | the RSS key and redirection table contents |
//! | `recovery.rs` | faults in the field: the watch thread (link changes, hot unplug, PCIe errors), the restore after a function reset, what a queue does when its port was reset or removed |
//!
//! Register facts are cited as "notes N.N": section N.N of `docs/intel-nics.md`, which names
//! the datasheet section or driver source of each.

pub mod config;
pub mod desc;
pub mod irq;
pub mod offload;
pub mod port;
pub mod queue;
pub mod recovery;
pub(crate) mod rss;
pub mod rx;
pub mod rxq;
pub mod stats;
pub mod tx;
pub mod txq;
pub mod vlan;

#[cfg(test)]
pub(crate) mod testkit;

pub use config::{Chip, IntelConfig, IrqConfig, Limits};
pub use port::{IntelChip, IntelPort};
pub use txq::IntelTx;
pub use vlan::VlanShadow;

use crate::device::MacAddr;
use crate::platform::mmio::Mmio;
use crate::platform::regs::Reg;

/// Reads receive address 0 (RAL0/RAH0), where both chips load the port's MAC from the EEPROM at
/// reset with the address-valid bit `av` set. An invalid or all-zero entry is logged, not fatal:
/// the port still works in promiscuous mode.
pub(crate) fn read_mac<M: Mmio + ?Sized>(
    m: &M,
    name: &str,
    ral: Reg,
    rah: Reg,
    av: u32,
) -> MacAddr {
    let lo = m.read(ral).to_le_bytes();
    let hi = m.read(rah);
    let h = hi.to_le_bytes();
    let mac = MacAddr([lo[0], lo[1], lo[2], lo[3], h[0], h[1]]);
    if hi & av == 0 || mac == MacAddr::default() {
        tracing::warn!(port = %name, %mac, "receive address 0 is not valid after reset; is the EEPROM blank?");
    }
    mac
}

/// Writes `mac` into receive address 0 (RAL0/RAH0) with the address-valid bit `av`: a port
/// restored after a reset keeps its address (Linux's `igb_rar_set`/`ixgbe_set_rar` at reset).
pub(crate) fn write_mac<M: Mmio + ?Sized>(m: &M, ral: Reg, rah: Reg, av: u32, mac: MacAddr) {
    let a = mac.0;
    m.write(ral, u32::from_le_bytes([a[0], a[1], a[2], a[3]]));
    m.write(rah, u32::from_le_bytes([a[4], a[5], 0, 0]) | av);
}
