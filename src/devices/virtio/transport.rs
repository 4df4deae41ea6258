//! The virtio PCI transport: the common configuration, the doorbells and the device
//! configuration, each a window into a BAR that the capability walk found.
//!
//! Every field is accessed at its natural width (8, 16 or 32 bits; virtio 1.2, 4.1.3.1): the
//! register map (`regs/virtio.toml`) groups the fields into 32-bit words, and a field's access
//! is at `word + lo / 8` with the field's width. The 64-bit queue addresses are written as two
//! 32-bit halves, which the spec allows.
//!
//! The transport is generic over [`Mmio`], so the host tests drive the whole bring-up against
//! a fake device's registers (`devices/virtio/tests.rs`: one that refuses FEATURES_OK, offers a
//! queue of 0 or 100 descriptors, ...), which accept only natural-width accesses.

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ring::SplitRing;
use crate::device::MacAddr;
use crate::error::{Error, Result};
use crate::platform::mmio::Mmio;
use crate::platform::regs::virtio as c;
use crate::platform::regs::virtio_net as n;
use crate::platform::regs::{Field, Reg, RegisterMap};

/// Device status bits (virtio 1.2, 2.1).
pub mod status {
    /// The guest found the device.
    pub const ACKNOWLEDGE: u8 = 1;
    /// The guest knows how to drive it.
    pub const DRIVER: u8 = 2;
    /// The driver is ready.
    pub const DRIVER_OK: u8 = 4;
    /// Feature negotiation is complete.
    pub const FEATURES_OK: u8 = 8;
    /// The device hit an error it cannot recover from without a reset.
    pub const DEVICE_NEEDS_RESET: u8 = 64;
    /// The driver gave up on the device.
    pub const FAILED: u8 = 128;
}

/// `VIRTIO_MSI_NO_VECTOR`: no interrupt for this queue or for configuration changes.
pub const NO_VECTOR: u16 = 0xffff;

/// One structure's window into a BAR.
pub struct Window<M: Mmio> {
    mmio: Arc<M>,
    base: usize,
    len: usize,
    /// The structure's register map, so that whole-word accesses through [`Mmio`] (the
    /// `regs` tool's) go field by field at their natural widths.
    map: Option<&'static RegisterMap>,
}

impl<M: Mmio> Window<M> {
    /// `len` bytes at `base` of `mmio`; refused if they do not fit the BAR.
    pub fn new(mmio: Arc<M>, base: usize, len: usize, what: &str) -> Result<Window<M>> {
        if base.checked_add(len).is_none_or(|end| end > mmio.len()) {
            return Err(Error::InvalidConfig(format!(
                "the virtio {what} window ({len:#x} bytes at {base:#x}) does not fit its {:#x}-byte BAR; the device's capability is wrong",
                mmio.len()
            )));
        }
        Ok(Window {
            mmio,
            base,
            len,
            map: None,
        })
    }

    /// The same window, accessed through [`Mmio`] field by field as `map` lays it out.
    pub fn with_map(mut self, map: &'static RegisterMap) -> Window<M> {
        self.map = Some(map);
        self
    }

    /// The fields of the register at `offset`, when one of them must be accessed narrower than
    /// 32 bits (the rule of [`get`](Self::get)); `None` for a plain word.
    fn narrow_fields(&self, offset: usize) -> Option<impl Iterator<Item = Field>> {
        let (info, _) = self.map?.by_offset(offset as u32)?;
        let fields = info.fields.iter().map(|f| Field {
            lo: f.lo,
            width: f.hi - f.lo + 1,
        });
        fields
            .clone()
            .any(|f| Self::narrow(f).is_some())
            .then_some(fields)
    }

    fn at(&self, offset: usize, width: usize) -> usize {
        assert!(
            offset + width <= self.len,
            "virtio window access at {offset:#x} beyond its {:#x} bytes",
            self.len
        );
        self.base + offset
    }

