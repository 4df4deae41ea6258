//! The VFIO ioctls, declared once and wrapped in functions that take file descriptors and plain
//! values.
//!
//! Every VFIO ioctl number is `_IO(';', 100 + n)`: the UAPI encodes neither direction nor size in
//! the number, so nix's `*_bad!` macros are the right tool and the kernel learns how much of a
//! struct it may read or write from its `argsz` field, which every wrapper here sets. Keeping the
//! `unsafe` calls in this one file means the rest of the module only has to reason about lifetimes
//! (which fd outlives which), not about pointers.

use std::ffi::CStr;
use std::fs::File;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};

use nix::errno::Errno;
use nix::libc::{c_char, c_int};
use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_group_status, vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap,
    vfio_iommu_type1_info, vfio_irq_info, vfio_irq_set, vfio_region_info, VFIO_BASE,
    VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE, VFIO_IOMMU_INFO_CAPS,
    VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_TYPE,
};

mod raw {
    use super::*;
    use nix::request_code_none;

    nix::ioctl_none_bad!(get_api_version, request_code_none!(VFIO_TYPE, VFIO_BASE));
    nix::ioctl_write_int_bad!(
        check_extension,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 1)
    );
    nix::ioctl_write_int_bad!(set_iommu, request_code_none!(VFIO_TYPE, VFIO_BASE + 2));
    nix::ioctl_readwrite_bad!(
        group_get_status,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 3),
        vfio_group_status
    );
    nix::ioctl_write_ptr_bad!(
        group_set_container,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 4),
        c_int
    );
    nix::ioctl_write_ptr_bad!(
        group_get_device_fd,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 6),
        c_char
    );
    nix::ioctl_readwrite_bad!(
        device_get_info,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 7),
        vfio_device_info
    );
    nix::ioctl_readwrite_bad!(
        device_get_region_info,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 8),
        vfio_region_info
    );
    nix::ioctl_readwrite_bad!(
        device_get_irq_info,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 9),
        vfio_irq_info
    );
    nix::ioctl_write_ptr_bad!(
        device_set_irqs,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 10),
        vfio_irq_set
    );
    nix::ioctl_none_bad!(device_reset, request_code_none!(VFIO_TYPE, VFIO_BASE + 11));
    nix::ioctl_readwrite_bad!(
        iommu_get_info,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 12),
        vfio_iommu_type1_info
    );
    nix::ioctl_write_ptr_bad!(
        iommu_map_dma,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 13),
        vfio_iommu_type1_dma_map
    );
    nix::ioctl_readwrite_bad!(
        iommu_unmap_dma,
        request_code_none!(VFIO_TYPE, VFIO_BASE + 14),
        vfio_iommu_type1_dma_unmap
    );
}

/// `argsz` of a fixed-size VFIO struct.
fn argsz<T>() -> u32 {
    size_of::<T>() as u32
}

/// `VFIO_GET_API_VERSION` on a container.
pub fn get_api_version(container: BorrowedFd<'_>) -> nix::Result<i32> {
    // SAFETY: the ioctl takes no argument and only returns a number; the fd is borrowed, so open.
    unsafe { raw::get_api_version(container.as_raw_fd()) }
}

/// `VFIO_CHECK_EXTENSION` on a container: whether IOMMU model `ext` is supported.
pub fn check_extension(container: BorrowedFd<'_>, ext: u32) -> nix::Result<bool> {
    // SAFETY: the argument is passed by value (an integer), so no memory is shared with the kernel.
    let r = unsafe { raw::check_extension(container.as_raw_fd(), ext as c_int) }?;
    Ok(r > 0)
}

/// `VFIO_SET_IOMMU` on a container; valid only once a group is attached.
pub fn set_iommu(container: BorrowedFd<'_>, iommu_type: u32) -> nix::Result<()> {
    // SAFETY: the argument is passed by value (an integer), so no memory is shared with the kernel.
    unsafe { raw::set_iommu(container.as_raw_fd(), iommu_type as c_int) }.map(drop)
}

/// `VFIO_GROUP_GET_STATUS`: the group's `VFIO_GROUP_FLAGS_*`.
pub fn group_get_status(group: BorrowedFd<'_>) -> nix::Result<u32> {
    let mut status = vfio_group_status {
        argsz: argsz::<vfio_group_status>(),
        flags: 0,
    };
    // SAFETY: `status` is a live, correctly sized struct whose `argsz` tells the kernel its size;
    // the kernel writes only within it during the call.
    unsafe { raw::group_get_status(group.as_raw_fd(), &mut status) }?;
    Ok(status.flags)
}

