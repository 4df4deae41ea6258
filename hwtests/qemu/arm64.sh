# hwtests/qemu/arm64.sh - the `arm64` layout of hwtests/qemu/run (sourced by it; not a program).
#
# The suite on arm64: `qemu-system-aarch64 -M virt,iommu=smmuv3,gic-version=3` under TCG, with
# Debian trixie's arm64 kernel (6.12), behind QEMU's emulated SMMUv3, MSI-X through the GICv3 ITS:
#   0000:01:00.0 igb (MAC ARM64_MAC0) and 0000:02:00.0 igb (ARM64_MAC1) on vfio-pci, wired
#     through hub 3 (the suite's two-port tests: traffic, VLAN modes, interrupts, jumbo);
#   0000:03:00.0 virtio-net-pci (virtio 1.x only, DMA through the SMMU; ARM64_MAC2) on
#     vfio-pci: the per-port tests (open, MAC, config space, register test, DMA mapping,
#     driver bring-up with its rings and notify) drive it too;
#   0000:04:00.0 igb (ARM64_MAC3) on Linux's igb with 8021q: the kernel peer of the first
#     port (VLAN modes against Linux's 8021q, jumbo, checksum offloads, the CLI's responder).
# All four are on hub 3; each sits behind a pcie-root-port of its own (its own IOMMU group).
#
# Everything arm64 comes from Debian, cached OUTSIDE the clone: the toolchain root of
# scripts/arm64 (which cross-builds vfio-nic-hwtests and vfio-nic, and downloads the arm64
# packages with its apt), and under ${VFIO_NIC_CACHE:-/var/cache/vfio-nic}/arm64/guest-KEY/
# the guest's kernel, modules (with their dependency closure, decompressed, in load order),
# busybox (busybox-static:arm64) and the C libraries the two programs load; KEY hashes the
# kernel package, its version and the module lists. Built in a temporary directory, renamed
# when complete, under a lock. The host needs qemu-system-aarch64 (qemu-system-arm from
# <codename>-backports, as qemu-system-x86 for the other layouts).
#
# The guest log is judged as the x86 layouts' are, with the SMMU's fault lines instead of the
# DMAR ones: Linux's arm-smmu-v3 prints "arm-smmu-v3 ...: event 0xNN received:" for every event
# (translation, permission, bad STE faults), and init.sh counts those lines.
#
# What the layout does NOT show: TCG does not reorder memory as an arm64 core does, so it proves
# that the port works on arm64 (the SMMU, the ITS, the arm64 kernel's VFIO), not that the
# barriers are sufficient; that rests on src/platform/barrier.rs's Linux citations and on
# `scripts/arm64 barriers`.

ARM64_MAC0=52:54:00:12:34:60
ARM64_MAC1=52:54:00:12:34:61
ARM64_MAC2=52:54:00:12:34:62
ARM64_MAC3=52:54:00:12:34:63
ARM64_PORT0=0000:01:00.0
ARM64_PORT1=0000:02:00.0
ARM64_VIRTIO=0000:03:00.0
ARM64_PEER=0000:04:00.0
# The guest kernel the layout was last proven with (moved in a commit of its own once the
# layout passes with another; when Debian has dropped this build, the one linux-image-arm64
# depends on is used, with a warning).
ARM64_KERNEL_PIN_PKG=linux-image-6.12.117+deb13-arm64
ARM64_KERNEL_PIN_VER=6.12.117-1
# Modules (Debian's arm64 config: the SMMUv3 driver and the ITS are built in; no dca).
ARM64_VFIO_MODULES=(irqbypass vfio vfio_iommu_type1 vfio-pci-core vfio-pci)
ARM64_PEER_MODULES=(igb llc stp garp mrp 8021q)
# Guest memory: the arm64 kernel and the suite's huge pages need more than the x86 guests'.
ARM64_MEM=768

ARM64_CACHE=${VFIO_NIC_CACHE:-/var/cache/vfio-nic}/arm64

