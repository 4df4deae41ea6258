//! DMA memory: host pages that a device reads and writes behind the CPU's back.
//!
//! The rules that keep this sound are the whole reason the type exists:
//! - No Rust reference to the bytes is ever handed out while the device may write them. Callers
//!   get raw pointers and atomic word accessors; the plain copies (`write_bytes`, `read_bytes`)
//!   are crate-private, because whether their bytes are owned at that moment is the driver's
//!   protocol, which nothing checks (outside the crate, safe code could race a copy against an
//!   atomic access on another thread); the buffer pool creates slices only for buffers the
//!   driver currently owns.
//! - Memory is mapped into the device's address space through a [`DmaMapper`] (the VFIO container,
//!   or [`IdentityMapper`] for in-memory devices) and unmapped in `Drop`, before the pages are
//!   returned to the kernel. Whoever owns a ring must stop the device's DMA before dropping it.
//! - 2 MiB huge pages are preferred (fewer IOTLB misses, physically contiguous buffers); when none
//!   are reserved the allocation falls back to ordinary pages with a warning, which VFIO handles
//!   just as well because the IOMMU makes the buffer contiguous in IOVA space anyway.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use memmap2::{MmapMut, MmapOptions};

use super::contiguous::ContiguousRegion;
use super::word;
use crate::error::{Error, Result};

/// Size of a huge page on x86-64.
pub const HUGE_PAGE: usize = 2 << 20;
const PAGE: usize = 4096;

/// Something that makes host memory visible to a device and tells which bus address to use.
pub trait DmaMapper: Send + Sync + fmt::Debug {
    /// Maps `len` bytes at `vaddr` for device access and returns the IOVA the device must use.
    ///
    /// # Safety
    /// `vaddr..vaddr+len` must be valid, page-aligned memory that stays allocated and is not
    /// reused for anything else until [`DmaMapper::unmap`] has been called with the returned IOVA.
    /// # Safety
    /// The caller upholds [`DmaMapper::map`]'s contract: the range stays valid until unmapped.
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<u64>;

    /// Removes a mapping made by [`DmaMapper::map`]. After it returns `Ok` the device can no
    /// longer reach the memory (an access faults in the IOMMU instead of corrupting freed pages).
    /// On `Err` the device may still reach it: the caller must not free or reuse the memory
    /// (`DmaMemory` leaks it), and the mapper keeps the IOVA range reserved.
    fn unmap(&self, iova: u64, len: usize) -> Result<()>;

    /// A short name for messages, e.g. "vfio container 3" or "identity".
    fn describe(&self) -> String;

    /// The DMA domain this mapper maps into: memory mapped through two mappers of one domain
    /// is reachable by the same devices. By default each mapper object is a domain of its own
    /// (a VFIO container, shared by every port of the process; a software IOMMU); every
    /// [`IdentityMapper`] is the same one (host virtual addresses).
    fn domain(&self) -> usize {
        self as *const Self as *const () as usize
    }

    /// Whether the device sees physical addresses, so that every block mapped through this
    /// mapper must be physically contiguous (VFIO's no-IOMMU mode): [`DmaMemory::allocate`]
    /// then assembles it from huge pages (`dma::contiguous`). False for every mapper that
    /// translates (an IOMMU, a software IOMMU, the identity mapper).
    fn needs_physical_contiguity(&self) -> bool {
        false
    }
}

/// The domain of every [`IdentityMapper`] (no object address is this small).
const IDENTITY_DOMAIN: usize = 1;

/// The mapper of in-memory devices: the "bus address" is the virtual address itself.
///
/// In-memory devices (null, the software 82599) run in this process and dereference IOVAs
/// directly, so pool and ring code is the same with and without an IOMMU.
#[derive(Debug, Default, Clone, Copy)]
pub struct IdentityMapper;

impl DmaMapper for IdentityMapper {
    /// # Safety
    /// Nothing to uphold beyond [`DmaMapper::map`]'s contract: no mapping is made.
    unsafe fn map(&self, vaddr: *mut u8, _len: usize) -> Result<u64> {
        Ok(vaddr as u64)
    }
    fn unmap(&self, _iova: u64, _len: usize) -> Result<()> {
        Ok(())
    }
    fn describe(&self) -> String {
        "identity".into()
    }
    fn domain(&self) -> usize {
        IDENTITY_DOMAIN
    }
}

