//! Standard output for the example programs (`#[path]`-included by each, not an example itself).
//!
//! `println!` panics ("failed printing to stdout: Broken pipe") when the reader has gone away,
//! as in `cargo run --example forward | head -1`. Here a line written to a reader that went away
//! is an ordinary error: the program stops through `?`, its ports are dropped as usual (their
//! DMA stopped first), and [`exit`] ends it quietly with status 0, since the reader has what it
//! wanted. The `vfio-nic` tool does the same (`outln!` in src/bin/vfio-nic/main.rs).

use std::fmt;
use std::io::{ErrorKind, Write};

/// Writes one line, like `println!`; `?` passes a reader gone away up to [`exit`]. (Programs
/// that print only at their end call [`line`] directly.)
#[allow(unused_macros)]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))?
    };
}

/// Writes one line to standard output.
pub fn line(args: fmt::Arguments<'_>) -> vfio_nic::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(|e| vfio_nic::Error::io("writing to standard output", e))
}

/// Ends the program with `result`: status 0 when it is `Ok` or standard output's reader went
/// away, else the error on standard error (prefixed with `program`) and status 1.
pub fn exit(program: &str, result: vfio_nic::Result<()>) -> ! {
    match result {
        Ok(()) => std::process::exit(0),
        Err(vfio_nic::Error::Io { source, .. }) if source.kind() == ErrorKind::BrokenPipe => {
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("{program}: {e}");
            std::process::exit(1)
        }
    }
}
