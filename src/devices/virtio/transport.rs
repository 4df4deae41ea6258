//! The virtio PCI transport: the common configuration, the doorbells and the device
//! configuration, each a window into a BAR that the capability walk found.
//!
//! Every field is accessed at its natural width (8, 16 or 32 bits; virtio 1.2, 4.1.3.1), and
//! that rule lives in one place: the register map (`regs/virtio.toml`) makes each field a
//! register of its own width (`Reg8`, `Reg16`, `Reg`), and [`Natural`] gives each width its
//! one access, so a 16-bit field cannot be reached through a 32-bit word. The 64-bit queue
//! addresses are written as two 32-bit halves, which the spec allows.
//!
//! The transport is generic over [`Mmio`], so the host tests drive the whole bring-up against
//! a fake device's registers (`devices/virtio/tests.rs`: one that refuses FEATURES_OK, offers a
//! queue of 0 or 100 descriptors, ...), which accept only natural-width accesses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::feature;
use super::ring::SplitRing;
use crate::device::MacAddr;
use crate::error::{Error, Result};
use crate::platform::barrier::{dma_wmb, VirtioOrder};
use crate::platform::mmio::Mmio;
use crate::platform::regs::virtio as c;
use crate::platform::regs::virtio_net as n;
use crate::platform::regs::{Reg, Reg16, Reg8, RegisterMap};

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

/// A register of a virtio structure at its natural width: the one place where a field's width
/// decides its access (virtio 1.2, 4.1.3.1: "the driver MUST access each field using the
/// natural width").
pub trait Natural: Copy {
    /// The field's value.
    type Value: Copy + Into<u32>;
    /// Byte offset in its structure.
    fn offset(self) -> usize;
    /// Bytes wide.
    const BYTES: usize;
    /// Reads it at its width.
    fn read<M: Mmio + ?Sized>(m: &M, at: usize) -> Self::Value;
    /// Writes it at its width.
    fn write<M: Mmio + ?Sized>(m: &M, at: usize, v: Self::Value);
}

impl Natural for Reg8 {
    type Value = u8;
    const BYTES: usize = 1;
    fn offset(self) -> usize {
        Reg8::offset(self)
    }
    fn read<M: Mmio + ?Sized>(m: &M, at: usize) -> u8 {
        m.read8(at)
    }
    fn write<M: Mmio + ?Sized>(m: &M, at: usize, v: u8) {
        m.write8(at, v)
    }
}

impl Natural for Reg16 {
    type Value = u16;
    const BYTES: usize = 2;
    fn offset(self) -> usize {
        Reg16::offset(self)
    }
    fn read<M: Mmio + ?Sized>(m: &M, at: usize) -> u16 {
        m.read16(at)
    }
    fn write<M: Mmio + ?Sized>(m: &M, at: usize, v: u16) {
        m.write16(at, v)
    }
}

impl Natural for Reg {
    type Value = u32;
    const BYTES: usize = 4;
    fn offset(self) -> usize {
        Reg::offset(self)
    }
    fn read<M: Mmio + ?Sized>(m: &M, at: usize) -> u32 {
        m.read32(at)
    }
    fn write<M: Mmio + ?Sized>(m: &M, at: usize, v: u32) {
        m.write32(at, v)
    }
}

/// One structure's window into a BAR.
pub struct Window<M: Mmio> {
    mmio: Arc<M>,
    base: usize,
    len: usize,
    /// The structure's register map, so that accesses through [`Mmio`] by offset (the `regs`
    /// tool's) go at each register's width.
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

    /// The same window, accessed through [`Mmio`] by offset at the widths `map` gives.
    pub fn with_map(mut self, map: &'static RegisterMap) -> Window<M> {
        self.map = Some(map);
        self
    }

    fn at(&self, offset: usize, width: usize) -> usize {
        assert!(
            offset + width <= self.len,
            "virtio window access at {offset:#x} beyond its {:#x} bytes",
            self.len
        );
        self.base + offset
    }

