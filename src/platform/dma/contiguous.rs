//! Physically contiguous DMA memory, for devices that see physical addresses (VFIO no-IOMMU).
//!
//! Without an IOMMU a device reaches a DMA block at its physical address, and the crate's pools
//! and rings address their buffers as `bus address + offset`: so the whole block must be
//! physically contiguous. A 2 MiB huge page is; several huge pages mapped in one go are not, in
//! general (the kernel hands out free huge pages in whatever order its free list has: on this
//! project's test machine four of them came back in the physical order 2, 4, 5, 1). So a block
//! of `n` huge pages is assembled as DPDK's legacy memory mode does it
//! (lib/eal/linux/eal_memory.c: map the pages, sort them by physical address, remap the runs):
//!
//! 1. huge pages are faulted into a hugetlb memfd (`memfd_create(MFD_HUGETLB)`), `n` at first and
//!    more in rounds while no `n` of them are physically adjacent (up to a bound);
//! 2. their physical addresses are read from the page map ([`super::pagemap`]), and a run of `n`
//!    adjacent pages is picked ([`pagemap::find_run`]);
//! 3. the run's file pages are mapped, in physical order, at consecutive virtual addresses
//!    (`MAP_FIXED` into a reserved range), the other pages are given back (hole punched), and
//!    the result is checked again page by page ([`pagemap::contiguous_base`]).
//!
//! Without huge pages only a block that fits in one 4 KiB page can be contiguous; anything
//! larger is refused with [`Error::HugePagesMissing`], which says how to reserve them.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use super::pagemap::{self, Pagemap};
use super::HUGE_PAGE;
use crate::error::{Error, Result};

const PAGE: usize = 4096;
const H: usize = HUGE_PAGE;
/// At most this many huge pages (beyond the `n` asked for, times eight) are tried before the
/// search for `n` adjacent ones gives up.
const EXTRA_PAGES: usize = 16;

/// A physically contiguous, populated, read-write block; unmapped on drop.
#[derive(Debug)]
pub struct ContiguousRegion {
    ptr: NonNull<u8>,
    len: usize,
    huge: bool,
}

// SAFETY: the region is plain memory owned by this value; it hands out only raw pointers.
unsafe impl Send for ContiguousRegion {}
// SAFETY: see `Send`.
unsafe impl Sync for ContiguousRegion {}

impl ContiguousRegion {
    /// At least `len` bytes, physically contiguous, zeroed: whole huge pages, or one 4 KiB page
    /// when `len` fits in one and no huge page is to be had.
    pub fn allocate(len: usize) -> Result<ContiguousRegion> {
        let n = len.div_ceil(H).max(1);
        match allocate_huge(n) {
            Ok(r) => Ok(r),
            Err(Missing(why)) if len <= PAGE => {
                tracing::debug!(len, why, "no huge page: one 4 KiB page");
                one_page()
            }
            Err(Missing(why)) => Err(Error::HugePagesMissing {
                bytes: len,
                pages: n,
                why,
            }),
            Err(Other(e)) => Err(e),
        }
    }

    /// The first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty; present for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the region is made of huge pages.
    pub fn is_huge(&self) -> bool {
        self.huge
    }
}

