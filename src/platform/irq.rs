//! Interrupts as file descriptors: one eventfd per vector.
//!
//! VFIO delivers a device's MSI-X vector by signalling an eventfd (`VFIO_DEVICE_SET_IRQS`,
//! [`VfioDevice::enable_msix`](crate::platform::vfio::VfioDevice::enable_msix)), and a device
//! model can signal one the same way, so a queue that sleeps waits on a file descriptor whatever
//! device it belongs to, and an application can put that descriptor into its own epoll, mio or
//! tokio loop ([`AsFd`]). This is what ixy's VFIO interrupt mode and DPDK's
//! `rte_eth_dev_rx_intr_*` hand out too.
//!
//! An eventfd counts: every signal adds one, a read returns the count and clears it. So a signal
//! that arrives while nobody waits is not lost: the next [`Interrupt::wait`] returns at once.

use std::fmt;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::error::{Error, Result};

/// One interrupt vector's eventfd. Clones share the descriptor.
#[derive(Clone)]
pub struct Interrupt {
    fd: Arc<EventFd>,
    vector: u16,
}

impl fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interrupt")
            .field("vector", &self.vector)
            .finish()
    }
}

impl Interrupt {
    /// A new, unsignalled eventfd for vector `vector` (non-blocking, closed on exec).
    pub fn new(vector: u16) -> Result<Interrupt> {
        let fd = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(|e| {
                Error::io(
                    format!(
                        "making an eventfd for interrupt vector {vector} (out of file descriptors? raise `ulimit -n`)"
                    ),
                    e.into(),
                )
            })?;
        Ok(Interrupt {
            fd: Arc::new(fd),
            vector,
        })
    }

    /// The vector this eventfd stands for (the device's MSI-X vector number).
    pub fn vector(&self) -> u16 {
        self.vector
    }

    /// Signals it, as the device's interrupt message does (device models, tests).
    pub fn trigger(&self) -> Result<()> {
        self.fd
            .write(1)
            .map(drop)
            .map_err(|e| Error::io("signalling an interrupt eventfd", e.into()))
    }

    /// How many signals arrived since the last `take` or `wait`, clearing the count; 0 when
    /// none did. Never blocks.
    pub fn take(&self) -> Result<u64> {
        match self.fd.read() {
            Ok(n) => Ok(n),
            Err(Errno::EAGAIN) => Ok(0),
            Err(e) => Err(Error::io("reading an interrupt eventfd", e.into())),
        }
    }

    /// Sleeps until the vector is signalled or `timeout` has passed; returns whether it was
    /// signalled (the count is cleared). A signal that arrived before the call returns at once.
    pub fn wait(&self, timeout: Duration) -> Result<bool> {
        wait_any(std::slice::from_ref(self), timeout)
    }
}

/// Sleeps until any of `irqs` is signalled or `timeout` passes; returns whether one was (the
/// signalled ones' counts are cleared). With no interrupt at all, sleeps the whole timeout.
pub fn wait_any(irqs: &[Interrupt], timeout: Duration) -> Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut fired = false;
        for irq in irqs {
            fired |= irq.take()? > 0;
        }
        if fired {
            return Ok(true);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        // Whole milliseconds, rounded up so that a short wait still sleeps.
        let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let mut fds: Vec<PollFd<'_>> = irqs
            .iter()
            .map(|i| PollFd::new(i.as_fd(), PollFlags::POLLIN))
            .collect();
        match poll(
            &mut fds,
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
        ) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => {
                let vectors: Vec<u16> = irqs.iter().map(Interrupt::vector).collect();
                return Err(Error::io(
                    format!("waiting for interrupt vectors {vectors:?} (poll on their eventfds)"),
                    e.into(),
                ));
            }
        }
    }
}

impl AsFd for Interrupt {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A device's interrupt vectors, each routed to an eventfd, for as long as this lives: dropping
/// it takes the routing down (VFIO disables MSI-X; a model stops signalling). The eventfds
/// themselves may live on in clones of the [`Interrupt`]s, unsignalled.
pub struct InterruptSet {
    vectors: Vec<Interrupt>,
    /// Whatever undoes the routing when dropped (a VFIO `SET_IRQS` guard, a model's hook).
    _teardown: Box<dyn std::any::Any + Send + Sync>,
}

impl fmt::Debug for InterruptSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterruptSet")
            .field("vectors", &self.vectors.len())
            .finish()
    }
}

impl InterruptSet {
    /// `vectors`, routed until `teardown` is dropped.
    pub fn new(vectors: Vec<Interrupt>, teardown: impl std::any::Any + Send + Sync) -> Self {
        InterruptSet {
            vectors,
            _teardown: Box::new(teardown),
        }
    }

    /// The vectors, in vector order.
    pub fn vectors(&self) -> &[Interrupt] {
        &self.vectors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_wakes_a_waiter_and_is_counted_once() {
        let irq = Interrupt::new(3).unwrap();
        assert_eq!(irq.vector(), 3);
        assert_eq!(irq.take().unwrap(), 0);
        // Nothing signalled: the wait times out, after about its timeout.
        let t = Instant::now();
        assert!(!irq.wait(Duration::from_millis(30)).unwrap());
        assert!(t.elapsed() >= Duration::from_millis(30));
        // Signalled before the wait (the race a sleeping queue must survive): returns at once.
        irq.trigger().unwrap();
        irq.trigger().unwrap();
        assert!(irq.wait(Duration::from_secs(5)).unwrap());
        assert_eq!(irq.take().unwrap(), 0, "the wait consumed both signals");
        // Signalled from another thread while waiting.
        let other = irq.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.trigger().unwrap();
        });
        assert!(irq.wait(Duration::from_secs(10)).unwrap());
        h.join().unwrap();
    }

    #[test]
    fn any_of_several_wakes_the_wait() {
        let irqs: Vec<Interrupt> = (0..3).map(|v| Interrupt::new(v).unwrap()).collect();
        assert!(!wait_any(&irqs, Duration::from_millis(20)).unwrap());
        let third = irqs[2].clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            third.trigger().unwrap();
        });
        assert!(wait_any(&irqs, Duration::from_secs(10)).unwrap());
        h.join().unwrap();
        assert_eq!(irqs[2].take().unwrap(), 0, "the wait consumed the signal");
        // Nothing to wait on: the timeout passes.
        assert!(!wait_any(&[], Duration::from_millis(10)).unwrap());
    }

    #[test]
    fn a_set_keeps_its_teardown_until_dropped() {
        struct Flag(Arc<std::sync::atomic::AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let down = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let set = InterruptSet::new(
            vec![Interrupt::new(0).unwrap(), Interrupt::new(1).unwrap()],
            Flag(down.clone()),
        );
        assert_eq!(set.vectors()[1].vector(), 1);
        let kept = set.vectors()[0].clone();
        drop(set);
        assert!(down.load(std::sync::atomic::Ordering::SeqCst));
        kept.trigger().unwrap(); // the eventfd itself lives on in its clone
        assert_eq!(kept.take().unwrap(), 1);
    }
}
