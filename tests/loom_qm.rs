//! The queue-manager model's release command ring: its lock-free handover (`Hot::rar`,
//! `Hot::ring_release`, `Hot::take_releases`, `Hot::free_slot`: the model's own code) under the loom model
//! checker, between a driver thread and the device thread, over every interleaving up to a
//! preemption bound. The driver writes each command into its slot (a loom `UnsafeCell`
//! standing for the slot's CENA words) and rings it; the device thread reads it and frees the
//! slot. Nine commands through the eight slots, so one slot is taken again: loom fails the run
//! if the driver's second write of it is not ordered after the device's read of the first
//! command, and the test checks that every command is read once.
//!
//! Run with `scripts/loom`; the normal build compiles none of this (`Hot` is public only in
//! the model-checking build, for this test; its `unsafe` is loom's cell, outside the crate).
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::Arc;

use vfio_nic::devices::qm::layout::RCR_SIZE;
use vfio_nic::devices::qm::model::Hot;
use vfio_nic::platform::regs::qbman::rar;

/// Commands sent: one more than the slots, so that the first slot is reused.
const COMMANDS: u32 = RCR_SIZE + 1;

#[test]
fn loom_release_slots_are_reused_only_after_the_device_read_them() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let hot = Arc::new(Hot::default());
        let slots: Arc<Vec<UnsafeCell<u32>>> =
            Arc::new((0..RCR_SIZE).map(|_| UnsafeCell::new(u32::MAX)).collect());
        let (h, s) = (hot.clone(), slots.clone());
        let device = loom::thread::spawn(move || {
            let mut seen = Vec::new();
            while seen.len() < COMMANDS as usize {
                let mut r = h.take_releases();
                if r == 0 {
                    loom::thread::yield_now();
                    continue;
                }
                while r != 0 {
                    let slot = r.trailing_zeros();
                    // SAFETY: loom's cell: a read, checked against the driver's writes.
                    seen.push(s[slot as usize].with(|c| unsafe { *c }));
                    h.free_slot(slot);
                    r &= r - 1;
                }
            }
            seen
        });
        for cmd in 0..COMMANDS {
            let got = loop {
                let got = hot.rar();
                if rar::SUCCESS.is_set(got) {
                    break got;
                }
                loom::thread::yield_now();
            };
            let slot = rar::IDX.get(got);
            assert_eq!(slot, cmd % RCR_SIZE, "slots are handed out in ring order");
            // SAFETY: loom's cell: the driver's write of the slot's command.
            slots[slot as usize].with_mut(|c| unsafe { *c = cmd });
            hot.ring_release(slot);
        }
        let mut seen = device.join().unwrap();
        // (Slots rung together are taken in index order, not ring order: releases are
        // independent, so the model need not keep it.)
        seen.sort_unstable();
        assert_eq!(
            seen,
            (0..COMMANDS).collect::<Vec<_>>(),
            "each command read once"
        );
    });
}
