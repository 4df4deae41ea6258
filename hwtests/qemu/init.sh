#!/bin/sh
# /init of the vfio-nic on-device test guest (packed into the initramfs by hwtests/qemu/run).
#
# Runs as PID 1 under busybox ash. It prepares the emulated ports (igb or virtio-net) as the
# chosen layout says, runs the test suite once, reports on the serial console with marker lines
# that the host parses, and powers the machine off. Nothing here may depend on the host beyond
# the initramfs: configuration comes from /etc/hwtests.env, written by the host-side runner:
#   HWT_LAYOUT        vfio | kernel-peer | shared-group | virtio | arm64
#   HWT_VFIO_PORTS    BDFs to bind to vfio-pci (space separated), or "auto": every 82576
#                     found (then VFIO_NIC_PORTS is exported here)
#   HWT_PEER_PORT     BDF to leave to a Linux driver (kernel-peer, virtio)
#   HWT_PEER_DRIVER   its PCI driver: igb (default) or virtio-pci (then virtio_net makes the netdev)
#   HWT_VFIO_MODULES  modules (file names without .ko, dependency order) for VFIO
#   HWT_PEER_MODULES  modules for the Linux peer (igb or virtio_pci + virtio_net, 8021q, and
#                     their dependencies)
#   HWT_MODULE_PARAMS parameters for insmod, as MODULE:NAME=VALUE[,NAME=VALUE] words (the
#                     no-IOMMU layouts: vfio:enable_unsafe_noiommu_mode=1; busybox insmod does
#                     not read module parameters from the kernel command line, as modprobe does)
#   HWT_VERBOSE       1 = keep kernel messages on the console
#   HWT_HUGEPAGES     2 MiB huge pages to reserve (default 48)
#   HWT_EXPECT_CDEV   1 = each vfio port must have its VFIO cdev (/dev/vfio/devices/vfioN)
#   HWT_EXTRA_ENV_NAMES  names of the variables given with --env (only shown on the console)
#   HWT_FAULT_TTY     the serial port to the host's fault agent (layout faults): put in raw mode
#   exported VFIO_NIC_* variables for the suite, and `set -- ...` with the suite's arguments.
#
# Host-parsed markers (keep in sync with hwtests/qemu/run):
#   @@HWT setup-failed: <reason>      the guest could not prepare the ports (suite not run)
#   @@HWT suite-begin / @@HWT suite-exit <status>
#   @@HWT suite-killed                the suite ran past HWT_SUITE_KILL and was killed
#   @@HWT dmar-begin / <fault lines> / @@HWT dmar-faults <count>
#   @@HWT unplug-stuck <count>        removals whose device was not let go of in time
#   @@HWT done

export PATH=/bin:/sbin:/usr/bin:/usr/sbin

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null || true
mkdir -p /dev/pts /tmp /run
mount -t tmpfs tmpfs /tmp
exec </dev/console >/dev/console 2>&1

. /etc/hwtests.env

# Reserve some 2 MiB huge pages so DMA memory takes the huge-page path, as on a tuned host
# (the no-IOMMU layouts need more: their DMA memory is physically contiguous huge pages).
echo "${HWT_HUGEPAGES:-48}" > /proc/sys/vm/nr_hugepages 2>/dev/null || true

# Keep the kernel's own console output (e.g. DMAR faults, printed at KERN_ERR) from
# interleaving with the suite's lines; they are collected from dmesg at the end instead.
[ "${HWT_VERBOSE:-0}" = 1 ] || dmesg -n 1

# The fault channel (layout faults): bytes as they come, no echo, so that a request line goes
# out and an answer line comes back unchanged (hwtests/qemu/fault-request).
if [ -n "${HWT_FAULT_TTY:-}" ]; then
    stty -F "$HWT_FAULT_TTY" raw -echo 115200 || setup_failed "cannot put $HWT_FAULT_TTY (the fault channel to the host) in raw mode"
fi

finish() {
    echo "@@HWT done"
    sync
    poweroff -f
    # poweroff should not return; if it does, make sure PID 1 never exits into a panic loop
    while :; do sleep 3600; done
}

