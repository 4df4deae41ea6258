//! iommufd (`/dev/iommu`) and the VFIO device cdev (`/dev/vfio/devices/vfioN`): Linux's
//! successor of the type1 container (kernel 6.6 and later with CONFIG_IOMMUFD and
//! CONFIG_VFIO_DEVICE_CDEV).
//!
//! The model differs from the container's in who owns what: an IOAS (I/O address space) is an
//! object inside the iommufd, made with `IOMMU_IOAS_ALLOC`, mapped with `IOMMU_IOAS_MAP` /
//! `IOMMU_IOAS_UNMAP`; a device is opened through its own cdev (no group fd), bound to the
//! iommufd (`VFIO_DEVICE_BIND_IOMMUFD`) and attached to the IOAS
//! (`VFIO_DEVICE_ATTACH_IOMMUFD_PT`). Several devices attach to one IOAS, which is how this
//! process keeps one bus address per buffer for all its ports. The IOVA windows come from
//! `IOMMU_IOAS_IOVA_RANGES`, which (like type1's capability chain) narrows with every device
//! attached, so it is asked again after each attach.
//!
//! vfio-bindings 0.6 has the two VFIO structs (`vfio_device_bind_iommufd`,
//! `vfio_device_attach_iommufd_pt`) but nothing of include/uapi/linux/iommufd.h, so the four
//! iommufd structs are declared here, field for field from that header (Linux 6.12), with their
//! sizes checked by tests. rust-vmm's vfio-ioctls and cloud-hypervisor drive the same ioctls;
//! this is our own, smaller, code for the same sequence.

use std::fs::File;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;
use vfio_bindings::bindings::vfio::{
    vfio_device_attach_iommufd_pt, vfio_device_bind_iommufd, VFIO_BASE, VFIO_TYPE,
};

/// The iommufd character device.
pub const IOMMU_PATH: &str = "/dev/iommu";
/// Directory of the VFIO device cdevs.
pub const CDEV_DIR: &str = "/dev/vfio/devices";

/// `IOMMUFD_TYPE` (include/uapi/linux/iommufd.h): the same ';' as VFIO's.
const IOMMUFD_TYPE: u8 = b';';
/// `IOMMUFD_CMD_BASE`.
const IOMMUFD_CMD_BASE: u32 = 0x80;
/// `IOMMUFD_CMD_IOAS_ALLOC`, `_IOAS_IOVA_RANGES`, `_IOAS_MAP`, `_IOAS_UNMAP`.
const CMD_IOAS_ALLOC: u32 = IOMMUFD_CMD_BASE + 1;
const CMD_IOAS_IOVA_RANGES: u32 = IOMMUFD_CMD_BASE + 4;
const CMD_IOAS_MAP: u32 = IOMMUFD_CMD_BASE + 5;
const CMD_IOAS_UNMAP: u32 = IOMMUFD_CMD_BASE + 6;

/// `enum iommufd_ioas_map_flags`.
const IOMMU_IOAS_MAP_FIXED_IOVA: u32 = 1 << 0;
const IOMMU_IOAS_MAP_WRITEABLE: u32 = 1 << 1;
const IOMMU_IOAS_MAP_READABLE: u32 = 1 << 2;

/// `struct iommu_ioas_alloc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IommuIoasAlloc {
    size: u32,
    flags: u32,
    out_ioas_id: u32,
}

/// `struct iommu_iova_range` (inclusive `last`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct IommuIovaRange {
    start: u64,
    last: u64,
}

/// `struct iommu_ioas_iova_ranges`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IommuIoasIovaRanges {
    size: u32,
    ioas_id: u32,
    num_iovas: u32,
    reserved: u32,
    allowed_iovas: u64,
    out_iova_alignment: u64,
}

/// `struct iommu_ioas_map`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IommuIoasMap {
    size: u32,
    flags: u32,
    ioas_id: u32,
    reserved: u32,
    user_va: u64,
    length: u64,
    iova: u64,
}

/// `struct iommu_ioas_unmap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IommuIoasUnmap {
    size: u32,
    ioas_id: u32,
    iova: u64,
    length: u64,
}

mod raw {
    use super::*;
    use nix::request_code_none;

