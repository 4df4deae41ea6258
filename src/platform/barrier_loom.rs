//! The device barriers in the model-checking build (`--cfg loom`, `scripts/loom`; no other
//! build compiles this file).
//!
//! Every barrier of [`super`] is loom's fence of the strength the x86-64 build compiles it to:
//! [`dma_wmb`](super::dma_wmb) and [`smp_wmb`](super::smp_wmb) a release fence,
//! [`dma_rmb`](super::dma_rmb) and [`smp_rmb`](super::smp_rmb) an acquire fence,
//! [`mb`](super::mb) and [`smp_mb`](super::smp_mb) a sequentially consistent one; the virtio
//! barriers pick among them by the ring's [`VirtioOrder`](super::VirtioOrder), as on arm64.
//! loom explores what each lets another thread see, so the models of `devices/loom/` and
//! `devices/qm/model/loom_tests.rs` check the orderings the drivers use, barrier by barrier.
//!
//! What loom cannot tell apart: the outer and inner shareable domains (`dmb osh*` against
//! `dmb ish*`: a model's device is a thread, another CPU), and the one way a release fence is
//! stronger than `dmb oshst`: it also orders earlier *loads* before later stores. A ring that
//! relied on `dma_wmb` for that would pass here and not on arm64; none does (each `dma_wmb`
//! stands before a doorbell or an index store, after the stores it publishes).
//!
//! A model shows that its check can fail by running with named barriers left out
//! ([`omitting`]): loom must then find the interleaving that breaks the ring, and the test
//! expects that failure (`#[should_panic]`).

use std::cell::Cell;
use std::sync::atomic::Ordering;

/// A device barrier by its name in [`super`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Barrier {
    /// [`super::dma_wmb`].
    DmaWmb,
    /// [`super::dma_rmb`].
    DmaRmb,
    /// [`super::mb`].
    Mb,
    /// [`super::smp_wmb`] (a virtio ring's `virtio_wmb`, by default).
    SmpWmb,
    /// [`super::smp_rmb`] (a virtio ring's `virtio_rmb`, by default).
    SmpRmb,
    /// [`super::smp_mb`] (a virtio ring's `virtio_mb`, by default).
    SmpMb,
}

impl Barrier {
    fn bit(self) -> u8 {
        1 << self as u8
    }
}

std::thread_local! {
    /// The barriers left out on this thread (a bit per [`Barrier`]). loom runs a model's
    /// threads one at a time on the OS thread that called it, so a test's setting reaches all
    /// of them, and no other test's.
    static OMITTED: Cell<u8> = const { Cell::new(0) };
}

/// The barrier `which`: loom's fence `order`, unless the running test left it out.
#[inline(always)]
pub(super) fn fence(which: Barrier, order: Ordering) {
    if OMITTED.with(|o| o.get() & which.bit() == 0) {
        loom::sync::atomic::fence(order);
    }
}

/// Runs `f` (a loom model) with the barriers `left_out` doing nothing, everywhere the drivers
/// call them: a model whose check needs one of them must fail.
#[cfg(test)]
pub(crate) fn omitting<R>(left_out: &[Barrier], f: impl FnOnce() -> R) -> R {
    /// Puts the barriers back when `f` returns or panics (a failing model panics).
    struct Restore(u8);
    impl Drop for Restore {
        fn drop(&mut self) {
            OMITTED.with(|o| o.set(self.0));
        }
    }
    let before = OMITTED.with(|o| o.get());
    let _restore = Restore(before);
    let bits = left_out.iter().fold(before, |m, b| m | b.bit());
    OMITTED.with(|o| o.set(bits));
    f()
}
