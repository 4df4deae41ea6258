//! A software IOMMU for in-memory devices.
//!
//! The software 82599 reads descriptors and writes frames at the bus addresses the driver gives
//! it, exactly like hardware. Dereferencing those addresses directly would make every driver bug
//! undefined behaviour in the test itself; instead the model goes through this table of mapped
//! ranges. An access outside every mapping is a *fault*: counted, logged and refused, as the
//! real IOMMU does (QEMU's virtual IOMMU prints a DMAR fault in the same situation). The IOVAs it
//! hands out are deliberately not the virtual addresses, so a driver that puts a pointer where a
//! bus address belongs faults here instead of working by accident.
//!
//! Unmapping takes the table's write lock, so it waits for any access in progress; after
//! `unmap` returns the model can no longer touch the memory, which is then freed by its owner.
//!
//! A device that makes several accesses in a row (a descriptor, its buffer, the write-back)
//! takes a [`DmaView`]: one hold of the read lock for the whole batch, and the mappings of the
//! last two accesses tried first, so each access costs a bounds check instead of a lock and a
//! search. Faults are detected exactly as before. A view must not be held across anything
//! that may take the table's lock again (another view, an access through the table itself):
//! with a writer waiting, the second read would wait for the writer, which waits for the first.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use super::iova::IovaAllocator;
use super::memory::DmaMapper;
use crate::error::{Error, Result};

/// A refused device access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("DMA fault: device {} {len} bytes at IOVA {iova:#x}, which is not mapped", if *.write { "write of" } else { "read of" })]
pub struct DmaFault {
    /// First byte accessed.
    pub iova: u64,
    /// Bytes accessed.
    pub len: usize,
    /// Whether it was a write.
    pub write: bool,
}

struct Mapping {
    iova: u64,
    len: usize,
    vaddr: usize,
}

struct Inner {
    alloc: IovaAllocator,
    /// Sorted by IOVA, non-overlapping.
    maps: Vec<Mapping>,
}

/// The table of mappings an in-memory device may access.
pub struct SoftIommu {
    name: String,
    inner: RwLock<Inner>,
    faults: AtomicU64,
}

impl fmt::Debug for SoftIommu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SoftIommu")
            .field("name", &self.name)
            .field("faults", &self.faults())
            .finish()
    }
}

impl SoftIommu {
    /// An empty table.
    pub fn new(name: impl Into<String>) -> Self {
        SoftIommu {
            name: name.into(),
            // A window far from typical user-space addresses, starting above 4 GiB.
            inner: RwLock::new(Inner {
                alloc: IovaAllocator::new(1 << 32, 1 << 44),
                maps: Vec::new(),
            }),
            faults: AtomicU64::new(0),
        }
    }

