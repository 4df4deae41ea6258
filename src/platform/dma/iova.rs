//! I/O virtual address allocation.
//!
//! With an IOMMU the driver chooses the bus addresses the device sees. They only have to be
//! unique, aligned and non-zero: QEMU's igb model (and some real firmware paths) treat a buffer
//! address of 0 as "no buffer" and silently consume the descriptor, so the allocator never hands
//! out anything below its base, which is never 0.
//!
//! Ranges are few (one per pool or ring) and long-lived, so a sorted first-fit list of free ranges
//! is enough; freed ranges are merged with their neighbours.

use crate::error::{Error, Result};

/// First-fit allocator over `[base, limit)`.
#[derive(Debug, Clone)]
pub struct IovaAllocator {
    /// Sorted, non-overlapping, non-adjacent free ranges `(start, end)`.
    free: Vec<(u64, u64)>,
}

/// The default IOVA window: from 1 MiB up to 2^39 (the 39-bit address width every VT-d
/// implementation supports, including QEMU's intel-iommu default).
pub const DEFAULT_BASE: u64 = 1 << 20;
/// See [`DEFAULT_BASE`].
pub const DEFAULT_LIMIT: u64 = 1 << 39;

/// The x86 interrupt (MSI) window, which the IOMMU reserves and VFIO refuses to map. Left out on
/// arm64 too, where it costs nothing: there the reserved window is the SMMU's software MSI
/// region (0x800_0000 to 0x80f_ffff in Linux's `arm_smmu_get_resv_regions`), which VFIO's
/// IOVA-range capability leaves out ([`IovaAllocator::restrict_to`]).
pub const MSI_WINDOW: (u64, u64) = (0xfee0_0000, 0xfef0_0000);

impl Default for IovaAllocator {
    /// The default window with the x86 MSI window left out.
    fn default() -> Self {
        let mut a = Self::new(DEFAULT_BASE, DEFAULT_LIMIT);
        a.free = vec![(DEFAULT_BASE, MSI_WINDOW.0), (MSI_WINDOW.1, DEFAULT_LIMIT)];
        a
    }
}

impl IovaAllocator {
    /// An allocator handing out addresses in `[base, limit)`; `base` 0 is raised to 4 KiB.
    pub fn new(base: u64, limit: u64) -> Self {
        let base = base.max(4096);
        assert!(base < limit, "empty IOVA window");
        IovaAllocator {
            free: vec![(base, limit)],
        }
    }

    /// Allocates `len` bytes aligned to `align` (a power of two, at least 4 KiB is sensible).
    pub fn alloc(&mut self, len: u64, align: u64) -> Result<u64> {
        assert!(
            align.is_power_of_two(),
            "IOVA alignment must be a power of two"
        );
        if len == 0 {
            return Err(Error::InvalidConfig("zero-length IOVA allocation".into()));
        }
        for i in 0..self.free.len() {
            let (start, end) = self.free[i];
            let Some(aligned) = start.checked_add(align - 1).map(|v| v & !(align - 1)) else {
                continue;
            };
            let Some(stop) = aligned.checked_add(len) else {
                continue;
            };
            if stop > end {
                continue;
            }
            // Split the free range into [start, aligned) and [stop, end).
            let mut replacement = Vec::with_capacity(2);
            if aligned > start {
                replacement.push((start, aligned));
            }
            if stop < end {
                replacement.push((stop, end));
            }
            self.free.splice(i..=i, replacement);
            return Ok(aligned);
        }
        Err(Error::IovaExhausted {
            bytes: len,
            align,
            windows: self.describe(),
        })
    }

    /// Keeps only the addresses that also lie in one of `usable` (inclusive `(start, end)`
    /// ranges, as VFIO's IOVA-range capability reports them: the IOMMU's address width less
    /// reserved regions such as the MSI window). Call it before the first allocation. The last
    /// page below 2^64 is never used (`iova + size` would wrap to 0 there, which type1 handles
    /// badly). Returns the windows left, for messages.
    pub fn restrict_to(&mut self, usable: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for &(fs, fe) in &self.free {
            for &(us, ue) in usable {
                let ue_excl = ue.saturating_add(1).min(u64::MAX - 4095);
                let (s, e) = (fs.max(us), fe.min(ue_excl));
                if s < e {
                    out.push((s, e));
                }
            }
        }
        out.sort_unstable();
        // Adjacent pieces (from adjacent reported ranges) become one, as `free` keeps them.
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(out.len());
        for (s, e) in out {
            match merged.last_mut() {
                Some(last) if last.1 == s => last.1 = e,
                _ => merged.push((s, e)),
            }
        }
        self.free = merged.clone();
        merged
    }

