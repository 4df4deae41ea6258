//! A word of a portal's CENA memory in the model-checking build (`--cfg loom`,
//! `scripts/loom`): a loom atomic, so that loom explores the orders in which the device
//! thread sees the driver's enqueue entries and commands; or none, for the words a model
//! leaves out (a portal's CENA is 2,048 words, and loom's cost grows with every object it
//! tracks: `loom_tests.rs` makes only the entries it uses). Every other build uses
//! `std::sync::atomic::AtomicU32` (`CenaWord` in `mod.rs`).

use std::sync::atomic::Ordering;

use loom::sync::atomic::AtomicU32;

/// A CENA word: a loom atomic, or a word the model left out (any access to it panics).
#[derive(Debug)]
pub struct CenaWord(Option<AtomicU32>);

impl CenaWord {
    /// A word holding `v`.
    pub fn new(v: u32) -> CenaWord {
        CenaWord(Some(AtomicU32::new(v)))
    }

    /// A word the model leaves out.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn absent() -> CenaWord {
        CenaWord(None)
    }

    fn word(&self) -> &AtomicU32 {
        self.0
            .as_ref()
            .expect("loom: a CENA word the model left out was accessed (make it in the model)")
    }

    /// As `AtomicU32::load`.
    pub fn load(&self, order: Ordering) -> u32 {
        self.word().load(order)
    }

    /// As `AtomicU32::store`.
    pub fn store(&self, value: u32, order: Ordering) {
        self.word().store(value, order)
    }
}
