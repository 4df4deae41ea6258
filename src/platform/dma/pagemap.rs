//! Physical addresses of this process's pages, from `/proc/self/pagemap`: the bus addresses of
//! DMA memory when no IOMMU translates (VFIO's no-IOMMU mode).
//!
//! The file holds one little-endian 64-bit entry per 4 KiB virtual page, at byte offset
//! `vaddr / 4096 * 8` (Linux, Documentation/admin-guide/mm/pagemap.rst): bit 63 "page
//! present", bits 0-54 the page frame number. Since Linux 4.2 the PFN reads as 0 unless the
//! reader has CAP_SYS_ADMIN, so a present page with PFN 0 means "not permitted", which is
//! turned into [`Error::PagemapUnreadable`] rather than a bus address of 0. DPDK reads the same
//! file for its IOVA-as-PA mode (lib/eal/linux/eal_memory.c, `rte_mem_virt2phy`).
//!
//! A device without an IOMMU sees physical memory, so a DMA block must be physically contiguous
//! to be reached as `bus address + offset`: [`contiguous_base`] checks that and names the first
//! boundary where it is not.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The path of the running process's page map.
pub const PAGEMAP: &str = "/proc/self/pagemap";

/// The granule of the page map: one entry per 4 KiB page, whatever backs it.
const ENTRY_PAGE: u64 = 4096;
/// Bit 63: the page is present in RAM.
const PRESENT: u64 = 1 << 63;
/// Bits 0-54: the page frame number (when present).
const PFN_MASK: u64 = (1 << 55) - 1;

/// What one page-map entry says about its page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageFrame {
    /// Present, at physical address `pfn * 4096`.
    Present {
        /// The page frame number.
        pfn: u64,
    },
    /// Present, but the PFN was withheld (the reader lacks CAP_SYS_ADMIN).
    Hidden,
    /// Not in RAM (never touched, or swapped out).
    NotPresent,
}

impl PageFrame {
    /// Decodes one entry.
    pub fn parse(entry: u64) -> PageFrame {
        if entry & PRESENT == 0 {
            return PageFrame::NotPresent;
        }
        match entry & PFN_MASK {
            0 => PageFrame::Hidden,
            pfn => PageFrame::Present { pfn },
        }
    }
}

/// A page map to read entries from (the process's own, or a file a test wrote).
#[derive(Debug)]
pub struct Pagemap {
    file: File,
    path: PathBuf,
}

impl Pagemap {
    /// The running process's page map.
    pub fn open_self() -> Result<Pagemap> {
        Pagemap::open(Path::new(PAGEMAP))
    }

