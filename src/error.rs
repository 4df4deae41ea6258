//! One error type for the whole crate.
//!
//! A driver error is read by someone at a console who has to act on it, so every message says what
//! went wrong *and* what to do next ("bound to igb; bind it to vfio-pci with ..."). Variants carry
//! the data a program needs to react (the PCI address, the register name) so that callers can
//! match instead of parsing text.

use std::path::PathBuf;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while opening, programming or running a port.
///
/// Variant fields are not documented one by one: each variant's message says what they hold.
#[allow(missing_docs)]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A port name that is neither a PCI address nor an in-memory device name.
    #[error(
        "'{input}' is not a port name: {reason}; use a PCI address such as 0000:01:00.0 (or 01:00.0 for domain 0), an in-memory port such as null:0 or sim:0, or a Linux interface as afp:IFNAME"
    )]
    BadPortName { input: String, reason: String },

    /// No such PCI device in sysfs.
    #[error("{addr}: no such PCI device (no {path}); list NICs with `lspci -D -d 8086:` or `vfio-nic list`")]
    NoSuchDevice { addr: String, path: PathBuf },

    /// The device is bound to a kernel driver other than vfio-pci (or to none).
    #[error(
        "{addr} is {bound}; bind it to vfio-pci with: echo vfio-pci > /sys/bus/pci/devices/{addr}/driver_override && {unbind}echo {addr} > /sys/bus/pci/drivers_probe"
    )]
    NotBoundToVfio {
        addr: String,
        /// "bound to igb" or "not bound to any driver".
        bound: String,
        /// The unbind command with its trailing "&& ", or empty when no driver is bound.
        unbind: String,
    },

    /// The device has no IOMMU group: the IOMMU is off or absent.
    #[error(
        "{addr} has no IOMMU group ({path} is missing): enable the IOMMU (intel_iommu=on or amd_iommu=on on the kernel command line, VT-d/AMD-Vi in the firmware) and reboot"
    )]
    NoIommuGroup { addr: String, path: PathBuf },

    /// The IOMMU group holds devices that are not bound to vfio-pci (or unbound).
    #[error(
        "IOMMU group {group} of {addr} is not viable: every other device in it must be bound to vfio-pci, pci-stub, pcieport or to no driver, but {others}; bind them to vfio-pci too (echo vfio-pci > /sys/bus/pci/devices/<addr>/driver_override, then unbind and reprobe), or unbind them (echo <addr> > /sys/bus/pci/devices/<addr>/driver/unbind)"
    )]
    GroupNotViable {
        addr: String,
        group: u32,
        others: String,
    },

    /// `/dev/vfio/vfio` is missing.
    #[error("{path} does not exist: load the VFIO modules with `modprobe vfio-pci` (and enable the IOMMU)")]
    NoVfio { path: PathBuf },

    /// Opening a VFIO node was refused.
    #[error("permission denied opening {path}: run as root, or give your user access with `chown $USER {path}` (and raise `ulimit -l` for DMA memory)")]
    PermissionDenied { path: PathBuf },

    /// The IOMMU group is open elsewhere (VFIO lets only one process open a group).
    #[error(
        "IOMMU group {group} ({path}) is already in use, probably by another process (a VM or another vfio-nic); stop that process (find it with `fuser -v {path}`) and retry"
    )]
    GroupBusy {
        /// The group number.
        group: u32,
        /// The group node, `/dev/vfio/<group>`.
        path: PathBuf,
    },

    /// The device is already open in this process.
    #[error(
        "{addr} is already open in this process; drop the first handle before opening it again"
    )]
    AlreadyOpen { addr: String },

    /// A VFIO ioctl or mmap failed.
    #[error("{what} failed for {target}: {source}")]
    Vfio {
        what: &'static str,
        target: String,
        #[source]
        source: std::io::Error,
    },

    /// Any other I/O error, with the path or object it concerns.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// DMA memory could not be allocated or mapped.
    #[error("cannot allocate {bytes} bytes of DMA memory: {reason}")]
    DmaAlloc { bytes: usize, reason: String },

    /// The IOMMU mapping of DMA memory could not be removed, so the device may still reach it.
    #[error("cannot unmap {len} bytes of DMA memory at IOVA {iova:#x}: {reason}; the memory is kept (leaked) because the device may still reach it; check `dmesg` for IOMMU errors and reset or unbind the device")]
    DmaUnmap {
        iova: u64,
        len: usize,
        reason: String,
    },

    /// The IOVA space is exhausted.
    #[error("IOVA space exhausted: no free range of {bytes} bytes aligned to {align} in the usable IOVA windows ({windows}, the IOMMU's reported ranges less what is in use); free DMA memory or use fewer/smaller pools")]
    IovaExhausted {
        bytes: u64,
        align: u64,
        windows: String,
    },

    /// A register poll did not see the expected value in time.
    #[error("{device}: timed out after {timeout_ms} ms waiting for {register} {expect}; last value {last:#010x}")]
    RegisterTimeout {
        device: String,
        register: &'static str,
        expect: String,
        timeout_ms: u64,
        last: u32,
    },

    /// The device stopped answering (all-ones reads, as after surprise removal).
    #[error("{device}: device is not answering (register reads return 0xffffffff); it was removed or reset behind our back; reopen it")]
    DeviceGone { device: String },

    /// The kernel asked for the device back (hot unplug: VFIO's device request); its DMA is
    /// stopped.
    #[error("{device}: the device is being removed (hot unplug): its DMA is stopped; drop the port and its queues so that the kernel can finish the removal")]
    DeviceRemoved { device: String },

    /// Pinning DMA memory would pass the process's locked-memory limit (VFIO charges every
    /// mapped page to RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK).
    #[error("cannot map {bytes} bytes of DMA memory for the device: VFIO pins it and charges it to the locked-memory limit, which is {limit} bytes ({locked} already locked by this process); raise the limit to at least {needed} bytes ({needed_kib} KiB): `ulimit -l {needed_kib}` in the shell that starts the program, `LimitMEMLOCK={needed}` in its systemd unit, or a `memlock` line in /etc/security/limits.conf; root (CAP_IPC_LOCK) has no such limit")]
    MemlockLimit {
        bytes: u64,
        limit: u64,
        locked: u64,
        needed: u64,
        needed_kib: u64,
    },

    /// A device with an id this crate does not drive.
    #[error("{addr}: PCI id {vendor:04x}:{device:04x} is not supported by vfio-nic; supported: {supported}")]
    UnsupportedDevice {
        addr: String,
        vendor: u16,
        device: u16,
        supported: String,
    },

    /// A configuration the device cannot do.
    #[error("{device}: {what} is not supported: {why}")]
    NotSupported {
        device: String,
        what: String,
        why: String,
    },

    /// A burst failed.
    #[error(transparent)]
    Queue(#[from] QueueError),

    /// A VLAN ID of 4095 where a usable VID is needed (filter entry, transmit tag).
    #[error("VLAN ID 4095 cannot be used {what}: IEEE 802.1Q reserves it; use a VID from 1 to 4094 (or 0 for a priority tag only)")]
    ReservedVlanId { what: &'static str },

    /// No network interface of that name in this network namespace.
    #[error(
        "no network interface '{name}' here (this network namespace): list them with `ip link`"
    )]
    NoSuchInterface { name: String },

    /// The interface exists but is down.
    #[error("interface {name} is down: bring it up with `ip link set {name} up`")]
    InterfaceDown { name: String },

    /// The kernel refused an operation for want of privilege.
    #[error("{what}: not permitted; packet sockets need CAP_NET_RAW: run as root, or give the program the capability with `setcap cap_net_raw+ep PROGRAM`")]
    NotPermitted { what: String },

    /// The kernel refused the memory of a packet socket's rings.
    #[error("the kernel refused {bytes} bytes of packet ring memory ({reason}): use fewer ring frames (`afp:IFNAME,frames=N`) or raise the locked-memory limit (`ulimit -l`)")]
    RingRefused { bytes: usize, reason: String },

    /// A stage of a pipeline waited too long for the other (which failed, or is starved).
    #[error("{stage}: waited {waited_ms} ms for {what}; the other stage failed or stopped (see its error), or the machine is too loaded to run both")]
    Stalled {
        stage: &'static str,
        what: &'static str,
        waited_ms: u64,
    },

    /// A management-complex command (DPAA2-like devices) came back with an error status.
    #[error(
        "{device}: management command {command} failed with status {status} ({code:#x}): {hint}"
    )]
    McCommand {
        device: String,
        command: &'static str,
        status: &'static str,
        code: u8,
        hint: &'static str,
    },

    /// A device broke its own protocol at bring-up (a portal not clean, a reply that makes no
    /// sense): what it did, and what to check.
    #[error("{device}: {what}")]
    DeviceState { device: String, what: String },

    /// The device could be opened only through VFIO's no-IOMMU mode, and this process did not
    /// allow it (issue 38: the mode is opt-in twice, in the kernel and here).
    #[error(
        "{addr} can only be opened in VFIO no-IOMMU mode (no IOMMU translates its DMA: the device can read and write ALL memory), and this process did not allow it; allow it with --allow-noiommu (PortConfig::vfio.allow_noiommu, VFIO_NIC_ALLOW_NOIOMMU=1 for the hwtests) if this machine has no IOMMU and you accept that"
    )]
    NoIommuNotAllowed { addr: String },

    /// No-IOMMU mode was asked for, but the kernel's own switch is off (or missing).
    #[error(
        "{addr}: the kernel's VFIO no-IOMMU mode is off ({why}); turn it on with `echo 1 > /sys/module/vfio/parameters/enable_unsafe_noiommu_mode` (or vfio.enable_unsafe_noiommu_mode=1 on the kernel command line; needs a kernel with CONFIG_VFIO_NOIOMMU), then rebind the device to vfio-pci"
    )]
    NoIommuNotEnabled { addr: String, why: String },

    /// Opening `/dev/iommu` was refused.
    #[error("permission denied opening {path}: the iommufd backend needs it read-write; run as root, give your user access (`chown $USER {path}` and the device's /dev/vfio/devices/vfioN), or choose --vfio-backend type1")]
    IommufdNotPermitted { path: PathBuf },

    /// The iommufd backend was asked for a device that has no VFIO cdev.
    #[error("{addr} has no VFIO device cdev ({why}); it needs a kernel with CONFIG_VFIO_DEVICE_CDEV and CONFIG_IOMMUFD (Linux 6.6 or later) and the device bound to vfio-pci; or choose --vfio-backend type1")]
    NoVfioCdev { addr: String, why: String },

    /// No DMA backend can open the device: each one's reason.
    #[error("{addr}: no VFIO DMA backend can open it: {reasons}")]
    NoDmaBackend { addr: String, reasons: String },

    /// The process's DMA domain already uses another backend (one per process: a buffer has
    /// one bus address for every port).
    #[error("{addr} would need the {wanted} backend, but this process's ports already use {live} (one DMA backend per process, so that every buffer has one bus address for all ports); close them first, or open this device with --vfio-backend {live}")]
    DmaBackendMismatch {
        addr: String,
        wanted: &'static str,
        live: &'static str,
    },

    /// `/proc/self/pagemap` does not give physical addresses (no-IOMMU DMA needs them).
    #[error("cannot read physical addresses from /proc/self/pagemap ({why}): no-IOMMU DMA needs them; run as root (the page frame numbers need CAP_SYS_ADMIN)")]
    PagemapUnreadable { why: String },

    /// No-IOMMU DMA memory needs huge pages (or allocations that fit in one page).
    #[error("no-IOMMU DMA memory of {bytes} bytes needs {pages} physically contiguous 2 MiB huge page(s) ({why}): a device without an IOMMU sees physical addresses, and only a huge page is contiguous; reserve some with `echo 512 > /proc/sys/vm/nr_hugepages` (hugepages=N on the kernel command line keeps them contiguous)")]
    HugePagesMissing {
        bytes: usize,
        pages: usize,
        why: String,
    },

    /// A configuration value out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// A run stopped by its `stop` flag (Ctrl-C in the tool) before its end: what it did so far
    /// is reported with it (the bench's rows measured).
    #[error("{0}: interrupted (Ctrl-C) before the end")]
    Interrupted(String),
}