setup_failed() {
    echo "@@HWT setup-failed: $*"
    echo "---- guest dmesg (last 40 lines) ----"
    dmesg | tail -n 40
    finish
}

load_modules() {
    for m in "$@"; do
        params=
        for p in ${HWT_MODULE_PARAMS:-}; do
            [ "${p%%:*}" = "$m" ] && params=$(echo "${p#*:}" | tr ',' ' ')
        done
        # shellcheck disable=SC2086 # the parameters are separate words
        insmod "/lib/modules/$m.ko" $params || setup_failed "insmod $m $params failed"
    done
}

# Bind one PCI function to a driver through driver_override + drivers_probe and check the result.
bind_port() { # bdf driver
    dev=/sys/bus/pci/devices/$1
    [ -e "$dev" ] || setup_failed "PCI device $1 not present"
    if [ -e "$dev/driver" ]; then
        cur=$(basename "$(readlink "$dev/driver")")
        [ "$cur" = "$2" ] && return 0
        echo "$1" > "$dev/driver/unbind" || setup_failed "cannot unbind $1 from $cur"
    fi
    echo "$2" > "$dev/driver_override" || setup_failed "cannot set driver_override of $1"
    echo "$1" > /sys/bus/pci/drivers_probe 2>/dev/null || true
    [ -e "$dev/driver" ] || setup_failed "$1 did not bind to $2"
    cur=$(basename "$(readlink "$dev/driver")")
    [ "$cur" = "$2" ] || setup_failed "$1 bound to $cur instead of $2"
}