/// A block of device-visible memory.
pub struct DmaMemory {
    ptr: NonNull<u8>,
    len: usize,
    iova: u64,
    huge: bool,
    mapper: Arc<dyn DmaMapper>,
    // Owns the pages; never dereferenced as a slice (that would create a reference to memory the
    // device writes). Dropped after a successful `unmap` in `Drop`, leaked after a failed one.
    map: Option<Backing>,
}

/// The pages behind a [`DmaMemory`]: any pages (a mapper that translates), or a physically
/// contiguous block (a device that sees physical addresses).
#[derive(Debug)]
enum Backing {
    Pages(MmapMut),
    Contiguous(ContiguousRegion),
}

// DmaMemory owns its mapping exclusively; every access that code outside this crate can make
// through `&self` is an atomic word access (a plain copy, `write_bytes`/`read_bytes`, is
// crate-private: its callers own the bytes they copy, as documented there).
// SAFETY: so moving it to another thread adds no data race of its own.
unsafe impl Send for DmaMemory {}
// SAFETY: see `Send`.
unsafe impl Sync for DmaMemory {}

impl fmt::Debug for DmaMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmaMemory")
            .field("vaddr", &self.ptr)
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .field("huge", &self.huge)
            .field("mapper", &self.mapper.describe())
            .finish()
    }
}

/// An array of `2^k` atomic words of one width inside a [`DmaMemory`] (a ring's descriptor
/// table, available or used ring), checked once when made ([`DmaMemory::words`]): word `i`
/// is then word `i mod 2^k`, reached with a mask and no further check, as DPDK's and Linux's
/// rings index theirs. It borrows the memory, so it cannot outlive the mapping; like every
/// access to DMA memory it is atomic, never a Rust reference to the bytes.
pub struct DmaWords<'m, T> {
    base: NonNull<T>,
    mask: usize,
    _mem: std::marker::PhantomData<&'m DmaMemory>,
}

/// A word array of a [`DmaMemory`], checked once ([`DmaMemory::span`]), to make its
/// [`DmaWords`] with one compare ([`DmaMemory::words_in`]). It holds no borrow, so a ring keeps
/// it beside its memory.
#[derive(Clone, Copy, Debug)]
pub struct DmaSpan<T> {
    /// Byte offset of the first word, and of the byte after the last.
    offset: usize,
    end: usize,
    /// Words - 1 (a power of two of them).
    mask: usize,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T> Clone for DmaWords<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

/// A copy is another shared view of the same words: a burst keeps one in a register instead of
/// reloading it through a reference after every atomic store.
impl<T> Copy for DmaWords<'_, T> {}

macro_rules! dma_words {
    ($t:ty) => {
        impl DmaWords<'_, $t> {
            /// Atomically loads word `i` (modulo the array's length).
            #[inline(always)]
            pub fn load(&self, i: usize, order: Ordering) -> $t {
                // SAFETY: `i & mask` is below the length, whose words all lie inside the live
                // mapping and are aligned (checked by `DmaMemory::words`); the borrow keeps
                // the mapping alive; memory shared with a device is only accessed atomically.
                unsafe { word::load(self.base.as_ptr().add(i & self.mask), order) }
            }

            /// Atomically stores word `i` (modulo the array's length).
            #[inline(always)]
            pub fn store(&self, i: usize, value: $t, order: Ordering) {
                // SAFETY: as in `load`.
                unsafe { word::store(self.base.as_ptr().add(i & self.mask), value, order) }
            }
        }
    };
}
dma_words!(u16);
dma_words!(u32);
dma_words!(u64);

