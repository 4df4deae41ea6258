//! Register access: the only way driver code touches a device's registers.
//!
//! Drivers are generic over [`Mmio`], so the same init sequence runs against a mapped BAR
//! ([`MmioRegion`]), a software model of a chip, or [`RecordingMmio`], which remembers every access
//! so that host tests can assert an init sequence register by register. All accesses are aligned
//! 32-bit volatile loads and stores: both Intel chips (and QEMU's model) implement nothing else.
//!
//! Two register accesses are ordered against DMA memory, each as Linux's accessor of the same
//! meaning (`platform::barrier` has the barriers and their sources):
//! - [`Mmio::doorbell`] is `writel`: descriptors written with plain stores must be visible to
//!   the device before it sees the new tail, so [`dma_wmb`] goes in front of the store and no
//!   caller can forget it;
//! - [`Mmio::read_ordered`] is `readl`: the read, then [`dma_rmb`], so that the ring a caller
//!   looks at next is read after the register (the interrupt arm sequence's flush).
//!
//! Every other access is `readl_relaxed`/`writel_relaxed`: a device sees its own registers'
//! accesses in program order (VFIO maps a BAR uncached, Device-nGnRnE on arm64), and nothing
//! else needs ordering against them.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::platform::barrier::{dma_rmb, dma_wmb};
use crate::platform::regs::Reg;

/// 32-bit register access to one device BAR.
pub trait Mmio: Send + Sync {
    /// Reads the 32-bit register at byte `offset`.
    fn read32(&self, offset: usize) -> u32;
    /// Writes the 32-bit register at byte `offset`.
    fn write32(&self, offset: usize, value: u32);
    /// Size of the register space in bytes.
    fn len(&self) -> usize;

    /// Whether the register space is empty (never, for a real BAR).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes `words` to consecutive 32-bit registers (or memory-backed portal words) from byte
    /// `offset` on, in order. For command entries that a doorbell hands over (a queue manager's
    /// enqueue ring in memory-backed mode, where the portal looks at no entry beyond the
    /// producer index it was told): one call per entry instead of one per word, as DPDK's
    /// `qbman_swp_enqueue_multiple_mem_back` copies an entry with `memcpy`. No ordering among
    /// the words is promised beyond program order; the doorbell's [`dma_wmb`] orders them all
    /// before the doorbell. The default writes them one by one with [`Mmio::write32`].
    fn write_block(&self, offset: usize, words: &[u32]) {
        for (i, w) in words.iter().enumerate() {
            self.write32(offset + 4 * i, *w);
        }
    }

    /// Writes a doorbell (tail) register after [`dma_wmb`], so that every descriptor and
    /// buffer write made before it is visible to the device first: Linux's `writel`
    /// (`asm-generic/io.h`: `__io_bw()` before `__raw_writel`; arm64's `__io_bw()` is
    /// `dma_wmb()`, `dmb oshst`; on x86-64 a compiler barrier only).
    #[inline(always)]
    fn doorbell(&self, offset: usize, value: u32) {
        dma_wmb();
        self.write32(offset, value);
    }

    /// Reads a named register as Linux's `readl` does: the read, then [`dma_rmb`] (arm64's
    /// `__io_ar()`), so that loads of DMA memory made after it are not satisfied before it.
    /// For the read that flushes posted writes before a ring is looked at again.
    #[inline(always)]
    fn read_ordered(&self, reg: Reg) -> u32 {
        let v = self.read32(reg.offset());
        dma_rmb();
        v
    }

