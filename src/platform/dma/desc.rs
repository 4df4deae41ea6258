//! A descriptor table: a power-of-two array of 16-byte descriptors in DMA memory.
//!
//! Rings touch a descriptor several times per packet. [`DmaMemory`]'s word accessors check every
//! offset against the allocation, which is right for arbitrary offsets but pure overhead here:
//! a descriptor index is always reduced modulo the (power-of-two) table size, and the table is at
//! least that large, so every access is in bounds by construction. The accessors below mask the
//! index and the word number instead of checking them, and stay safe for any argument.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::memory::{DmaMapper, DmaMemory};
use super::word;
use crate::error::{Error, Result};

/// Bytes per descriptor (Intel advanced descriptors, both directions).
pub const DESC_BYTES: usize = 16;

/// `n` descriptors of 16 bytes, `n` a power of two.
#[derive(Debug)]
pub struct DescTable {
    mem: DmaMemory,
    mask: usize,
}

impl DescTable {
    /// Allocates a zeroed table of `n` descriptors through `mapper`.
    pub fn new(n: usize, mapper: Arc<dyn DmaMapper>) -> Result<DescTable> {
        if !n.is_power_of_two() {
            return Err(Error::InvalidConfig(format!(
                "descriptor table size {n} is not a power of two"
            )));
        }
        let mem = DmaMemory::allocate(n * DESC_BYTES, mapper)?;
        // The allocation is rounded up to whole pages, never down.
        assert!(mem.len() >= n * DESC_BYTES);
        // The model-checking build: every descriptor word is shared with the device.
        #[cfg(loom)]
        mem.loom_words(0, n * DESC_BYTES);
        Ok(DescTable { mem, mask: n - 1 })
    }

    /// Number of descriptors.
    pub fn len(&self) -> usize {
        self.mask + 1
    }

    /// Never empty; for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Bus address of descriptor 0 (for the base-address registers).
    pub fn iova(&self) -> u64 {
        self.mem.iova()
    }

    /// Length in bytes (for the length register).
    pub fn bytes(&self) -> usize {
        self.len() * DESC_BYTES
    }

    /// The table as a slice of descriptors, for loops over runs that do not wrap.
    #[inline(always)]
    pub fn descs(&self) -> &[Desc] {
        // SAFETY: the allocation holds `len()` descriptors (checked in `new`), is page-aligned
        // (so 16-byte aligned), and `Desc` is two atomic words: shared references to it are
        // how memory shared with the device may be accessed (atomically, never as plain data).
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr().cast::<Desc>(), self.len()) }
    }

    /// A copy of the table's address and size for a hot loop. Accesses through `&self` reload
    /// both after every store the compiler cannot prove unrelated (a descriptor, a packet);
    /// a view is a local value that stays in registers.
    #[inline(always)]
    pub fn view(&self) -> DescView<'_> {
        DescView {
            base: NonNull::new(self.mem.as_ptr()).expect("DMA memory is never null"),
            mask: self.mask,
            _table: PhantomData,
        }
    }

    /// Pointer to 64-bit word `q` (0 or 1, masked) of descriptor `i` (reduced modulo the size).
    #[inline(always)]
    fn qword(&self, i: usize, q: usize) -> *mut u64 {
        let off = (i & self.mask) * DESC_BYTES + (q & 1) * 8;
        // SAFETY: `off + 8 <= len() * 16 <= mem.len()` for every `i` and `q` after masking, and
        // the offset is 8-byte aligned inside a page-aligned allocation.
        unsafe { self.mem.as_ptr().add(off).cast() }
    }

    /// Atomically loads qword `q` of descriptor `i`.
    #[inline(always)]
    pub fn load(&self, i: usize, q: usize, order: Ordering) -> u64 {
        // SAFETY: in bounds and aligned (see `qword`); memory shared with a device is only ever
        // accessed through atomics or volatile operations.
        unsafe { word::load(self.qword(i, q), order) }
    }

    /// Atomically stores qword `q` of descriptor `i`.
    #[inline(always)]
    pub fn store(&self, i: usize, q: usize, value: u64, order: Ordering) {
        // SAFETY: as in `load`.
        unsafe { word::store(self.qword(i, q), value, order) }
    }

    /// Atomically loads 32-bit word `d` (0..=3, masked) of descriptor `i`: the status word of a
    /// receive write-back is word 2, the DD word of a transmit write-back word 3.
    #[inline(always)]
    pub fn load_dword(&self, i: usize, d: usize, order: Ordering) -> u32 {
        let p = self.qword(i, (d >> 1) & 1).cast::<u32>();
        // SAFETY: `p` plus 0 or 1 u32 stays inside the 8-byte word `qword` returned; 4-aligned.
        unsafe { word::load(p.add(d & 1), order) }
    }

    /// Atomically stores 32-bit word `d` (0..=3, masked) of descriptor `i`.
    #[inline(always)]
    pub fn store_dword(&self, i: usize, d: usize, value: u32, order: Ordering) {
        let p = self.qword(i, (d >> 1) & 1).cast::<u32>();
        // SAFETY: as in `load_dword`.
        unsafe { word::store(p.add(d & 1), value, order) }
    }
}

