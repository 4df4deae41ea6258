//! Starting and stopping a hardware queue, the same dance on both chips.
//!
//! RXDCTL(n)/TXDCTL(n) carry an ENABLE bit (bit 25 on both) that the device acknowledges by
//! reading it back. A queue's memory may be freed only after the device has stopped using it:
//! the datasheets (82576 4.5.9/4.5.10, 82599 4.6.7.1/4.6.8.1) ask to clear ENABLE, poll until it
//! reads 0, and give in-flight writes a moment to land. A transmit queue first lets what is
//! queued leave (the head catches up with the tail), briefly, so a dropped queue does not cut
//! off the last frames of a burst. These helpers never fail: they run in `Drop`, where the only
//! thing left to do with a problem is to log it.

use std::time::Duration;

use crate::error::Result;
use crate::platform::mmio::{wait_for, Mmio};
use crate::platform::regs::{Reg, RegArray};

/// How long a transmit queue's stop lets queued frames leave before disabling it.
pub(crate) const TX_DRAIN: Duration = Duration::from_millis(10);
/// Time between a receive queue reading back disabled and its memory being released
/// (82599 datasheet 4.6.7.1; the 82576 asks for the same).
pub(crate) const RX_QUIESCE: Duration = Duration::from_micros(100);

/// The registers of one kind of ring (receive or transmit) on one chip: base, length, head,
/// tail and control arrays, and the control register's ENABLE bit.
#[derive(Clone, Copy, Debug)]
pub struct RingRegs {
    /// Base address, low half (RDBAL, TDBAL).
    pub bal: RegArray,
    /// Base address, high half (RDBAH, TDBAH).
    pub bah: RegArray,
    /// Ring length in bytes (RDLEN, TDLEN).
    pub len: RegArray,
    /// Head (RDH, TDH).
    pub head: RegArray,
    /// Tail (RDT, TDT).
    pub tail: RegArray,
    /// Queue control (RXDCTL, TXDCTL).
    pub ctl: RegArray,
    /// The control register's ENABLE bit.
    pub enable: u32,
    /// "RXDCTL.ENABLE" or "TXDCTL.ENABLE", for timeouts.
    pub what: &'static str,
}

/// The receive and transmit [`RingRegs`] of a chip, from its register map: both chips name
/// their ring registers alike (RDBAL ... RXDCTL, TDBAL ... TXDCTL).
macro_rules! ring_regs {
    ($r:ident, rx) => {
        $crate::devices::intel::queue::RingRegs {
            bal: $r::RDBAL,
            bah: $r::RDBAH,
            len: $r::RDLEN,
            head: $r::RDH,
            tail: $r::RDT,
            ctl: $r::RXDCTL,
            enable: $r::rxdctl::ENABLE.bit(),
            what: "RXDCTL.ENABLE",
        }
    };
    ($r:ident, tx) => {
        $crate::devices::intel::queue::RingRegs {
            bal: $r::TDBAL,
            bah: $r::TDBAH,
            len: $r::TDLEN,
            head: $r::TDH,
            tail: $r::TDT,
            ctl: $r::TXDCTL,
            enable: $r::txdctl::ENABLE.bit(),
            what: "TXDCTL.ENABLE",
        }
    };
}
pub(crate) use ring_regs;

impl RingRegs {
    /// Clears every queue's ENABLE (each RXDCTL or TXDCTL of the chip) without waiting: how a
    /// port restored after a function reset leaves its queues until each owner puts its ring
    /// back (the reset's defaults differ between cards and models: cleared, not trusted).
    pub(crate) fn disable_all<M: Mmio + ?Sized>(&self, m: &M) {
        for q in 0..self.ctl.count() {
            self.ctl(q).clear(m);
        }
    }

    /// Queue `q`'s control register.
    pub(crate) fn ctl(&self, q: u32) -> QueueCtl {
        QueueCtl {
            reg: self.ctl.at(q),
            enable: self.enable,
            what: self.what,
        }
    }

    /// Programs queue `q`'s ring (the queue disabled): base, length, head = tail = 0.
    pub(crate) fn program<M: Mmio + ?Sized>(&self, m: &M, q: u32, iova: u64, len: u32) {
        m.write(self.bal.at(q), iova as u32);
        m.write(self.bah.at(q), (iova >> 32) as u32);
        m.write(self.len.at(q), len);
        m.write(self.head.at(q), 0);
        m.write(self.tail.at(q), 0);
    }
}

/// The control register of one hardware queue and its ENABLE bit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueueCtl {
    /// RXDCTL(n) or TXDCTL(n).
    pub reg: Reg,
    /// Its ENABLE bit.
    pub enable: u32,
    /// "RXDCTL.ENABLE" or "TXDCTL.ENABLE", for timeouts.
    pub what: &'static str,
}

impl QueueCtl {
    /// Sets ENABLE and waits for the device to acknowledge it.
    pub(crate) fn enable<M: Mmio + ?Sized>(&self, m: &M, name: &str, t: Duration) -> Result<()> {
        m.modify(self.reg, 0, self.enable);
        wait_for(m, name, self.reg, self.what, self.enable, self.enable, t)?;
        Ok(())
    }

    /// Clears ENABLE without waiting (for stopping many queues at once, then [`Self::wait_off`]).
    pub(crate) fn clear<M: Mmio + ?Sized>(&self, m: &M) {
        m.modify(self.reg, self.enable, 0);
    }

    /// Waits until ENABLE reads 0; logs (and returns false) if it does not.
    pub(crate) fn wait_off<M: Mmio + ?Sized>(
        &self,
        m: &M,
        name: &str,
        queue: u32,
        t: Duration,
    ) -> bool {
        match wait_for(m, name, self.reg, self.what, self.enable, 0, t) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(port = %name, queue, error = %e, "queue did not stop");
                false
            }
        }
    }

    /// The receive queue's `Drop`: clear ENABLE, wait for it, let in-flight writes land.
    pub(crate) fn stop_rx<M: Mmio + ?Sized>(&self, m: &M, name: &str, queue: u32, t: Duration) {
        if m.read(self.reg) == u32::MAX {
            return;
        }
        self.clear(m);
        if self.wait_off(m, name, queue, t) {
            std::thread::sleep(RX_QUIESCE);
        }
    }

    /// The transmit queue's `Drop`: let what is queued leave (TDH reaches `tail`, for at most
    /// [`TX_DRAIN`]), then clear ENABLE and wait for it.
    pub(crate) fn stop_tx<M: Mmio + ?Sized>(
        &self,
        m: &M,
        name: &str,
        queue: u32,
        tdh: Reg,
        tail: u32,
        t: Duration,
    ) {
        let v = m.read(self.reg);
        if v == u32::MAX {
            return;
        }
        if v & self.enable != 0 {
            let _ = wait_for(
                m,
                name,
                tdh,
                "TDH (transmit drain)",
                u32::MAX,
                tail,
                TX_DRAIN.min(t),
            );
        }
        self.clear(m);
        self.wait_off(m, name, queue, t);
    }
}

/// The port's shutdown of every queue (also those handed out, which may still run): clear all
/// ENABLE bits first, so the queues stop in parallel, then wait for each.
pub(crate) fn stop_all<M: Mmio + ?Sized>(
    m: &M,
    name: &str,
    queues: impl Iterator<Item = (u32, QueueCtl)> + Clone,
    t: Duration,
) {
    for (_, q) in queues.clone() {
        q.clear(m);
    }
    for (n, q) in queues {
        q.wait_off(m, name, n, t);
    }
}
