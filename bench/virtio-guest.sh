#!/bin/sh
# bench/virtio-guest.sh - the guest side of bench/virtio-compare (run as the suite binary of the
# `virtio` layout of hwtests/qemu/run; busybox sh).
#
# Forwarding between the two virtio-net ports on vfio-pci, DPDK testpmd (io forward, net_virtio)
# and `vfio-nic fwd` in turn, ROUNDS times each, interleaved. The three ports sit on one QEMU
# hub, so a frame forwarded out of one vfio port arrives at the other: FRAMES frames sent once by
# the Linux peer (to a MAC nobody has, so the peer's own device drops them) circulate for as long
# as the forwarder runs, and its rate is the rate of the loop. Each run prints its own
# per-second rates on the console between marker lines; the host reads them.
#   @@BENCH begin <tool> <round>
#   ... testpmd's --stats-period output, or vfio-nic fwd's live lines ...
#   @@BENCH end <tool> <round> <exit status>
set -u
P0=${VFIO_NIC_PORTS%%,*}
P1=${VFIO_NIC_PORTS##*,}
PEER=${VFIO_NIC_PEER_IF:?no peer interface}
ROUNDS=${BENCH_ROUNDS:-5}
SECONDS_PER_RUN=${BENCH_SECONDS:-8}
FRAMES=${BENCH_FRAMES:-64}

mkdir -p /dev/hugepages
mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null || true
ip link set "$PEER" up

inject() {
    # The peer sends FRAMES frames into the hub once; the forwarder keeps them going.
    vfio-nic gen "afp:$PEER" --count "$FRAMES" --dst 02:00:00:00:00:99 --stats-period 0 >/dev/null 2>&1 ||
        echo "@@BENCH inject-failed"
}

dpdk_round() {
    echo "@@BENCH begin dpdk $1"
    # Two lcores on the one vCPU: the main one sleeps between statistics, the forwarding one
    # polls; 1 queue pair per port, bursts of 32, as vfio-nic fwd.
    dpdk-testpmd --lcores '0@0,1@0' -n 1 --in-memory --iova-mode=va \
        -a "$P0" -a "$P1" --log-level=lib.eal:error -- \
        --forward-mode=io --nb-cores=1 --burst=32 --rxd=256 --txd=256 \
        --total-num-mbufs=4096 --stats-period=1 --no-lsc-interrupt >/tmp/dpdk.out 2>&1 &
    pid=$!
    sleep 3
    inject
    sleep "$SECONDS_PER_RUN"
    kill -INT "$pid" 2>/dev/null
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 20 ]; do sleep 1; i=$((i + 1)); done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid"
    st=$?
    # The rates, and whatever went wrong (EAL's and the driver's messages).
    grep -E 'Tx-pps|rror|ail|EAL|Port [0-9]' /tmp/dpdk.out | tail -n 400
    echo "@@BENCH end dpdk $1 $st"
}

ours_round() {
    echo "@@BENCH begin ours $1"
    vfio-nic fwd "$P0" "$P1" --burst 32 --duration $((SECONDS_PER_RUN + 3)) --stats-period 1 >/tmp/ours.out 2>&1 &
    pid=$!
    sleep 3
    inject
    wait "$pid"
    st=$?
    cat /tmp/ours.out
    echo "@@BENCH end ours $1 $st"
}

# The order alternates (DPDK first in odd rounds, ours first in even ones), so that whatever
# builds up in the guest over a round (QEMU's queued frames, caches) falls on both alike.
r=1
while [ $r -le "$ROUNDS" ]; do
    if [ $((r % 2)) = 1 ]; then
        dpdk_round $r
        ours_round $r
    else
        ours_round $r
        dpdk_round $r
    fi
    r=$((r + 1))
done
echo "@@BENCH done"