    /// Accesses refused so far.
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }

    /// A view for a batch of accesses: the mappings stay while it lives (module doc).
    ///
    /// The device's side of the memory, so crate-private, with every access below: a model's
    /// copies are plain copies into memory that the driver reaches atomically, and into packet
    /// buffers that a [`Packet`](super::Packet) lends out as slices. Only this crate's models,
    /// which follow their device's protocol (they write only what the driver handed them), may
    /// make them; safe code elsewhere could race them against the driver.
    ///
    /// ```compile_fail,E0624
    /// use vfio_nic::platform::dma::SoftIommu;
    /// let iommu = SoftIommu::new("doc");
    /// let _ = iommu.view(); // private: the device side of DMA memory
    /// ```
    ///
    /// The table's own one-access copies and words are there for this module's tests only:
    ///
    /// ```compile_fail,E0599
    /// use vfio_nic::platform::dma::SoftIommu;
    /// let iommu = SoftIommu::new("doc");
    /// let _ = iommu.write(1 << 32, &[0; 4]); // none: a plain copy into DMA memory
    /// ```
    pub(crate) fn view(&self) -> DmaView<'_> {
        DmaView {
            iommu: self,
            inner: self.inner.read().unwrap_or_else(|e| e.into_inner()),
            last: Cell::new([0, 0]),
        }
    }

    /// Copies device memory at `iova` into `dst` (one access: a view of its own).
    #[cfg(test)]
    pub(crate) fn read(&self, iova: u64, dst: &mut [u8]) -> Result<(), DmaFault> {
        self.view().read(iova, dst)
    }

    /// Copies `src` into device memory at `iova`.
    #[cfg(test)]
    pub(crate) fn write(&self, iova: u64, src: &[u8]) -> Result<(), DmaFault> {
        self.view().write(iova, src)
    }

    /// Loads an aligned 64-bit word.
    #[cfg(test)]
    pub(crate) fn load_u64(&self, iova: u64, order: Ordering) -> Result<u64, DmaFault> {
        self.view().load_u64(iova, order)
    }

    /// Stores an aligned 32-bit word.
    #[cfg(test)]
    pub(crate) fn store_u32(&self, iova: u64, value: u32, order: Ordering) -> Result<(), DmaFault> {
        self.view().store_u32(iova, value, order)
    }

    /// Loads an aligned 32-bit word.
    pub(crate) fn load_u32(&self, iova: u64, order: Ordering) -> Result<u32, DmaFault> {
        self.view().load_u32(iova, order)
    }

    fn misaligned(&self, iova: u64, len: usize, write: bool) -> DmaFault {
        self.faults.fetch_add(1, Ordering::Relaxed);
        DmaFault { iova, len, write }
    }
}

/// A batch of device accesses under one hold of the table's read lock (`SoftIommu::view`:
/// this crate's models only, as every device-side access).
pub struct DmaView<'a> {
    iommu: &'a SoftIommu,
    inner: RwLockReadGuard<'a, Inner>,
    /// The mappings the last two accesses hit, the latest first: a device alternates between
    /// a descriptor ring and a buffer pool.
    last: Cell<[usize; 2]>,
}

impl<'a> DmaView<'a> {
    /// Runs `f` with the host address of `iova..iova+len`, or counts and logs a fault.
    ///
    /// The mappings of the last two accesses are tried first, inline (a device alternates
    /// between a descriptor ring and a buffer pool; a hit costs a subtraction and a compare);
    /// anything else goes to [`lookup`](Self::lookup).
    #[inline(always)]
    fn with<T>(
        &self,
        iova: u64,
        len: usize,
        write: bool,
        f: impl FnOnce(*mut u8) -> T,
    ) -> Result<T, DmaFault> {
        let maps = &self.inner.maps;
        let host = |i: usize| {
            let m = maps.get(i)?;
            let off = iova.wrapping_sub(m.iova);
            // `off + len <= m.len` without overflow: `len <= m.len` first.
            (len <= m.len && off <= (m.len - len) as u64).then(|| m.vaddr + off as usize)
        };
        let [a, b] = self.last.get();
        if let Some(p) = host(a) {
            return Ok(f(p as *mut u8));
        }
        if let Some(p) = host(b) {
            self.last.set([b, a]);
            return Ok(f(p as *mut u8));
        }
        match self.lookup(iova, len, write) {
            Ok(p) => Ok(f(p)),
            Err(e) => Err(e),
        }
    }

    /// The mapping that holds all of `iova..iova+len` (its index) and the host address of
    /// `iova`: a binary search of the table.
    fn find(&self, iova: u64, len: usize) -> Option<(usize, usize)> {
        let maps = &self.inner.maps;
        let i = maps.partition_point(|m| m.iova <= iova).checked_sub(1)?;
        let m = &maps[i];
        let end = (iova - m.iova).checked_add(len as u64)?;
        (end <= m.len as u64).then(|| (i, m.vaddr + (iova - m.iova) as usize))
    }

