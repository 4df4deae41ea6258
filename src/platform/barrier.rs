//! Ordering against a device: Linux's DMA barriers, by name, for x86-64 and arm64.
//!
//! A driver and its device share memory (descriptor rings, virtqueues, result storage) and
//! talk through registers. Every point where the order of those accesses matters calls one of
//! the functions below, each with the meaning of the Linux barrier of the same name, so that a
//! reader can check a ring against Linux's driver for the same chip line by line:
//!
//! | here | meaning | arm64 (Linux) | x86-64 (Linux) | x86-64 here |
//! |---|---|---|---|---|
//! | [`dma_wmb`] | stores to DMA memory before later stores (a doorbell, a valid or index word) | `dmb oshst` | `barrier()` | release fence: no instruction |
//! | [`dma_rmb`] | a load of a done/valid/index word before later loads (the rest of the entry, the buffer) | `dmb oshld` | `barrier()` | acquire fence: no instruction |
//! | [`mb`] | every access before every later one, device registers included | `dsb sy` | `mfence` | `mfence` |
//! | [`smp_wmb`], [`smp_rmb`], [`smp_mb`] | the same, towards another CPU only (a "device" that is software on an SMP host) | `dmb ishst`, `dmb ishld`, `dmb ish` | `barrier()`, `barrier()`, `lock addl` | no instruction, no instruction, `mfence` |
//!
//! Sources: Linux `arch/arm64/include/asm/barrier.h` (`__dma_wmb() dmb(oshst)`, `__dma_rmb()
//! dmb(oshld)`, `__mb() dsb(sy)`, `__smp_wmb() dmb(ishst)`, `__smp_rmb() dmb(ishld)`,
//! `__smp_mb() dmb(ish)`) and `arch/x86/include/asm/barrier.h` (`__dma_rmb()`/`__dma_wmb()`
//! are `barrier()`, a compiler barrier; `__mb()` is `mfence`). x86-64 orders stores after
//! stores and loads after loads for cacheable memory and uncached MMIO alike (TSO), so there
//! the DMA barriers only have to keep the compiler from moving accesses across them: a release
//! fence (for `dma_wmb`) and an acquire fence (for `dma_rmb`) do exactly that and emit no
//! instruction, which is what the rings compiled to before this module existed
//! (`bench/instructions` holds that figure). On arm64 a release fence would be `dmb ish`,
//! ordering memory for the other CPUs (the inner shareable domain) only; a device is an
//! observer in the outer shareable domain, so the `osh` forms are written out with `asm!`.
//!
//! How the drivers use them (each call site cites its Linux or DPDK counterpart):
//! - a doorbell or tail write is Linux's `writel`: `dma_wmb()` then the store
//!   ([`Mmio::doorbell`](super::mmio::Mmio::doorbell); `arch/arm64/include/asm/io.h`:
//!   `__io_bw()` is `dma_wmb()`, and `asm-generic/io.h`'s `writel` calls it before
//!   `__raw_writel`). Linux's arm64 `writel` needs no `wmb()` (`dsb st`) since its I/O
//!   accessors were relaxed to `dmb oshst` (Linux 5.2), for memory mapped as ours is (normal
//!   cacheable DMA memory, device registers mapped uncached by VFIO);
//! - the read that flushes posted writes before a ring is looked at again is Linux's `readl`:
//!   the load, then `dma_rmb()` (`__io_ar()`;
//!   [`Mmio::read_ordered`](super::mmio::Mmio::read_ordered)). Linux adds a dummy control
//!   dependency there for `udelay()`'s timer reads, which no caller here has;
//! - a ring's done/valid/used-index word is loaded relaxed, then `dma_rmb()`, then the rest
//!   (Linux `igb_clean_rx_irq`, `virtqueue_get_buf_ctx_split`'s `virtio_rmb`);
//! - virtio picks with [`virtio_wmb`], [`virtio_rmb`] and [`virtio_mb`] as Linux's
//!   `include/linux/virtio_ring.h` does: the SMP barriers unless the device negotiated
//!   `VIRTIO_F_ORDER_PLATFORM` (a device that is hardware, or reached as such), the platform
//!   ones then.
//!
//! VFIO makes this the whole story: it refuses a device behind an IOMMU whose DMA is not
//! cache-coherent (Linux `drivers/vfio/vfio_main.c`, `__vfio_register_dev`: "VFIO always sets
//! IOMMU_CACHE because we offer no way for userspace to restore cache coherency"), so no cache
//! maintenance is needed beside the barriers.
//!
//! What TCG cannot show: QEMU's emulation of arm64 on an x86 host does not reorder memory as
//! an arm64 core does, so the test bed proves that the port works, not that these barriers are
//! sufficient. That rests on the Linux citations above and on `scripts/arm64 barriers`, which
//! finds each driver's doorbell in the arm64 build's disassembly and checks the barrier is in
//! front of the store.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "vfio-nic knows the device barriers of x86-64 and arm64 only (src/platform/barrier.rs): \
     another architecture needs its own dma_wmb/dma_rmb/mb, after Linux's arch/*/include/asm/barrier.h"
);

#[cfg(target_arch = "aarch64")]
use std::arch::asm;
#[cfg(target_arch = "x86_64")]
use std::sync::atomic::{fence, Ordering};

/// Linux's `dma_wmb()`: stores to DMA memory made before it are seen by the device before any
/// store made after it (arm64 `dmb oshst`; x86-64: no instruction, a release fence for the
/// compiler).
#[inline(always)]
pub fn dma_wmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction: it reads and writes no memory or register of ours and
    // leaves the stack and flags alone; without `nomem` the compiler keeps memory accesses on
    // their side of it, as Linux's "memory" clobber does.
    unsafe {
        asm!("dmb oshst", options(nostack, preserves_flags))
    };
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::Release);
}

