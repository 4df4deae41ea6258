//! The threads of the loom models (the tests of `--cfg loom`, `scripts/loom`; no other build
//! compiles this file): each with a stack large enough for a model that fails.
//!
//! loom runs every thread of a model as a coroutine on generator's default stack, 0x1000 words
//! (32 KiB), unless it is spawned with a size, and a model's main thread always so. A model
//! that fails, as every `_fails_without_` model must (`devices/loom/`), panics on that stack,
//! and with `RUST_BACKTRACE` set the panic hook's backtrace capture overflowed 32 KiB once the
//! Intel ring's burst was inlined into its caller (larger frames): "coroutine ... has
//! overflowed its stack", then "thread panicked while processing panic", and the test process
//! aborted instead of reporting. So [`check`] runs a model's body on a thread of its own with
//! [`STACK_WORDS`], and [`spawn`] starts the model's other threads with the same; every model
//! of the crate (the pool's buffer return here in platform, the rings in devices) uses both.

/// The stack of every model thread, in the unit loom passes on to its coroutines (generator's
/// `Gn::new_opt` counts words): 1 MiB.
const STACK_WORDS: usize = 1 << 17;

/// `loom::thread::spawn` with [`STACK_WORDS`] of stack: how a model starts its other threads.
pub(crate) fn spawn<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> loom::thread::JoinHandle<T> {
    loom::thread::Builder::new()
        .stack_size(STACK_WORDS)
        .spawn(f)
        .expect("loom: spawning a model thread")
}

/// `b.check(body)`, with `body` on a thread of its own with [`STACK_WORDS`] of stack (loom's
/// main thread has 32 KiB). A panic in it is resumed unchanged, so `#[should_panic(expected)]`
/// still sees its message.
pub(crate) fn check(b: loom::model::Builder, body: impl Fn() + Sync + Send + 'static) {
    let body = std::sync::Arc::new(body);
    b.check(move || {
        let body = body.clone();
        if let Err(panic) = spawn(move || body()).join() {
            std::panic::resume_unwind(panic);
        }
    });
}
