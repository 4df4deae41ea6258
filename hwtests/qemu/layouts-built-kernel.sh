# hwtests/qemu/layouts-built-kernel.sh - the layouts that boot the kernel
# hwtests/qemu/kernel/build prepares, sourced by hwtests/qemu/run. Issue 38.
#
# Debian's kernels have neither CONFIG_IOMMUFD nor CONFIG_VFIO_NOIOMMU, so these layouts boot
# Debian's 6.12 kernel with its VFIO modules rebuilt from Debian's source with those options on
# (iommufd.ko, vfio.ko and the modules that depend on vfio.ko's structures; every other module
# is Debian's: see hwtests/qemu/kernel/build for why that is the same code):
#   iommufd         the vfio layout (two igb ports on vfio-pci behind intel-iommu, one hub),
#                   opened through the device cdevs and /dev/iommu (VFIO_NIC_VFIO_BACKEND=iommufd);
#                   0 DMAR faults required as for every layout;
#   noiommu         no virtual IOMMU at all, vfio loaded with enable_unsafe_noiommu_mode=1: two
#                   igb ports on vfio-pci in no-IOMMU groups and a third igb on Linux's driver as
#                   the peer, one hub; the suite with VFIO_NIC_VFIO_BACKEND=noiommu
#                   VFIO_NIC_ALLOW_NOIOMMU=1, DMA to physical addresses;
#   noiommu-virtio  the same with three modern virtio-net functions without iommu_platform (what
#                   a VM without an IOMMU offers), the third on Linux's virtio_net.
# The other x86-64 layouts stay on Debian's 6.1 (see hwtests/qemu/README.md for why).
#
# Everything here is functions of the runner's own variables (PORT0, MAC0, ...); the runner
# calls them where its own layouts have their case branches.

BUILT_LAYOUTS="iommufd noiommu noiommu-virtio"

# Whether layout $1 boots the built kernel.
built_layout() {
    case " $BUILT_LAYOUTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac
}

# The kernel directory (vmlinuz, modules/, *.order) layout $1 boots.
layout_kdir() {
    if built_layout "$1"; then echo "$BUILT_KDIR"; else echo "$KDIR"; fi
}

# Builds (or finds in the cache) the modules and sets BUILT_DIR to hwtests/qemu/kernel/build's
# result, then unpacks its kernel package with the rebuilt modules in place of Debian's into
# BUILT_KDIR (once per result: the directory is named after it).
prepare_built_kernel() {
    BUILT_DIR=$("$SCRIPT_DIR/kernel/build" | tail -n 1) ||
        die "preparing the guest kernel failed (hwtests/qemu/kernel/build)"
    [ -f "$BUILT_DIR/image.deb" ] || die "hwtests/qemu/kernel/build printed no result directory"
    BUILT_KDIR=$CACHE/kernel/built-$(basename "$BUILT_DIR")
    kernel_ready "$BUILT_KDIR" "$BUILT_DIR" ||
        unpack_kernel "$BUILT_DIR/image.deb" "$BUILT_KDIR" "$BUILT_DIR" "$BUILT_DIR/modules"
    find "$CACHE/kernel" -mindepth 1 -maxdepth 1 -name 'built-*' ! -name "$(basename "$BUILT_KDIR")" \
        -exec rm -rf {} +
}

# The third port of the no-IOMMU layouts, on Linux's driver (wired to the two vfio ports).
NOIOMMU_PEER=0000:03:00.0

