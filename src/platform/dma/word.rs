//! The one way to a word of DMA memory: an atomic load or store at an address, and the hooks
//! of the plain copies.
//!
//! Every path by which a driver or a model reads or writes a ring word ([`DmaMemory`]'s word
//! accessors, [`DmaWords`], [`DescTable`] and its [`Desc`] views, and the software IOMMU's
//! [`DmaView`], [`DmaWindow`] and [`DmaRing`]) ends in [`load`] or [`store`] here. In every
//! normal build they are `Atomic*::from_ptr(p)` and the access, inlined: the code generated is
//! what those paths compiled to before this module existed (`bench/instructions --check`
//! holds that figure). In the model-checking build (`--cfg loom`, `scripts/loom`) they go to
//! [`shadow`](super::shadow): loom atomics that stand for the words, so that loom explores
//! every order in which a driver thread and a device thread may see each other's stores. The
//! plain copies (frames, a virtio driver's own area) call [`copied_from`] and [`copied_to`],
//! which do nothing in a normal build and, under loom, check the copy against every other
//! access to those bytes (a copy not ordered after the last write of another thread is a data
//! race, and loom reports it).
//!
//! [`DmaMemory`]: super::DmaMemory
//! [`DmaWords`]: super::DmaWords
//! [`DescTable`]: super::DescTable
//! [`Desc`]: super::Desc
//! [`DmaView`]: super::DmaView
//! [`DmaWindow`]: super::DmaWindow
//! [`DmaRing`]: super::DmaRing

use std::sync::atomic::Ordering;
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64};

/// A word width DMA memory is accessed at: `u16`, `u32` or `u64`.
pub(crate) trait Word: Copy {
    /// Atomically loads the word at `p`.
    ///
    /// # Safety
    /// `p` is aligned to the word and lies inside live DMA memory (or other memory a device
    /// shares), which is only ever accessed atomically or by copies its owner makes while no
    /// one else touches those bytes.
    // SAFETY: a contract for callers (above), kept by DmaMemory's word accessors.
    unsafe fn load_at(p: *mut Self, order: Ordering) -> Self;

    /// Atomically stores `value` at `p`.
    ///
    /// # Safety
    /// As [`Word::load_at`].
    unsafe fn store_at(p: *mut Self, value: Self, order: Ordering);
}

macro_rules! word {
    ($t:ty, $atomic:ident) => {
        impl Word for $t {
            #[inline(always)]
            // SAFETY: the caller keeps `Word::load_at`'s contract; the body relies on it.
            unsafe fn load_at(p: *mut Self, order: Ordering) -> Self {
                #[cfg(not(loom))]
                {
                    // SAFETY: as the caller guarantees: aligned, live, shared only atomically.
                    unsafe { $atomic::from_ptr(p) }.load(order)
                }
                #[cfg(loom)]
                {
                    super::shadow::load(p as usize, std::mem::size_of::<$t>(), order) as $t
                }
            }

            #[inline(always)]
            // SAFETY: the caller keeps `Word::store_at`'s contract; the body relies on it.
            unsafe fn store_at(p: *mut Self, value: Self, order: Ordering) {
                #[cfg(not(loom))]
                {
                    // SAFETY: as in `load_at`.
                    unsafe { $atomic::from_ptr(p) }.store(value, order)
                }
                #[cfg(loom)]
                {
                    super::shadow::store(
                        p as usize,
                        std::mem::size_of::<$t>(),
                        u64::from(value),
                        order,
                    )
                }
            }
        }
    };
}
word!(u16, AtomicU16);
word!(u32, AtomicU32);
word!(u64, AtomicU64);

/// Atomically loads the word at `p`.
///
/// # Safety
/// See [`Word::load_at`].
#[inline(always)]
pub(crate) unsafe fn load<T: Word>(p: *mut T, order: Ordering) -> T {
    // SAFETY: as the caller guarantees.
    unsafe { T::load_at(p, order) }
}

/// Atomically stores `value` at `p`.
///
/// # Safety
/// See [`Word::load_at`].
#[inline(always)]
pub(crate) unsafe fn store<T: Word>(p: *mut T, value: T, order: Ordering) {
    // SAFETY: as the caller guarantees.
    unsafe { T::store_at(p, value, order) }
}

/// A plain copy is about to read `len` bytes of DMA memory at `p`: nothing in a normal build;
/// under loom, a read checked against the other threads' writes of those bytes.
#[inline(always)]
pub(crate) fn copied_from(p: *const u8, len: usize) {
    #[cfg(loom)]
    super::shadow::copy(p as usize, len, false);
    #[cfg(not(loom))]
    let _ = (p, len);
}

/// A plain copy is about to write `len` bytes of DMA memory at `p` (as [`copied_from`]).
#[inline(always)]
pub(crate) fn copied_to(p: *const u8, len: usize) {
    #[cfg(loom)]
    super::shadow::copy(p as usize, len, true);
    #[cfg(not(loom))]
    let _ = (p, len);
}