impl Drop for ContiguousRegion {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr+len` is the mapping this value created and owns; nothing else
        // refers to it once its owner (DmaMemory, after a successful unmap) drops it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Why an allocation of huge pages failed.
enum Failure {
    /// Not enough huge pages (or none adjacent): the text says which.
    Missing(String),
    /// Anything else (the page map unreadable, say).
    Other(Error),
}
use Failure::{Missing, Other};

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Other(e)
    }
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Maps `pages` huge pages of `fd` from file page `first` (shared, populated).
fn map_file_pages(fd: &OwnedFd, first: usize, pages: usize) -> std::io::Result<NonNull<u8>> {
    // SAFETY: a fresh shared mapping of the memfd at an address the kernel picks; it touches
    // no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            pages * H,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            (first * H) as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    Ok(NonNull::new(p.cast()).expect("mmap never returns null on success"))
}

/// Temporary mappings of the candidate pages, unmapped when dropped.
struct Candidates(Vec<(NonNull<u8>, usize)>);

impl Drop for Candidates {
    fn drop(&mut self) {
        for &(p, pages) in &self.0 {
            // SAFETY: each entry is a mapping `map_file_pages` made for this value alone.
            unsafe { libc::munmap(p.as_ptr().cast(), pages * H) };
        }
    }
}

fn allocate_huge(n: usize) -> std::result::Result<ContiguousRegion, Failure> {
    const NAME: &CStr = c"vfio-nic-dma";
    // SAFETY: memfd_create with a valid C string; the fd is owned at once.
    let raw = unsafe { libc::memfd_create(NAME.as_ptr(), libc::MFD_HUGETLB | libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(Missing(format!(
            "memfd_create(MFD_HUGETLB) failed: {}",
            errno()
        )));
    }
    // SAFETY: `raw` is a fresh fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let pm = Pagemap::open_self()?;
    let limit = n * 8 + EXTRA_PAGES;
    let mut candidates = Candidates(Vec::new());
    let mut phys: Vec<u64> = Vec::new();
    let run = loop {
        let total = phys.len();
        let want = if total == 0 {
            n
        } else {
            total.min(limit - total)
        };
        // SAFETY: plain ftruncate on our memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), ((total + want) * H) as libc::off_t) } != 0 {
            return Err(Other(Error::io("growing the huge-page memfd", errno())));
        }
        let p = match map_file_pages(&fd, total, want) {
            Ok(p) => p,
            Err(e) if total == 0 => {
                return Err(Missing(format!(
                    "mapping {n} huge page(s) failed: {e}; {}",
                    free_huge_pages()
                )))
            }
            // No more free huge pages: search what we have (below, then give up).
            Err(_) => {
                return Err(Missing(format!(
                    "no {n} of the {total} huge pages this process could take are physically adjacent; {}",
                    free_huge_pages()
                )))
            }
        };
        candidates.0.push((p, want));
        phys.extend(pm.physical_pages(p.as_ptr() as u64, (want * H) as u64, H as u64)?);
        if let Some(run) = pagemap::find_run(&phys, H as u64, n) {
            break run;
        }
        if phys.len() >= limit {
            return Err(Missing(format!(
                "no {n} of {} huge pages tried are physically adjacent; {}",
                phys.len(),
                free_huge_pages()
            )));
        }
    };
    let region = remap_run(&fd, &run)?;
    drop(candidates);
    // Give the pages outside the run back to the kernel's huge-page pool.
    for i in (0..phys.len()).filter(|i| !run.contains(i)) {
        // SAFETY: fallocate on our memfd; punching a hole frees that file page.
        unsafe {
            libc::fallocate(
                fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (i * H) as libc::off_t,
                H as libc::off_t,
            )
        };
    }
    // The check that counts: the final mapping's pages, in virtual order.
    let got = pm.physical_pages(region.ptr.as_ptr() as u64, region.len as u64, H as u64)?;
    if let Err(d) = pagemap::contiguous_base(&got, H as u64) {
        return Err(Other(Error::DmaAlloc {
            bytes: region.len,
            reason: format!("the assembled huge pages are not contiguous: {d} (a driver bug)"),
        }));
    }
    tracing::debug!(
        pages = n,
        tried = phys.len(),
        "physically contiguous huge pages assembled"
    );
    Ok(region)
}

/// Maps the file pages `run` (in that order) at consecutive virtual addresses.
fn remap_run(fd: &OwnedFd, run: &[usize]) -> std::result::Result<ContiguousRegion, Failure> {
    let len = run.len() * H;
    // Reserve one huge page more than needed, to align the start to 2 MiB.
    // SAFETY: a fresh inaccessible anonymous reservation at an address the kernel picks.
    let reserve = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + H,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if reserve == libc::MAP_FAILED {
        return Err(Other(Error::io(
            "reserving address space for DMA memory",
            errno(),
        )));
    }
    let start = reserve as usize;
    let base = start.next_multiple_of(H);
    // SAFETY: the head and tail are parts of our own reservation outside `base..base+len`.
    unsafe {
        if base > start {
            libc::munmap(reserve, base - start);
        }
        let end = base + len;
        if start + len + H > end {
            libc::munmap(end as *mut libc::c_void, start + len + H - end);
        }
    }
    let region = ContiguousRegion {
        ptr: NonNull::new(base as *mut u8).expect("an mmap reservation is never at 0"),
        len,
        huge: true,
    };
    for (j, &file_page) in run.iter().enumerate() {
        // SAFETY: MAP_FIXED replaces part of our own reservation (owned by `region`, which
        // unmaps all of it on an early return) with the memfd's page.
        let p = unsafe {
            libc::mmap(
                (base + j * H) as *mut libc::c_void,
                H,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                (file_page * H) as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Other(Error::io(
                "mapping a huge page for DMA memory",
                errno(),
            )));
        }
    }
    Ok(region)
}

/// One zeroed, populated 4 KiB page (contiguous by definition).
fn one_page() -> Result<ContiguousRegion> {
    // SAFETY: a fresh private anonymous page at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::DmaAlloc {
            bytes: PAGE,
            reason: errno().to_string(),
        });
    }
    Ok(ContiguousRegion {
        ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
        len: PAGE,
        huge: false,
    })
}

/// "N of M huge pages free" from sysfs, for messages.
fn free_huge_pages() -> String {
    let dir = "/sys/kernel/mm/hugepages/hugepages-2048kB";
    let read = |f: &str| {
        std::fs::read_to_string(format!("{dir}/{f}"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    };
    format!(
        "{} of {} huge pages of 2 MiB free",
        read("free_hugepages"),
        read("nr_hugepages")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One huge page more than the machine has reserved can never be had: the refusal names
    /// the fix, whatever the machine.
    #[test]
    fn more_huge_pages_than_reserved_is_a_typed_refusal() {
        let total: usize =
            std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
        let len = (total + 1) * H;
        let e = ContiguousRegion::allocate(len).unwrap_err();
        assert!(
            matches!(e, Error::HugePagesMissing { bytes, pages, .. } if bytes == len && pages == total + 1),
            "{e:?}"
        );
        let m = e.to_string();
        assert!(m.contains("nr_hugepages") && m.contains("physical"), "{m}");
    }

    /// On a machine with huge pages and the right to read physical addresses (root), blocks of
    /// several huge pages come back physically contiguous; elsewhere the refusal is typed and
    /// says what to do.
    #[test]
    fn blocks_are_contiguous_or_refused_with_the_fix() {
        for len in [100, 3 << 20, 9 << 20] {
            match ContiguousRegion::allocate(len) {
                Ok(r) => {
                    assert!(r.len() >= len);
                    let pm = Pagemap::open_self().unwrap();
                    let page = if r.is_huge() { H } else { PAGE } as u64;
                    let phys = pm
                        .physical_pages(r.as_ptr() as u64, r.len() as u64, page)
                        .unwrap();
                    assert!(pagemap::contiguous_base(&phys, page).is_ok(), "{phys:x?}");
                    // SAFETY: the region is ours and at least one page long.
                    assert_eq!(unsafe { r.as_ptr().read_volatile() }, 0, "zeroed");
                }
                Err(e @ Error::HugePagesMissing { .. }) => {
                    assert!(len > PAGE, "one page is always possible: {e}");
                    assert!(e.to_string().contains("nr_hugepages"), "{e}");
                }
                Err(e @ Error::PagemapUnreadable { .. }) => {
                    assert!(e.to_string().contains("run as root"), "{e}")
                }
                Err(e) => panic!("{len}: {e}"),
            }
        }
    }
}
