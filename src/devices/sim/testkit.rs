//! Test helpers: bring a sim port up with raw register writes (notes section 1.4 order) and
//! drive descriptor rings by hand, without the ixgbe driver.

use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{SimConfig, SimPort, SimRegs};
use crate::platform::bus::Bus;
use crate::platform::dma::DmaMemory;
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe as r;

pub(super) fn regs(p: &SimPort) -> Arc<SimRegs> {
    p.regs().clone()
}

/// Reset, link, RX and TX global enables; no queue yet.
pub(super) fn init(p: &SimPort) {
    let m = p.regs();
    p.enable_bus_master().unwrap();
    m.write(r::EIMC, u32::MAX);
    m.write(r::CTRL, r::ctrl::RST.bit() | r::ctrl::LNK_RST.bit());
    assert_eq!(
        m.read(r::CTRL) & (r::ctrl::RST.bit() | r::ctrl::LNK_RST.bit()),
        0
    );
    assert!(r::eec::ARD.is_set(m.read(r::EEC)));
    assert!(r::rdrxctl::DMAIDONE.is_set(m.read(r::RDRXCTL)));
    m.write(r::AUTOC, r::autoc::LMS.val(3) | r::autoc::AN_RESTART.bit());
    for c in [r::GPRC, r::GPTC, r::GORCL, r::GORCH, r::GOTCL, r::GOTCH] {
        m.read(c);
    }
    m.write(r::RXCTRL, 0);
    m.modify(r::HLREG0, 0, r::hlreg0::RXCRCSTRP.bit());
    m.modify(r::RDRXCTL, 0, r::rdrxctl::CRCSTRIP.bit());
    m.modify(r::FCTRL, 0, r::fctrl::BAM.bit());
    m.modify(
        r::HLREG0,
        0,
        r::hlreg0::TXCRCEN.bit() | r::hlreg0::TXPADEN.bit(),
    );
    m.write(r::DMATXCTL, m.read(r::DMATXCTL) | r::dmatxctl::TE.bit());
    m.write(r::RXCTRL, r::rxctrl::RXEN.bit());
    assert!(
        r::links::UP.is_set(m.read(r::LINKS)),
        "link up after AN restart"
    );
}

/// One written-back receive descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Wb {
    pub lo: u64,
    pub status: u32,
    pub len: u16,
    pub vlan: u16,
}

/// A frame as the test's receive ring saw it.
#[derive(Clone, Debug)]
pub(super) struct Got {
    pub data: Vec<u8>,
    pub descs: Vec<Wb>,
}

impl Got {
    pub fn last(&self) -> Wb {
        *self.descs.last().unwrap()
    }
}

/// A receive ring driven by hand.
pub(super) struct Rx {
    pub q: u32,
    pub desc: DmaMemory,
    pub bufs: DmaMemory,
    pub n: usize,
    pub buf: usize,
    next: usize,
}

impl Rx {
    /// Programs queue `q` with `n` descriptors of `buf`-byte buffers (SRRCTL.BSIZEPKT = buf/1024,
    /// at least 1) and hands `n - 1` to the device.
    pub fn new(p: &SimPort, q: u32, n: usize, buf: usize) -> Rx {
        let m = p.regs();
        let desc = DmaMemory::allocate(n * 16, p.dma_mapper()).unwrap();
        let bufs = DmaMemory::allocate(n * buf, p.dma_mapper()).unwrap();
        for i in 0..n {
            desc.store_u64(i * 16, bufs.iova() + (i * buf) as u64, Relaxed);
            desc.store_u64(i * 16 + 8, 0, Relaxed);
        }
        m.write(r::RDBAL.at(q), desc.iova() as u32);
        m.write(r::RDBAH.at(q), (desc.iova() >> 32) as u32);
        m.write(r::RDLEN.at(q), (n * 16) as u32);
        let bsize = (buf / 1024).max(1) as u32;
        m.write(
            r::SRRCTL.at(q),
            r::srrctl::DESCTYPE.val(1) | r::srrctl::BSIZEPKT.val(bsize),
        );
        m.write(r::RDH.at(q), 0);
        m.write(r::RDT.at(q), 0);
        m.modify(r::RXDCTL.at(q), 0, r::rxdctl::ENABLE.bit());
        assert!(r::rxdctl::ENABLE.is_set(m.read(r::RXDCTL.at(q))));
        m.doorbell(r::RDT.at(q).offset(), (n - 1) as u32);
        Rx {
            q,
            desc,
            bufs,
            n,
            buf,
            next: 0,
        }
    }

    /// Sets or clears bits of this queue's RXDCTL.
    pub fn rxdctl(&self, p: &SimPort, clear: u32, set: u32) {
        p.regs().modify(r::RXDCTL.at(self.q), clear, set);
    }

    fn wb(&self, i: usize) -> Option<Wb> {
        let status = self.desc.load_u32(i * 16 + 8, Acquire);
        if status & 1 == 0 {
            return None;
        }
        let hi = self.desc.load_u32(i * 16 + 12, Relaxed);
        Some(Wb {
            lo: self.desc.load_u64(i * 16, Relaxed),
            status,
            len: hi as u16,
            vlan: (hi >> 16) as u16,
        })
    }