# Lines of /etc/hwtests.env for a built-kernel layout (the VFIO modules' list is the runner's;
# the peer's modules load after the vfio ports are bound, as on Debian's 6.1).
built_layout_env() { # layout
    case $1 in
        iommufd)
            echo "HWT_VFIO_PORTS='$PORT0 $PORT1'"
            echo "HWT_EXPECT_CDEV=1"
            echo "export VFIO_NIC_PORTS=$PORT0,$PORT1"
            echo "export VFIO_NIC_EXPECT_MACS=$MAC0,$MAC1"
            echo "export VFIO_NIC_VFIO_BACKEND=iommufd"
            ;;
        noiommu)
            echo "HWT_VFIO_PORTS='$PORT0 $PORT1'"
            echo "HWT_PEER_PORT='$NOIOMMU_PEER'"
            echo "HWT_PEER_DRIVER=igb"
            echo "HWT_PEER_MODULES=$(shq "$(cat "$BUILT_KDIR/peer.order")")"
            echo "HWT_MODULE_PARAMS='vfio:enable_unsafe_noiommu_mode=1'"
            echo "HWT_HUGEPAGES=160"
            echo "export VFIO_NIC_PORTS=$PORT0,$PORT1"
            echo "export VFIO_NIC_EXPECT_MACS=$MAC0,$MAC1"
            echo "export VFIO_NIC_OTHER_DRIVER_PORT=$NOIOMMU_PEER"
            echo "export VFIO_NIC_PEER_MAC=$MAC2"
            echo "export VFIO_NIC_VFIO_BACKEND=noiommu"
            echo "export VFIO_NIC_ALLOW_NOIOMMU=1"
            ;;
        noiommu-virtio)
            echo "HWT_VFIO_PORTS='$VIRTIO_PORT0 $VIRTIO_PORT1'"
            echo "HWT_PEER_PORT='$VIRTIO_PEER'"
            echo "HWT_PEER_DRIVER=virtio-pci"
            echo "HWT_PEER_MODULES=$(shq "$(cat "$BUILT_KDIR/virtio-peer.order")")"
            echo "HWT_MODULE_PARAMS='vfio:enable_unsafe_noiommu_mode=1'"
            echo "HWT_HUGEPAGES=160"
            echo "export VFIO_NIC_PORTS=$VIRTIO_PORT0,$VIRTIO_PORT1"
            echo "export VFIO_NIC_EXPECT_MACS=$MAC4,$MAC5"
            echo "export VFIO_NIC_OTHER_DRIVER_PORT=$VIRTIO_PEER"
            echo "export VFIO_NIC_PEER_MAC=$MAC6"
            echo "export VFIO_NIC_VFIO_BACKEND=noiommu"
            echo "export VFIO_NIC_ALLOW_NOIOMMU=1"
            ;;
    esac
}

# Sets the QEMU arguments of a built-kernel layout: appends devices to the array `qemu`, sets
# `iommu` (empty: none) and `dump` (the hub port the capture filter watches).
built_layout_qemu() { # layout
    local rp3=(-device pcie-root-port,id=rp1,chassis=1,slot=1 -device pcie-root-port,id=rp2,chassis=2,slot=2
        -device pcie-root-port,id=rp3,chassis=3,slot=3)
    case $1 in
        iommufd)
            qemu+=("${rp3[@]:0:4}"
                -netdev hubport,id=p0,hubid=0 -device "igb,netdev=p0,bus=rp1,mac=$MAC0"
                -netdev hubport,id=p1,hubid=0 -device "igb,netdev=p1,bus=rp2,mac=$MAC1")
            dump=p1
            ;;
        noiommu)
            iommu=
            qemu+=("${rp3[@]}"
                -netdev hubport,id=p0,hubid=0 -device "igb,netdev=p0,bus=rp1,mac=$MAC0"
                -netdev hubport,id=p1,hubid=0 -device "igb,netdev=p1,bus=rp2,mac=$MAC1"
                -netdev hubport,id=p2,hubid=0 -device "igb,netdev=p2,bus=rp3,mac=$MAC2")
            # The peer's hub port: the hub floods every frame of the two vfio ports to it.
            dump=p2
            ;;
        noiommu-virtio)
            iommu=
            # Modern only, and no iommu_platform: the device offers no VIRTIO_F_ACCESS_PLATFORM
            # and DMAs to guest-physical addresses, as in a VM without an IOMMU.
            local vnet=virtio-net-pci,disable-legacy=on
            qemu+=("${rp3[@]}"
                -netdev hubport,id=p4,hubid=2 -device "$vnet,netdev=p4,bus=rp1,mac=$MAC4"
                -netdev hubport,id=p5,hubid=2 -device "$vnet,netdev=p5,bus=rp2,mac=$MAC5"
                -netdev hubport,id=p6,hubid=2 -device "$vnet,netdev=p6,bus=rp3,mac=$MAC6")
            dump=p6
            ;;
    esac
}
