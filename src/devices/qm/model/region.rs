//! [`QmRegion`]: the regions of a modelled port as the driver sees them (its MC command portal,
//! and each software portal's CENA memory and CINH registers), and what a read or a write of
//! each does: the triggers of the portal engines, the MC's answer, plain memory.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::Arc;

use super::{engine, mc, state, Inner, Mode};
use crate::devices::qm::layout::{cena, EQCR_SIZE, RT, VALID_BIT};
use crate::devices::qm::mc::{header, McStatus, PORTAL_BYTES};
use crate::platform::mmio::Mmio;
use crate::platform::regs::qbman as r;

#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Mc,
    Cena(usize),
    Cinh(usize),
}

/// One region of a modelled port: its MC command portal, or a software portal's CENA memory
/// or CINH registers.
pub struct QmRegion {
    pub(super) soc: Arc<Inner>,
    pub(super) d: usize,
    pub(super) kind: Kind,
}

const EQCR_PI: usize = r::EQCR_PI.offset();
const EQCR_CI: usize = r::EQCR_CI.offset();
const VDQCR_RT: usize = r::VDQCR_RT.offset();
const CR_RT: usize = r::CR_RT.offset();
const DQPI: usize = r::DQPI.offset();
const RAR: usize = r::RAR.offset();
const CFG: usize = r::CFG.offset();
const SDQCR: usize = r::SDQCR.offset();
const ISR: usize = r::ISR.offset();
const IER: usize = r::IER.offset();
const ISDR: usize = r::ISDR.offset();
const IIR: usize = r::IIR.offset();
const RCR_AM_RT: usize = r::RCR_AM_RT.at(0).offset();
const RCR_AM_RT_END: usize = r::RCR_AM_RT.at(7).offset();
const RCR_PI: usize = r::RCR_PI.offset();

impl QmRegion {
    fn cinh_read(&self, p: usize, off: usize) -> u32 {
        let h = &self.soc.hot[p];
        match off {
            EQCR_PI => {
                let ci = h.device.ci.load(Acquire);
                ci | state::Portal::eqcr_vb(ci)
            }
            EQCR_CI => h.device.ci.load(Acquire),
            RAR => h.rar(),
            _ => {
                let s = self.soc.lock();
                let port = &s.portals[p];
                match off {
                    DQPI => port.dqpi,
                    CFG => port.cfg,
                    SDQCR => port.sdqcr,
                    ISR => port.isr,
                    IER => port.ier,
                    ISDR => port.isdr,
                    IIR => port.iir,
                    _ => 0,
                }
            }
        }
    }

    /// A doorbell or read trigger in threaded mode: noted for the device thread.
    fn trigger(&self, p: usize, off: usize, v: u32) -> bool {
        let h = &self.soc.hot[p];
        match off {
            EQCR_PI => h.driver.pi.store(v & (2 * EQCR_SIZE - 1), Release),
            VDQCR_RT if v & RT != 0 => h.driver.vdq.store(true, Release),
            CR_RT if v & RT != 0 => h.driver.cr.store(true, Release),
            RCR_AM_RT..=RCR_AM_RT_END if v & RT != 0 => {
                h.ring_release(((off - RCR_AM_RT) / 4) as u32);
            }
            _ => return false,
        }
        true
    }

    /// A write to a portal not initialised since its CFG write: an initialisation write is
    /// noted, a doorbell or trigger refused (counted, nothing done); whether it was either
    /// (anything else is written as usual).
    ///
    /// A memory-backed portal's initialisation (Linux and DPDK `qbman_swp_init`) writes RT to
    /// EQCR_PI and RCR_PI after CFG, and SDQCR = 0. What QMan does with a portal used without
    /// it is not documented publicly; the model refuses it, so that a driver that skips it
    /// fails here and not on a card.
    #[cold]
    fn before_ready(&self, p: usize, off: usize, v: u32) -> bool {
        let mut s = self.soc.lock();
        let port = &mut s.portals[p];
        let configured = port.cfg != 0;
        let step = match off {
            // Exactly RT (`QMAN_RT_MODE`): producer index 0 with valid bit 0, which no
            // doorbell carries (the valid bit is set on the ring's first pass, whose index 0
            // no doorbell names, and index 0 comes back only with it set again).
            EQCR_PI if configured && v == RT => state::INIT_EQCR,
            RCR_PI if configured && v == RT => state::INIT_RCR,
            SDQCR if configured && v == 0 => {
                port.sdqcr = 0;
                state::INIT_SDQCR
            }
            EQCR_PI | RCR_PI | VDQCR_RT | CR_RT | RCR_AM_RT..=RCR_AM_RT_END => {
                s.faults.uninitialised += 1;
                if s.faults.uninitialised <= 4 {
                    tracing::error!(
                        portal = p,
                        offset = off,
                        value = v,
                        "qm model: a doorbell on a portal not initialised since its CFG write \
                         (EQCR_PI and RCR_PI to RT, SDQCR to 0): refused"
                    );
                }
                return true;
            }
            _ => return false,
        };
        port.init |= step;
        if port.init == state::INIT_ALL {
            self.soc.hot[p].driver.ready.store(true, Release);
        }
        true
    }