impl DmaMemory {
    /// Allocates at least `len` zeroed bytes and maps them through `mapper`.
    ///
    /// Tries 2 MiB huge pages first (the length is rounded up to a whole huge page), then falls
    /// back to ordinary pages with a `tracing` warning (once per process, and only for memory
    /// a device reaches: not for the identity mapper's).
    pub fn allocate(len: usize, mapper: Arc<dyn DmaMapper>) -> Result<Self> {
        if len == 0 {
            return Err(Error::DmaAlloc {
                bytes: 0,
                reason: "zero-length allocation".into(),
            });
        }
        if mapper.needs_physical_contiguity() {
            let region = ContiguousRegion::allocate(len)?;
            let (ptr, huge) = (region.as_ptr(), region.is_huge());
            return Self::map_through(Backing::Contiguous(region), ptr, huge, mapper);
        }
        let huge_len = len.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        // (The model-checking build makes a few small memories per run, thousands of runs:
        // not a 2 MiB page to zero each time.)
        let first = if cfg!(loom) {
            Err(std::io::ErrorKind::Unsupported.into())
        } else {
            MmapOptions::new()
                .len(huge_len)
                .huge(Some(21))
                .populate()
                .map_anon()
        };
        let (mut map, huge, len) = match first {
            Ok(m) => (m, true, huge_len),
            Err(e) => {
                static WARNED: std::sync::atomic::AtomicBool =
                    std::sync::atomic::AtomicBool::new(false);
                // Memory no device reaches (the null device's and af_packet's pools, behind
                // the identity mapper) gains little from huge pages: no warning for it.
                let for_a_device = mapper.domain() != IDENTITY_DOMAIN;
                if !for_a_device || WARNED.swap(true, Ordering::Relaxed) {
                    tracing::debug!(bytes = len, "DMA memory from 4 KiB pages");
                } else {
                    tracing::warn!(
                    bytes = len,
                    error = %e,
                    "no 2 MiB huge pages available, using 4 KiB pages for DMA memory \
                     (reserve some with `echo 512 > /proc/sys/vm/nr_hugepages`)"
                    );
                }
                let len = len.div_ceil(PAGE) * PAGE;
                let m = MmapOptions::new()
                    .len(len)
                    .populate()
                    .map_anon()
                    .map_err(|e| Error::DmaAlloc {
                        bytes: len,
                        reason: e.to_string(),
                    })?;
                (m, false, len)
            }
        };
        debug_assert_eq!(map.len(), len);
        let ptr = map.as_mut_ptr();
        Self::map_through(Backing::Pages(map), ptr, huge, mapper)
    }

    /// Maps the fresh pages `backing` (starting at `ptr`) through `mapper`.
    fn map_through(
        backing: Backing,
        ptr: *mut u8,
        huge: bool,
        mapper: Arc<dyn DmaMapper>,
    ) -> Result<Self> {
        let len = match &backing {
            Backing::Pages(m) => m.len(),
            Backing::Contiguous(r) => r.len(),
        };
        let ptr = NonNull::new(ptr).expect("mmap returned null");
        // SAFETY: `ptr..ptr+len` is the fresh page-aligned mapping owned by `backing`, which
        // lives in the returned DmaMemory until after `Drop` has called `unmap`.
        let iova = unsafe { mapper.map(ptr.as_ptr(), len)? };
        tracing::debug!(len, huge, iova = format_args!("{iova:#x}"), mapper = %mapper.describe(), "DMA memory mapped");
        // (The model-checking build: no shadow of an earlier mapping at these addresses.)
        #[cfg(loom)]
        super::shadow::forget(ptr.as_ptr() as usize, len);
        Ok(DmaMemory {
            ptr,
            len,
            iova,
            huge,
            mapper,
            map: Some(backing),
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty; present for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bus address of the first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Whether the memory is backed by huge pages.
    pub fn is_huge(&self) -> bool {
        self.huge
    }

    /// Virtual address of the first byte. Never turn it into a reference while a device may
    /// write the memory.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The mapper this memory is mapped through.
    pub fn mapper(&self) -> &Arc<dyn DmaMapper> {
        &self.mapper
    }

    #[inline(always)]
    fn word<T>(&self, offset: usize) -> *mut T {
        let size = std::mem::size_of::<T>();
        // `len` is a whole number of pages (`allocate` rounds it up), so an aligned word of at
        // most 8 bytes that starts inside ends inside: one compare bounds it, with no add that
        // could wrap.
        const { assert!(std::mem::size_of::<T>() <= 8) };
        assert!(
            offset % size == 0 && offset < self.len,
            "DMA word access at {offset:#x} outside {} bytes",
            self.len
        );
        // SAFETY: the offset is inside the allocation (checked above).
        unsafe { self.ptr.as_ptr().add(offset).cast() }
    }

    /// The `n` words of type `T` (`u16`, `u32` or `u64`) from byte `offset`, as an array
    /// checked once ([`DmaWords`]).
    ///
    /// # Panics
    /// If `n` is not a power of two, `offset` is not aligned to the word, or the words do not
    /// all lie inside the memory.
    pub fn words<T>(&self, offset: usize, n: usize) -> DmaWords<'_, T> {
        let size = std::mem::size_of::<T>();
        assert!(
            n.is_power_of_two()
                && offset % size == 0
                && n.checked_mul(size)
                    .and_then(|b| b.checked_add(offset))
                    .is_some_and(|end| end <= self.len),
            "DMA word array of {n} x {size} bytes at {offset:#x} outside {} bytes, misaligned, or not a power of two",
            self.len
        );
        DmaWords {
            // SAFETY: `offset < len` (checked above), inside the allocation.
            base: unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(offset)) }.cast(),
            mask: n - 1,
            _mem: std::marker::PhantomData,
        }
    }