    /// Reads the 16-bit register at byte `offset` (2-byte aligned). Devices whose registers are
    /// narrower than 32 bits (virtio's common configuration) must be accessed at their natural
    /// width; this default reads the enclosing 32-bit word, which is right for memory-backed
    /// models and recorders, and a real BAR ([`MmioRegion`]) overrides it with a 16-bit access.
    fn read16(&self, offset: usize) -> u16 {
        assert!(
            offset % 2 == 0,
            "16-bit register offset {offset:#x} is not 2-byte aligned"
        );
        (self.read32(offset & !3) >> ((offset & 2) * 8)) as u16
    }
    /// Writes the 16-bit register at byte `offset`; the default is a read-modify-write of the
    /// enclosing 32-bit word (see [`Mmio::read16`]).
    fn write16(&self, offset: usize, value: u16) {
        assert!(
            offset % 2 == 0,
            "16-bit register offset {offset:#x} is not 2-byte aligned"
        );
        let shift = (offset & 2) * 8;
        let word = self.read32(offset & !3) & !(0xffff << shift);
        self.write32(offset & !3, word | u32::from(value) << shift);
    }
    /// Reads the 8-bit register at byte `offset` (default as in [`Mmio::read16`]).
    fn read8(&self, offset: usize) -> u8 {
        (self.read32(offset & !3) >> ((offset & 3) * 8)) as u8
    }
    /// Writes the 8-bit register at byte `offset` (default as in [`Mmio::write16`]).
    fn write8(&self, offset: usize, value: u8) {
        let shift = (offset & 3) * 8;
        let word = self.read32(offset & !3) & !(0xff << shift);
        self.write32(offset & !3, word | u32::from(value) << shift);
    }

    /// Reads a named register.
    #[inline(always)]
    fn read(&self, reg: Reg) -> u32 {
        self.read32(reg.offset())
    }

    /// Writes a named register.
    #[inline(always)]
    fn write(&self, reg: Reg, value: u32) {
        self.write32(reg.offset(), value)
    }

    /// Read-modify-write: sets the bits in `set`, clears those in `clear`.
    fn modify(&self, reg: Reg, clear: u32, set: u32) {
        let v = self.read(reg);
        self.write(reg, (v & !clear) | set);
    }
}

impl<M: Mmio + ?Sized> Mmio for Arc<M> {
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        (**self).read32(offset)
    }
    #[inline(always)]
    fn write32(&self, offset: usize, value: u32) {
        (**self).write32(offset, value)
    }
    #[inline(always)]
    fn write_block(&self, offset: usize, words: &[u32]) {
        (**self).write_block(offset, words)
    }
    fn len(&self) -> usize {
        (**self).len()
    }
    fn read16(&self, offset: usize) -> u16 {
        (**self).read16(offset)
    }
    fn write16(&self, offset: usize, value: u16) {
        (**self).write16(offset, value)
    }
    fn read8(&self, offset: usize) -> u8 {
        (**self).read8(offset)
    }
    fn write8(&self, offset: usize, value: u8) {
        (**self).write8(offset, value)
    }
}

