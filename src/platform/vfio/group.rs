//! An open VFIO group (`/dev/vfio/<n>`), shared by every open device of that group.
//!
//! The group is the unit the IOMMU isolates, and VFIO allows it to be opened only once: so the
//! container's registry keeps one `Arc<Group>` per group number and hands it to every device of the
//! group. The container owns the registry and closes the groups when it is dropped (see
//! `container.rs` for why they stay attached until then); closing the fd detaches the group.

use std::collections::BTreeSet;
use std::fmt;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Locks a mutex even if a panicking thread poisoned it: the data is plain bookkeeping that every
/// critical section leaves consistent, and a driver must still be able to unmap and close.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Group numbers whose fd is open in this process. A container being dropped on one thread closes
/// its groups while another thread may already be opening a new container: VFIO would refuse the
/// second open of a group with EBUSY, so the opener waits for the close (see [`wait_until_closed`]).
static OPEN_GROUPS: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// Waits (briefly) until no group `number` is open in this process.
pub(super) fn wait_until_closed(number: u32) {
    let deadline = Instant::now() + Duration::from_secs(1);
    while lock(&OPEN_GROUPS).contains(&number) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// An open, viable group attached to the process's container.
pub(super) struct Group {
    number: u32,
    /// `Some` until `Drop` closes it.
    file: Option<File>,
}

impl Group {
    pub(super) fn new(number: u32, file: File) -> Self {
        lock(&OPEN_GROUPS).insert(number);
        Group {
            number,
            file: Some(file),
        }
    }

    /// The group number.
    pub(super) fn number(&self) -> u32 {
        self.number
    }

    /// The group fd.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.file
            .as_ref()
            .expect("the group fd is only taken in Drop")
            .as_fd()
    }
}

impl fmt::Debug for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Group")
            .field("number", &self.number)
            .field("fd", &self.file.as_ref().map(|f| f.as_raw_fd()))
            .finish()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        drop(self.file.take());
        lock(&OPEN_GROUPS).remove(&self.number);
        tracing::debug!(group = self.number, "VFIO group closed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_registered_while_open() {
        let number = 4_000_000_001;
        let g = Group::new(number, tempfile::tempfile().unwrap());
        assert!(lock(&OPEN_GROUPS).contains(&number));
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(g);
        });
        let start = Instant::now();
        wait_until_closed(number);
        assert!(!lock(&OPEN_GROUPS).contains(&number));
        assert!(start.elapsed() < Duration::from_secs(1));
        closer.join().unwrap();
    }
}
