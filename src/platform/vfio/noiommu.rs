//! DMA without an IOMMU (VFIO's no-IOMMU mode): the bus address of memory is its physical
//! address.
//!
//! The container (`VFIO_NOIOMMU_IOMMU`) maps nothing: the kernel's no-IOMMU "driver" refuses
//! `VFIO_IOMMU_MAP_DMA` (drivers/vfio/container.c, `vfio_noiommu_ops`). Instead, for each block of
//! DMA memory this module
//!
//! 1. locks it (`mlock`), so that the pages the device is told about stay where they are;
//! 2. reads every 4 KiB page's physical address from `/proc/self/pagemap` (root only: the PFNs
//!    need CAP_SYS_ADMIN, [`crate::Error::PagemapUnreadable`] otherwise);
//! 3. refuses the block unless it is physically contiguous ([`pagemap::contiguous_base`]):
//!    the crate's rings and pools address buffers as `base + offset`, so a buffer or ring that
//!    crossed a discontiguous boundary would send the device to someone else's memory.
//!
//! `DmaMemory` makes such blocks (huge pages assembled in physical order, `dma::contiguous`)
//! because the container's mapper says it needs them (`DmaMapper::needs_physical_contiguity`).
//! The check here is the one that counts: it runs on whatever memory is handed over.

use crate::error::{Error, Result};
use crate::platform::dma::pagemap::{self, Pagemap};

const PAGE: u64 = 4096;

/// The physical address of `vaddr..vaddr+len` after locking it, if it is contiguous.
///
/// # Safety
/// `vaddr..vaddr+len` must be memory of this process that stays allocated until the caller
/// stops the device's DMA to it (the device reaches it by physical address from now on).
pub(super) unsafe fn physical_base(vaddr: *mut u8, len: usize) -> Result<u64> {
    // SAFETY: mlock only pins the caller's own, valid range (this function's contract).
    if unsafe { libc::mlock(vaddr.cast(), len) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::DmaAlloc {
            bytes: len,
            reason: format!(
                "locking no-IOMMU DMA memory (mlock) failed: {e}; raise the locked-memory limit (`ulimit -l unlimited`) or run as root"
            ),
        });
    }
    let pm = Pagemap::open_self()?;
    let phys = pm.physical_pages(vaddr as u64, len as u64, PAGE)?;
    pagemap::contiguous_base(&phys, PAGE).map_err(|d| Error::DmaAlloc {
        bytes: len,
        reason: format!(
            "no-IOMMU DMA memory must be physically contiguous (the device sees physical addresses), but {d}; allocate it with DmaMemory::allocate, which assembles huge pages in physical order"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two separate 4 KiB pages are (almost always) not adjacent; one page always is. As
    /// root the check runs on real physical addresses, elsewhere the refusal says run as root.
    #[test]
    fn one_page_is_contiguous_and_the_refusals_are_typed() {
        let mut v = vec![0u8; 3 * PAGE as usize];
        let p = v
            .as_mut_ptr()
            .wrapping_add(v.as_ptr().align_offset(PAGE as usize));
        // SAFETY: one page inside `v`, which outlives the call; nothing reaches it by DMA.
        match unsafe { physical_base(p, PAGE as usize) } {
            Ok(pa) => assert_eq!(pa % PAGE, 0),
            Err(e @ Error::PagemapUnreadable { .. }) => {
                assert!(e.to_string().contains("run as root"), "{e}")
            }
            Err(e @ Error::DmaAlloc { .. }) => assert!(e.to_string().contains("ulimit"), "{e}"),
            Err(e) => panic!("{e:?}"),
        }
    }
}