    /// The slow path of [`with`](Self::with): [`find`](Self::find); a miss is a fault, counted
    /// and logged.
    #[inline(never)]
    fn lookup(&self, iova: u64, len: usize, write: bool) -> Result<*mut u8, DmaFault> {
        if let Some((i, host)) = self.find(iova, len) {
            let [a, _] = self.last.get();
            self.last.set([i, a]);
            return Ok(host as *mut u8);
        }
        let fault = DmaFault { iova, len, write };
        if self.iommu.faults.fetch_add(1, Ordering::Relaxed) < 16 {
            tracing::error!(iommu = %self.iommu.name, "{fault}");
        }
        Err(fault)
    }

    /// Copies device memory at `iova` into `dst`.
    #[inline]
    pub fn read(&self, iova: u64, dst: &mut [u8]) -> Result<(), DmaFault> {
        self.with(iova, dst.len(), false, |p| {
            // SAFETY: `p..p+len` lies inside a live mapping (checked by `with`; the view holds
            // the read lock, so the mapping cannot be removed and freed meanwhile); `dst` is
            // ordinary memory, so the ranges do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) }
        })
    }

    /// Appends `len` bytes of device memory at `iova` to `dst` (no zero-fill first).
    #[inline]
    pub fn read_append(&self, iova: u64, len: usize, dst: &mut Vec<u8>) -> Result<(), DmaFault> {
        dst.reserve(len);
        self.with(iova, len, false, |p| {
            let at = dst.len();
            // SAFETY: the source is inside a live mapping (as in `read`); the destination is
            // the `len` bytes of spare capacity reserved above, which `set_len` then declares
            // initialised because the copy wrote every one of them; the two do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr().add(at), len);
                dst.set_len(at + len);
            }
        })
    }

    /// Checks that all of `iova..iova+len` may be read, as a DMA read of it would be, and
    /// copies its first bytes into `dst` (as many as fit, at most `len`); returns how many.
    /// For a device that needs only a frame's header (a frame the model sends nowhere).
    #[inline]
    pub fn read_prefix(&self, iova: u64, len: usize, dst: &mut [u8]) -> Result<usize, DmaFault> {
        let n = dst.len().min(len);
        self.with(iova, len, false, |p| {
            // SAFETY: `p..p+len` lies inside a live mapping (as in `read`) and `n <= len`; `dst`
            // is ordinary memory, so the ranges do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), n) };
            n
        })
    }

    /// A window on `iova..iova+len` for a batch of accesses to it (a descriptor ring): it is
    /// translated here once, and an access inside it then costs a bounds check. A range that is
    /// not inside one mapping gives a window whose every access goes through the view, faults
    /// included.
    pub fn window(&self, iova: u64, len: usize) -> DmaWindow<'_, 'a> {
        let host = self.find(iova, len).map(|(_, host)| host);
        DmaWindow {
            view: self,
            iova,
            len: if host.is_some() { len } else { 0 },
            host: host.unwrap_or(0),
        }
    }

    /// A window on the whole mapping that holds `iova` (a buffer pool), for a batch of
    /// accesses to its buffers; with no mapping there, a window whose every access goes
    /// through the view (and faults there).
    pub fn window_around(&self, iova: u64) -> DmaWindow<'_, 'a> {
        let m = self.find(iova, 1).map(|(i, _)| &self.inner.maps[i]);
        DmaWindow {
            view: self,
            iova: m.map_or(0, |m| m.iova),
            len: m.map_or(0, |m| m.len),
            host: m.map_or(0, |m| m.vaddr),
        }
    }

    /// A descriptor ring of `n` 16-byte slots at `iova`, translated once, when all of it lies in
    /// one mapping and starts 16-byte aligned; `None` otherwise (the caller then goes through
    /// the view, which faults where the ring is not mapped). Its slots are then reached by
    /// index with one bounds check, no translation.
    pub fn ring(&self, iova: u64, n: usize) -> Option<DmaRing<'_, 'a>> {
        let bytes = n.checked_mul(16)?;
        let (_, host) = self.find(iova, bytes)?;
        (n > 0 && host % 16 == 0).then_some(DmaRing {
            _view: self,
            host,
            n,
        })
    }

    /// Copies `src` into device memory at `iova`.
    #[inline]
    pub fn write(&self, iova: u64, src: &[u8]) -> Result<(), DmaFault> {
        self.with(iova, src.len(), true, |p| {
            // SAFETY: as in `read`.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) }
        })
    }

    /// Loads an aligned 64-bit word.
    #[inline]
    pub fn load_u64(&self, iova: u64, order: Ordering) -> Result<u64, DmaFault> {
        if iova % 8 != 0 {
            return Err(self.iommu.misaligned(iova, 8, false));
        }
        self.with(iova, 8, false, |p| {
            // SAFETY: inside a live mapping (see `read`) and 8-byte aligned (mappings start on
            // page boundaries and the IOVA is aligned); shared words are accessed atomically.
            unsafe { AtomicU64::from_ptr(p.cast()) }.load(order)
        })
    }

    /// Stores an aligned 64-bit word.
    #[inline]
    pub fn store_u64(&self, iova: u64, value: u64, order: Ordering) -> Result<(), DmaFault> {
        if iova % 8 != 0 {
            return Err(self.iommu.misaligned(iova, 8, true));
        }
        self.with(iova, 8, true, |p| {
            // SAFETY: as in `load_u64`.
            unsafe { AtomicU64::from_ptr(p.cast()) }.store(value, order)
        })
    }

    /// Stores an aligned 32-bit word.
    #[inline]
    pub fn store_u32(&self, iova: u64, value: u32, order: Ordering) -> Result<(), DmaFault> {
        if iova % 4 != 0 {
            return Err(self.iommu.misaligned(iova, 4, true));
        }
        self.with(iova, 4, true, |p| {
            // SAFETY: as in `load_u64`, for a 4-byte aligned word.
            unsafe { AtomicU32::from_ptr(p.cast()) }.store(value, order)
        })
    }

    /// Loads an aligned 32-bit word.
    #[inline]
    pub fn load_u32(&self, iova: u64, order: Ordering) -> Result<u32, DmaFault> {
        if iova % 4 != 0 {
            return Err(self.iommu.misaligned(iova, 4, false));
        }
        self.with(iova, 4, false, |p| {
            // SAFETY: as in `load_u64`, for a 4-byte aligned word.
            unsafe { AtomicU32::from_ptr(p.cast()) }.load(order)
        })
    }
}