/// `VFIO_GROUP_SET_CONTAINER`: attaches the group to the container.
pub fn group_set_container(group: BorrowedFd<'_>, container: BorrowedFd<'_>) -> nix::Result<()> {
    let fd: c_int = container.as_raw_fd();
    // SAFETY: the kernel reads one int (the container fd) through the pointer, which points to a
    // local that outlives the call.
    unsafe { raw::group_set_container(group.as_raw_fd(), &fd) }.map(drop)
}

/// `VFIO_GROUP_GET_DEVICE_FD`: opens the device called `name` (its PCI address) in the group.
pub fn group_get_device_fd(group: BorrowedFd<'_>, name: &CStr) -> nix::Result<File> {
    // SAFETY: `name` is a NUL-terminated string that outlives the call; the kernel only reads it.
    let fd = unsafe { raw::group_get_device_fd(group.as_raw_fd(), name.as_ptr()) }?;
    if fd < 0 {
        return Err(Errno::EBADF);
    }
    // SAFETY: on success the ioctl returns a new file descriptor that nothing else owns, so the
    // File may take ownership and close it on drop.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `VFIO_DEVICE_GET_INFO`.
pub fn device_get_info(device: BorrowedFd<'_>) -> nix::Result<vfio_device_info> {
    let mut info = vfio_device_info {
        argsz: argsz::<vfio_device_info>(),
        ..Default::default()
    };
    // SAFETY: `info` is a live struct of the size given in `argsz`; the kernel writes within it.
    unsafe { raw::device_get_info(device.as_raw_fd(), &mut info) }?;
    Ok(info)
}

/// `VFIO_DEVICE_GET_REGION_INFO` for region `index`.
pub fn device_get_region_info(device: BorrowedFd<'_>, index: u32) -> nix::Result<vfio_region_info> {
    let mut info = vfio_region_info {
        argsz: argsz::<vfio_region_info>(),
        index,
        ..Default::default()
    };
    // SAFETY: `info` is a live struct of the size given in `argsz`. If the region has capabilities
    // the kernel only raises `argsz` to say how much it would need; it never writes past our size.
    unsafe { raw::device_get_region_info(device.as_raw_fd(), &mut info) }?;
    Ok(info)
}

/// `VFIO_DEVICE_GET_IRQ_INFO` for interrupt index `index` (`VFIO_PCI_INTX/MSI/MSIX_IRQ_INDEX`):
/// how many vectors of that kind the device offers, and whether they signal eventfds.
pub fn device_get_irq_info(device: BorrowedFd<'_>, index: u32) -> nix::Result<vfio_irq_info> {
    let mut info = vfio_irq_info {
        argsz: argsz::<vfio_irq_info>(),
        index,
        ..Default::default()
    };
    // SAFETY: `info` is a live struct of the size given in `argsz`; the kernel writes within it.
    unsafe { raw::device_get_irq_info(device.as_raw_fd(), &mut info) }?;
    Ok(info)
}

/// `VFIO_DEVICE_SET_IRQS` with `DATA_EVENTFD | ACTION_TRIGGER`: vector `i` of interrupt index
/// `index` signals `eventfds[i]` from now on (vectors 0 to n - 1; the kernel enables MSI-X
/// with that many vectors).
pub fn device_set_irq_eventfds(
    device: BorrowedFd<'_>,
    index: u32,
    eventfds: &[BorrowedFd<'_>],
) -> nix::Result<()> {
    // The struct's five u32 words, then one s32 file descriptor per vector (the UAPI's
    // variable `data`), in one u32 buffer so that the header is aligned as the struct needs.
    let header = size_of::<vfio_irq_set>() / 4;
    let mut buf = vec![0u32; header + eventfds.len()];
    buf[0] = (buf.len() * 4) as u32; // argsz: header and data
    buf[1] = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    buf[2] = index;
    buf[3] = 0; // start
    buf[4] = eventfds.len() as u32; // count
    for (slot, fd) in buf[header..].iter_mut().zip(eventfds) {
        *slot = fd.as_raw_fd() as u32;
    }
    // The descriptors are borrowed for the call, so they are open; the kernel takes its own
    // reference to each eventfd.
    // SAFETY: `buf` is a u32-aligned `vfio_irq_set` header and `count` descriptors, `argsz`
    // bytes in all, alive for the call; the kernel only reads it, during the call.
    unsafe { raw::device_set_irqs(device.as_raw_fd(), buf.as_ptr().cast::<vfio_irq_set>()) }
        .map(drop)
}

/// `VFIO_DEVICE_SET_IRQS` with `DATA_NONE | ACTION_TRIGGER` and a count of 0: every vector of
/// interrupt index `index` off (the kernel disables MSI-X and lets go of the eventfds).
pub fn device_disable_irqs(device: BorrowedFd<'_>, index: u32) -> nix::Result<()> {
    let set = vfio_irq_set {
        argsz: argsz::<vfio_irq_set>(),
        flags: VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
        index,
        start: 0,
        count: 0,
        ..Default::default()
    };
    // SAFETY: `set` is a live header of the size in `argsz`, with no data (count 0); the
    // kernel only reads it.
    unsafe { raw::device_set_irqs(device.as_raw_fd(), &set) }.map(drop)
}

/// `VFIO_DEVICE_RESET`.
pub fn device_reset(device: BorrowedFd<'_>) -> nix::Result<()> {
    // SAFETY: the ioctl takes no argument.
    unsafe { raw::device_reset(device.as_raw_fd()) }.map(drop)
}

/// `VFIO_IOMMU_GET_INFO` (type1) with its capability chain: the raw info buffer, as long as
/// the kernel asked for (a first call with the fixed part learns the size: Linux
/// `vfio_iommu_type1_get_info` raises `argsz` instead of failing).
pub fn iommu_get_info(container: BorrowedFd<'_>) -> nix::Result<Vec<u8>> {
    let mut size = argsz::<vfio_iommu_type1_info>();
    for _ in 0..4 {
        // u64 words: the buffer is aligned for the struct (it holds a u64).
        let mut buf = vec![0u64; (size as usize).div_ceil(8)];
        buf[0] = u64::from(size); // argsz in the low half of the first word (little endian)
        let p = buf.as_mut_ptr().cast::<vfio_iommu_type1_info>();
        // SAFETY: `buf` is live, 8-aligned and at least `size` bytes, the `argsz` the kernel is
        // given; it writes only within `argsz` bytes during the call.
        unsafe { raw::iommu_get_info(container.as_raw_fd(), p) }?;
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_le_bytes()).collect();
        let want = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        if want <= size {
            return Ok(bytes);
        }
        size = want;
    }
    Err(Errno::EOVERFLOW)
}

/// The usable IOVA ranges (inclusive `(start, end)`) from a `VFIO_IOMMU_GET_INFO` buffer's
/// `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE` capability (Linux >= 5.4; `include/uapi/linux/vfio.h`:
/// header `{u16 id, u16 version, u32 next}` with `next` from the start of the buffer, then
/// `u32 nr_iovas, u32 reserved`, then `{u64 start, u64 end}` per range, `end` inclusive).
/// `None` when the kernel reports no such capability. Every offset is bounds-checked: a
/// malformed buffer gives `None`, never a panic.
pub fn parse_iova_ranges(info: &[u8]) -> Option<Vec<(u64, u64)>> {
    let u16_at = |o: usize| Some(u16::from_le_bytes(info.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(info.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(info.get(o..o + 8)?.try_into().ok()?));
    if u32_at(4)? & VFIO_IOMMU_INFO_CAPS == 0 {
        return None;
    }
    let mut at = u32_at(16)? as usize;
    // The chain is short (three capabilities today); a loop in it must not hang us.
    for _ in 0..16 {
        if at == 0 {
            return None;
        }
        if u32::from(u16_at(at)?) == VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE {
            let n = u32_at(at + 8)? as usize;
            return (0..n.min(1024))
                .map(|i| {
                    let r = at + 16 + 16 * i;
                    Some((u64_at(r)?, u64_at(r + 8)?))
                })
                .collect();
        }
        at = u32_at(at + 4)? as usize;
    }
    None
}

/// `VFIO_IOMMU_MAP_DMA` (type1): maps `size` bytes at `vaddr` to `iova`, readable and writable by
/// the devices of the container.
///
/// # Safety
/// `vaddr..vaddr+size` must stay allocated, and not be used for anything the device must not see,
/// until it is unmapped with [`iommu_unmap_dma`]: after this call the device can write it at any time.
pub unsafe fn iommu_map_dma(
    container: BorrowedFd<'_>,
    vaddr: u64,
    iova: u64,
    size: u64,
) -> nix::Result<()> {
    let map = vfio_iommu_type1_dma_map {
        argsz: argsz::<vfio_iommu_type1_dma_map>(),
        flags: VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
        vaddr,
        iova,
        size,
    };
    // SAFETY: the kernel reads the local `map` (size in `argsz`) during the call; the memory it
    // describes stays valid per this function's contract.
    unsafe { raw::iommu_map_dma(container.as_raw_fd(), &map) }.map(drop)
}

/// `VFIO_IOMMU_UNMAP_DMA` (type1): returns the number of bytes the kernel actually unmapped.
pub fn iommu_unmap_dma(container: BorrowedFd<'_>, iova: u64, size: u64) -> nix::Result<u64> {
    let mut unmap = vfio_iommu_type1_dma_unmap {
        argsz: argsz::<vfio_iommu_type1_dma_unmap>(),
        flags: 0,
        iova,
        size,
        ..Default::default()
    };
    // SAFETY: `unmap` is a live struct of the size in `argsz` (no dirty-bitmap flag, so the kernel
    // reads nothing past it) and the kernel writes back only its `size` field.
    unsafe { raw::iommu_unmap_dma(container.as_raw_fd(), &mut unmap) }?;
    Ok(unmap.size)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request numbers must match `_IO(';', 100 + n)` from `<linux/vfio.h>`.
    #[test]
    fn request_codes_match_the_uapi() {
        let io = |n: u32| (b';' as u32) << 8 | (100 + n);
        assert_eq!(nix::request_code_none!(VFIO_TYPE, VFIO_BASE) as u32, io(0));
        assert_eq!(
            nix::request_code_none!(VFIO_TYPE, VFIO_BASE + 13) as u32,
            io(13)
        );
        assert_eq!(io(0), 0x3b64);
        assert_eq!(io(13), 0x3b71);
    }

    #[test]
    fn argsz_covers_the_fixed_part() {
        assert_eq!(argsz::<vfio_group_status>(), 8);
        assert_eq!(argsz::<vfio_device_info>(), 24);
        assert_eq!(argsz::<vfio_region_info>(), 32);
        assert_eq!(argsz::<vfio_iommu_type1_dma_map>(), 32);
        assert_eq!(argsz::<vfio_iommu_type1_dma_unmap>(), 24);
        assert_eq!(argsz::<vfio_irq_info>(), 16);
        assert_eq!(argsz::<vfio_irq_set>(), 20);
    }

    /// An info buffer as Linux 6.1 returns it for a VT-d container: a migration capability
    /// first, then the IOVA ranges (the cap is not necessarily first: the chain is walked).
    fn info_with_caps(ranges: &[(u64, u64)]) -> Vec<u8> {
        let mut b = vec![0u8; 24];
        b[4..8].copy_from_slice(&(1u32 | VFIO_IOMMU_INFO_CAPS).to_le_bytes());
        b[16..20].copy_from_slice(&24u32.to_le_bytes());
        // Migration capability (id 2) at 24, 32 bytes long, next = 56.
        b.extend_from_slice(&2u16.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&56u32.to_le_bytes());
        b.extend_from_slice(&[0; 24]);
        // IOVA ranges (id 1) at 56, last in the chain.
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(ranges.len() as u32).to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        for &(s, e) in ranges {
            b.extend_from_slice(&s.to_le_bytes());
            b.extend_from_slice(&e.to_le_bytes());
        }
        let len = b.len() as u32;
        b[0..4].copy_from_slice(&len.to_le_bytes());
        b
    }

    #[test]
    fn iova_ranges_are_found_in_the_capability_chain() {
        let r = [(0, 0xfedf_ffff), (0xfef0_0000, (1 << 39) - 1)];
        assert_eq!(parse_iova_ranges(&info_with_caps(&r)), Some(r.to_vec()));
        // No CAPS flag, a truncated buffer, a loop in the chain: no ranges, no panic.
        let mut none = info_with_caps(&r);
        none[4..8].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(parse_iova_ranges(&none), None);
        let full = info_with_caps(&r);
        for cut in [0, 10, 20, 30, 60, 70, full.len() - 1] {
            let _ = parse_iova_ranges(&full[..cut]);
        }
        let mut looped = info_with_caps(&r);
        looped[56..58].copy_from_slice(&9u16.to_le_bytes()); // not the IOVA cap ...
        looped[60..64].copy_from_slice(&24u32.to_le_bytes()); // ... and it points back
        assert_eq!(parse_iova_ranges(&looped), None);
    }

    #[test]
    fn ioctls_on_a_non_vfio_fd_fail_cleanly() {
        let f = tempfile::tempfile().unwrap();
        use std::os::fd::AsFd;
        assert!(get_api_version(f.as_fd()).is_err());
        assert!(group_get_status(f.as_fd()).is_err());
        assert!(device_get_region_info(f.as_fd(), 7).is_err());
        assert!(iommu_get_info(f.as_fd()).is_err());
        assert!(device_get_irq_info(f.as_fd(), 2).is_err());
        assert!(device_set_irq_eventfds(f.as_fd(), 2, &[f.as_fd()]).is_err());
        assert!(device_disable_irqs(f.as_fd(), 2).is_err());
    }
}
