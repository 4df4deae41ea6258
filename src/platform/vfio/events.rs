//! A device's fault notifications through VFIO: the error and request eventfds, PCIe error
//! reporting and the AER registers, and the function reset that recovery needs.
//!
//! Linux's vfio-pci (drivers/vfio/pci/vfio_pci_core.c) signals two eventfds its user may
//! register with `VFIO_DEVICE_SET_IRQS`:
//! - the error trigger (`VFIO_PCI_ERR_IRQ_INDEX`, `err_trigger`), from its AER callback
//!   `vfio_pci_core_aer_err_detected`, when the kernel's AER driver handles an uncorrectable
//!   error of the device. The kernel resets nothing for a non-fatal error (the callback answers
//!   `PCI_ERS_RESULT_CAN_RECOVER`): recovery is the user's;
//! - the request trigger (`VFIO_PCI_REQ_IRQ_INDEX`, `req_trigger`), from
//!   `vfio_pci_core_request`, when the kernel wants the device back (hot unplug, unbind). The
//!   removal waits until the user closes the device; meanwhile the request is signalled again
//!   every 10 s ("Relaying device request to user (#N)", printed for #0, #10, ...), or, with no
//!   trigger registered, the kernel warns once that it is "blocked until released by user".
//!
//! QEMU registers both for an assigned device (hw/vfio/pci.c `vfio_register_err_notifier`,
//! `vfio_register_req_notifier`: an error stops the VM, a request unplugs the device from the
//! guest), and so does DPDK's EAL for a port (the request notifier raises RTE_DEV_EVENT_REMOVE /
//! RTE_ETH_EVENT_INTR_RMV). [`DeviceEvents`] is the same for a driver of this crate.
//!
//! Two more things an error handler needs:
//! - Error reporting on. A function reports an uncorrectable error to the root port only with
//!   its Device Control enables set (PCIe 7.5.3.4 CERE, NFERE, FERE, URRE; Linux's
//!   `pci_enable_pcie_error_reporting`, `PCI_EXP_AER_FLAGS`, which igb's probe called until
//!   Linux 6.5 enabled it in the PCI core). vfio-pci passes these bits through, so
//!   [`VfioDevice::events`] sets them. QEMU forwards a message only with them set
//!   (hw/pci/pcie_aer.c `pcie_aer_msg_alldev`); seen here: Linux 6.1 left them clear on a
//!   vfio-pci function, and QEMU's injected errors never reached the kernel.
//! - The AER status registers (PCIe 7.8.4), which name the error: the kernel clears the
//!   uncorrectable ones after its own handling, and its counters in sysfs
//!   (`aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal`) keep the totals; correctable
//!   errors reach no eventfd at all (vfio-pci has no callback for them), so a driver polls
//!   [`DeviceEvents::take_aer`] to report them.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_PCI_ERR_IRQ_INDEX, VFIO_PCI_REQ_IRQ_INDEX,
};

use super::device::{Device, Inner};
use super::ioctl;
use crate::error::{Error, Result};
use crate::platform::irq::Interrupt;
use crate::platform::pci::{self, PciAddress, Sysfs};

/// The PCI Express capability id, and its Device Control register.
const PCI_CAP_ID_EXP: u8 = 0x10;
const PCI_EXP_DEVCTL: u64 = 0x08;
/// Device Control: correctable, non-fatal, fatal and unsupported-request reporting enables
/// (Linux `PCI_EXP_AER_FLAGS`).
const PCI_EXP_AER_FLAGS: u16 = 0x000f;
/// Extended capabilities start here; AER is extended capability 1.
const PCI_EXT_CAP_START: u64 = 0x100;
const PCI_EXT_CAP_ID_ERR: u16 = 0x0001;
/// AER registers, from the capability (PCIe 7.8.4).
const PCI_ERR_UNCOR_STATUS: u64 = 0x04;
const PCI_ERR_UNCOR_SEVER: u64 = 0x0c;
const PCI_ERR_COR_STATUS: u64 = 0x10;

