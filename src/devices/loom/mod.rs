//! The rings in DMA memory under the loom model checker: a driver's real ring code on one
//! thread, the device side on another (and a third where the protocol has one), over every
//! interleaving loom explores up to a preemption bound, with every ring word a loom atomic
//! and every frame copy checked for data races (`platform/dma/shadow.rs`).
//!
//! - [`virtio`]: the split ring: descriptors and the available index published by the real
//!   `SplitRing`, consumed by the virtio model's `DeviceQueue`, returned in the used ring and
//!   harvested; the notification suppression of QEMU's device against `SplitRing::publish`'s
//!   full fence (a lost wake-up is a failure);
//! - [`intel`]: the descriptor ring as the software 82599 models it: the real `RxRing` and
//!   `TxRing` arm descriptors and write the tail, the device reads them and writes DD back;
//! - the queue-manager portal's enqueue ring (valid bit, EQCR_PI doorbell) and pull results
//!   (token word): `devices/qm/model/loom_tests.rs`, beside the model whose internals it
//!   builds (the real `SwPortal` against the model's regions and device thread work).
//!
//! Each model says what it checks and which barriers it relies on, and shows that its check
//! can fail: a `#[should_panic]` test runs it with each of those barriers left out
//! (`platform::barrier::loom_model::omitting`), and loom must find the interleaving that breaks
//! the ring. The orderings checked are the drivers' own: the named barriers of
//! `platform::barrier` (loom fences in this build) and the relaxed ring-word accesses around them.
//!
//! A model drops DMA memory only on its main thread, after the device thread's `DmaView` is
//! gone: the unmap takes the software IOMMU's write lock, and loom's threads share one OS
//! thread, so a wait for it while another holds the view would never end.
//!
//! Run with `scripts/loom`; the normal build compiles none of this.

mod intel;
mod virtio;

use std::sync::atomic::Ordering;

use loom::sync::atomic::AtomicU32;

use crate::platform::mmio::Mmio;

pub(crate) use crate::platform::loom_threads::spawn;

/// Runs `f` under loom, every schedule with up to `preemptions` preemptions explored (loom's
/// advice: most bugs need two or three; the bound keeps the three-thread models to seconds).
/// `f` runs on a thread of its own with a large stack (`platform::loom_threads`: a failing
/// model's panic needs more than loom's 32 KiB), its panic message kept for
/// `#[should_panic(expected)]`.
pub(crate) fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    // (A driver's burst is a few hundred loom steps, and a model's threads poll each other:
    // loom's default bound of 1,000 branches per run is too few for three threads.)
    b.max_branches = 20_000;
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let r = runs.clone();
    let t = std::time::Instant::now();
    crate::platform::loom_threads::check(b, move || {
        r.fetch_add(1, Ordering::Relaxed);
        f()
    });
    eprintln!(
        "loom: {} runs in {:?}",
        runs.load(Ordering::Relaxed),
        t.elapsed()
    );
}

/// A device's registers as loom atomics: what a driver's [`Mmio`] reaches. The driver's
/// register accesses are relaxed (Linux's `readl_relaxed`/`writel_relaxed`: they order nothing
/// by themselves; the barriers of `Mmio::doorbell` and `Mmio::read_ordered` do, and those are
/// what the models check); the device's are acquire loads and release stores, as the software
/// devices' own (`SimRegs::get_off`, `set_off`).
struct Regs(Box<[AtomicU32]>);

impl Regs {
    /// `n` registers of 32 bits, all 0.
    fn new(n: usize) -> Regs {
        Regs((0..n).map(|_| AtomicU32::new(0)).collect())
    }

    /// The device's read of the register at byte `offset`.
    fn get(&self, offset: usize) -> u32 {
        self.0[offset / 4].load(Ordering::Acquire)
    }

    /// The device's write of the register at byte `offset` (a release store, as the models'
    /// `SimRegs::set_off`).
    fn set(&self, offset: usize, value: u32) {
        self.0[offset / 4].store(value, Ordering::Release)
    }
}

impl Mmio for Regs {
    fn read32(&self, offset: usize) -> u32 {
        self.0[offset / 4].load(Ordering::Relaxed)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.0[offset / 4].store(value, Ordering::Relaxed)
    }
    fn len(&self) -> usize {
        4 * self.0.len()
    }
}
