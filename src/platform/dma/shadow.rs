//! DMA memory as the loom model checker sees it (the `--cfg loom` build only; `scripts/loom`).
//!
//! loom explores the orders in which threads may see each other's stores only for its own
//! atomics and cells; a word reached through `AtomicU64::from_ptr` on mapped memory is
//! invisible to it. So in this build every ring word a driver and a device share is
//! *shadowed*: [`super::word`]'s loads and stores of it go to a loom `AtomicU64` standing for
//! the aligned 8 bytes that hold it, and the plain copies of frames and driver areas are
//! checked against a loom cell per 64-byte line (a copy that is not ordered after the last
//! write of those bytes by another thread, or a write not ordered after the last reads, is a
//! data race, which loom reports with both places).
//!
//! # Declared, not made on first use
//! loom requires every access to one of its objects to happen after the object was made, so a
//! shadow cannot be made by whichever thread touches the word first: the owner of the memory
//! declares, where it makes the memory and before another thread can reach it, which bytes are
//! ring words ([`DmaMemory::loom_words`](super::DmaMemory::loom_words): the descriptor table of
//! [`DescTable::new`](super::DescTable::new), a virtio ring's three parts) and which are copied
//! plainly ([`DmaMemory::loom_bytes`](super::DmaMemory::loom_bytes): a model's buffers). This
//! also keeps each model's loom objects to the few it uses (loom's cost grows with every object
//! it tracks). Then:
//! - an atomic access to an undeclared word panics, naming it (declare it where the memory is
//!   made);
//! - a plain copy over a declared word panics: a non-atomic access to a word that is accessed
//!   atomically is a data race in every build (or a model that declared wrongly);
//! - a plain copy of undeclared bytes is allowed and not checked.
//!
//! # What loom sees of a word
//! The shadow holds the words' values from the declaration on (the memory's own bytes keep
//! what they held then, and what plain copies write). loom's locations are aligned 8-byte
//! words: fields that share one (a virtio ring's flags and index, or its index and its first
//! two entries) are one location to loom, so the order of stores between them is not checked;
//! a model that relies on such an order puts the fields it checks in different words, and says
//! so. A 16- or 32-bit store is a read-modify-write of its 8-byte word with the store's
//! ordering, which keeps the other bytes (loom reads the newest value for it, as the hardware's
//! narrower store leaves the other bytes alone).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU64;

/// Bytes per line of plain-copy tracking.
const LINE: usize = 64;

/// The shadows of the live DMA memory of every model running in the process (tests run in
/// parallel, each loom model on its own thread: their memory never shares an address while it
/// is live). The lock is held only to find an entry, never across a loom operation (loom's
/// threads take turns on one OS thread, and a loom operation may switch to another).
struct Shadows {
    /// Aligned 8-byte word address -> its loom atomic.
    words: BTreeMap<usize, Arc<AtomicU64>>,
    /// 64-byte line address -> the loom cell tracking plain copies of it.
    lines: BTreeMap<usize, Arc<UnsafeCell<()>>>,
}

// SAFETY: the loom objects are only touched by the loom model that made them, on its own OS
// thread (the addresses of two live models never meet); the map only carries them.
unsafe impl Send for Shadows {}

static SHADOWS: Mutex<Shadows> = Mutex::new(Shadows {
    words: BTreeMap::new(),
    lines: BTreeMap::new(),
});

fn shadows() -> MutexGuard<'static, Shadows> {
    SHADOWS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Declares the words in `addr..addr + len` (widened to whole aligned 8-byte words) as ring
/// words, each shadow starting with the word's present value.
///
/// # Safety
/// The range (widened) lies inside live DMA memory.
pub(super) unsafe fn declare_words(addr: usize, len: usize) {
    let (start, end) = (addr & !7, (addr + len).next_multiple_of(8));
    let mut s = shadows();
    for w in (start..end).step_by(8) {
        // SAFETY: an aligned word inside live memory (the caller's promise). In this build no
        // atomic access writes the memory's bytes (they go to the shadows), so only a plain
        // copy could, which its crate-private contract makes its owner's alone.
        let now = unsafe { std::sync::atomic::AtomicU64::from_ptr(w as *mut u64) }
            .load(Ordering::Relaxed);
        s.words
            .entry(w)
            .or_insert_with(|| Arc::new(AtomicU64::new(now)));
    }
}