    /// The page map at `path`.
    pub fn open(path: &Path) -> Result<Pagemap> {
        let file = File::open(path).map_err(|e| Error::PagemapUnreadable {
            why: format!("opening {}: {e}", path.display()),
        })?;
        Ok(Pagemap {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The raw entry of the 4 KiB page holding `vaddr`.
    pub fn entry(&self, vaddr: u64) -> Result<u64> {
        Ok(self.entries(vaddr, 1)?[0])
    }

    /// The raw entries of the `n` 4 KiB pages from the one holding `vaddr` (one read).
    pub fn entries(&self, vaddr: u64, n: usize) -> Result<Vec<u64>> {
        let mut b = vec![0u8; n * 8];
        let at = vaddr / ENTRY_PAGE * 8;
        self.file
            .read_exact_at(&mut b, at)
            .map_err(|e| Error::PagemapUnreadable {
                why: format!("reading {} at {at:#x}: {e}", self.path.display()),
            })?;
        Ok(b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }

    /// The physical address of the byte at `vaddr`, which must be in a present page.
    pub fn physical(&self, vaddr: u64) -> Result<u64> {
        self.decode(vaddr, self.entry(vaddr)?)
    }

    /// The physical address of `vaddr` from its page's entry.
    fn decode(&self, vaddr: u64, entry: u64) -> Result<u64> {
        match PageFrame::parse(entry) {
            PageFrame::Present { pfn } => Ok(pfn * ENTRY_PAGE + vaddr % ENTRY_PAGE),
            PageFrame::Hidden => Err(Error::PagemapUnreadable {
                why: format!(
                    "{} gives page frame numbers as 0 to this process",
                    self.path.display()
                ),
            }),
            PageFrame::NotPresent => Err(Error::DmaAlloc {
                bytes: 0,
                reason: format!(
                    "the page at {vaddr:#x} is not in RAM ({} says not present): DMA memory must be populated and locked before its physical address is taken (a driver bug)",
                    self.path.display()
                ),
            }),
        }
    }

    /// The physical address of each `page`-sized page of `vaddr..vaddr + len` (`vaddr` and
    /// `len` multiples of `page`).
    pub fn physical_pages(&self, vaddr: u64, len: u64, page: u64) -> Result<Vec<u64>> {
        assert!(
            page >= ENTRY_PAGE && vaddr % page == 0 && len % page == 0,
            "pages of {page:#x} bytes at {vaddr:#x} for {len:#x} bytes are not aligned"
        );
        let step = (page / ENTRY_PAGE) as usize;
        let entries = self.entries(vaddr, (len / ENTRY_PAGE) as usize)?;
        entries
            .iter()
            .step_by(step)
            .enumerate()
            .map(|(i, &e)| self.decode(vaddr + i as u64 * page, e))
            .collect()
    }
}

/// Where a block stops being physically contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Discontiguity {
    /// Byte offset in the block of the first page that does not follow its predecessor.
    pub offset: u64,
    /// The physical address it would need.
    pub expected: u64,
    /// The physical address it has.
    pub found: u64,
}

impl std::fmt::Display for Discontiguity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the page at offset {:#x} is at physical address {:#x}, not {:#x}",
            self.offset, self.found, self.expected
        )
    }
}

/// The physical address of a block whose pages (of `page` bytes, physical addresses `phys` in
/// virtual order) are physically contiguous, or the first boundary where they are not.
pub fn contiguous_base(phys: &[u64], page: u64) -> std::result::Result<u64, Discontiguity> {
    let Some(&base) = phys.first() else {
        return Err(Discontiguity {
            offset: 0,
            expected: 0,
            found: 0,
        });
    };
    for (i, &p) in phys.iter().enumerate().skip(1) {
        let offset = i as u64 * page;
        if p != base + offset {
            return Err(Discontiguity {
                offset,
                expected: base + offset,
                found: p,
            });
        }
    }
    Ok(base)
}

/// Physically contiguous runs: the indices (into `phys`) of `n` pages of `page` bytes that
/// follow each other in physical memory, in physical order, or `None`.
pub fn find_run(phys: &[u64], page: u64, n: usize) -> Option<Vec<usize>> {
    if n == 0 || phys.len() < n {
        return None;
    }
    let mut order: Vec<usize> = (0..phys.len()).collect();
    order.sort_by_key(|&i| phys[i]);
    let mut start = 0;
    for k in 1..=order.len() {
        if k - start == n {
            return Some(order[start..k].to_vec());
        }
        if k < order.len() && phys[order[k]] != phys[order[k - 1]] + page {
            start = k;
        }
    }
    None
}

/// Whether the error is "the page map withholds physical addresses" (for callers that map it
/// to a clearer message).
pub fn is_unreadable(e: &Error) -> bool {
    matches!(e, Error::PagemapUnreadable { .. })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes a page map with `entries` (virtual address, raw entry); the rest reads as 0.
    fn write_entries(path: &Path, entries: &[(u64, u64)]) -> std::io::Result<()> {
        let f = File::create(path)?;
        for &(vaddr, e) in entries {
            f.write_all_at(&e.to_le_bytes(), vaddr / ENTRY_PAGE * 8)?;
        }
        Ok(())
    }

    const H: u64 = 2 << 20;

    #[test]
    fn entries_decode_present_pfn_hidden_and_absent() {
        assert_eq!(
            PageFrame::parse(PRESENT | 0x12345),
            PageFrame::Present { pfn: 0x12345 }
        );
        // Bits 55-62 (soft-dirty, exclusive, file/shared, swapped) are not part of the PFN.
        assert_eq!(
            PageFrame::parse(PRESENT | (1 << 55) | (1 << 61) | 0x7),
            PageFrame::Present { pfn: 0x7 }
        );
        assert_eq!(PageFrame::parse(PRESENT), PageFrame::Hidden);
        assert_eq!(PageFrame::parse(0x12345), PageFrame::NotPresent);
        assert_eq!(PageFrame::parse(0), PageFrame::NotPresent);
    }

    #[test]
    fn a_file_page_map_gives_physical_addresses_and_says_why_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pagemap");
        write_entries(
            &path,
            &[
                (0x20_0000, PRESENT | 0x400),
                (0x40_0000, PRESENT | 0x600),
                (0x60_0000, 0),
                (0x80_0000, PRESENT),
            ],
        )
        .unwrap();
        let pm = Pagemap::open(&path).unwrap();
        assert_eq!(pm.physical(0x20_0123).unwrap(), 0x40_0123);
        assert_eq!(
            pm.physical_pages(0x20_0000, 2 * H, H).unwrap(),
            [0x40_0000, 0x60_0000]
        );
        let absent = pm.physical(0x60_0000).unwrap_err();
        assert!(absent.to_string().contains("not present"), "{absent}");
        let hidden = pm.physical(0x80_0000).unwrap_err();
        assert!(is_unreadable(&hidden), "{hidden:?}");
        assert!(hidden.to_string().contains("CAP_SYS_ADMIN"), "{hidden}");
        // Past the end of the file: unreadable, not a panic.
        assert!(is_unreadable(&pm.physical(1 << 40).unwrap_err()));
    }