    fn cinh_write(&self, p: usize, off: usize, v: u32) {
        if !self.soc.hot[p].driver.ready.load(Acquire) && self.before_ready(p, off, v) {
            return;
        }
        if self.soc.mode == Mode::Threaded && self.trigger(p, off, v) {
            return;
        }
        let mem = &self.soc.cena[p];
        let h = &self.soc.hot[p];
        let mut s = self.soc.lock();
        match off {
            EQCR_PI => {
                h.driver.pi.store(v & (2 * EQCR_SIZE - 1), Relaxed);
                engine::eqcr_consume(&mut s, &self.soc.iommu, mem, h, v)
            }
            VDQCR_RT if v & RT != 0 => engine::pull(&mut s, &self.soc.iommu, mem),
            CR_RT if v & RT != 0 => engine::command(&mut s, p, mem),
            RCR_AM_RT..=RCR_AM_RT_END if v & RT != 0 => {
                engine::release_slot(&mut s, mem, h, ((off - RCR_AM_RT) / 4) as u32)
            }
            CFG => {
                // Configuring a portal is taken as its DPIO being enabled after a reset: the
                // management response and release slots start over (the enqueue ring's
                // position stays; drivers read it from EQCR_PI).
                // It must be initialised again before it is used (`before_ready`).
                let port = &mut s.portals[p];
                port.cfg = v;
                port.init = 0;
                h.driver.ready.store(false, Release);
                port.rr_vb = VALID_BIT;
                h.slots.next.store(0, Relaxed);
                h.slots.busy.store(0, Relaxed);
            }
            SDQCR => s.portals[p].sdqcr = v,
            ISR => s.portals[p].isr &= !v,
            IER => s.portals[p].ier = v,
            ISDR => s.portals[p].isdr = v,
            IIR => s.portals[p].iir = v,
            _ => tracing::debug!(
                offset = off,
                value = v,
                "qm model: write to a portal register it does not act on"
            ),
        }
    }

    /// What a 32-bit write does (`write32`, and `write_block` outside the CENA area).
    #[inline(always)]
    fn store(&self, offset: usize, value: u32) {
        if self.soc.gone[self.d].load(Relaxed) {
            return;
        }
        match self.kind {
            Kind::Mc => {
                if let Some(w) = self.soc.mcp[self.d].get(offset / 4) {
                    w.store(value, Release);
                }
                if offset == 0 && header::status(u64::from(value)) == McStatus::Ready as u8 {
                    self.mc_command();
                }
            }
            Kind::Cena(p) => {
                if let Some(w) = self.soc.cena[p].get(offset / 4) {
                    w.store(value, Release);
                }
            }
            Kind::Cinh(p) => self.cinh_write(p, offset, value),
        }
    }

    /// A command written to the MC portal: answered in place, status last.
    fn mc_command(&self) {
        let m = &self.soc.mcp[self.d];
        let w = |i: usize| {
            u64::from(m[2 * i].load(Relaxed)) | u64::from(m[2 * i + 1].load(Relaxed)) << 32
        };
        let h = w(0);
        let params: [u64; 7] = std::array::from_fn(|i| w(i + 1));
        let a = mc::execute(
            &mut self.soc.lock(),
            header::cmd_id(h),
            header::token(h),
            params,
        );
        if a.status == McStatus::Ok {
            for (i, p) in a.params.iter().enumerate() {
                m[2 + 2 * i].store(*p as u32, Relaxed);
                m[3 + 2 * i].store((*p >> 32) as u32, Relaxed);
            }
        }
        let token = if a.token != 0 {
            a.token
        } else {
            header::token(h)
        };
        let out = header::new(header::cmd_id(h), token, a.status as u8);
        m[1].store((out >> 32) as u32, Relaxed);
        m[0].store(out as u32, Release);
    }
}

impl Mmio for QmRegion {
    // Not inlined: `bench/instructions --device qm` switches callgrind's collection off inside
    // these three (with `write_block`), so that the model's work is not counted as the driver's.
    #[inline(never)]
    fn read32(&self, offset: usize) -> u32 {
        if self.soc.gone[self.d].load(Relaxed) {
            return u32::MAX;
        }
        match self.kind {
            Kind::Mc => self.soc.mcp[self.d]
                .get(offset / 4)
                .map_or(0, |w| w.load(Acquire)),
            Kind::Cena(p) => self.soc.cena[p]
                .get(offset / 4)
                .map_or(0, |w| w.load(Acquire)),
            Kind::Cinh(p) => self.cinh_read(p, offset),
        }
    }

    #[inline(never)]
    fn write32(&self, offset: usize, value: u32) {
        self.store(offset, value)
    }

    /// A block write (an enqueue entry): plain memory in the CENA area, stored word by word as
    /// `write32` stores them (the model acts on entries only at the EQCR_PI doorbell, which
    /// reads them up to the producer index). Not inlined, and on `bench/instructions`' list
    /// with `read32` and `write32`, for the same reason. Other regions take the words one by
    /// one as `write32` does, so that an MC command's status word still triggers its answer.
    #[inline(never)]
    fn write_block(&self, offset: usize, words: &[u32]) {
        match self.kind {
            Kind::Cena(p) => {
                if self.soc.gone[self.d].load(Relaxed) {
                    return;
                }
                let mem = &self.soc.cena[p];
                for (i, v) in words.iter().enumerate() {
                    if let Some(w) = mem.get(offset / 4 + i) {
                        w.store(*v, Release);
                    }
                }
            }
            // Not through `write32`: a call to it would switch callgrind's collection back on.
            Kind::Mc | Kind::Cinh(_) => {
                for (i, v) in words.iter().enumerate() {
                    self.store(offset + 4 * i, *v);
                }
            }
        }
    }

    fn len(&self) -> usize {
        match self.kind {
            Kind::Mc => PORTAL_BYTES,
            Kind::Cena(_) => cena::SIZE,
            Kind::Cinh(_) => 0x1000,
        }
    }
}
