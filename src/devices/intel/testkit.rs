//! Host-test helpers shared by the igb and ixgbe driver tests: a [`Bus`] whose registers are a
//! [`RecordingMmio`], and lookups in its write log.

use std::sync::{Arc, Mutex};

use super::config::{Chip, IntelConfig};
use crate::error::Result;
use crate::platform::bus::Bus;
use crate::platform::dma::{DmaMapper, IdentityMapper, PoolConfig};
use crate::platform::mmio::RecordingMmio;
use crate::platform::regs::Reg;

/// A bus whose registers are a [`RecordingMmio`].
pub(crate) struct TestBus {
    pub regs: Arc<RecordingMmio>,
    pub id: (u16, u16),
    /// "bus master on" / "bus master off" events, in order.
    pub events: Arc<Mutex<Vec<&'static str>>>,
}

impl TestBus {
    /// A bus with PCI id `id` over `regs`.
    pub(crate) fn new(regs: Arc<RecordingMmio>, id: (u16, u16)) -> Self {
        TestBus {
            regs,
            id,
            events: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl Bus for TestBus {
    type Mmio = RecordingMmio;
    fn regs(&self) -> &Arc<RecordingMmio> {
        &self.regs
    }
    fn dma_mapper(&self) -> Arc<dyn DmaMapper> {
        Arc::new(IdentityMapper)
    }
    fn pci_id(&self) -> (u16, u16) {
        self.id
    }
    fn name(&self) -> &str {
        "test:0"
    }
    fn enable_bus_master(&self) -> Result<()> {
        self.events.lock().unwrap().push("bus master on");
        Ok(())
    }
    fn disable_bus_master(&self) -> Result<()> {
        self.events.lock().unwrap().push("bus master off");
        Ok(())
    }
}

/// Index of the first write to `reg` (with `value & mask == want`) at or after `from`.
pub(crate) fn find(
    w: &[(usize, u32)],
    from: usize,
    reg: Reg,
    mask: u32,
    want: u32,
) -> Option<usize> {
    w.iter()
        .enumerate()
        .skip(from)
        .find(|(_, &(o, v))| o == reg.offset() && v & mask == want)
        .map(|(i, _)| i)
}

/// Like [`find`] from the start, panicking with the register's name when there is none.
pub(crate) fn pos(w: &[(usize, u32)], reg: Reg, mask: u32, want: u32) -> usize {
    find(w, 0, reg, mask, want)
        .unwrap_or_else(|| panic!("no write to {reg} with & {mask:#x} == {want:#x}"))
}

/// A small port for tests: rings of 64, 128 buffers, 50 ms timeouts.
pub(crate) fn small<C: Chip>() -> IntelConfig<C> {
    IntelConfig {
        rx_ring: 64,
        tx_ring: 64,
        pool: PoolConfig {
            buffers: 128,
            ..PoolConfig::default()
        },
        link_timeout: std::time::Duration::from_millis(50),
        reg_timeout: std::time::Duration::from_millis(50),
        ..IntelConfig::default()
    }
}

/// [`small`] with four receive queues (RSS), a 9000-byte MTU in 10 KB buffers, and MAC
/// loopback: what the "RSS, jumbo and loopback are programmed" tests open.
pub(crate) fn rss_jumbo_loopback<C: Chip>() -> IntelConfig<C> {
    IntelConfig {
        rx_queues: 4,
        mtu: 9000,
        loopback: true,
        pool: PoolConfig {
            buffers: 128,
            buf_size: 10 * 1024 + 128,
            headroom: 128,
        },
        ..small()
    }
}