/// Correctable error status bits and the names Linux gives them (drivers/pci/pcie/aer.c
/// `aer_correctable_error_string`, as in sysfs `aer_dev_correctable`).
pub const COR_NAMES: &[(u32, &str)] = &[
    (0, "RxErr"),
    (6, "BadTLP"),
    (7, "BadDLLP"),
    (8, "Rollover"),
    (12, "Timeout"),
    (13, "NonFatalErr"),
    (14, "CorrIntErr"),
    (15, "HeaderOF"),
];

/// Uncorrectable error status bits and their names (`aer_uncorrectable_error_string`).
pub const UNCOR_NAMES: &[(u32, &str)] = &[
    (4, "DLP"),
    (5, "SDES"),
    (12, "TLP"),
    (13, "FCP"),
    (14, "CmpltTO"),
    (15, "CmpltAbrt"),
    (16, "UnxCmplt"),
    (17, "RxOF"),
    (18, "MalfTLP"),
    (19, "ECRC"),
    (20, "UnsupReq"),
    (21, "ACSViol"),
    (22, "UncorrIntErr"),
    (23, "BlockedTLP"),
    (24, "AtomicOpBlocked"),
    (25, "TLPBlockedErr"),
];

/// The names of the bits set in `status`, from `table` ("bit N" for one without a name).
pub fn bit_names(status: u32, table: &[(u32, &str)]) -> Vec<String> {
    (0..32)
        .filter(|b| status & (1 << b) != 0)
        .map(|b| match table.iter().find(|(n, _)| *n == b) {
            Some((_, name)) => name.to_string(),
            None => format!("bit {b}"),
        })
        .collect()
}

/// The AER status registers of a function, as read (and then cleared) by
/// [`DeviceEvents::take_aer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AerStatus {
    /// Correctable Error Status.
    pub correctable: u32,
    /// Uncorrectable Error Status.
    pub uncorrectable: u32,
    /// Uncorrectable Error Severity: a set bit makes that error fatal.
    pub severity: u32,
}

impl AerStatus {
    /// Whether any error bit is set.
    pub fn any(&self) -> bool {
        self.correctable != 0 || self.uncorrectable != 0
    }
}

/// What [`DeviceEvents::wait`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Signals {
    /// The caller's stop eventfd.
    pub stop: bool,
    /// The kernel asked for the device back.
    pub request: bool,
    /// The kernel's AER driver reported an uncorrectable error of the device.
    pub error: bool,
}

/// A device's error and request notifications, routed to eventfds until this is dropped; and
/// what an error handler does to the device (stop its DMA, read its AER registers, reset it).
///
/// It holds the device open: a driver drops it with the port, so that a removal can complete.
pub struct DeviceEvents {
    device: Arc<Inner>,
    request: Option<Interrupt>,
    error: Option<Interrupt>,
    /// Offset of the PCI Express capability and of the AER extended capability.
    pcie: Option<u64>,
    aer: Option<u64>,
}

impl std::fmt::Debug for DeviceEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceEvents")
            .field("addr", &self.device.addr.to_string())
            .field("request", &self.request.is_some())
            .field("error", &self.error.is_some())
            .field("aer", &self.aer)
            .finish()
    }
}

