//! What a qm port and its queues share, dropped with the last of them: the MC portal and the
//! objects' tokens, the pool's lending table, and the stop that takes every buffer back; and
//! the process-wide list of lenders through which a transmit queue finds the pool id of a
//! packet from another port's pool.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::layout::BUFS_PER_CMD;
use super::mc::McPortal;
use super::portal::SwPortal;
use super::QmBus;
use crate::error::Result;
use crate::platform::dma::{LentBuffers, Meta, Packet};
use crate::platform::regs::qbman::cmd::*;
use crate::platform::regs::McCommand;

/// A pool some qm port lends to its queue manager: its table, its pool id, and whether the
/// port is still up (a transmit queue caches this; a port going away clears `alive`, and the
/// pool's packets are copied from then on instead of being sent with a pool id nobody serves).
#[derive(Clone)]
pub(super) struct Lender {
    pub table: Arc<LentBuffers>,
    pub bpid: u16,
    pub alive: Arc<AtomicBool>,
}

impl Lender {
    /// Whether `p` can go out with this lender's pool id.
    #[inline(always)]
    pub fn takes(&self, p: &Packet) -> bool {
        p.is_from(self.table.pool()) && self.alive.load(Ordering::Relaxed)
    }
}

/// Every lender, by DMA domain: how a transmit queue finds the pool id of a packet from
/// another port's pool.
static LENDERS: Mutex<Vec<(usize, Lender)>> = Mutex::new(Vec::new());

/// Adds a port's pool to the lenders of DMA domain `domain`.
pub(super) fn register_lender(domain: usize, lender: Lender) {
    LENDERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((domain, lender));
}

/// The lender of `p`'s pool in DMA domain `domain`, if a live port lends it.
pub(super) fn lender_of(domain: usize, p: &Packet) -> Option<Lender> {
    let l = LENDERS.lock().unwrap_or_else(|e| e.into_inner());
    l.iter()
        .filter(|e| e.0 == domain)
        .find(|e| e.1.takes(p))
        .map(|e| e.1.clone())
}

/// What the port and its queues share; dropped with the last of them.
pub(super) struct Shared<B: QmBus> {
    pub bus: B,
    pub name: String,
    pub mc: McPortal<B::Mmio>,
    pub dpni: u16,
    pub dpbp: u16,
    /// This port as a lender: its pool's lending table and pool id (its `alive` goes false
    /// when the port goes).
    pub lender: Lender,
    pub rx_fqid: u32,
    pub tx_fqid: u32,
    pub domain: usize,
    /// Buffers of the pool the receive queue keeps with the device.
    pub target: usize,
}

impl<B: QmBus> Shared<B> {
    /// Sends a command to the DPNI.
    pub fn dpni_cmd(&self, c: McCommand, params: [u64; 7]) -> Result<[u64; 7]> {
        Ok(self.mc.send(c, self.dpni, params)?.params)
    }

    /// Takes up to `most` buffers back from the device's pool (acquires of 7 until it is
    /// empty) and frees them to the software pool; returns how many.
    pub fn reclaim(&self, portal: &mut SwPortal<B::Mmio>, most: usize) -> Result<usize> {
        let table = &self.lender.table;
        let off = table.pool().headroom() as u16;
        let mut n = 0;
        while n < most {
            let got = portal.acquire(self.lender.bpid, BUFS_PER_CMD.min(most - n))?;
            if got.is_empty() {
                break;
            }
            for a in got {
                match table.take_back(a, off, 0, Meta::default()) {
                    Ok(p) => drop(p),
                    Err(e) => tracing::warn!(port = %self.name, error = %e, "reclaim: refused"),
                }
                n += 1;
            }
        }
        Ok(n)
    }

    /// Every step of the stop, each tried even when one before failed (a device gone fails
    /// them all); the first error is returned.
    fn teardown(&mut self) -> Result<()> {
        let mut first = Ok(());
        let mut step = |r: Result<()>| {
            if first.is_ok() {
                first = r;
            }
        };
        step(self.dpni_cmd(DPNI_DISABLE, [0; 7]).map(drop));
        // A reset of the DPNI returns the frames still queued to their pools (the model
        // does; what an MC firmware does with them is not documented), then the pool is
        // drained through the receive portal, whose queue is gone by now. The portal is
        // taken over as it stands (not cleared): a release the queue rang last may still be
        // waiting in it; or initialised, when no queue ever configured it.
        step(self.dpni_cmd(DPNI_RESET, [0; 7]).map(drop));
        if let Some((c, i)) = self.bus.portal(0) {
            match SwPortal::take_over(c, i, self.name.clone()) {
                Ok(mut portal) => step(self.reclaim(&mut portal, usize::MAX).map(drop)),
                Err(e) => step(Err(e)),
            }
        }
        step(self.mc.send(DPBP_DISABLE, self.dpbp, [0; 7]).map(drop));
        step(self.mc.send(DPBP_CLOSE, self.dpbp, [0; 7]).map(drop));
        step(self.dpni_cmd(DPNI_CLOSE, [0; 7]).map(drop));
        step(self.bus.disable_bus_master());
        first
    }
}

impl<B: QmBus> Drop for Shared<B> {
    /// Stops the device and takes the buffers back: DMA stops before the pool can go.
    fn drop(&mut self) {
        self.lender.alive.store(false, Ordering::Relaxed);
        LENDERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|e| !Arc::ptr_eq(&e.1.table, &self.lender.table));
        if let Err(e) = self.teardown() {
            tracing::warn!(port = %self.name, error = %e, "qm port teardown incomplete");
        }
        let left = self.lender.table.lent();
        if left > 0 {
            tracing::warn!(port = %self.name, buffers = left, "buffers still with the device");
        }
    }
}