    /// The `n` words of type `T` from byte `offset`, checked as [`words`](Self::words) checks
    /// them, kept to make their [`DmaWords`] later with one compare
    /// ([`words_in`](Self::words_in)): a ring checks its arrays once, when it is made, not in
    /// every burst.
    ///
    /// # Panics
    /// As [`words`](Self::words).
    pub fn span<T>(&self, offset: usize, n: usize) -> DmaSpan<T> {
        let _ = self.words::<T>(offset, n);
        DmaSpan {
            offset,
            end: offset + n * std::mem::size_of::<T>(),
            mask: n - 1,
            _t: std::marker::PhantomData,
        }
    }

    /// The word array `span` describes ([`span`](Self::span)): one compare, that its words
    /// lie inside this memory (they do when the span was made from it). Every DMA memory
    /// starts on a page, so an offset aligned for `T` in one is aligned in any other.
    ///
    /// # Panics
    /// If the span's words do not lie inside this memory (a span made from a larger one).
    #[inline(always)]
    pub fn words_in<T>(&self, span: &DmaSpan<T>) -> DmaWords<'_, T> {
        assert!(
            span.end <= self.len,
            "a DMA word span past the end of this memory"
        );
        DmaWords {
            // SAFETY: `offset < end <= len`: inside this allocation, aligned for `T` (checked
            // by `span` against a page-aligned base, as this one is).
            base: unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(span.offset)) }.cast(),
            mask: span.mask,
            _mem: std::marker::PhantomData,
        }
    }

    /// Atomically loads the aligned 64-bit word at `offset`.
    #[inline(always)]
    pub fn load_u64(&self, offset: usize, order: Ordering) -> u64 {
        let p = self.word::<u64>(offset);
        // SAFETY: `p` is aligned and inside the live mapping (checked by `word`); memory shared
        // with a device or another thread is only ever accessed through atomics or volatile ops.
        unsafe { word::load(p, order) }
    }

    /// Atomically stores the aligned 64-bit word at `offset`.
    #[inline(always)]
    pub fn store_u64(&self, offset: usize, value: u64, order: Ordering) {
        let p = self.word::<u64>(offset);
        // SAFETY: as in `load_u64`.
        unsafe { word::store(p, value, order) }
    }

    /// Atomically loads the aligned 32-bit word at `offset`.
    #[inline(always)]
    pub fn load_u32(&self, offset: usize, order: Ordering) -> u32 {
        let p = self.word::<u32>(offset);
        // SAFETY: as in `load_u64`.
        unsafe { word::load(p, order) }
    }

    /// Atomically stores the aligned 32-bit word at `offset`.
    #[inline(always)]
    pub fn store_u32(&self, offset: usize, value: u32, order: Ordering) {
        let p = self.word::<u32>(offset);
        // SAFETY: as in `load_u64`.
        unsafe { word::store(p, value, order) }
    }

    /// Atomically loads the aligned 16-bit word at `offset` (virtio ring indices).
    #[inline(always)]
    pub fn load_u16(&self, offset: usize, order: Ordering) -> u16 {
        let p = self.word::<u16>(offset);
        // SAFETY: `p` is 2-byte aligned and inside the live mapping (checked by `word`); the
        // word is shared with the device, so it is only ever accessed atomically.
        unsafe { word::load(p, order) }
    }

    /// Atomically stores the aligned 16-bit word at `offset`.
    #[inline(always)]
    pub fn store_u16(&self, offset: usize, value: u16, order: Ordering) {
        let p = self.word::<u16>(offset);
        // SAFETY: as in `load_u16`: aligned, inside the mapping, accessed only atomically.
        unsafe { word::store(p, value, order) }
    }

    /// Copies `src` into the memory at `offset`: a plain (non-atomic) copy.
    ///
    /// The caller must own those bytes at the moment (neither the device nor another thread is
    /// reading or writing them); publishing them to the device is the job of a later release
    /// store or doorbell. Nothing can check that, so this is crate-private: `DmaMemory` is
    /// `Sync`, and safe code outside the crate could otherwise race this copy against an atomic
    /// access to the same bytes (the driver's, or another thread's), a data race. Outside the
    /// crate the memory is reached by atomic words only ([`DmaMemory::store_u32`],
    /// [`DmaMemory::words`]).
    ///
    /// ```compile_fail,E0624
    /// use std::sync::Arc;
    /// use vfio_nic::platform::dma::{DmaMemory, IdentityMapper};
    /// let m = DmaMemory::allocate(4096, Arc::new(IdentityMapper)).unwrap();
    /// m.write_bytes(0, &[1, 2, 3, 4]); // private: a plain copy could race an atomic access
    /// ```
    pub(crate) fn write_bytes(&self, offset: usize, src: &[u8]) {
        assert!(
            offset
                .checked_add(src.len())
                .is_some_and(|end| end <= self.len),
            "DMA write outside the allocation"
        );
        // SAFETY: the range is inside the allocation (checked above) and `src` is ordinary memory,
        // so the two cannot overlap.
        unsafe {
            let to = self.ptr.as_ptr().add(offset);
            word::copied_to(to, src.len());
            std::ptr::copy_nonoverlapping(src.as_ptr(), to, src.len())
        }
    }

    /// Copies bytes at `offset` out into `dst`: a plain copy, crate-private for the reason and
    /// with the ownership rule of [`DmaMemory::write_bytes`].
    ///
    /// ```compile_fail,E0624
    /// use std::sync::Arc;
    /// use vfio_nic::platform::dma::{DmaMemory, IdentityMapper};
    /// let m = DmaMemory::allocate(4096, Arc::new(IdentityMapper)).unwrap();
    /// let mut out = [0u8; 4];
    /// m.read_bytes(0, &mut out); // private: a plain copy could race an atomic store
    /// ```
    pub(crate) fn read_bytes(&self, offset: usize, dst: &mut [u8]) {
        assert!(
            offset
                .checked_add(dst.len())
                .is_some_and(|end| end <= self.len),
            "DMA read outside the allocation"
        );
        // SAFETY: as in `write_bytes`.
        unsafe {
            let from = self.ptr.as_ptr().add(offset);
            word::copied_from(from, dst.len());
            std::ptr::copy_nonoverlapping(from, dst.as_mut_ptr(), dst.len())
        }
    }

    /// Whether `iova..iova+len` lies inside this memory; returns the byte offset if so.
    pub fn offset_of_iova(&self, iova: u64, len: usize) -> Option<usize> {
        let off = iova.checked_sub(self.iova)?;
        (off.checked_add(len as u64)? <= self.len as u64).then_some(off as usize)
    }

    /// The model-checking build: declares `offset..offset + len` as words a driver and a
    /// device share, shadowed by loom atomics (`shadow.rs` says why a declaration, made where
    /// the memory is made, before another thread can reach it). Every atomic access to the
    /// memory must be to declared words.
    ///
    /// # Panics
    /// If the range is not inside the memory.
    #[cfg(loom)]
    pub(crate) fn loom_words(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "loom words outside the allocation"
        );
        // SAFETY: inside the live mapping (checked above; `len` is whole pages, so widening
        // the range to whole 8-byte words stays inside).
        unsafe { super::shadow::declare_words(self.ptr.as_ptr() as usize + offset, len) }
    }

    /// The model-checking build: declares `offset..offset + len` as bytes copied plainly
    /// (frames), each copy checked by loom against the other threads' accesses.
    #[cfg(loom)]
    pub(crate) fn loom_bytes(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "loom bytes outside the allocation"
        );
        super::shadow::declare_bytes(self.ptr.as_ptr() as usize + offset, len)
    }
}

