//! The IOMMU backend of a container: the only code that knows which kernel interface programs the
//! IOMMU.
//!
//! Three interfaces (see `select.rs` for which one a device gets): the type1 container
//! (`/dev/vfio/vfio`, groups attached to it, `VFIO_IOMMU_MAP_DMA`); iommufd (`/dev/iommu`, an
//! IOAS, devices attached through their cdevs, `IOMMU_IOAS_MAP`: `iommufd.rs`); and the
//! no-IOMMU container (`VFIO_NOIOMMU_IOMMU`, groups attached, nothing mapped: the device uses
//! physical addresses, `noiommu.rs`). The container's group, device and DMA bookkeeping is the
//! same for all three; the operations that differ dispatch here.

use std::os::fd::BorrowedFd;

use vfio_bindings::bindings::vfio::{VFIO_TYPE1v2_IOMMU, VFIO_NOIOMMU_IOMMU, VFIO_TYPE1_IOMMU};

use super::select::DmaBackend;
use super::{ioctl, iommufd};
use crate::error::{Error, Result};

/// How a container talks to the IOMMU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Backend {
    /// The type1 IOMMU driver; `iommu_type` is `VFIO_TYPE1v2_IOMMU` when available (precise
    /// unmap semantics), else `VFIO_TYPE1_IOMMU`.
    Type1 { iommu_type: u32 },
    /// VFIO's no-IOMMU mode: groups attached to a container of type `VFIO_NOIOMMU_IOMMU`,
    /// nothing mapped.
    NoIommu,
    /// iommufd: the container fd is `/dev/iommu`, `ioas` the address space every device of
    /// the process is attached to.
    Iommufd { ioas: u32 },
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

    /// The no-IOMMU container type, if the kernel's mode is on (else the typed refusal).
    pub(super) fn probe_noiommu(container: BorrowedFd<'_>, path: &str) -> Result<Self> {
        let on =
            ioctl::check_extension(container, VFIO_NOIOMMU_IOMMU).map_err(|e| Error::Vfio {
                what: "VFIO_CHECK_EXTENSION",
                target: path.to_string(),
                source: e.into(),
            })?;
        if on {
            Ok(Backend::NoIommu)
        } else {
            Err(Error::NoIommuNotEnabled {
                addr: path.to_string(),
                why: "the container does not offer VFIO_NOIOMMU_IOMMU".into(),
            })
        }
    }

    /// Which of the three it is.
    pub(super) fn kind(self) -> DmaBackend {
        match self {
            Backend::Type1 { .. } => DmaBackend::Type1,
            Backend::NoIommu => DmaBackend::NoIommu,
            Backend::Iommufd { .. } => DmaBackend::Iommufd,
        }
    }

    /// The ioctl that maps, for messages.
    pub(super) fn map_call(self) -> &'static str {
        match self {
            Backend::Iommufd { .. } => "IOMMU_IOAS_MAP",
            _ => "VFIO_IOMMU_MAP_DMA",
        }
    }

    /// The ioctl that unmaps, for messages.
    pub(super) fn unmap_call(self) -> &'static str {
        match self {
            Backend::Iommufd { .. } => "IOMMU_IOAS_UNMAP",
            _ => "VFIO_IOMMU_UNMAP_DMA",
        }
    }

    /// Short name for messages.
    pub(super) fn name(self) -> &'static str {
        match self {
            Backend::Type1 { iommu_type } if iommu_type == VFIO_TYPE1v2_IOMMU => "type1v2",
            Backend::Type1 { .. } => "type1",
            Backend::NoIommu => "noiommu",
            Backend::Iommufd { .. } => "iommufd",
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
            Backend::Iommufd { ioas } => {
                iommufd::ioas_iova_ranges(container, ioas).map(|(r, _align)| Some(r))
            }
            // Nothing is translated: there are no IOVAs.
            Backend::NoIommu => Ok(None),
        }
    }

    /// Attaches a group to the container.
    pub(super) fn attach_group(
        self,
        container: BorrowedFd<'_>,
        group: BorrowedFd<'_>,
    ) -> nix::Result<()> {
        match self {
            Backend::Type1 { .. } | Backend::NoIommu => {
                ioctl::group_set_container(group, container)
            }
            // iommufd has no groups: devices attach through their cdev (`Container::attach_cdev`).
            Backend::Iommufd { .. } => Err(nix::errno::Errno::ENOTTY),
        }
    }

    /// Selects the IOMMU model; done once, after the first group is attached.
    pub(super) fn set_iommu(self, container: BorrowedFd<'_>) -> nix::Result<()> {
        match self {
            Backend::Type1 { iommu_type } => ioctl::set_iommu(container, iommu_type),
            Backend::NoIommu => ioctl::set_iommu(container, VFIO_NOIOMMU_IOMMU),
            // The IOAS was made with the container: there is nothing to select.
            Backend::Iommufd { .. } => Ok(()),
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
            // SAFETY: as above.
            Backend::Iommufd { ioas } => unsafe {
                iommufd::ioas_map(container, ioas, vaddr, iova, len)
            },
            // Never called: the container maps no-IOMMU memory by physical address (noiommu.rs).
            Backend::NoIommu => Err(nix::errno::Errno::ENOTTY),
        }
    }

    /// Unmaps `iova..iova+len`; returns how many bytes the kernel unmapped.
    pub(super) fn unmap(self, container: BorrowedFd<'_>, iova: u64, len: u64) -> nix::Result<u64> {
        match self {
            Backend::Type1 { .. } => ioctl::iommu_unmap_dma(container, iova, len),
            Backend::Iommufd { ioas } => iommufd::ioas_unmap(container, ioas, iova, len),
            // Nothing was mapped.
            Backend::NoIommu => Ok(len),
        }
    }
}