impl Error {
    /// An [`Error::Io`] with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// Why a burst failed. Small and `Copy`, so the hot path returns it in registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The device stopped answering (all-ones register reads).
    #[error("device is not answering (register reads return 0xffffffff); reopen the port")]
    DeviceGone,
    /// The kernel asked for the device back (hot unplug, VFIO's device request): the driver
    /// stopped its DMA. Drop the queue and its port so that the removal can complete.
    #[error("device removed (hot unplug): its DMA is stopped; drop this queue and its port so that the kernel can finish the removal")]
    DeviceRemoved,
    /// The device broke the queue's protocol (what it did is the payload). Nothing was
    /// handed out twice; the queue refuses further bursts, and the log says what was seen.
    #[error("device broke the queue protocol ({0}); nothing was handed out twice; the queue is stopped: reopen the port (the open resets the device)")]
    ProtocolViolation(Violation),
}

/// How a device broke a queue's protocol. One byte, so that a burst's `Result` stays two
/// words, returned in registers (a `&str` here cost the 82599's forwarding path about one
/// instruction per packet, bench/instructions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// A completion names a descriptor the device does not hold (never given to it, or
    /// already returned).
    #[error("a used entry names a descriptor the device does not hold")]
    NotHeld,
    /// The device's completion index moved past what was given to it.
    #[error("the used index jumped past what was posted")]
    IndexJumped,
}