    #[test]
    fn an_unreadable_page_map_says_run_as_root() {
        let e = Pagemap::open(Path::new("/nonexistent/pagemap")).unwrap_err();
        assert!(matches!(e, Error::PagemapUnreadable { .. }), "{e:?}");
        assert!(e.to_string().contains("run as root"), "{e}");
    }

    #[test]
    fn contiguity_is_checked_page_by_page() {
        assert_eq!(contiguous_base(&[0x4000_0000], H), Ok(0x4000_0000));
        assert_eq!(
            contiguous_base(&[0x4000_0000, 0x4020_0000, 0x4040_0000], H),
            Ok(0x4000_0000)
        );
        let d = contiguous_base(&[0x4000_0000, 0x4020_0000, 0x3fe0_0000], H).unwrap_err();
        assert_eq!(
            d,
            Discontiguity {
                offset: 2 * H,
                expected: 0x4040_0000,
                found: 0x3fe0_0000
            }
        );
        assert!(d.to_string().contains("offset 0x400000"), "{d}");
        // Reverse order is physically adjacent but not contiguous in virtual order.
        assert!(contiguous_base(&[0x4020_0000, 0x4000_0000], H).is_err());
        assert!(contiguous_base(&[], H).is_err());
    }

    #[test]
    fn runs_are_found_in_any_order() {
        let phys = [0x80_0000, 0x20_0000, 0x60_0000, 0x40_0000, 0xa0_0000];
        // 0x20.., 0x40.., 0x60.., 0x80.., 0xa0.. are all adjacent: the first three, in physical order.
        assert_eq!(find_run(&phys, H, 3), Some(vec![1, 3, 2]));
        assert_eq!(find_run(&phys, H, 5), Some(vec![1, 3, 2, 0, 4]));
        let gaps = [0x20_0000, 0x80_0000, 0x40_0000, 0xe0_0000];
        assert_eq!(find_run(&gaps, H, 2), Some(vec![0, 2]));
        assert_eq!(find_run(&gaps, H, 3), None);
        assert_eq!(find_run(&gaps, H, 1), Some(vec![0]));
        assert_eq!(find_run(&gaps, H, 0), None);
        assert_eq!(find_run(&[], H, 1), None);
    }

    #[test]
    fn the_running_process_page_map_reads_or_says_why_not() {
        // As root this gives a real address; without CAP_SYS_ADMIN the typed refusal.
        let v = vec![1u8; 4096];
        let pm = Pagemap::open_self().unwrap();
        match pm.physical(v.as_ptr() as u64) {
            Ok(pa) => assert_eq!(pa % ENTRY_PAGE, v.as_ptr() as u64 % ENTRY_PAGE),
            Err(e) => assert!(is_unreadable(&e), "{e:?}"),
        }
    }
}