/// Linux's `dma_rmb()`: a load of DMA memory made before it (a done bit, a valid bit, a used
/// index) completes before any load made after it (arm64 `dmb oshld`; x86-64: no instruction,
/// an acquire fence for the compiler).
#[inline(always)]
pub fn dma_rmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as in `dma_wmb`: a barrier instruction, no memory or register of ours changed.
    unsafe {
        asm!("dmb oshld", options(nostack, preserves_flags))
    };
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::Acquire);
}

/// Linux's `mb()`: every load and store before it, device registers included, completes
/// before any after it (arm64 `dsb sy`; x86-64 `mfence`).
#[inline(always)]
pub fn mb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as in `dma_wmb`: a barrier instruction, no memory or register of ours changed.
    unsafe {
        asm!("dsb sy", options(nostack, preserves_flags))
    };
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::SeqCst);
}

/// Linux's `smp_wmb()` (`virt_wmb()`): [`dma_wmb`] towards other CPUs only (arm64 `dmb ishst`;
/// x86-64: no instruction).
#[inline(always)]
pub fn smp_wmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as in `dma_wmb`: a barrier instruction, no memory or register of ours changed.
    unsafe {
        asm!("dmb ishst", options(nostack, preserves_flags))
    };
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::Release);
}

/// Linux's `smp_rmb()` (`virt_rmb()`): [`dma_rmb`] towards other CPUs only (arm64 `dmb ishld`;
/// x86-64: no instruction).
#[inline(always)]
pub fn smp_rmb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as in `dma_wmb`: a barrier instruction, no memory or register of ours changed.
    unsafe {
        asm!("dmb ishld", options(nostack, preserves_flags))
    };
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::Acquire);
}

/// Linux's `smp_mb()` (`virt_mb()`): [`mb`] towards other CPUs only (arm64 `dmb ish`; x86-64
/// `mfence`, where Linux has the equivalent `lock addl`).
#[inline(always)]
pub fn smp_mb() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as in `dma_wmb`: a barrier instruction, no memory or register of ours changed.
    unsafe {
        asm!("dmb ish", options(nostack, preserves_flags))
    };
    #[cfg(target_arch = "x86_64")]
    fence(Ordering::SeqCst);
}

/// Which barriers a virtio device asks for (Linux `vring_virtqueue::weak_barriers`): the SMP
/// ones ([`VirtioOrder::Smp`]: the device is software on another CPU of an SMP host, the
/// default) or the platform's ([`VirtioOrder::Platform`]: `VIRTIO_F_ORDER_PLATFORM` was
/// negotiated; Linux `__vring_new_virtqueue` sets `weak_barriers = false` then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VirtioOrder {
    /// `weak_barriers`: `virt_wmb`/`virt_rmb`/`virt_mb`.
    Smp,
    /// `VIRTIO_F_ORDER_PLATFORM`: `dma_wmb`/`dma_rmb`/`mb`.
    Platform,
}

/// Linux's `virtio_wmb(weak_barriers)`: before publishing what the device may read (the
/// available index). On x86-64 both kinds are the same compiler fence, and the choice is not
/// even read.
#[inline(always)]
pub fn virtio_wmb(order: VirtioOrder) {
    #[cfg(target_arch = "aarch64")]
    match order {
        VirtioOrder::Smp => smp_wmb(),
        VirtioOrder::Platform => dma_wmb(),
    }
    #[cfg(target_arch = "x86_64")]
    {
        let _ = order;
        dma_wmb()
    }
}

/// Linux's `virtio_rmb(weak_barriers)`: after reading what the device published (the used
/// index), before the entries behind it. On x86-64 both kinds are the same compiler fence.
#[inline(always)]
pub fn virtio_rmb(order: VirtioOrder) {
    #[cfg(target_arch = "aarch64")]
    match order {
        VirtioOrder::Smp => smp_rmb(),
        VirtioOrder::Platform => dma_rmb(),
    }
    #[cfg(target_arch = "x86_64")]
    {
        let _ = order;
        dma_rmb()
    }
}

/// Linux's `virtio_mb(weak_barriers)`: between publishing and reading the device's
/// suppression flags (`virtqueue_kick_prepare_split`, `virtqueue_poll`). On x86-64 both kinds
/// are `mfence`.
#[inline(always)]
pub fn virtio_mb(order: VirtioOrder) {
    #[cfg(target_arch = "aarch64")]
    match order {
        VirtioOrder::Smp => smp_mb(),
        VirtioOrder::Platform => mb(),
    }
    #[cfg(target_arch = "x86_64")]
    {
        let _ = order;
        mb()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The barriers order nothing a single thread could see, so what a test can check is that
    /// each one runs (on arm64 each is an instruction the CPU must accept at EL0) and that a
    /// store before it and a load after it see each other as program order says.
    #[test]
    fn every_barrier_runs_and_keeps_program_order() {
        let mut x = 0u64;
        for (i, b) in [dma_wmb, dma_rmb, mb, smp_wmb, smp_rmb, smp_mb]
            .iter()
            .enumerate()
        {
            x = i as u64;
            b();
            assert_eq!(std::hint::black_box(x), i as u64);
        }
        for order in [VirtioOrder::Smp, VirtioOrder::Platform] {
            virtio_wmb(order);
            virtio_rmb(order);
            virtio_mb(order);
        }
        assert_eq!(x, 5);
    }
}