    nix::ioctl_readwrite_bad!(
        ioas_alloc,
        request_code_none!(IOMMUFD_TYPE, CMD_IOAS_ALLOC),
        IommuIoasAlloc
    );
    nix::ioctl_readwrite_bad!(
        ioas_iova_ranges,
        request_code_none!(IOMMUFD_TYPE, CMD_IOAS_IOVA_RANGES),
        IommuIoasIovaRanges
    );
    nix::ioctl_readwrite_bad!(
        ioas_map,
        request_code_none!(IOMMUFD_TYPE, CMD_IOAS_MAP),
        IommuIoasMap
    );
    nix::ioctl_readwrite_bad!(
        ioas_unmap,
        request_code_none!(IOMMUFD_TYPE, CMD_IOAS_UNMAP),
        IommuIoasUnmap
    );
    nix::ioctl_readwrite_bad!(
        device_bind_iommufd,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 18),
        vfio_device_bind_iommufd
    );
    nix::ioctl_readwrite_bad!(
        device_attach_iommufd_pt,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 19),
        vfio_device_attach_iommufd_pt
    );
}

fn size32<T>() -> u32 {
    u32::try_from(size_of::<T>()).expect("uapi structs are small")
}

/// `IOMMU_IOAS_ALLOC`: a new, empty I/O address space; its id.
pub(super) fn ioas_alloc(iommufd: BorrowedFd<'_>) -> nix::Result<u32> {
    let mut a = IommuIoasAlloc {
        size: size32::<IommuIoasAlloc>(),
        ..Default::default()
    };
    // SAFETY: `a` is a valid, writable struct whose `size` is its real size.
    unsafe { raw::ioas_alloc(iommufd.as_raw_fd(), &mut a) }?;
    Ok(a.out_ioas_id)
}

