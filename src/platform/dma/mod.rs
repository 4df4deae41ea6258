//! Device-visible memory: allocation, IOVA management and the packet buffer pool.
//!
//! This module and its children are, with `vfio` and `mmio`, the only places allowed to use
//! `unsafe`: everything above them works with owned packets and word accessors.

mod chain;
mod contiguous;
mod desc;
pub mod iova;
mod lent;
mod memory;
pub mod pagemap;
pub mod pool;
mod recycle;
#[cfg(loom)]
mod shadow;
pub mod slots;
mod soft_iommu;
mod word;

pub use contiguous::ContiguousRegion;
pub use desc::{Desc, DescTable, DescView, DESC_BYTES};
pub use iova::IovaAllocator;
pub use lent::{LentBuffers, NotLent, TakeBacks, TakenRun};
pub use memory::{DmaMapper, DmaMemory, DmaSpan, DmaWords, IdentityMapper, HUGE_PAGE};
pub use pool::{Meta, Packet, Pool, PoolConfig, PoolStats, TxOffload, MAX_BUF_SIZE};
pub use slots::{RxSlots, TxSlots};
pub use soft_iommu::{DmaFault, DmaRing, DmaView, DmaWindow, SoftIommu};