/// A range inside one mapping, translated once ([`DmaView::window`]). It borrows its view, so
/// the mapping cannot go away while it lives; accesses outside it go through the view (and
/// fault there if they are outside every mapping).
pub struct DmaWindow<'v, 'a> {
    view: &'v DmaView<'a>,
    iova: u64,
    /// 0 when the range was not inside one mapping.
    len: usize,
    /// Host address of `iova`.
    host: usize,
}

impl DmaWindow<'_, '_> {
    /// The host address of `iova..iova+len` when it is inside the window.
    #[inline(always)]
    fn range(&self, iova: u64, len: usize) -> Option<*mut u8> {
        let off = iova.wrapping_sub(self.iova);
        let inside = len <= self.len && off <= (self.len - len) as u64;
        inside.then(|| (self.host + off as usize) as *mut u8)
    }

    /// The host address of `iova..iova+len` when it is inside the window and `len`-aligned.
    #[inline(always)]
    fn word(&self, iova: u64, len: usize) -> Option<*mut u8> {
        self.range(iova, len).filter(|_| iova % len as u64 == 0)
    }

    /// Copies `src` into device memory at `iova`.
    #[inline(always)]
    pub fn write(&self, iova: u64, src: &[u8]) -> Result<(), DmaFault> {
        let Some(p) = self.range(iova, src.len()) else {
            return self.view.write(iova, src);
        };
        // SAFETY: inside the window, so inside a live mapping (the window borrows the view,
        // which holds the read lock); `src` is ordinary memory, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    /// Copies `src` into device memory at `iova` if all of it is inside the window; whether it
    /// did (nothing is written otherwise, and nothing is counted: the caller sends that access
    /// the whole way, where a fault is detected).
    #[inline(always)]
    pub fn write_inside(&self, iova: u64, src: &[u8]) -> bool {
        let Some(p) = self.range(iova, src.len()) else {
            return false;
        };
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        true
    }

    /// If all of `iova..iova+len` is inside the window (a DMA read of it cannot fault), copies
    /// its first bytes into `dst` (as many as fit, at most `len`) and returns how many; `None`
    /// otherwise, with nothing copied or counted (as [`write_inside`](Self::write_inside)).
    #[inline(always)]
    pub fn read_prefix_inside(&self, iova: u64, len: usize, dst: &mut [u8]) -> Option<usize> {
        let p = self.range(iova, len)?;
        let n = dst.len().min(len);
        // SAFETY: `p..p+len` is inside the window, so inside a live mapping (as in `write`), and
        // `n <= len`; `dst` is ordinary memory, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), n) };
        Some(n)
    }

    /// Loads an aligned 64-bit word.
    #[inline(always)]
    pub fn load_u64(&self, iova: u64, order: Ordering) -> Result<u64, DmaFault> {
        match self.word(iova, 8) {
            // SAFETY: inside the window, so inside a live mapping (the window borrows the view,
            // which holds the read lock), and 8-byte aligned: the window's host address and
            // IOVA differ by a multiple of the page size (mappings start on page boundaries).
            Some(p) => Ok(unsafe { AtomicU64::from_ptr(p.cast()) }.load(order)),
            None => self.view.load_u64(iova, order),
        }
    }

    /// Stores an aligned 64-bit word.
    #[inline(always)]
    pub fn store_u64(&self, iova: u64, value: u64, order: Ordering) -> Result<(), DmaFault> {
        let Some(p) = self.word(iova, 8) else {
            return self.view.store_u64(iova, value, order);
        };
        // SAFETY: as in `load_u64`.
        unsafe { AtomicU64::from_ptr(p.cast()) }.store(value, order);
        Ok(())
    }

    /// Stores an aligned 32-bit word.
    #[inline(always)]
    pub fn store_u32(&self, iova: u64, value: u32, order: Ordering) -> Result<(), DmaFault> {
        let Some(p) = self.word(iova, 4) else {
            return self.view.store_u32(iova, value, order);
        };
        // SAFETY: as in `load_u64`, for a 4-byte aligned word.
        unsafe { AtomicU32::from_ptr(p.cast()) }.store(value, order);
        Ok(())
    }
}

/// A descriptor ring inside one mapping, translated once ([`DmaView::ring`]): `n` slots of 16
/// bytes, each reached by its index. It borrows its view, so the mapping cannot go away while
/// it lives. A slot index at or past `n`, or a word not inside its 16-byte slot or not aligned,
/// panics (like a slice index): the caller computes indices modulo the ring, so it never does.
pub struct DmaRing<'v, 'a> {
    _view: &'v DmaView<'a>,
    /// Host address of slot 0 (16-byte aligned).
    host: usize,
    n: usize,
}

impl DmaRing<'_, '_> {
    /// Slots in the ring.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Always false: a ring has at least one slot.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The host address of the `W`-byte word at byte `off` of slot `slot`.
    #[inline(always)]
    fn word<const W: usize>(&self, slot: usize, off: usize) -> *mut u8 {
        assert!(
            slot < self.n && off % W == 0 && off + W <= 16,
            "descriptor word {off} of slot {slot} in a ring of {}",
            self.n
        );
        (self.host + slot * 16 + off) as *mut u8
    }