    /// The next complete frame, if any; its descriptors are re-armed and handed back.
    pub fn recv(&mut self, p: &SimPort) -> Option<Got> {
        let mut k = 0;
        let mut descs = Vec::new();
        loop {
            let wb = self.wb((self.next + k) % self.n)?;
            descs.push(wb);
            k += 1;
            if wb.status & 2 != 0 {
                break;
            }
        }
        let mut data = Vec::new();
        for (j, wb) in descs.iter().enumerate() {
            let i = (self.next + j) % self.n;
            let mut part = vec![0u8; wb.len as usize];
            self.bufs.read_bytes(i * self.buf, &mut part);
            data.extend_from_slice(&part);
            self.desc
                .store_u64(i * 16, self.bufs.iova() + (i * self.buf) as u64, Relaxed);
            self.desc.store_u64(i * 16 + 8, 0, Relaxed);
        }
        self.next = (self.next + k) % self.n;
        let tail = (self.next + self.n - 1) % self.n;
        p.regs().doorbell(r::RDT.at(self.q).offset(), tail as u32);
        Some(Got { data, descs })
    }

    /// Every frame available now.
    pub fn drain(&mut self, p: &SimPort) -> Vec<Got> {
        std::iter::from_fn(|| self.recv(p)).collect()
    }

    /// Waits (threaded mode) for `n` frames.
    pub fn wait(&mut self, p: &SimPort, n: usize) -> Vec<Got> {
        let start = Instant::now();
        let mut out = Vec::new();
        while out.len() < n && start.elapsed() < Duration::from_secs(10) {
            match self.recv(p) {
                Some(g) => out.push(g),
                None => std::thread::sleep(Duration::from_micros(100)),
            }
        }
        out
    }
}

/// A transmit ring driven by hand.
pub(super) struct Tx {
    pub q: u32,
    pub desc: DmaMemory,
    pub bufs: DmaMemory,
    pub n: usize,
    pub tail: usize,
    used: usize,
}

pub(super) const DATA: u32 = (0x3 << 20) | (1 << 29) | (1 << 25);
pub(super) const EOP: u32 = 1 << 24;
pub(super) const RS: u32 = 1 << 27;
pub(super) const VLE: u32 = 1 << 30;

impl Tx {
    pub fn new(p: &SimPort, q: u32, n: usize) -> Tx {
        let m = p.regs();
        let desc = DmaMemory::allocate(n * 16, p.dma_mapper()).unwrap();
        let bufs = DmaMemory::allocate(64 * 1024, p.dma_mapper()).unwrap();
        m.write(r::TDBAL.at(q), desc.iova() as u32);
        m.write(r::TDBAH.at(q), (desc.iova() >> 32) as u32);
        m.write(r::TDLEN.at(q), (n * 16) as u32);
        m.write(r::TDH.at(q), 0);
        m.write(r::TDT.at(q), 0);
        m.modify(r::TXDCTL.at(q), 0, r::txdctl::ENABLE.bit());
        Tx {
            q,
            desc,
            bufs,
            n,
            tail: 0,
            used: 0,
        }
    }

    /// Writes one raw descriptor (no doorbell); returns its slot.
    pub fn put(&mut self, qw0: u64, cmd: u32, olinfo: u32) -> usize {
        let i = self.tail;
        self.desc.store_u64(i * 16, qw0, Relaxed);
        self.desc.store_u64(
            i * 16 + 8,
            u64::from(cmd) | u64::from(olinfo) << 32,
            Relaxed,
        );
        self.tail = (i + 1) % self.n;
        i
    }

    /// Copies `bytes` into the buffer area; returns their IOVA.
    pub fn stage(&mut self, bytes: &[u8]) -> u64 {
        if self.used + bytes.len() > self.bufs.len() {
            self.used = 0;
        }
        let off = self.used;
        self.bufs.write_bytes(off, bytes);
        self.used = (off + bytes.len()).next_multiple_of(64);
        self.bufs.iova() + off as u64
    }

    /// Rings the doorbell.
    pub fn kick(&self, p: &SimPort) {
        p.regs()
            .doorbell(r::TDT.at(self.q).offset(), self.tail as u32);
    }

    /// Sends `frame` in one data descriptor with RS (and VLE + IDX when `vle` is given).
    pub fn send(&mut self, p: &SimPort, frame: &[u8], vle: Option<u32>) -> usize {
        let a = self.stage(frame);
        let len = frame.len() as u32;
        let (cmd, idx) = match vle {
            Some(idx) => (DATA | EOP | RS | VLE | len, idx << 4),
            None => (DATA | EOP | RS | len, 0),
        };
        let slot = self.put(a, cmd, len << 14 | idx);
        self.kick(p);
        slot
    }

    /// Writes a context descriptor carrying `tci` into slot `idx`.
    pub fn context(&mut self, tci: u16, idx: u32) {
        let ctx = (0x2 << 20) | (1 << 29) | (0x3 << 11);
        self.put(u64::from(tci) << 16 | 14 << 9, ctx, idx << 4);
    }

    /// Whether the device wrote DD back into `slot`.
    pub fn done(&self, slot: usize) -> bool {
        self.desc.load_u32(slot * 16 + 12, Acquire) & 1 != 0
    }
}

/// An inline pair, both ports initialised, queue 0 of each set up.
pub(super) struct PairRig {
    pub a: SimPort,
    pub b: SimPort,
    pub a_tx: Tx,
    pub b_rx: Rx,
}

pub(super) fn pair_rig(cfg: SimConfig) -> PairRig {
    let (a, b) = SimPort::pair(cfg);
    init(&a);
    init(&b);
    let a_tx = Tx::new(&a, 0, 64);
    let b_rx = Rx::new(&b, 0, 64, 2048);
    PairRig { a, b, a_tx, b_rx }
}

/// An IPv4/UDP frame of `size` bytes from `sport` to the given MAC.
pub(super) fn udp(dst: [u8; 6], sport: u16, size: usize) -> Vec<u8> {
    super::frame::udp_frame(dst, [0x02, 0, 0, 0, 0, 9], (sport, 80), size)
}