    /// Reads register `r` at its width.
    pub fn read<R: Natural>(&self, r: R) -> R::Value {
        R::read(&*self.mmio, self.at(r.offset(), R::BYTES))
    }

    /// Writes register `r` at its width.
    pub fn write<R: Natural>(&self, r: R, v: R::Value) {
        R::write(&*self.mmio, self.at(r.offset(), R::BYTES), v)
    }

    /// Bytes in the window.
    pub fn size(&self) -> usize {
        self.len
    }

    /// The width in bytes of the map's register at `offset`, when it is narrower than 32 bits.
    fn narrow_at(&self, offset: usize) -> Option<u8> {
        let (info, _) = self.map?.by_offset(offset as u32)?;
        (info.width < 32).then_some(info.width / 8)
    }
}

/// Register access relative to the window, for tools (`vfio-nic regs`): a register the map
/// says is 8 or 16 bits wide is read and written at that width, whatever the call's.
impl<M: Mmio> Mmio for Window<M> {
    fn read32(&self, offset: usize) -> u32 {
        match self.narrow_at(offset) {
            Some(1) => self.read8(offset).into(),
            Some(_) => self.read16(offset).into(),
            None => self.mmio.read32(self.at(offset, 4)),
        }
    }
    fn write32(&self, offset: usize, value: u32) {
        match self.narrow_at(offset) {
            Some(1) => self.write8(offset, value as u8),
            Some(_) => self.write16(offset, value as u16),
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
    /// Rings it, after [`dma_wmb`] so that the ring writes before it are visible first: Linux's
    /// `vp_notify` is an `iowrite16`, whose arm64 `writew` puts `__io_bw()` (`dma_wmb`) before
    /// the store, whatever the ring's [`VirtioOrder`]. Out of line on arm64 only, so that
    /// `scripts/arm64 barriers` finds it in the disassembly; inlined on x86-64 as before.
    #[cfg_attr(target_arch = "aarch64", inline(never))]
    #[cfg_attr(not(target_arch = "aarch64"), inline(always))]
    pub fn ring(&self) {
        dma_wmb();
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
    /// The barriers the negotiated features ask for ([`Transport::set_driver_features`]).
    order: VirtioOrder,
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
            order: VirtioOrder::Smp,
        }
    }

    /// The device status.
    pub fn status(&self) -> u8 {
        self.common.read(c::DEVICE_STATUS)
    }

    /// Adds `bits` to the device status.
    pub fn add_status(&self, bits: u8) {
        let s = self.status();
        self.common.write(c::DEVICE_STATUS, s | bits);
    }

    /// Resets the device (status 0) and waits until it reads 0: from then on it does no DMA
    /// and has forgotten its queues (virtio 1.2, 4.1.4.3.2).
    pub fn reset(&self) -> Result<()> {
        self.common.write(c::DEVICE_STATUS, 0);
        let start = Instant::now();
        let mut pause = Duration::from_micros(1);
        loop {
            let s = self.status();
            if s == 0 {
                return Ok(());
            }
            if start.elapsed() >= self.timeout {
                return Err(Error::RegisterTimeout {
                    device: self.name.to_string(),
                    register: "virtio device_status (reset)",
                    expect: "== 0".into(),
                    timeout_ms: self.timeout.as_millis() as u64,
                    last: s.into(),
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
            self.common.write(c::DEVICE_FEATURE_SELECT, half);
            f |= u64::from(self.common.read(c::DEVICE_FEATURE)) << (32 * half);
        }
        f
    }

    /// The barriers the rings use: [`VirtioOrder::Platform`] when `VIRTIO_F_ORDER_PLATFORM` was
    /// accepted, the SMP ones otherwise (Linux `__vring_new_virtqueue`).
    pub fn order(&self) -> VirtioOrder {
        self.order
    }

    /// Writes the features the driver accepts, and takes the ring barriers they ask for.
    pub fn set_driver_features(&mut self, f: u64) {
        self.order = if f & feature::ORDER_PLATFORM != 0 {
            VirtioOrder::Platform
        } else {
            VirtioOrder::Smp
        };
        for half in 0..2u32 {
            self.common.write(c::DRIVER_FEATURE_SELECT, half);
            self.common
                .write(c::DRIVER_FEATURE, (f >> (32 * half)) as u32);
        }
    }

    /// Virtqueues the device has.
    pub fn num_queues(&self) -> u16 {
        self.common.read(c::NUM_QUEUES)
    }

    /// Selects queue `q` and returns its maximum size (0: the queue does not exist).
    pub fn queue_max(&self, q: u16) -> u16 {
        self.common.write(c::QUEUE_SELECT, q);
        self.common.read(c::QUEUE_SIZE)
    }

    /// Gives queue `q` the ring `ring` (whose size the caller chose within
    /// [`queue_max`](Self::queue_max)) and MSI-X vector `vector` ([`NO_VECTOR`]: none), with the
    /// barriers the negotiated features ask for ([`Transport::order`]), and enables it. Returns
    /// its doorbell.
    pub fn setup_queue(&self, q: u16, ring: &mut SplitRing, vector: u16) -> Result<Doorbell<M>> {
        ring.set_order(self.order);
        let cm = &self.common;
        cm.write(c::QUEUE_SELECT, q);
        cm.write(c::QUEUE_SIZE, ring.size());
        for (lo, hi, a) in [
            (c::QUEUE_DESC_LO, c::QUEUE_DESC_HI, ring.desc_iova()),
            (c::QUEUE_DRIVER_LO, c::QUEUE_DRIVER_HI, ring.avail_iova()),
            (c::QUEUE_DEVICE_LO, c::QUEUE_DEVICE_HI, ring.used_iova()),
        ] {
            cm.write(lo, a as u32);
            cm.write(hi, (a >> 32) as u32);
        }
        cm.write(c::QUEUE_MSIX_VECTOR, vector);
        // A device that cannot route the vector reads back NO_VECTOR (virtio 1.2, 4.1.5.1.2).
        let got = cm.read(c::QUEUE_MSIX_VECTOR);
        if got != vector {
            return Err(Error::DeviceState {
                device: self.name.to_string(),
                what: format!(
                    "queue {q} took MSI-X vector {got:#x} instead of {vector:#x}: the device could not route its interrupt; open the port without interrupts"
                ),
            });
        }
        let off = usize::from(cm.read(c::QUEUE_NOTIFY_OFF));
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
        cm.write(c::QUEUE_ENABLE, 1);
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
        let generation = || self.common.read(c::CONFIG_GENERATION);
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
        MacAddr([n::MAC0, n::MAC1, n::MAC2, n::MAC3, n::MAC4, n::MAC5].map(|r| d.read(r)))
    }

    /// The link status word of the device configuration (bit 0: up).
    pub fn net_status(&self) -> Option<u16> {
        let d = self.device.as_ref()?;
        Some(d.read(n::STATUS))
    }
}

/// Checks queue `q`'s maximum size: present and a power of two.
pub(crate) fn check_queue_max<M: Mmio>(t: &Transport<M>, q: u16, what: &str) -> Result<u16> {
    let max = t.queue_max(q);
    if max == 0 {
        return Err(Error::DeviceState {
            device: t.name.to_string(),
            what: format!("its {what} queue ({q}) has size 0: the device does not offer it"),
        });
    }
    if !max.is_power_of_two() {
        return Err(Error::DeviceState {
            device: t.name.to_string(),
            what: format!(
                "its {what} queue ({q}) offers {max} descriptors, not a power of two; split virtqueues here need one"
            ),
        });
    }
    Ok(max)
}