/// One 16-byte descriptor: two 64-bit words, only ever accessed atomically.
#[repr(C, align(16))]
pub struct Desc([AtomicU64; 2]);

impl Desc {
    /// Atomically loads word `q` (0 or 1, masked).
    #[inline(always)]
    pub fn load(&self, q: usize, order: Ordering) -> u64 {
        // SAFETY: the word is an aligned `AtomicU64` of a descriptor in DMA memory (a `Desc` is
        // only ever made over a table, `descs` and `DescView::at`), accessed only atomically.
        unsafe { word::load(self.0[q & 1].as_ptr(), order) }
    }

    /// Atomically stores word `q` (0 or 1, masked).
    #[inline(always)]
    pub fn store(&self, q: usize, value: u64, order: Ordering) {
        // SAFETY: as in `load`.
        unsafe { word::store(self.0[q & 1].as_ptr(), value, order) }
    }
}

/// A table's address and index mask, copied out for a hot loop ([`DescTable::view`]).
#[derive(Clone, Copy)]
pub struct DescView<'a> {
    base: NonNull<u8>,
    mask: usize,
    _table: PhantomData<&'a DescTable>,
}

impl<'a> DescView<'a> {
    /// Descriptor `i`, reduced modulo the table size.
    #[inline(always)]
    pub fn at(self, i: usize) -> &'a Desc {
        // SAFETY: `i & mask` is below the table's length, the table outlives `'a`, and the
        // element is 16-byte aligned inside the page-aligned allocation (see `descs`).
        unsafe { &*self.base.as_ptr().cast::<Desc>().add(i & self.mask) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::dma::IdentityMapper;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn indices_wrap_and_words_land_where_the_layout_says() {
        let t = DescTable::new(8, Arc::new(IdentityMapper)).unwrap();
        assert!(DescTable::new(6, Arc::new(IdentityMapper)).is_err());
        assert_eq!((t.len(), t.bytes()), (8, 128));
        t.store(9, 1, 0x1111_2222_3333_4444, Relaxed); // index 9 is descriptor 1
        assert_eq!(t.load(1, 1, Relaxed), 0x1111_2222_3333_4444);
        assert_eq!(t.load_dword(1, 2, Relaxed), 0x3333_4444);
        assert_eq!(t.load_dword(1, 3, Relaxed), 0x1111_2222);
        t.store_dword(7, 3, 1, Relaxed);
        assert_eq!(t.load(7, 1, Relaxed), 1 << 32);
        // Out-of-range word numbers are masked, never out of bounds.
        t.store_dword(7, 7, 5, Relaxed);
        assert_eq!(t.load_dword(7, 3, Relaxed), 5);
        assert_eq!(t.descs()[1].load(1, Relaxed), 0x1111_2222_3333_4444);
        assert_eq!(t.view().at(9).load(1, Relaxed), 0x1111_2222_3333_4444);
        t.view().at(15).store(0, 3, Relaxed);
        assert_eq!(t.load(7, 0, Relaxed), 3);
        let mut raw = [0u8; 8];
        t.mem.read_bytes(16 + 8, &mut raw);
        assert_eq!(u64::from_le_bytes(raw), 0x1111_2222_3333_4444);
    }
}