    /// How `f` is reached: a byte or a halfword on its own boundary is accessed alone (the
    /// spec's natural width), anything else through the whole word.
    fn narrow(f: Field) -> Option<usize> {
        let bytes = usize::from(f.width) / 8;
        let at = usize::from(f.lo) / 8;
        (matches!(f.width, 8 | 16) && f.lo % 8 == 0 && at % bytes == 0).then_some(bytes)
    }

    /// A field of a register, read at the field's width.
    pub fn get(&self, reg: Reg, f: Field) -> u32 {
        let off = reg.offset() + usize::from(f.lo / 8);
        match Self::narrow(f) {
            Some(1) => u32::from(self.mmio.read8(self.at(off, 1))),
            Some(_) => u32::from(self.mmio.read16(self.at(off, 2))),
            None => f.get(self.mmio.read32(self.at(reg.offset(), 4))),
        }
    }

    /// A field of a register, written at the field's width; a field narrower than its word
    /// that is not a byte or a halfword, by a read-modify-write of the word.
    pub fn set(&self, reg: Reg, f: Field, v: u32) {
        let off = reg.offset() + usize::from(f.lo / 8);
        match Self::narrow(f) {
            Some(1) => self.mmio.write8(self.at(off, 1), v as u8),
            Some(_) => self.mmio.write16(self.at(off, 2), v as u16),
            None if f.width >= 32 => self.mmio.write32(self.at(reg.offset(), 4), v),
            None => {
                let at = self.at(reg.offset(), 4);
                let w = self.mmio.read32(at);
                self.mmio.write32(at, f.with(w, v));
            }
        }
    }

    /// A whole 32-bit register.
    pub fn word(&self, reg: Reg) -> u32 {
        self.mmio.read32(self.at(reg.offset(), 4))
    }

    /// Writes a whole 32-bit register.
    pub fn set_word(&self, reg: Reg, v: u32) {
        self.mmio.write32(self.at(reg.offset(), 4), v)
    }

    /// Bytes in the window.
    pub fn size(&self) -> usize {
        self.len
    }
}

/// Register access relative to the window, for tools (`vfio-nic regs`): a word whose fields
/// are 8 or 16 bits wide is read and written field by field at their natural widths.
impl<M: Mmio> Mmio for Window<M> {
    fn read32(&self, offset: usize) -> u32 {
        let reg = Reg(offset as u32);
        match self.narrow_fields(offset) {
            Some(fields) => fields.fold(0, |w, f| w | self.get(reg, f) << f.lo),
            None => self.mmio.read32(self.at(offset, 4)),
        }
    }
    fn write32(&self, offset: usize, value: u32) {
        let reg = Reg(offset as u32);
        match self.narrow_fields(offset) {
            Some(fields) => fields.for_each(|f| self.set(reg, f, f.get(value))),
            None => self.mmio.write32(self.at(offset, 4), value),
        }
    }
    fn len(&self) -> usize {
        self.len
    }
    fn read16(&self, offset: usize) -> u16 {
        self.mmio.read16(self.at(offset, 2))
    }
    fn write16(&self, offset: usize, value: u16) {
        self.mmio.write16(self.at(offset, 2), value)
    }
    fn read8(&self, offset: usize) -> u8 {
        self.mmio.read8(self.at(offset, 1))
    }
    fn write8(&self, offset: usize, value: u8) {
        self.mmio.write8(self.at(offset, 1), value)
    }
}

/// A queue's doorbell: a 16-bit write of the queue index to its notify address.
pub struct Doorbell<M: Mmio> {
    mmio: Arc<M>,
    offset: usize,
    queue: u16,
}

impl<M: Mmio> Doorbell<M> {
    /// Rings it, after a release fence so that the ring writes before it are visible first.
    #[inline(always)]
    pub fn ring(&self) {
        fence(Ordering::Release);
        self.mmio.write16(self.offset, self.queue);
    }
}

