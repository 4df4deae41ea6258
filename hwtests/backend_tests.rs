//! Which DMA backend the suite's ports go through (issue 38), and what that backend promises.
//!
//! The backend comes from the environment like the ports (`VFIO_NIC_VFIO_BACKEND`,
//! `VFIO_NIC_ALLOW_NOIOMMU`; unset: automatic), so the suite runs unchanged on a real machine
//! with any of the three. This test checks that the one asked for is the one in use, and:
//! - no-IOMMU: a bus address is the physical address of the memory, page for page, across the
//!   huge pages of a block (what `dma::contiguous` assembles and `/proc/self/pagemap` shows);
//! - iommufd: the device has no group fd (it was opened through its cdev), and DMA memory is
//!   mapped in the IOAS's windows;
//! - type1: the device has a group fd.

use vfio_nic::platform::dma::pagemap::Pagemap;
use vfio_nic::platform::dma::DmaMemory;
use vfio_nic::platform::vfio::{DmaBackend, VfioDevice};

use super::{drv, step, Ctx, Outcome};

pub fn dma_backend_as_chosen(ctx: &Ctx) -> Outcome {
    match check(ctx) {
        Ok(d) => Outcome::Pass(d),
        Err(e) => Outcome::Fail(e),
    }
}

fn check(ctx: &Ctx) -> Result<String, String> {
    let options = drv::vfio();
    let addr = ctx.ports[0];
    step(format!("opening {addr} with {options:?}"));
    let dev = VfioDevice::open_with(addr, &options).map_err(|e| e.to_string())?;
    let backend = dev.backend();
    if let Some(want) = options.backend {
        if backend != want {
            return Err(format!("{addr} was opened through {backend}, not {want}"));
        }
    }
    let mut detail = format!(
        "{addr} through {backend} (IOMMU group {}, group fd {:?})",
        dev.iommu_group(),
        dev.group_fd()
    );
    match backend {
        DmaBackend::Type1 if dev.group_fd().is_none() => {
            return Err("a type1 device without a group fd".into())
        }
        DmaBackend::Iommufd if dev.group_fd().is_some() => {
            return Err(
                "an iommufd device has a group fd: it was not opened through its cdev".into(),
            )
        }
        DmaBackend::NoIommu => detail += &format!("; {}", physical(&dev)?),
        _ => {
            let mem =
                DmaMemory::allocate(64 * 1024, dev.dma_mapper()).map_err(|e| e.to_string())?;
            detail += &format!(
                "; 64 KiB mapped at IOVA {:#x}, windows {}",
                mem.iova(),
                dev.container().iova_windows()
            );
        }
    }
    Ok(detail)
}

/// Blocks of one and of three huge pages: every page's bus address is its physical address.
fn physical(dev: &VfioDevice) -> Result<String, String> {
    let pm = Pagemap::open_self().map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for len in [4096, 5 << 20] {
        step(format!("no-IOMMU DMA memory of {len} bytes"));
        let mem = DmaMemory::allocate(len, dev.dma_mapper()).map_err(|e| e.to_string())?;
        for off in (0..mem.len()).step_by(4096) {
            let pa = pm
                .physical(mem.as_ptr() as u64 + off as u64)
                .map_err(|e| e.to_string())?;
            if pa != mem.iova() + off as u64 {
                return Err(format!(
                    "{len} bytes: the page at offset {off:#x} is at physical {pa:#x}, but the device is told {:#x}",
                    mem.iova() + off as u64
                ));
            }
        }
        out.push(format!(
            "{} bytes at physical {:#x} (huge pages: {})",
            mem.len(),
            mem.iova(),
            mem.is_huge()
        ));
    }
    Ok(format!("bus addresses are physical: {}", out.join(", ")))
}