# qemu-system-aarch64 with igb on the host (Debian: qemu-system-arm, from the backports suite
# when the release's own QEMU is older than 8.0, the version that has igb).
arm64_host_qemu() {
    # cpio packs the initramfs; the host's busybox-static lists the applets (below).
    local pkgs=()
    command -v cpio >/dev/null 2>&1 || pkgs+=(cpio)
    pkg_installed busybox-static || pkgs+=(busybox-static)
    if [ ${#pkgs[@]} -gt 0 ]; then
        log "installing ${pkgs[*]}"
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null ||
            die "apt-get install ${pkgs[*]} failed"
    fi
    if command -v qemu-system-aarch64 >/dev/null 2>&1 &&
        qemu-system-aarch64 -device help 2>/dev/null | grep -w '"igb"' >/dev/null; then
        return 0
    fi
    local cn
    cn=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ -n "$cn" ] || die "no VERSION_CODENAME in /etc/os-release; install a qemu-system-aarch64 >= 8.0 (with igb) yourself"
    ensure_backports "$cn"
    log "installing qemu-system-arm (from $cn-backports) for the arm64 layout"
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" timeout 900 apt-get install -y -qq --no-install-recommends -t "$cn-backports" qemu-system-arm >/dev/null ||
        { "${SUDO[@]}" timeout 600 apt-get update -qq &&
            "${SUDO[@]}" timeout 900 apt-get install -y -qq --no-install-recommends -t "$cn-backports" qemu-system-arm >/dev/null; } ||
        die "apt-get install qemu-system-arm from $cn-backports failed (or took over 900 s)"
    qemu-system-aarch64 -device help 2>/dev/null | grep -w '"igb"' >/dev/null ||
        die "the installed qemu-system-aarch64 has no -device igb"
}

# Sets ARM64_KPKG/ARM64_KVER and ARM64_GUEST (the guest's cache directory) and fills it if
# needed: kernel, modules, busybox, libraries.
arm64_prepare_guest() {
    ARM64_KPKG=$ARM64_KERNEL_PIN_PKG
    ARM64_KVER=$ARM64_KERNEL_PIN_VER
    local want key
    want="$ARM64_KPKG=$ARM64_KVER | ${ARM64_VFIO_MODULES[*]} | ${ARM64_PEER_MODULES[*]} | busybox-static:arm64 | libs 1"
    key=$(printf '%s' "$want" | sha256sum | cut -c1-16)
    ARM64_GUEST=$ARM64_CACHE/guest-$key
    [ -f "$ARM64_GUEST/.complete" ] && { ARM64_KVER=$(cat "$ARM64_GUEST/.complete"); return 0; }
    mkdir -p "$ARM64_CACHE"
    exec 7>"$ARM64_CACHE/guest.lock"
    flock -w 1800 7 || die "waited 1800 s for $ARM64_CACHE/guest.lock"
    if [ -f "$ARM64_GUEST/.complete" ]; then exec 7>&-; ARM64_KVER=$(cat "$ARM64_GUEST/.complete"); return 0; fi
    local tmp=$ARM64_GUEST.tmp.$$ dl
    rm -rf "$ARM64_CACHE"/guest-*.tmp.*
    mkdir -p "$tmp/debs" "$tmp/modules" "$tmp/root"
    # The packages, through the toolchain root's apt (trixie, arm64 enabled).
    log "arm64 guest: downloading $ARM64_KPKG=$ARM64_KVER and busybox-static:arm64 (trixie)"
    if ! "$REPO/scripts/arm64" download "$tmp/debs" "$ARM64_KPKG:arm64=$ARM64_KVER" busybox-static:arm64; then
        local now
        now=$("$REPO/scripts/arm64" run apt-cache depends linux-image-arm64:arm64 2>/dev/null |
            sed -n 's/^ *Depends: \(linux-image-[^:]*\).*/\1/p' | head -n 1)
        [ -n "$now" ] || die "neither the pinned $ARM64_KPKG $ARM64_KVER nor linux-image-arm64's kernel can be downloaded"
        log "WARNING: the pinned arm64 guest kernel $ARM64_KPKG $ARM64_KVER is no longer in the archive; using $now (what linux-image-arm64 depends on now). Pin it in hwtests/qemu/arm64.sh once the layout passes with it."
        ARM64_KPKG=$now
        "$REPO/scripts/arm64" download "$tmp/debs" "$ARM64_KPKG:arm64" busybox-static:arm64 ||
            die "downloading $ARM64_KPKG and busybox-static:arm64 failed"
    fi
    dl=$tmp/unpack
    mkdir -p "$dl"
    local deb
    for deb in "$tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$dl"; done
    ARM64_KVER=$(dpkg-deb -f "$(ls "$tmp"/debs/linux-image-*.deb | head -n 1)" Version)
    local kver
    kver=$(ls -1 "$dl/usr/lib/modules" 2>/dev/null | head -n 1)
    local moddir=$dl/usr/lib/modules/$kver
    [ -n "$kver" ] || { kver=$(ls -1 "$dl/lib/modules" | head -n 1); moddir=$dl/lib/modules/$kver; }
    [ -n "$kver" ] && [ -f "$dl/boot/vmlinuz-$kver" ] || die "$ARM64_KPKG holds no vmlinuz/modules"
    cp "$dl/boot/vmlinuz-$kver" "$tmp/vmlinuz"
    cp "$dl/bin/busybox" "$tmp/busybox" 2>/dev/null || cp "$dl/usr/bin/busybox" "$tmp/busybox" ||
        die "busybox-static:arm64 holds no busybox"

    # Modules: each after its dependencies (from .modinfo), decompressed, in load order.
    declare -A path=() done_=()
    local f n
    while IFS= read -r f; do
        n=$(basename "$f"); n=${n%%.ko*}; n=${n//-/_}; path[$n]=$f
    done < <(find "$moddir" -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' -o -name '*.ko.gz')
    # Built into this kernel (modules.builtin lists them: irqbypass is, with KVM): nothing to load.
    declare -A builtin=()
    if [ -f "$moddir/modules.builtin" ]; then
        while IFS= read -r f; do
            n=$(basename "$f"); n=${n%%.ko*}; builtin[${n//-/_}]=1
        done <"$moddir/modules.builtin"
    fi
    arm64_add_module() { # name order-list-variable
        local key=${1//-/_} src out d
        [ -z "${done_[$2/$key]:-}" ] || return 0
        [ -z "${builtin[$key]:-}" ] || return 0
        src=${path[$key]:-}
        [ -n "$src" ] || die "module $1 not found in $ARM64_KPKG (nor built in)"
        out=$tmp/modules/$(basename "${src%%.ko*}").ko
        if [ ! -f "$out" ]; then
            case $src in
                *.ko) cp "$src" "$out" ;; *.xz) xz -dc "$src" >"$out" ;;
                *.zst) zstd -qdc "$src" >"$out" ;; *.gz) gzip -dc "$src" >"$out" ;;
            esac
        fi
        for d in $(ko_depends "$out"); do arm64_add_module "$d" "$2"; done
        done_[$2/$key]=1
        eval "$2+=(\"\$(basename \"\$out\" .ko)\")"
    }
    local vfio_order=() peer_order=() m
    for m in "${ARM64_VFIO_MODULES[@]}"; do arm64_add_module "$m" vfio_order; done
    for m in "${ARM64_PEER_MODULES[@]}"; do arm64_add_module "$m" peer_order; done
    echo "${vfio_order[*]}" >"$tmp/vfio.order"
    echo "${peer_order[*]}" >"$tmp/peer.order"

    # The C libraries the programs load (glibc of the cross toolchain, the same build as trixie's
    # libc6:arm64), at the paths its loader searches.
    local lib=$tmp/root/lib/aarch64-linux-gnu
    mkdir -p "$lib"
    "$REPO/scripts/arm64" run sh -c 'cd /usr/aarch64-linux-gnu/lib && tar -ch ld-linux-aarch64.so.1 libc.so.6 libm.so.6 libgcc_s.so.1' |
        tar -x -C "$lib" || die "copying the arm64 C libraries out of the toolchain root failed"
    mv "$lib/ld-linux-aarch64.so.1" "$tmp/root/lib/ld-linux-aarch64.so.1"

    rm -rf "$dl" "$tmp/debs"
    echo "$ARM64_KVER" >"$tmp/.complete"
    mv "$tmp" "$ARM64_GUEST"
    find "$ARM64_CACHE" -mindepth 1 -maxdepth 1 -name 'guest-*' ! -name "guest-$key" ! -name 'guest.lock' -exec rm -rf {} +
    log "arm64 guest: kernel $kver ($ARM64_KPKG $ARM64_KVER); vfio modules: ${vfio_order[*]}; peer modules: ${peer_order[*]}"
    exec 7>&-
}

# Everything the layout needs before a guest starts: the host's QEMU, the guest's files.
arm64_prepare() {
    arm64_host_qemu
    arm64_prepare_guest
}

# The two programs, cross-built by scripts/arm64 (a no-op when the arm64 stage of
# scripts/test-all built them already: the same command, the same cached target directory).
arm64_build() {
    if [ -n "${VFIO_NIC_ARM64_BIN_DIR:-}" ]; then
        ARM64_BIN=$VFIO_NIC_ARM64_BIN_DIR
    else
        # At a lower priority (scripts/test-all's arm64 stage's, which runs the same build): a
        # guest may be running beside it.
        nice -n 5 "$REPO/scripts/arm64" build >"$1/arm64-build.log" 2>&1 ||
            { tail -n 20 "$1/arm64-build.log" >&2; die "scripts/arm64 build failed (log: $1/arm64-build.log)"; }
        ARM64_BIN=$REPO/target/arm64
    fi
    [ -x "$ARM64_BIN/vfio-nic-hwtests" ] && [ -x "$ARM64_BIN/vfio-nic" ] ||
        die "no vfio-nic-hwtests and vfio-nic in $ARM64_BIN"
}

# arm64_initramfs <dir> <pcap?>: writes <dir>/initrd.gz.
arm64_initramfs() {
    local wd=$1 pcap=$2 root=$1/root a
    rm -rf "$root"
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,lib/modules,etc,proc,sys,dev,tmp,run}
    cp "$ARM64_GUEST/busybox" "$root/bin/busybox"
    chmod 755 "$root/bin/busybox"
    # The applets' links: busybox cannot run here to list them (it is arm64), so they are read
    # from the host's busybox-static (the same upstream list); every applet the suite calls
    # (sh, insmod, ip, ping, ...) is in both.
    while IFS= read -r a; do
        [ "$a" = bin/busybox ] || [ -e "$root/$a" ] || ln -s /bin/busybox "$root/$a"
    done < <(/bin/busybox --list-full)
    [ -e "$root/bin/sh" ] || ln -s busybox "$root/bin/sh"
    mknod "$root/dev/console" c 5 1 2>/dev/null || true
    install -m 755 "$SCRIPT_DIR/init.sh" "$root/init"
    cp "$ARM64_GUEST"/modules/*.ko "$root/lib/modules/"
    cp -a "$ARM64_GUEST/root/." "$root/"
    install -m 755 "$ARM64_BIN/vfio-nic-hwtests" "$root/bin/vfio-nic-hwtests"
    install -m 755 "$ARM64_BIN/vfio-nic" "$root/bin/vfio-nic"
    {
        echo "# generated by hwtests/qemu/run (arm64.sh)"
        echo "HWT_LAYOUT=arm64"
        echo "HWT_VERBOSE=$VERBOSE"
        echo "HWT_VFIO_MODULES=$(shq "$(cat "$ARM64_GUEST/vfio.order")")"
        echo "export VFIO_NIC_LAYOUT=arm64"
        echo "export VFIO_NIC_HWTESTS_BUDGET=$SUITE_BUDGET"
        echo "HWT_SUITE_KILL=$((SUITE_BUDGET + 20))"
        # The device tests only: the fault tests run in the x86-64 faults layout (hwtests/main.rs,
        # VFIO_NIC_HWTESTS_GROUP; its default, all, would run the soak here without a fault injector).
        echo "export VFIO_NIC_HWTESTS_GROUP=device"
        echo "HWT_VFIO_PORTS='$ARM64_PORT0 $ARM64_PORT1 $ARM64_VIRTIO'"
        echo "HWT_PEER_PORT='$ARM64_PEER'"
        echo "HWT_PEER_DRIVER=igb"
        echo "HWT_PEER_MODULES=$(shq "$(cat "$ARM64_GUEST/peer.order")")"
        echo "export VFIO_NIC_PORTS=$ARM64_PORT0,$ARM64_PORT1,$ARM64_VIRTIO"
        echo "export VFIO_NIC_EXPECT_MACS=$ARM64_MAC0,$ARM64_MAC1,$ARM64_MAC2"
        echo "export VFIO_NIC_OTHER_DRIVER_PORT=$ARM64_PEER"
        echo "export VFIO_NIC_PEER_MAC=$ARM64_MAC3"
        [ -z "$pcap" ] || echo "export VFIO_NIC_PCAP=1"
        for kv in "${EXTRA_ENV[@]}"; do echo "export ${kv%%=*}=$(shq "${kv#*=}")"; done
        echo "HWT_EXTRA_ENV_NAMES='$(for kv in "${EXTRA_ENV[@]}"; do printf '%s ' "${kv%%=*}"; done)'"
        printf 'set --'
        for a in "${TEST_ARGS[@]}"; do printf ' %s' "$(shq "$a")"; done
        echo
    } >"$root/etc/hwtests.env"
    (cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) |
        gzip -1 >"$wd/initrd.gz"
}

# arm64_qemu_cmd <dir> <pcap?>: sets QEMU_CMD (the array boot_layout runs) and ARM64_DUMP (the hub
# port a capture watches: the peer's, which the hub floods every frame to).
arm64_qemu_cmd() {
    local wd=$1 pcap=$2
    local append="console=ttyAMA0 panic=-1 oops=panic"
    [ "$VERBOSE" = 1 ] || append+=" quiet"
    # cortex-a72: an Armv8.0 core, quick under TCG (`max` emulates pointer authentication,
    # which costs much there). The ITS is the virt machine's default with GICv3.
    # shellcheck disable=SC2054 # commas belong to QEMU's option syntax
    QEMU_CMD=(qemu-system-aarch64 -accel tcg -M virt,iommu=smmuv3,gic-version=3 -cpu cortex-a72
        -m "$ARM64_MEM" -smp "$SMP" -nodefaults -display none -monitor none -serial stdio -no-reboot
        -kernel "$ARM64_GUEST/vmlinuz" -initrd "$wd/initrd.gz" -append "$append"
        -device pcie-root-port,id=rp1,chassis=1,slot=1 -device pcie-root-port,id=rp2,chassis=2,slot=2
        -device pcie-root-port,id=rp3,chassis=3,slot=3 -device pcie-root-port,id=rp4,chassis=4,slot=4
        -netdev hubport,id=a0,hubid=3 -device igb,netdev=a0,bus=rp1,mac=$ARM64_MAC0
        -netdev hubport,id=a1,hubid=3 -device igb,netdev=a1,bus=rp2,mac=$ARM64_MAC1
        -netdev hubport,id=a2,hubid=3 -device virtio-net-pci,disable-legacy=on,iommu_platform=on,netdev=a2,bus=rp3,mac=$ARM64_MAC2
        -netdev hubport,id=a3,hubid=3 -device igb,netdev=a3,bus=rp4,mac=$ARM64_MAC3)
    [ -z "$pcap" ] || QEMU_CMD+=(-object "filter-dump,id=f0,netdev=a3,file=$pcap")
}

# arm64_boot <dir> <pcap?>: the layout's guest, as boot_layout runs the others (the programs
# built, the initramfs packed, QEMU under `timeout`, its serial output shown and kept). Sets
# QEMU_RC, GUEST_TIME and PCAP_FILE.
arm64_boot() {
    local wd=$1 pcap=$2 t0
    arm64_build "$wd"
    arm64_initramfs "$wd" "$pcap"
    arm64_qemu_cmd "$wd" "$pcap"
    printf '%q ' "${QEMU_CMD[@]}" >"$wd/qemu.cmdline"
    echo "==== hwtests/qemu: layout arm64: booting guest (timeout ${TIMEOUT}s) ===="
    t0=$(date +%s.%N)
    set +e
    # --foreground: QEMU stays in this script's process group (see boot_layout).
    timeout --foreground --kill-after=10 "$TIMEOUT" "${QEMU_CMD[@]}" </dev/null 2>"$wd/qemu.stderr" |
        sed -u 's/\r$//' | tee "$wd/serial.log"
    QEMU_RC=${PIPESTATUS[0]}
    set -e
    GUEST_TIME=$(elapsed "$t0")
    echo "==== hwtests/qemu: layout arm64: guest finished after ${GUEST_TIME}s (qemu status $QEMU_RC) ===="
    if grep -v 'hub [0-9]* is not connected to host network' "$wd/qemu.stderr" >"$wd/qemu.stderr.shown"; then
        echo "---- QEMU stderr ----"
        cat "$wd/qemu.stderr.shown"
    fi
    [ -z "$pcap" ] || echo "hwtests/qemu: capture: $pcap ($(stat -c %s "$pcap" 2>/dev/null || echo 0) bytes)"
    PCAP_FILE=$pcap
}