/// Polls `reg` until `value & mask == want`, for at most `timeout`.
///
/// Every wait on a device goes through here, so none can hang: on timeout the error names the
/// device, the register (`what`, e.g. "RDRXCTL.DMAIDONE") and the last value read. An all-ones
/// read ends the wait at once with [`Error::DeviceGone`]: a removed device never answers.
pub fn wait_for<M: Mmio + ?Sized>(
    m: &M,
    device: &str,
    reg: Reg,
    what: &'static str,
    mask: u32,
    want: u32,
    timeout: Duration,
) -> Result<u32> {
    let start = Instant::now();
    let mut pause = Duration::from_micros(1);
    loop {
        let v = m.read(reg);
        if v & mask == want {
            return Ok(v);
        }
        if v == u32::MAX && want != mask {
            return Err(Error::DeviceGone {
                device: device.to_string(),
            });
        }
        if start.elapsed() >= timeout {
            return Err(Error::RegisterTimeout {
                device: device.to_string(),
                register: what,
                expect: format!("& {mask:#x} == {want:#x}"),
                timeout_ms: timeout.as_millis() as u64,
                last: v,
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// A memory-mapped device BAR.
///
/// Holds whatever keeps the mapping alive (the VFIO device and its mmap) so the pointer stays valid
/// for the lifetime of the region.
pub struct MmioRegion {
    base: NonNull<u32>,
    len: usize,
    name: String,
    _owner: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the region is a pointer into device memory that stays mapped while `_owner` lives; all
// accesses are single volatile 32-bit loads and stores, which are atomic with respect to the device
// and to other threads, so sharing or moving the handle between threads cannot cause a data race.
unsafe impl Send for MmioRegion {}
// SAFETY: see `Send`: every access through `&self` is a volatile 32-bit access.
unsafe impl Sync for MmioRegion {}

impl MmioRegion {
    /// Wraps a mapped register window.
    ///
    /// `base` must point to `len` bytes of device memory (or memory that behaves like it), aligned
    /// to 4 bytes, mapped for reading and writing, and it must stay mapped for as long as `owner`
    /// is alive. No Rust reference to that memory may exist.
    ///
    /// # Safety
    /// As above: a live, aligned, read-write mapping owned by `owner`.
    pub unsafe fn from_raw(
        base: NonNull<u8>,
        len: usize,
        name: impl Into<String>,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> Self {
        assert_eq!(
            base.as_ptr() as usize % 4,
            0,
            "MMIO base must be 4-byte aligned"
        );
        MmioRegion {
            base: base.cast(),
            len,
            name: name.into(),
            _owner: owner,
        }
    }

    /// Name of the region for messages (e.g. "0000:01:00.0 BAR0").
    pub fn name(&self) -> &str {
        &self.name
    }

    #[inline(always)]
    fn check(&self, offset: usize) {
        self.check_width(offset, 4)
    }

    /// Keeps a `width`-byte access aligned and inside the mapping.
    #[inline(always)]
    fn check_width(&self, offset: usize, width: usize) {
        assert!(
            // checked: `offset + width` must not wrap around to pass the bound in release builds
            offset % width == 0 && offset.checked_add(width).is_some_and(|end| end <= self.len),
            "{}: {width}-byte register offset {offset:#x} outside the {:#x}-byte BAR (or unaligned)",
            self.name,
            self.len
        );
    }

    /// The address of a `width`-byte access at `offset`, checked (by `check_width`) to be
    /// aligned and inside the mapping.
    fn narrow(&self, offset: usize, width: usize) -> *mut u8 {
        self.check_width(offset, width);
        // SAFETY: `offset + width <= len` (checked above), so the result stays inside the
        // mapping `base` points to.
        unsafe { self.base.cast::<u8>().as_ptr().add(offset) }
    }
}

impl Mmio for MmioRegion {
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        self.check(offset);
        // SAFETY: `check` keeps the 4-byte access inside the mapping and aligned; the mapping is
        // alive while `self._owner` is (contract of `from_raw`); volatile because it is device memory.
        unsafe { self.base.as_ptr().add(offset / 4).read_volatile() }
    }

    #[inline(always)]
    fn write32(&self, offset: usize, value: u32) {
        self.check(offset);
        // SAFETY: as in `read32`.
        unsafe { self.base.as_ptr().add(offset / 4).write_volatile(value) }
    }

    /// One bounds check for the block, then one volatile store per word, in order.
    #[inline(always)]
    fn write_block(&self, offset: usize, words: &[u32]) {
        assert!(
            // checked: the end must not wrap around to pass the bound in release builds
            offset % 4 == 0
                && (words.len().checked_mul(4))
                    .and_then(|bytes| offset.checked_add(bytes))
                    .is_some_and(|end| end <= self.len),
            "{}: a block of {} words at {offset:#x} outside the {:#x}-byte BAR (or unaligned)",
            self.name,
            words.len(),
            self.len
        );
        // SAFETY: the assertion keeps `offset` aligned and the block inside (or, empty, one past)
        // the mapping, alive while `self._owner` is (contract of `from_raw`); volatile: device
        // memory.
        let base = unsafe { self.base.as_ptr().add(offset / 4) };
        for (i, w) in words.iter().enumerate() {
            // SAFETY: word `i` of the checked block (above).
            unsafe { base.add(i).write_volatile(*w) }
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn read16(&self, offset: usize) -> u16 {
        // SAFETY: as in `read32`, for an aligned 2-byte access inside the mapping (`narrow`).
        unsafe { self.narrow(offset, 2).cast::<u16>().read_volatile() }
    }

    fn write16(&self, offset: usize, value: u16) {
        // SAFETY: as in `read16`.
        unsafe { self.narrow(offset, 2).cast::<u16>().write_volatile(value) }
    }

    fn read8(&self, offset: usize) -> u8 {
        // SAFETY: as in `read32`, for a 1-byte access inside the mapping (`narrow`).
        unsafe { self.narrow(offset, 1).read_volatile() }
    }

    fn write8(&self, offset: usize, value: u8) {
        // SAFETY: as in `read8`.
        unsafe { self.narrow(offset, 1).write_volatile(value) }
    }
}

/// One access seen by [`RecordingMmio`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A read of `offset` that returned `value`.
    Read {
        /// Byte offset.
        offset: usize,
        /// Value returned.
        value: u32,
    },
    /// A write of `value` to `offset`.
    Write {
        /// Byte offset.
        offset: usize,
        /// Value written.
        value: u32,
    },
}

/// A fake register file that records every access.
///
/// Registers are plain storage unless a test installs read hooks with [`RecordingMmio::on_read`]
/// (for example to make a self-clearing reset bit read back as 0). Host tests drive a driver
/// against it and then assert on [`RecordingMmio::log`].
pub struct RecordingMmio {
    inner: Mutex<RecInner>,
}

type ReadHook = Box<dyn FnMut(usize, u32) -> u32 + Send>;

struct RecInner {
    regs: Vec<u32>,
    log: Vec<Access>,
    hooks: Vec<(usize, ReadHook)>,
}

impl RecordingMmio {
    /// A register file of `len` bytes, all zero.
    pub fn new(len: usize) -> Self {
        RecordingMmio {
            inner: Mutex::new(RecInner {
                regs: vec![0; len.div_ceil(4)],
                log: Vec::new(),
                hooks: Vec::new(),
            }),
        }
    }

    /// Presets a register without recording an access.
    pub fn preset(&self, offset: usize, value: u32) {
        self.inner.lock().unwrap().regs[offset / 4] = value;
    }

    /// Current stored value of a register, without recording an access.
    pub fn peek(&self, offset: usize) -> u32 {
        self.inner.lock().unwrap().regs[offset / 4]
    }

    /// Installs a hook that computes what a read of `offset` returns from the stored value.
    pub fn on_read(&self, offset: usize, hook: impl FnMut(usize, u32) -> u32 + Send + 'static) {
        self.inner
            .lock()
            .unwrap()
            .hooks
            .push((offset, Box::new(hook)));
    }

    /// Every access so far, in order.
    pub fn log(&self) -> Vec<Access> {
        self.inner.lock().unwrap().log.clone()
    }

    /// Only the writes so far, as `(offset, value)`.
    pub fn writes(&self) -> Vec<(usize, u32)> {
        self.log()
            .into_iter()
            .filter_map(|a| match a {
                Access::Write { offset, value } => Some((offset, value)),
                Access::Read { .. } => None,
            })
            .collect()
    }

    /// Forgets the recorded accesses.
    pub fn clear_log(&self) {
        self.inner.lock().unwrap().log.clear();
    }
}

impl Mmio for RecordingMmio {
    fn read32(&self, offset: usize) -> u32 {
        let mut g = self.inner.lock().unwrap();
        let inner = &mut *g;
        let mut value = inner.regs[offset / 4];
        for (off, hook) in inner.hooks.iter_mut() {
            if *off == offset {
                value = hook(offset, value);
            }
        }
        inner.log.push(Access::Read { offset, value });
        value
    }

    fn write32(&self, offset: usize, value: u32) {
        let mut g = self.inner.lock().unwrap();
        g.regs[offset / 4] = value;
        g.log.push(Access::Write { offset, value });
    }

    fn len(&self) -> usize {
        self.inner.lock().unwrap().regs.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recording_fake_logs_in_order_and_stores() {
        let m = RecordingMmio::new(0x100);
        m.write32(0x10, 0xdead_beef);
        assert_eq!(m.read32(0x10), 0xdead_beef);
        m.doorbell(0x18, 7);
        assert_eq!(
            m.log(),
            vec![
                Access::Write {
                    offset: 0x10,
                    value: 0xdead_beef
                },
                Access::Read {
                    offset: 0x10,
                    value: 0xdead_beef
                },
                Access::Write {
                    offset: 0x18,
                    value: 7
                },
            ]
        );
        assert_eq!(m.writes(), vec![(0x10, 0xdead_beef), (0x18, 7)]);
        m.clear_log();
        assert!(m.log().is_empty());
    }

    #[test]
    fn read_hook_models_self_clearing_bit() {
        let m = RecordingMmio::new(0x100);
        m.on_read(0, |_, v| v & !(1 << 26));
        m.write32(0, 1 << 26 | 1);
        assert_eq!(m.read32(0), 1);
        assert_eq!(m.peek(0), 1 << 26 | 1);
    }

    #[test]
    fn wait_for_succeeds_times_out_and_detects_removal() {
        let m = RecordingMmio::new(0x100);
        m.preset(8, 0b10);
        assert_eq!(
            wait_for(
                &m,
                "t",
                Reg(8),
                "X.B1",
                0b10,
                0b10,
                Duration::from_millis(5)
            )
            .unwrap(),
            0b10
        );
        let e = wait_for(&m, "t", Reg(8), "X.B0", 0b1, 0b1, Duration::from_millis(5)).unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("X.B0") && text.contains("timed out"),
            "{text}"
        );
        m.preset(8, u32::MAX - 1);
        m.preset(12, u32::MAX);
        let e = wait_for(&m, "t", Reg(12), "X.B0", 0b1, 0, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, Error::DeviceGone { .. }), "{e}");
    }

    #[test]
    fn modify_sets_and_clears() {
        let m = RecordingMmio::new(0x100);
        m.preset(4, 0b1100);
        m.modify(Reg(4), 0b0100, 0b0001);
        assert_eq!(m.peek(4), 0b1001);
    }

    #[test]
    fn region_over_plain_memory_is_volatile_and_bounds_checked() {
        let mem: Arc<Mutex<Vec<u32>>> = Arc::new(Mutex::new(vec![0u32; 16]));
        let ptr = NonNull::new(mem.lock().unwrap().as_mut_ptr() as *mut u8).unwrap();
        // SAFETY: the Vec's buffer is 64 bytes, 4-aligned, and is kept alive by `mem`, which the
        // region owns; no reference to its elements is used while the region exists.
        let r = unsafe { MmioRegion::from_raw(ptr, 64, "test", mem.clone()) };
        r.write32(8, 42);
        assert_eq!(r.read32(8), 42);
        r.write_block(48, &[1, 2, 3, 4]);
        assert_eq!(
            [r.read32(48), r.read32(52), r.read32(56), r.read32(60)],
            [1, 2, 3, 4]
        );
        for (at, n) in [(52, 4), (50, 1), (usize::MAX - 3, 2)] {
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                r.write_block(at, &vec![9; n])
            }));
            assert!(res.is_err(), "a block of {n} at {at:#x}");
        }
        assert_eq!(r.read32(60), 4, "a refused block writes nothing");
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r.read32(64)));
        assert!(res.is_err());
        // An offset whose end wraps around is refused by the bound, not let through (release)
        // or caught by an overflow check (debug).
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            r.write32(usize::MAX - 3, 1)
        }));
        let msg = res.unwrap_err();
        let msg = msg
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        assert!(msg.contains("outside"), "{msg}");
    }
}