    /// The free windows, as "0x100000-0xfee00000, 0xfef00000-0x8000000000" (for messages).
    pub fn describe(&self) -> String {
        if self.free.is_empty() {
            return "none".into();
        }
        self.free
            .iter()
            .map(|(s, e)| format!("{s:#x}-{e:#x}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Returns a range obtained from [`IovaAllocator::alloc`].
    ///
    /// Panics if the range overlaps free space (a double free), which would be a driver bug.
    pub fn free(&mut self, iova: u64, len: u64) {
        let end = iova + len;
        let pos = self.free.partition_point(|&(s, _)| s < iova);
        if pos > 0 {
            assert!(
                self.free[pos - 1].1 <= iova,
                "IOVA double free at {iova:#x}"
            );
        }
        if pos < self.free.len() {
            assert!(end <= self.free[pos].0, "IOVA double free at {iova:#x}");
        }
        self.free.insert(pos, (iova, end));
        // Merge with the right neighbour, then the left.
        if pos + 1 < self.free.len() && self.free[pos].1 == self.free[pos + 1].0 {
            self.free[pos].1 = self.free[pos + 1].1;
            self.free.remove(pos + 1);
        }
        if pos > 0 && self.free[pos - 1].1 == self.free[pos].0 {
            self.free[pos - 1].1 = self.free[pos].1;
            self.free.remove(pos);
        }
    }

    /// Total free bytes.
    pub fn free_bytes(&self) -> u64 {
        self.free.iter().map(|(s, e)| e - s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn never_zero_even_when_asked_for_base_zero() {
        let mut a = IovaAllocator::new(0, 1 << 30);
        let x = a.alloc(4096, 4096).unwrap();
        assert_ne!(x, 0);
    }

    #[test]
    fn default_window_skips_the_msi_range() {
        let mut a = IovaAllocator::default();
        let mut last = 0;
        for _ in 0..20 {
            let x = a.alloc(256 << 20, 2 << 20).unwrap();
            assert!(
                x + (256 << 20) <= MSI_WINDOW.0 || x >= MSI_WINDOW.1,
                "{x:#x}"
            );
            last = x;
        }
        assert!(last >= MSI_WINDOW.1);
    }

    #[test]
    fn the_usable_ranges_the_kernel_reports_bound_the_window() {
        // What QEMU's intel-iommu (39-bit) reports through VFIO: everything but the MSI window,
        // inclusive ends; and a narrower 32-bit IOMMU.
        let mut a = IovaAllocator::default();
        let left = a.restrict_to(&[(0, 0xfedf_ffff), (0xfef0_0000, (1 << 39) - 1)]);
        assert_eq!(
            left,
            [(DEFAULT_BASE, MSI_WINDOW.0), (MSI_WINDOW.1, DEFAULT_LIMIT)]
        );
        let mut b = IovaAllocator::default();
        b.restrict_to(&[(0, 0x7fff_ffff)]);
        assert_eq!(b.describe(), "0x100000-0x80000000");
        let x = b.alloc(1 << 30, 1 << 21).unwrap();
        assert!(x + (1 << 30) <= 0x8000_0000, "{x:#x}");
        assert!(matches!(
            b.alloc(1 << 30, 1 << 21),
            Err(Error::IovaExhausted { .. })
        ));
        // Adjacent reported ranges give one window; a second restriction (another group
        // attached) narrows what is free, never what is in use.
        let mut d = IovaAllocator::default();
        d.restrict_to(&[(0, 0x0fff_ffff), (0x1000_0000, 0x7fff_ffff)]);
        assert_eq!(d.describe(), "0x100000-0x80000000");
        let used = d.alloc(1 << 20, 1 << 20).unwrap();
        d.restrict_to(&[(0, 0x3fff_ffff)]);
        assert_eq!(d.free_bytes(), (0x4000_0000 - (1 << 20)) - (1 << 20));
        d.free(used, 1 << 20);
        // A range up to the top of the address space loses its last page.
        let mut c = IovaAllocator::new(1 << 20, u64::MAX);
        assert_eq!(
            c.restrict_to(&[(0, u64::MAX)]),
            [(1 << 20, u64::MAX - 4095)]
        );
    }

    #[test]
    fn exhaustion_is_an_error() {
        let mut a = IovaAllocator::new(1 << 20, 2 << 20);
        a.alloc(1 << 20, 4096).unwrap();
        assert!(matches!(
            a.alloc(4096, 4096),
            Err(Error::IovaExhausted { .. })
        ));
    }

    proptest! {
        #[test]
        fn no_overlap_alignment_and_conservation(ops in proptest::collection::vec((1u64..64, 0u32..4, any::<bool>()), 1..200)) {
            let window = (1u64 << 20, 1u64 << 32);
            let mut a = IovaAllocator::new(window.0, window.1);
            let total = a.free_bytes();
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (pages, align_log, do_free) in ops {
                if do_free && !live.is_empty() {
                    let (iova, len) = live.swap_remove(pages as usize % live.len());
                    a.free(iova, len);
                } else {
                    let len = pages * 4096;
                    let align = 4096u64 << (align_log * 3);
                    let iova = a.alloc(len, align).unwrap();
                    prop_assert!(iova != 0);
                    prop_assert_eq!(iova % align, 0);
                    prop_assert!(iova >= window.0 && iova + len <= window.1);
                    for &(s, l) in &live {
                        prop_assert!(iova + len <= s || s + l <= iova, "overlap");
                    }
                    live.push((iova, len));
                }
                let used: u64 = live.iter().map(|x| x.1).sum();
                prop_assert_eq!(a.free_bytes() + used, total);
            }
            for (iova, len) in live.drain(..) {
                a.free(iova, len);
            }
            prop_assert_eq!(a.free.len(), 1);
            prop_assert_eq!(a.free_bytes(), total);
        }
    }
}