impl Device {
    /// Routes the device's request and error notifications to eventfds (where VFIO offers
    /// them: the error one only for a PCI Express function) and turns its PCIe error reporting
    /// on, until the returned object is dropped.
    pub fn events(&self) -> Result<DeviceEvents> {
        let inner = self.inner.clone();
        let addr = inner.addr;
        let route = |index: u32, what: &'static str| -> Result<Option<Interrupt>> {
            let info = ioctl::device_get_irq_info(inner.fd.as_fd(), index)
                .map_err(|e| vfio_err("VFIO_DEVICE_GET_IRQ_INFO (error/request)", addr, e))?;
            if info.count == 0 || info.flags & VFIO_IRQ_INFO_EVENTFD == 0 {
                tracing::debug!(%addr, what, "VFIO offers no such notification for this device");
                return Ok(None);
            }
            let irq = Interrupt::new(0)?;
            ioctl::device_set_irq_eventfds(inner.fd.as_fd(), index, &[irq.as_fd()])
                .map_err(|e| vfio_err("VFIO_DEVICE_SET_IRQS (error/request eventfd)", addr, e))?;
            Ok(Some(irq))
        };
        let mut ev = DeviceEvents {
            device: inner.clone(),
            request: None,
            error: None,
            pcie: None,
            aer: None,
        };
        // Routed one by one, so that a failure leaves `ev` to undo what was done.
        ev.request = route(VFIO_PCI_REQ_IRQ_INDEX, "device request")?;
        ev.error = route(VFIO_PCI_ERR_IRQ_INDEX, "error")?;
        ev.pcie = find_cap(self, PCI_CAP_ID_EXP)?;
        ev.aer = find_ext_cap(self, PCI_EXT_CAP_ID_ERR)?;
        if let Some(cap) = ev.pcie {
            let ctl = self.config_read_u16(cap + PCI_EXP_DEVCTL)?;
            if ctl & PCI_EXP_AER_FLAGS != PCI_EXP_AER_FLAGS {
                self.config_write_u16(cap + PCI_EXP_DEVCTL, ctl | PCI_EXP_AER_FLAGS)?;
            }
            tracing::debug!(%addr, cap = format_args!("{cap:#x}"), before = format_args!("{ctl:#06x}"), after = format_args!("{:#06x}", self.config_read_u16(cap + PCI_EXP_DEVCTL)?), "PCIe Device Control: error reporting on");
        }
        tracing::info!(
            %addr,
            request = ev.request.is_some(),
            error = ev.error.is_some(),
            aer = ev.aer.is_some(),
            "device notifications routed (hot unplug, PCIe errors)"
        );
        Ok(ev)
    }
}

impl DeviceEvents {
    /// The device's address.
    pub fn addr(&self) -> PciAddress {
        self.device.addr
    }

    /// Whether the kernel's removal requests reach us (else a removal waits until the
    /// process closes the device).
    pub fn has_request(&self) -> bool {
        self.request.is_some()
    }

    /// Whether uncorrectable errors reach us.
    pub fn has_error(&self) -> bool {
        self.error.is_some()
    }