/// Declares the bytes in `addr..addr + len` (widened to whole 64-byte lines) as bytes copied
/// plainly, each copy then checked by loom.
pub(super) fn declare_bytes(addr: usize, len: usize) {
    let (start, end) = (addr & !(LINE - 1), (addr + len).next_multiple_of(LINE));
    let mut s = shadows();
    for l in (start..end).step_by(LINE) {
        s.lines
            .entry(l)
            .or_insert_with(|| Arc::new(UnsafeCell::new(())));
    }
}

/// Forgets every shadow in `addr..addr + len` (memory being unmapped or mapped afresh).
pub(super) fn forget(addr: usize, len: usize) {
    let mut s = shadows();
    let words: Vec<usize> = s.words.range(addr..addr + len).map(|(k, _)| *k).collect();
    for w in words {
        s.words.remove(&w);
    }
    let lines: Vec<usize> = s
        .lines
        .range(addr & !(LINE - 1)..addr + len)
        .map(|(k, _)| *k)
        .collect();
    for l in lines {
        s.lines.remove(&l);
    }
}

/// The shadow of the 8-byte word holding `addr`, checked to hold a `size`-byte access.
fn word(addr: usize, size: usize) -> Arc<AtomicU64> {
    assert!(
        addr % size == 0,
        "loom: DMA word access of {size} bytes at {addr:#x} is not aligned"
    );
    match shadows().words.get(&(addr & !7)) {
        Some(w) => w.clone(),
        None => panic!(
            "loom: DMA word at {addr:#x} was not declared where its memory was made \
             (DmaMemory::loom_words; see src/platform/dma/shadow.rs)"
        ),
    }
}

fn mask(size: usize) -> u64 {
    if size == 8 {
        u64::MAX
    } else {
        (1 << (8 * size)) - 1
    }
}

/// Loads the `size`-byte word at `addr` from its shadow.
pub(super) fn load(addr: usize, size: usize, order: Ordering) -> u64 {
    let w = word(addr, size);
    w.load(order) >> (8 * (addr & 7)) & mask(size)
}

/// Stores the `size`-byte `value` at `addr` into its shadow (a read-modify-write of the
/// 8-byte word when narrower).
pub(super) fn store(addr: usize, size: usize, value: u64, order: Ordering) {
    let w = word(addr, size);
    if size == 8 {
        return w.store(value, order);
    }
    let (shift, m) = (8 * (addr & 7), mask(size));
    let fetch = if order == Ordering::SeqCst {
        Ordering::SeqCst
    } else {
        Ordering::Relaxed
    };
    let _ = w.fetch_update(order, fetch, |old| {
        Some(old & !(m << shift) | (value & m) << shift)
    });
}

/// A plain copy of `len` bytes at `addr` (a write when `write`): refused over ring words,
/// checked by loom where the bytes were declared.
pub(super) fn copy(addr: usize, len: usize, write: bool) {
    if len == 0 {
        return;
    }
    let lines: Vec<Arc<UnsafeCell<()>>> = {
        let s = shadows();
        if let Some((w, _)) = s.words.range((addr & !7)..addr + len).next() {
            panic!(
                "loom: a plain copy of {len} bytes at {addr:#x} covers the ring word at {w:#x}, \
                 which is accessed atomically (a data race in every build)"
            );
        }
        s.lines
            .range(addr & !(LINE - 1)..addr + len)
            .map(|(_, l)| l.clone())
            .collect()
    };
    for l in lines {
        if write {
            l.with_mut(|_| ());
        } else {
            l.with(|_| ());
        }
    }
}