impl Drop for DmaMemory {
    fn drop(&mut self) {
        // Unmap first: after this the device cannot reach the pages, then `map` returns them.
        // If the unmap failed, the device may still write them: returning them to the kernel
        // would let it corrupt whatever reuses them, so they are leaked instead.
        #[cfg(loom)]
        {
            super::shadow::forget(self.ptr.as_ptr() as usize, self.len);
            // A loom model that failed unwinds its threads one by one on one OS thread: the
            // unmap would wait for the software IOMMU's write lock while another of them holds
            // a view, for ever. Its memory is leaked instead (a failed model's only).
            if std::thread::panicking() {
                std::mem::forget(self.map.take());
                return;
            }
        }
        let map = self.map.take();
        if let Err(e) = self.mapper.unmap(self.iova, self.len) {
            tracing::error!(error = %e, "DMA memory leaked");
            std::mem::forget(map);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records map and unmap calls; with `fail_unmap`, every unmap fails (as a VFIO unmap can).
    /// (The pool's tests use it too, to see when a pool's memory goes.)
    #[derive(Debug, Default)]
    pub(in crate::platform::dma) struct Spy(Mutex<Vec<String>>, bool);

    impl Spy {
        /// Unmap calls so far.
        pub(in crate::platform::dma) fn unmaps(&self) -> usize {
            let log = self.0.lock().unwrap();
            log.iter().filter(|l| l.starts_with("unmap")).count()
        }
    }

    impl DmaMapper for Spy {
        /// # Safety
        /// Records the call only; maps nothing.
        unsafe fn map(&self, _vaddr: *mut u8, len: usize) -> Result<u64> {
            self.0.lock().unwrap().push(format!("map {len}"));
            Ok(0x10_0000)
        }
        fn unmap(&self, iova: u64, len: usize) -> Result<()> {
            self.0
                .lock()
                .unwrap()
                .push(format!("unmap {iova:#x} {len}"));
            if self.1 {
                return Err(Error::DmaUnmap {
                    iova,
                    len,
                    reason: "spy told to fail".into(),
                });
            }
            Ok(())
        }
        fn describe(&self) -> String {
            "spy".into()
        }
    }

    #[test]
    fn allocate_maps_and_drop_unmaps() {
        let spy = Arc::new(Spy::default());
        let m = DmaMemory::allocate(10_000, spy.clone()).unwrap();
        assert!(m.len() >= 10_000);
        assert_eq!(m.len() % PAGE, 0);
        assert_eq!(m.iova(), 0x10_0000);
        assert_eq!(m.offset_of_iova(0x10_0010, 16), Some(16));
        assert_eq!(m.offset_of_iova(0xf_0000, 16), None);
        let len = m.len();
        drop(m);
        let log = spy.0.lock().unwrap().clone();
        assert_eq!(
            log,
            vec![format!("map {len}"), format!("unmap 0x100000 {len}")]
        );
    }

    /// Whether `addr` lies in a mapping of this process (/proc/self/maps).
    fn mapped(addr: usize) -> bool {
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.split_once('-'))
            .filter_map(|(a, b)| {
                Some((
                    usize::from_str_radix(a, 16).ok()?,
                    usize::from_str_radix(b, 16).ok()?,
                ))
            })
            .any(|(a, b)| (a..b).contains(&addr))
    }

    #[test]
    fn memory_whose_unmap_failed_is_leaked_not_freed() {
        // After a failed unmap the device may still write the pages: they must stay allocated
        // (freed pages would be reused by the process while the device writes them).
        let spy = Arc::new(Spy(Mutex::default(), true));
        let m = DmaMemory::allocate(10_000, spy.clone()).unwrap();
        let addr = m.as_ptr() as usize;
        drop(m);
        assert_eq!(spy.0.lock().unwrap().len(), 2, "unmap was called");
        // (Not checked the other way round: another test thread may map the same address as
        // soon as it is free.)
        assert!(mapped(addr), "the pages were returned to the kernel");
    }

    #[test]
    fn memory_is_zeroed_and_words_round_trip() {
        let m = DmaMemory::allocate(4096, Arc::new(IdentityMapper)).unwrap();
        assert_eq!(m.iova(), m.as_ptr() as u64);
        assert_eq!(m.load_u64(8, Ordering::Relaxed), 0);
        m.store_u64(8, 0x1122_3344_5566_7788, Ordering::Release);
        assert_eq!(m.load_u32(8, Ordering::Acquire), 0x5566_7788);
        m.write_bytes(100, b"hello");
        let mut out = [0u8; 5];
        m.read_bytes(100, &mut out);
        assert_eq!(&out, b"hello");
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn word_access_is_bounds_checked() {
        let m = DmaMemory::allocate(4096, Arc::new(IdentityMapper)).unwrap();
        m.load_u64(m.len(), Ordering::Relaxed);
    }

    #[test]
    fn offsets_whose_end_wraps_around_are_refused_by_the_bound() {
        let m = DmaMemory::allocate(4096, Arc::new(IdentityMapper)).unwrap();
        let outside = |f: &dyn Fn()| {
            let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_err();
            let msg = e.downcast_ref::<String>().cloned().unwrap_or_default()
                + e.downcast_ref::<&str>().copied().unwrap_or_default();
            assert!(msg.contains("outside"), "{msg}");
        };
        outside(&|| {
            m.load_u64(usize::MAX - 7, Ordering::Relaxed);
        });
        outside(&|| m.write_bytes(usize::MAX, &[1, 2]));
        outside(&|| m.read_bytes(usize::MAX - 1, &mut [0; 4]));
    }
}