    /// Sleeps until `stop`, a request or an error is signalled, or `timeout` passes; says which
    /// (each signalled eventfd's count is cleared).
    pub fn wait(&self, stop: &Interrupt, timeout: Duration) -> Result<Signals> {
        let deadline = Instant::now() + timeout;
        loop {
            let s = Signals {
                stop: stop.take()? > 0,
                request: take(&self.request)?,
                error: take(&self.error)?,
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if s != Signals::default() || left.is_zero() {
                return Ok(s);
            }
            let mut fds = vec![PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
            for irq in [&self.request, &self.error].into_iter().flatten() {
                fds.push(PollFd::new(irq.as_fd(), PollFlags::POLLIN));
            }
            let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
            match poll(
                &mut fds,
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX),
            ) {
                Ok(_) | Err(Errno::EINTR) => {}
                Err(e) => {
                    return Err(Error::io(
                        format!(
                            "{}: waiting for the device's request and error eventfds (poll)",
                            self.device.addr
                        ),
                        e.into(),
                    ))
                }
            }
        }
    }

    /// The kernel asked for the device back: stops its DMA at once (clears Bus Master Enable:
    /// the device may be gone any moment, and nothing it does may reach memory from now on),
    /// and marks it so that its group leaves the container when its last handle closes
    /// (`Drop` of the device), which the kernel waits for.
    pub fn removal_requested(&self) -> Result<()> {
        self.device
            .removed
            .store(true, std::sync::atomic::Ordering::Release);
        device(&self.device).disable_bus_master()
    }

    /// Resets the function through VFIO (`VFIO_DEVICE_RESET`: a function-level reset, with
    /// the kernel saving and restoring the config space around it, bus mastering and MSI-X
    /// included). Retries while the kernel is busy with the device (its AER handling holds the
    /// device lock, and `pci_try_reset_function` then answers EAGAIN), until `timeout`.
    /// Returns false when VFIO cannot reset this device.
    pub fn reset(&self, timeout: Duration) -> Result<bool> {
        let dev = device(&self.device);
        if !dev.can_reset() {
            return Ok(false);
        }
        let deadline = Instant::now() + timeout;
        loop {
            match ioctl::device_reset(self.device.fd.as_fd()) {
                Ok(()) => return Ok(true),
                Err(Errno::EAGAIN | Errno::EBUSY) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(vfio_err("VFIO_DEVICE_RESET", self.device.addr, e)),
            }
        }
    }

    /// Reads the AER status registers and clears the correctable bits read (write-one-to-clear;
    /// the uncorrectable ones are the kernel's AER driver's to read and clear, see
    /// [`DeviceEvents::clear_uncorrectable`]); `None` when the function has no AER capability.
    pub fn take_aer(&self) -> Result<Option<AerStatus>> {
        let Some(cap) = self.aer else {
            return Ok(None);
        };
        let dev = device(&self.device);
        let s = AerStatus {
            correctable: dev.config_read_u32(cap + PCI_ERR_COR_STATUS)?,
            uncorrectable: dev.config_read_u32(cap + PCI_ERR_UNCOR_STATUS)?,
            severity: dev.config_read_u32(cap + PCI_ERR_UNCOR_SEVER)?,
        };
        if s.correctable != 0 {
            dev.config_write_u32(cap + PCI_ERR_COR_STATUS, s.correctable)?;
        }
        Ok(Some(s))
    }

    /// Clears uncorrectable status bits (for a driver that handled the error itself, no
    /// kernel AER driver having seen it).
    pub fn clear_uncorrectable(&self, bits: u32) -> Result<()> {
        match self.aer {
            Some(cap) if bits != 0 => {
                device(&self.device).config_write_u32(cap + PCI_ERR_UNCOR_STATUS, bits)
            }
            _ => Ok(()),
        }
    }

    /// The kernel's AER counters of the device and of the port above it (sysfs
    /// `aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal`: one "Name count" line per
    /// error; the port's names end in `@` and its address), all three lists in that order;
    /// empty where the kernel keeps none (no AER driver, or an older kernel). The port counts
    /// errors it detected on the link to the device (a completion timeout, say), which Linux
    /// reports to every driver below the port (drivers/pci/pcie/err.c `pcie_do_recovery`).
    pub fn kernel_aer_counters(&self, sysfs: &Sysfs) -> [Vec<(String, u64)>; 3] {
        let dir = sysfs.device_dir(self.device.addr);
        // The device's directory sits in its upstream port's (/sys/devices/pci0000:00/...).
        let port = std::fs::canonicalize(&dir)
            .ok()
            .and_then(|d| d.parent().map(|p| p.to_path_buf()));
        let port_name = port
            .as_ref()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        ["aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal"].map(|f| {
            let mut all = std::fs::read_to_string(dir.join(f))
                .map(|t| parse_counters(&t))
                .unwrap_or_default();
            if let Some(p) = &port {
                if let Ok(t) = std::fs::read_to_string(p.join(f)) {
                    all.extend(
                        parse_counters(&t)
                            .into_iter()
                            .map(|(n, v)| (format!("{n}@{port_name}"), v)),
                    );
                }
            }
            all
        })
    }
}

impl Drop for DeviceEvents {
    fn drop(&mut self) {
        for (index, irq) in [
            (VFIO_PCI_REQ_IRQ_INDEX, &self.request),
            (VFIO_PCI_ERR_IRQ_INDEX, &self.error),
        ] {
            if irq.is_some() {
                if let Err(e) = ioctl::device_disable_irqs(self.device.fd.as_fd(), index) {
                    tracing::warn!(addr = %self.device.addr, index, "taking the request/error eventfd down (VFIO_DEVICE_SET_IRQS) failed: {e}");
                }
            }
        }
    }
}

/// "Name count" lines (the AER counter files' format) as pairs; other lines are skipped.
pub fn parse_counters(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (name, n) = (w.next()?, w.next()?.parse().ok()?);
            Some((name.to_string(), n))
        })
        .collect()
}

