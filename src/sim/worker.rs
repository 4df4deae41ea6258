//! The device thread of the threaded mode.
//!
//! One thread per port polls the transmit tails and the inbound FIFO and does the same work the
//! inline mode does inside register writes, so descriptors and frames are written by another
//! core, as DMA is. It holds only a `Weak` reference between polls: when the last `SimPort`
//! handle and the last `Arc<SimRegs>` (the driver's rings keep one) are gone, the next upgrade
//! fails and the thread ends. When idle it spins briefly, then yields, then sleeps with a
//! growing pause (up to 1 ms), so an idle model costs nothing on a small machine and the host
//! tests stay fast.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::regs::SimRegs;
use crate::error::{Error, Result};

const SPINS: u32 = 200;
const YIELDS: u32 = 400;
const MAX_PAUSE: Duration = Duration::from_millis(1);

/// Starts the device thread of `dev`; `alive` is cleared when it ends.
pub(super) fn spawn(dev: &Arc<SimRegs>, alive: Arc<AtomicBool>) -> Result<()> {
    let weak: Weak<SimRegs> = Arc::downgrade(dev);
    let name = format!("{} device", dev.name());
    alive.store(true, Ordering::Release);
    let flag = alive.clone();
    let spawned = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let mut idle = 0u32;
            let mut pause = Duration::from_micros(20);
            while let Some(dev) = weak.upgrade() {
                let worked = dev.poll();
                drop(dev);
                if worked {
                    idle = 0;
                    pause = Duration::from_micros(20);
                    continue;
                }
                idle = idle.saturating_add(1);
                if idle < SPINS {
                    std::hint::spin_loop();
                } else if idle < SPINS + YIELDS {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            }
            tracing::debug!(thread = %name, "software 82599 device thread ends: no handle left");
            flag.store(false, Ordering::Release);
        });
    spawned.map(|_| ()).map_err(|e| {
        alive.store(false, Ordering::Release);
        Error::io(format!("starting the device thread of {}", dev.name()), e)
    })
}