    /// Loads the 64-bit word at byte `off` (0 or 8) of slot `slot`.
    #[inline(always)]
    pub fn load_u64(&self, slot: usize, off: usize, order: Ordering) -> u64 {
        let p = self.word::<8>(slot, off);
        // Shared words are accessed atomically.
        // SAFETY: the slot is inside the ring (`word` checks), which lies in a live mapping
        // (`DmaView::ring` checks; the ring borrows the view, which holds the read lock), and
        // the word is 8-byte aligned: slot 0 is 16-byte aligned and `off % 8 == 0`.
        unsafe { AtomicU64::from_ptr(p.cast()) }.load(order)
    }

    /// Stores the 64-bit word at byte `off` (0 or 8) of slot `slot`.
    #[inline(always)]
    pub fn store_u64(&self, slot: usize, off: usize, value: u64, order: Ordering) {
        let p = self.word::<8>(slot, off);
        // SAFETY: as in `load_u64`.
        unsafe { AtomicU64::from_ptr(p.cast()) }.store(value, order)
    }

    /// Stores the 32-bit word at byte `off` (0, 4, 8 or 12) of slot `slot`.
    #[inline(always)]
    pub fn store_u32(&self, slot: usize, off: usize, value: u32, order: Ordering) {
        let p = self.word::<4>(slot, off);
        // SAFETY: as in `load_u64`, for a 4-byte aligned word.
        unsafe { AtomicU32::from_ptr(p.cast()) }.store(value, order)
    }
}

impl DmaMapper for SoftIommu {
    /// # Safety
    /// The caller upholds [`DmaMapper::map`]'s contract: the range stays valid until unmapped.
    unsafe fn map(&self, vaddr: *mut u8, len: usize) -> Result<u64> {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let iova = inner.alloc.alloc(len as u64, 4096)?;
        let pos = inner.maps.partition_point(|m| m.iova < iova);
        inner.maps.insert(
            pos,
            Mapping {
                iova,
                len,
                vaddr: vaddr as usize,
            },
        );
        Ok(iova)
    }