/// The three windows of a virtio PCI device.
pub struct Transport<M: Mmio> {
    /// The device's name, for messages.
    pub name: Arc<str>,
    /// The common configuration.
    pub common: Window<M>,
    notify: Window<M>,
    notify_mult: u32,
    /// The device configuration (absent on a device without one).
    pub device: Option<Window<M>>,
    timeout: Duration,
}

impl<M: Mmio> Transport<M> {
    /// A transport over the windows the capability walk found; `timeout` bounds every wait.
    pub fn new(
        name: Arc<str>,
        common: Window<M>,
        notify: Window<M>,
        notify_mult: u32,
        device: Option<Window<M>>,
        timeout: Duration,
    ) -> Transport<M> {
        Transport {
            name,
            common,
            notify,
            notify_mult,
            device,
            timeout,
        }
    }

    /// The device status.
    pub fn status(&self) -> u8 {
        self.common
            .get(c::DEVICE_STATUS, c::device_status::DEVICE_STATUS) as u8
    }

    /// Adds `bits` to the device status.
    pub fn add_status(&self, bits: u8) {
        let s = self.status();
        self.common.set(
            c::DEVICE_STATUS,
            c::device_status::DEVICE_STATUS,
            u32::from(s | bits),
        );
    }

    /// Resets the device (status 0) and waits until it reads 0: from then on it does no DMA
    /// and has forgotten its queues (virtio 1.2, 4.1.4.3.2).
    pub fn reset(&self) -> Result<()> {
        let f = c::device_status::DEVICE_STATUS;
        self.common.set(c::DEVICE_STATUS, f, 0);
        let start = Instant::now();
        let mut pause = Duration::from_micros(1);
        loop {
            let s = self.common.get(c::DEVICE_STATUS, f);
            if s == 0 {
                return Ok(());
            }
            if start.elapsed() >= self.timeout {
                return Err(Error::RegisterTimeout {
                    device: self.name.to_string(),
                    register: "virtio device_status (reset)",
                    expect: "== 0".into(),
                    timeout_ms: self.timeout.as_millis() as u64,
                    last: s,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    /// The 64 feature bits the device offers.
    pub fn device_features(&self) -> u64 {
        let mut f = 0u64;
        for half in 0..2u32 {
            self.common.set_word(c::DEVICE_FEATURE_SELECT, half);
            f |= u64::from(self.common.word(c::DEVICE_FEATURE)) << (32 * half);
        }
        f
    }

    /// Writes the features the driver accepts.
    pub fn set_driver_features(&self, f: u64) {
        for half in 0..2u32 {
            self.common.set_word(c::DRIVER_FEATURE_SELECT, half);
            self.common
                .set_word(c::DRIVER_FEATURE, (f >> (32 * half)) as u32);
        }
    }

    /// Virtqueues the device has.
    pub fn num_queues(&self) -> u16 {
        self.common
            .get(c::CONFIG_MSIX_VECTOR, c::config_msix_vector::NUM_QUEUES) as u16
    }

    /// Selects queue `q` and returns its maximum size (0: the queue does not exist).
    pub fn queue_max(&self, q: u16) -> u16 {
        self.common.set(
            c::DEVICE_STATUS,
            c::device_status::QUEUE_SELECT,
            u32::from(q),
        );
        self.common.get(c::QUEUE_SIZE, c::queue_size::QUEUE_SIZE) as u16
    }

    /// Gives queue `q` the ring `ring` (whose size the caller chose within
    /// [`queue_max`](Self::queue_max)) and MSI-X vector `vector` ([`NO_VECTOR`]: none), and
    /// enables it. Returns its doorbell.
    pub fn setup_queue(&self, q: u16, ring: &SplitRing, vector: u16) -> Result<Doorbell<M>> {
        let cm = &self.common;
        cm.set(
            c::DEVICE_STATUS,
            c::device_status::QUEUE_SELECT,
            u32::from(q),
        );
        cm.set(
            c::QUEUE_SIZE,
            c::queue_size::QUEUE_SIZE,
            u32::from(ring.size()),
        );
        for (lo, hi, a) in [
            (c::QUEUE_DESC_LO, c::QUEUE_DESC_HI, ring.desc_iova()),
            (c::QUEUE_DRIVER_LO, c::QUEUE_DRIVER_HI, ring.avail_iova()),
            (c::QUEUE_DEVICE_LO, c::QUEUE_DEVICE_HI, ring.used_iova()),
        ] {
            cm.set_word(lo, a as u32);
            cm.set_word(hi, (a >> 32) as u32);
        }
        cm.set(
            c::QUEUE_SIZE,
            c::queue_size::QUEUE_MSIX_VECTOR,
            u32::from(vector),
        );
        // A device that cannot route the vector reads back NO_VECTOR (virtio 1.2, 4.1.5.1.2).
        let got = cm.get(c::QUEUE_SIZE, c::queue_size::QUEUE_MSIX_VECTOR) as u16;
        if got != vector {
            return Err(Error::DeviceState {
                device: self.name.to_string(),
                what: format!(
                    "queue {q} took MSI-X vector {got:#x} instead of {vector:#x}: the device could not route its interrupt; open the port without interrupts"
                ),
            });
        }
        let off = cm.get(c::QUEUE_ENABLE, c::queue_enable::QUEUE_NOTIFY_OFF) as usize;
        let at = off * self.notify_mult as usize;
        if at + 2 > self.notify.size() || (self.notify.base + at) % 2 != 0 {
            return Err(Error::DeviceState {
                device: self.name.to_string(),
                what: format!(
                    "queue {q}'s doorbell (notify offset {off} x {}) lies outside the {}-byte notify window, or is not 2-byte aligned",
                    self.notify_mult,
                    self.notify.size()
                ),
            });
        }
        cm.set(c::QUEUE_ENABLE, c::queue_enable::QUEUE_ENABLE, 1);
        Ok(Doorbell {
            mmio: self.notify.mmio.clone(),
            offset: self.notify.base + at,
            queue: q,
        })
    }

    /// The MAC address of the device configuration, read until `config_generation` is the
    /// same before and after (a multi-byte field may change between reads otherwise; virtio
    /// 1.2, 4.1.3.1); `None` without a device configuration.
    pub fn mac(&self) -> Result<Option<MacAddr>> {
        let Some(d) = self.device.as_ref() else {
            return Ok(None);
        };
        let generation = || {
            self.common
                .get(c::DEVICE_STATUS, c::device_status::CONFIG_GENERATION)
        };
        for _ in 0..16 {
            let before = generation();
            let m = Self::read_mac(d);
            if generation() == before {
                return Ok(Some(m));
            }
        }
        Err(Error::DeviceState {
            device: self.name.to_string(),
            what: "its configuration kept changing while the MAC was read (config_generation moved 16 times)".into(),
        })
    }

    fn read_mac(d: &Window<M>) -> MacAddr {
        let f = [
            (n::MAC_LO, n::mac_lo::MAC0),
            (n::MAC_LO, n::mac_lo::MAC1),
            (n::MAC_LO, n::mac_lo::MAC2),
            (n::MAC_LO, n::mac_lo::MAC3),
            (n::MAC_HI, n::mac_hi::MAC4),
            (n::MAC_HI, n::mac_hi::MAC5),
        ];
        let mut m = [0u8; 6];
        for (b, (reg, field)) in m.iter_mut().zip(f) {
            *b = d.get(reg, field) as u8;
        }
        MacAddr(m)
    }

    /// The link status word of the device configuration (bit 0: up).
    pub fn net_status(&self) -> Option<u16> {
        let d = self.device.as_ref()?;
        Some(d.get(n::MAC_HI, n::mac_hi::STATUS) as u16)
    }
}