/// `IOMMU_IOAS_IOVA_RANGES`: the IOVA ranges (inclusive ends) mappings may use, and the
/// minimum IOVA alignment.
pub(super) fn ioas_iova_ranges(
    iommufd: BorrowedFd<'_>,
    ioas: u32,
) -> nix::Result<(Vec<(u64, u64)>, u64)> {
    let mut ranges = vec![IommuIovaRange::default(); 8];
    loop {
        let mut q = IommuIoasIovaRanges {
            size: size32::<IommuIoasIovaRanges>(),
            ioas_id: ioas,
            num_iovas: u32::try_from(ranges.len()).expect("a small array"),
            allowed_iovas: ranges.as_mut_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: `q` is valid; `allowed_iovas` points to `num_iovas` writable ranges that
        // outlive the call.
        match unsafe { raw::ioas_iova_ranges(iommufd.as_raw_fd(), &mut q) } {
            Ok(_) => {
                ranges.truncate(q.num_iovas as usize);
                let out = ranges.iter().map(|r| (r.start, r.last)).collect();
                return Ok((out, q.out_iova_alignment));
            }
            // The array was too small: the kernel said how many there are.
            Err(Errno::EMSGSIZE) if q.num_iovas as usize > ranges.len() => {
                ranges = vec![IommuIovaRange::default(); q.num_iovas as usize];
            }
            Err(e) => return Err(e),
        }
    }
}

/// `IOMMU_IOAS_MAP` at a fixed IOVA, readable and writable by the device.
///
/// # Safety
/// `vaddr..vaddr+len` must stay valid memory of this process until unmapped (the kernel pins
/// the pages; the device may write them at any time).
pub(super) unsafe fn ioas_map(
    iommufd: BorrowedFd<'_>,
    ioas: u32,
    vaddr: u64,
    iova: u64,
    len: u64,
) -> nix::Result<()> {
    let mut m = IommuIoasMap {
        size: size32::<IommuIoasMap>(),
        flags: IOMMU_IOAS_MAP_FIXED_IOVA | IOMMU_IOAS_MAP_WRITEABLE | IOMMU_IOAS_MAP_READABLE,
        ioas_id: ioas,
        user_va: vaddr,
        length: len,
        iova,
        ..Default::default()
    };
    // SAFETY: `m` is valid; the memory's lifetime is the caller's promise.
    unsafe { raw::ioas_map(iommufd.as_raw_fd(), &mut m) }?;
    Ok(())
}

/// `IOMMU_IOAS_UNMAP`: returns how many bytes were unmapped.
pub(super) fn ioas_unmap(
    iommufd: BorrowedFd<'_>,
    ioas: u32,
    iova: u64,
    len: u64,
) -> nix::Result<u64> {
    let mut u = IommuIoasUnmap {
        size: size32::<IommuIoasUnmap>(),
        ioas_id: ioas,
        iova,
        length: len,
    };
    // SAFETY: `u` is a valid, writable struct.
    unsafe { raw::ioas_unmap(iommufd.as_raw_fd(), &mut u) }?;
    Ok(u.length)
}

/// `VFIO_DEVICE_BIND_IOMMUFD`: binds an opened cdev to the iommufd; returns the device id.
pub(super) fn bind(device: &File, iommufd: BorrowedFd<'_>) -> nix::Result<u32> {
    let mut b = vfio_device_bind_iommufd {
        argsz: size32::<vfio_device_bind_iommufd>(),
        flags: 0,
        iommufd: iommufd.as_raw_fd(),
        out_devid: 0,
    };
    // SAFETY: `b` is a valid, writable struct whose `argsz` is its real size.
    unsafe { raw::device_bind_iommufd(device.as_raw_fd(), &mut b) }?;
    Ok(b.out_devid)
}

/// `VFIO_DEVICE_ATTACH_IOMMUFD_PT`: attaches a bound device to the IOAS `ioas`.
pub(super) fn attach(device: &File, ioas: u32) -> nix::Result<()> {
    let mut a = vfio_device_attach_iommufd_pt {
        argsz: size32::<vfio_device_attach_iommufd_pt>(),
        flags: 0,
        pt_id: ioas,
        pasid: 0,
    };
    // SAFETY: `a` is a valid, writable struct whose `argsz` is its real size (the trailing
    // `pasid` is zero, as kernels without PASID attach expect).
    unsafe { raw::device_attach_iommufd_pt(device.as_raw_fd(), &mut a) }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Sizes from include/uapi/linux/iommufd.h (every field u32 or __aligned_u64).
    #[test]
    fn structs_have_the_uapi_layout() {
        assert_eq!(size_of::<IommuIoasAlloc>(), 12);
        assert_eq!(size_of::<IommuIovaRange>(), 16);
        assert_eq!(size_of::<IommuIoasIovaRanges>(), 32);
        assert_eq!(size_of::<IommuIoasMap>(), 40);
        assert_eq!(size_of::<IommuIoasUnmap>(), 24);
        assert_eq!(std::mem::offset_of!(IommuIoasMap, user_va), 16);
        assert_eq!(std::mem::offset_of!(IommuIoasUnmap, iova), 8);
    }

    /// The numbers Linux's headers give (`_IO(';', 0x81)` and so on).
    #[test]
    fn request_codes_match_the_uapi() {
        assert_eq!(
            nix::request_code_none!(IOMMUFD_TYPE, CMD_IOAS_ALLOC),
            0x3b81
        );
        assert_eq!(
            nix::request_code_none!(IOMMUFD_TYPE, CMD_IOAS_IOVA_RANGES),
            0x3b84
        );
        assert_eq!(nix::request_code_none!(IOMMUFD_TYPE, CMD_IOAS_MAP), 0x3b85);
        assert_eq!(
            nix::request_code_none!(IOMMUFD_TYPE, CMD_IOAS_UNMAP),
            0x3b86
        );
        // VFIO_DEVICE_BIND_IOMMUFD = _IO(';', 100 + 18), ATTACH = + 19.
        assert_eq!(nix::request_code_none!(VFIO_TYPE, VFIO_BASE + 18), 0x3b76);
        assert_eq!(nix::request_code_none!(VFIO_TYPE, VFIO_BASE + 19), 0x3b77);
    }

    #[test]
    fn ioctls_on_a_plain_file_fail_cleanly() {
        let f = tempfile::tempfile().unwrap();
        assert!(ioas_alloc(f.as_fd()).is_err());
        assert!(ioas_iova_ranges(f.as_fd(), 1).is_err());
        assert!(ioas_unmap(f.as_fd(), 1, 0x10_0000, 4096).is_err());
        assert!(bind(&f, f.as_fd()).is_err());
        assert!(attach(&f, 1).is_err());
    }
}