/// The counters that grew from `before` to `after` ("CmpltTO +1"), the totals left out.
pub fn counter_growth(before: &[(String, u64)], after: &[(String, u64)]) -> Vec<String> {
    after
        .iter()
        .filter(|(n, _)| !n.starts_with("TOTAL"))
        .filter_map(|(n, v)| {
            let old = before.iter().find(|(b, _)| b == n).map_or(0, |&(_, v)| v);
            (*v > old).then(|| format!("{n} +{}", v - old))
        })
        .collect()
}

fn take(irq: &Option<Interrupt>) -> Result<bool> {
    Ok(match irq {
        Some(i) => i.take()? > 0,
        None => false,
    })
}

/// A handle on the same open device (no new open; the claim and fd are shared).
fn device(inner: &Arc<Inner>) -> Device {
    Device {
        inner: inner.clone(),
    }
}

fn vfio_err(what: &'static str, addr: PciAddress, e: Errno) -> Error {
    Error::Vfio {
        what,
        target: addr.to_string(),
        source: e.into(),
    }
}

/// Offset of standard capability `id` (the first in the list: [`pci::capabilities`]).
fn find_cap(dev: &Device, id: u8) -> Result<Option<u64>> {
    let caps = pci::capabilities(|at| dev.config_read_u16(at))?;
    Ok(caps.into_iter().find(|&(_, i)| i == id).map(|(at, _)| at))
}

/// Offset of extended capability `id` (PCIe 7.6.3: 16-bit id, 4-bit version, 12-bit next).
fn find_ext_cap(dev: &Device, id: u16) -> Result<Option<u64>> {
    let mut at = PCI_EXT_CAP_START;
    for _ in 0..480 {
        // A conventional PCI function's config space ends at 0x100: no extended capabilities.
        let Ok(hdr) = dev.config_read_u32(at) else {
            return Ok(None);
        };
        if hdr == 0 || hdr == u32::MAX {
            return Ok(None);
        }
        if hdr as u16 == id {
            return Ok(Some(at));
        }
        at = u64::from(hdr >> 20) & !3;
        if at < PCI_EXT_CAP_START {
            return Ok(None);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bits_are_named_as_linux_names_them() {
        assert_eq!(bit_names(1 << 14, UNCOR_NAMES), ["CmpltTO"]);
        assert_eq!(bit_names(1 | 1 << 6, COR_NAMES), ["RxErr", "BadTLP"]);
        assert_eq!(bit_names(1 << 30, COR_NAMES), ["bit 30"]);
        assert!(bit_names(0, COR_NAMES).is_empty());
    }

    #[test]
    fn kernel_counters_parse_and_their_growth_is_named() {
        let before = parse_counters("RxErr 0\nBadTLP 2\nTOTAL_ERR_COR 2\n");
        let after = parse_counters("RxErr 1\nBadTLP 2\nTOTAL_ERR_COR 3\nnot a line\n");
        assert_eq!(after.len(), 3);
        assert_eq!(counter_growth(&before, &after), ["RxErr +1"]);
        assert!(counter_growth(&after, &after).is_empty());
    }
}
