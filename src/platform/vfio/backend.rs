//! The IOMMU backend of a container: the only code that knows which kernel interface programs the
//! IOMMU.
//!
//! Today that is the legacy type1 container (`/dev/vfio/vfio`). Newer kernels also offer iommufd
//! with per-device cdevs (`/dev/vfio/devices/vfioX`), where attaching and mapping go through
//! different ioctls on a different fd. Keeping those four operations behind this enum lets such a
//! backend be added as a variant without touching the group, device or DMA bookkeeping.

use std::os::fd::BorrowedFd;

use vfio_bindings::bindings::vfio::{VFIO_TYPE1v2_IOMMU, VFIO_TYPE1_IOMMU};

use super::ioctl;
use crate::error::{Error, Result};

/// How a container talks to the IOMMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Backend {
    /// The type1 IOMMU driver; `iommu_type` is `VFIO_TYPE1v2_IOMMU` when available (precise
    /// unmap semantics), else `VFIO_TYPE1_IOMMU`.
    Type1 { iommu_type: u32 },
}

impl Backend {
    /// Picks the best type1 flavour the container supports.
    pub(super) fn probe(container: BorrowedFd<'_>, path: &str) -> Result<Self> {
        for iommu_type in [VFIO_TYPE1v2_IOMMU, VFIO_TYPE1_IOMMU] {
            let supported =
                ioctl::check_extension(container, iommu_type).map_err(|e| Error::Vfio {
                    what: "VFIO_CHECK_EXTENSION",
                    target: path.to_string(),
                    source: e.into(),
                })?;
            if supported {
                return Ok(Backend::Type1 { iommu_type });
            }
        }
        Err(Error::NotSupported {
            device: path.to_string(),
            what: "the type1 IOMMU model".into(),
            why:
                "the kernel offers neither VFIO_TYPE1v2_IOMMU nor VFIO_TYPE1_IOMMU; load it with \
                  `modprobe vfio_iommu_type1` and enable the IOMMU (intel_iommu=on or amd_iommu=on)"
                    .into(),
        })
    }

    /// Short name for messages.
    pub(super) fn name(self) -> &'static str {
        match self {
            Backend::Type1 { iommu_type } if iommu_type == VFIO_TYPE1v2_IOMMU => "type1v2",
            Backend::Type1 { .. } => "type1",
        }
    }

    /// The usable IOVA ranges the IOMMU reports (inclusive ends), or `None` when the kernel
    /// has no IOVA-range capability (before Linux 5.4).
    pub(super) fn iova_ranges(
        self,
        container: BorrowedFd<'_>,
    ) -> nix::Result<Option<Vec<(u64, u64)>>> {
        match self {
            Backend::Type1 { .. } => {
                ioctl::iommu_get_info(container).map(|b| ioctl::parse_iova_ranges(&b))
            }
        }
    }

    /// Attaches a group to the container.
    pub(super) fn attach_group(
        self,
        container: BorrowedFd<'_>,
        group: BorrowedFd<'_>,
    ) -> nix::Result<()> {
        match self {
            Backend::Type1 { .. } => ioctl::group_set_container(group, container),
        }
    }

    /// Selects the IOMMU model; done once, after the first group is attached.
    pub(super) fn set_iommu(self, container: BorrowedFd<'_>) -> nix::Result<()> {
        match self {
            Backend::Type1 { iommu_type } => ioctl::set_iommu(container, iommu_type),
        }
    }

    /// Maps `len` bytes at `vaddr` to `iova`.
    ///
    /// # Safety
    /// As [`ioctl::iommu_map_dma`]: the memory must stay valid until unmapped.
    pub(super) unsafe fn map(
        self,
        container: BorrowedFd<'_>,
        vaddr: u64,
        iova: u64,
        len: u64,
    ) -> nix::Result<()> {
        match self {
            // SAFETY: forwarded from this function's own contract.
            Backend::Type1 { .. } => unsafe { ioctl::iommu_map_dma(container, vaddr, iova, len) },
        }
    }

    /// Unmaps `iova..iova+len`; returns how many bytes the kernel unmapped.
    pub(super) fn unmap(self, container: BorrowedFd<'_>, iova: u64, len: u64) -> nix::Result<u64> {
        match self {
            Backend::Type1 { .. } => ioctl::iommu_unmap_dma(container, iova, len),
        }
    }
}