# 1. VFIO: load, then bind every VFIO port before any NIC driver is loaded (so igb or
# virtio_pci cannot grab it).
# shellcheck disable=SC2086 # word lists on purpose
load_modules $HWT_VFIO_MODULES
if [ "$HWT_VFIO_PORTS" = auto ]; then
    # Every 82576 (8086:10c9) physical function, in address order.
    HWT_VFIO_PORTS=
    for d in /sys/bus/pci/devices/*; do
        [ "$(cat "$d/vendor")" = 0x8086 ] && [ "$(cat "$d/device")" = 0x10c9 ] || continue
        HWT_VFIO_PORTS="$HWT_VFIO_PORTS $(basename "$d")"
    done
    [ -n "$HWT_VFIO_PORTS" ] || setup_failed "no 82576 (8086:10c9) found for the automatic port list"
    VFIO_NIC_PORTS=$(echo $HWT_VFIO_PORTS | tr ' ' ',')
    export VFIO_NIC_PORTS
fi
for bdf in $HWT_VFIO_PORTS; do
    bind_port "$bdf" vfio-pci
    grp=$(basename "$(readlink "/sys/bus/pci/devices/$bdf/iommu_group")")
    # A no-IOMMU group (vfio.enable_unsafe_noiommu_mode=1, no IOMMU) has a node of its own name.
    node=/dev/vfio/$grp
    [ -c "$node" ] || node=/dev/vfio/noiommu-$grp
    [ -c "$node" ] || setup_failed "neither /dev/vfio/$grp nor $node for $bdf"
    cdev=
    for c in "/sys/bus/pci/devices/$bdf"/vfio-dev/vfio*; do
        [ -e "$c" ] && cdev=/dev/vfio/devices/$(basename "$c")
    done
    if [ "${HWT_EXPECT_CDEV:-0}" = 1 ]; then
        [ -n "$cdev" ] && [ -c "$cdev" ] || setup_failed "$bdf has no VFIO cdev under /dev/vfio/devices"
        [ -c /dev/iommu ] || setup_failed "/dev/iommu missing (kernel without CONFIG_IOMMUFD?)"
    fi
    echo "hwtests: $bdf -> vfio-pci, IOMMU group $grp ($node${cdev:+, cdev $cdev})"
done
[ -c /dev/vfio/vfio ] || setup_failed "/dev/vfio/vfio missing"

# 2. Linux peer (kernel-peer, virtio): the driver binds the remaining port by itself; make it
# explicit anyway. igb's netdev hangs off the PCI device (<bdf>/net/), virtio_net's off the
# virtio device virtio-pci creates under it (<bdf>/virtioN/net/).
if [ -n "${HWT_PEER_PORT:-}" ]; then
    peer_driver=${HWT_PEER_DRIVER:-igb}
    # shellcheck disable=SC2086
    load_modules $HWT_PEER_MODULES
    bind_port "$HWT_PEER_PORT" "$peer_driver"
    ifname=
    pdev=/sys/bus/pci/devices/$HWT_PEER_PORT
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        for n in "$pdev"/net/* "$pdev"/virtio*/net/*; do
            [ -e "$n" ] && ifname=$(basename "$n") && break
        done
        [ -n "$ifname" ] && break
        sleep 1
    done
    [ -n "$ifname" ] || setup_failed "no netdev appeared for $HWT_PEER_PORT"
    export VFIO_NIC_PEER_IF="$ifname"
    echo "hwtests: $HWT_PEER_PORT -> $peer_driver, netdev $ifname (left down; tests bring it up)"
fi
ip link set lo up 2>/dev/null || true

# 3. The suite.
echo "hwtests: env: $(env | grep '^VFIO_NIC_' | sort | tr '\n' ' ')"
for n in ${HWT_EXTRA_ENV_NAMES:-}; do eval "echo \"hwtests: env (--env): $n=\$$n\""; done
echo "@@HWT suite-begin"
cd /tmp || true
# The suite keeps to its own budget (VFIO_NIC_HWTESTS_BUDGET); this is the last resort.
timeout -s KILL "${HWT_SUITE_KILL:-600}" /bin/vfio-nic-hwtests "$@"
status=$?
[ "$status" != 137 ] || echo "@@HWT suite-killed"
echo  # in case the suite's last line had no newline: markers must start a line
echo "@@HWT suite-exit $status"

# 4. IOMMU faults. Linux 6.1 intel-iommu prints e.g.
#   DMAR: DRHD: handling fault status reg 2
#   DMAR: [DMA Read NO_PASID] Request device [01:00.0] fault addr 0x1000 [fault reason 0x06] PTE Read access is not set
#   DMAR: [INTR-REMAP] Request device [01:00.0] fault index 0x0 [fault reason 0x25] ...
# and arm-smmu-v3 (the arm64 layout; Linux 6.12 arm_smmu_evtq_thread) an event line per fault
# (rate-limited, the first always printed), followed by its raw words, counted once,
#   arm-smmu-v3 arm-smmu-v3.0.auto: event 0x10 received:
# or "EVTQ overflow detected -- events lost", or (arm_smmu_gerror_handler) "unexpected global
# error reported".
echo "@@HWT dmar-begin"
dmesg > /tmp/dmesg.txt
grep -E 'DMAR.*([Ff]ault|PTE (Read|Write) access|INTR-REMAP)|dmar_fault|DMAR-IR:.*[Ff]ault|arm-smmu-v3.*(event 0x[0-9a-f]+ received|EVTQ overflow|global error)' /tmp/dmesg.txt > /tmp/faults.txt
cat /tmp/faults.txt
echo "@@HWT dmar-faults $(wc -l < /tmp/faults.txt)"

# 5. Hot unplug. vfio-pci relays the kernel's removal request to the device's user every 10 s
# until the user lets go, printing "(#0)", then "(#10)" after 100 s, and so on
# (vfio_pci_core_request), or warns once that nobody can be asked ("No device request channel
# registered, blocked until released by user"). A driver that releases the device in time leaves
# the first line only.
grep -E 'Relaying device request to user|No device request channel registered' /tmp/dmesg.txt
echo "@@HWT unplug-stuck $(grep -cE 'Relaying device request to user \(#[1-9]|No device request channel registered' /tmp/dmesg.txt)"

# Other kernel errors/warnings (level <= 4) are worth seeing when something goes wrong; they do
# not fail the run by themselves.
if [ "$status" != 0 ] || [ "${HWT_VERBOSE:-0}" = 1 ]; then
    echo "---- guest kernel messages of level warning or worse ----"
    dmesg -r | grep -E '^<[0-4]>' | sed -e 's/^<[0-9]>//' | tail -n 60
fi
finish