    fn unmap(&self, iova: u64, len: usize) -> Result<()> {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match inner
            .maps
            .iter()
            .position(|m| m.iova == iova && m.len == len)
        {
            Some(i) => {
                inner.maps.remove(i);
                inner.alloc.free(iova, len as u64);
                Ok(())
            }
            None => Err(Error::DmaUnmap {
                iova,
                len,
                reason: format!("{} never mapped that range (a driver bug)", self.name),
            }),
        }
    }

    fn describe(&self) -> String {
        format!("software IOMMU of {}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::dma::DmaMemory;
    use std::sync::Arc;

    #[test]
    fn device_sees_mapped_memory_and_faults_elsewhere() {
        let iommu = Arc::new(SoftIommu::new("t"));
        let mem = DmaMemory::allocate(8192, iommu.clone()).unwrap();
        assert_ne!(
            mem.iova(),
            mem.as_ptr() as u64,
            "IOVAs are not virtual addresses"
        );
        iommu.write(mem.iova() + 100, b"frame").unwrap();
        let mut out = [0u8; 5];
        mem.read_bytes(100, &mut out);
        assert_eq!(&out, b"frame");
        mem.store_u64(64, 0xabcd, Ordering::Release);
        assert_eq!(
            iommu.load_u64(mem.iova() + 64, Ordering::Acquire).unwrap(),
            0xabcd
        );
        // Past the end, before the start, misaligned.
        assert!(iommu
            .read(mem.iova() + mem.len() as u64 - 2, &mut out)
            .is_err());
        assert!(iommu.load_u64(mem.iova() - 8, Ordering::Relaxed).is_err());
        assert!(iommu.load_u64(mem.iova() + 4, Ordering::Relaxed).is_err());
        assert_eq!(iommu.faults(), 3);
        let iova = mem.iova();
        drop(mem);
        assert!(
            iommu.load_u64(iova, Ordering::Relaxed).is_err(),
            "unmapped memory faults"
        );
    }

    #[test]
    fn a_window_is_translated_once_and_still_faults_outside() {
        let iommu = Arc::new(SoftIommu::new("t"));
        let mem = DmaMemory::allocate(8192, iommu.clone()).unwrap();
        let view = iommu.view();
        let w = view.window(mem.iova(), 4096);
        w.store_u64(mem.iova() + 8, 0x1234, Ordering::Release)
            .unwrap();
        w.store_u32(mem.iova() + 16, 0x55, Ordering::Release)
            .unwrap();
        assert_eq!(
            w.load_u64(mem.iova() + 8, Ordering::Acquire).unwrap(),
            0x1234
        );
        assert_eq!(mem.load_u32(16, Ordering::Acquire), 0x55);
        // Outside the window but inside the mapping: through the view, no fault.
        w.store_u64(mem.iova() + 4096, 7, Ordering::Release)
            .unwrap();
        assert_eq!(mem.load_u64(4096, Ordering::Acquire), 7);
        // Outside every mapping, or misaligned: faults, counted.
        assert!(w.load_u64(mem.iova() - 8, Ordering::Relaxed).is_err());
        assert!(w.load_u64(mem.iova() + 4, Ordering::Relaxed).is_err());
        let nowhere = view.window(0x1000, 64);
        // Writes and reads that stay inside the window, or do nothing.
        assert!(w.write_inside(mem.iova() + 200, b"abc"));
        assert!(!w.write_inside(mem.iova() + 4095, b"abc"));
        let mut six = [0u8; 6];
        assert_eq!(w.read_prefix_inside(mem.iova() + 200, 3, &mut six), Some(3));
        assert_eq!(&six[..3], b"abc");
        assert_eq!(w.read_prefix_inside(mem.iova() + 4094, 3, &mut six), None);
        assert!(nowhere.store_u32(0x1000, 1, Ordering::Relaxed).is_err());
        assert_eq!(iommu.faults(), 3);
        // Appending reads: the bytes are added; a fault leaves the vector as it was.
        mem.write_bytes(100, b"frame");
        let mut v = b"ab".to_vec();
        view.read_append(mem.iova() + 100, 5, &mut v).unwrap();
        assert_eq!(v, b"abframe");
        let end = mem.iova() + mem.len() as u64;
        assert!(view.read_append(end - 2, 5, &mut v).is_err());
        assert_eq!(v, b"abframe");
    }

    #[test]
    fn a_ring_is_translated_once_and_only_where_it_is_mapped_whole() {
        let iommu = Arc::new(SoftIommu::new("t"));
        let mem = DmaMemory::allocate(8192, iommu.clone()).unwrap();
        let view = iommu.view();
        // The ring fills the mapping's last 4 KiB (the mapping may be larger than asked for).
        let at = mem.len() - 4096;
        let ring = view.ring(mem.iova() + at as u64, 256).unwrap();
        assert_eq!(ring.len(), 256);
        ring.store_u64(255, 8, 0x77, Ordering::Release);
        ring.store_u32(3, 12, 0x5, Ordering::Release);
        assert_eq!(mem.load_u64(at + 255 * 16 + 8, Ordering::Acquire), 0x77);
        assert_eq!(mem.load_u32(at + 3 * 16 + 12, Ordering::Acquire), 0x5);
        mem.store_u64(at + 16, 0xabc, Ordering::Release);
        assert_eq!(ring.load_u64(1, 0, Ordering::Acquire), 0xabc);
        // One slot too many, misaligned, nowhere, empty: no ring (and no fault counted).
        assert!(view.ring(mem.iova() + at as u64, 257).is_none());
        assert!(view.ring(mem.iova() + 8, 4).is_none());
        assert!(view.ring(0x1000, 4).is_none());
        assert!(view.ring(mem.iova(), 0).is_none());
        assert_eq!(iommu.faults(), 0);
        let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ring.load_u64(256, 0, Ordering::Relaxed)
        }));
        assert!(past.is_err(), "a slot past the ring panics");
    }
}
