//! The work a repetition times, and its clock.
//!
//! Work: `fwd` forwards A.rx -> B.tx without reading the frame ([`forward_burst`]); `l2` reads
//! the destination MAC and the tag with [`PacketVlan::take_vlan`], folds both into a checksum
//! the compiler must keep, and asks for the same tag on transmit (a VLAN-transparent
//! forwarder). A benchmark reports figures; it asserts nothing about speed.

use std::time::{Duration, Instant};

use crate::app::forward::{forward_burst, forward_burst_with, FwdStats};
use crate::device::{QueueError, RxQueue};
use crate::devices::sim::Source;
use crate::platform::dma::Packet;
use crate::vlan::{PacketVlan, SwVlanTx, VlanRx, VlanTx};
use crate::{Error, Result};

use super::plan::{Traffic, Work};

/// Frame length on the wire without the tag and without FCS.
pub const FRAME: usize = 64;
/// The tag of tagged traffic: VID 100, PCP 5.
const TCI: u16 = 0xa064;

/// The source of `traffic`'s frames: 64-byte UDP, tagged or not.
pub(super) fn source(traffic: Traffic) -> Source {
    let s = Source::udp(crate::device::MacAddr([0x02, 0, 0, 0, 0, 2]), FRAME);
    match traffic {
        Traffic::Tagged => s.with_vlan(0x8100, TCI),
        Traffic::Untagged => s,
    }
}

/// The frame the source sends (and the null device copies into every buffer).
pub(super) fn frame(traffic: Traffic) -> Vec<u8> {
    source(traffic).frame()
}

/// One burst of the `l2` work: read the destination MAC and the tag, use both, send the frame
/// out with the tag it came with.
#[inline]
pub(super) fn l2_burst<R: RxQueue, T: SwVlanTx>(
    rx: &mut VlanRx<R>,
    tx: &mut VlanTx<T>,
    batch: &mut Vec<Packet>,
    burst: usize,
    st: &mut FwdStats,
    acc: &mut u64,
) -> std::result::Result<(), QueueError> {
    forward_burst_with(rx, tx, batch, burst, st, |rx, batch| {
        let ctx = rx.ctx();
        for p in batch {
            let tci = p.take_vlan(ctx);
            let d = p.data();
            let dst = d.get(..6).map_or(0, |m| {
                u64::from_le_bytes([m[0], m[1], m[2], m[3], m[4], m[5], 0, 0])
            });
            let t = tci.map_or(0, |t| t.raw());
            *acc = acc.rotate_left(5) ^ dst ^ u64::from(t);
            if let Some(t) = tci {
                // Cannot fail: the tag was received, so its VID is not 4095.
                let _ = p.set_tx_vlan(t);
            }
        }
    })?;
    Ok(())
}

/// What [`timed`] returns as its time.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Clock {
    /// The time the loop took.
    Elapsed,
    /// The loop's busy time: the bursts that received something, each from its clock read to
    /// the next (a clock read a burst, which `Elapsed` does not pay: for a separate repetition,
    /// not one of the compared samples).
    Busy,
}

/// How long a repetition that has forwarded nothing when its `dur` ends goes on waiting for its
/// first packet (a threaded model's thread not yet scheduled is a late start, not a stuck
/// device): the pipeline's bound, one for every timed run.
pub(super) use crate::app::pipeline::STALL;

/// Forwards for `dur` (longer while nothing has been forwarded, up to [`STALL`]); returns the
/// stats and the time taken (or busy, see [`Clock`]).
pub(super) fn timed<R: RxQueue, T: SwVlanTx>(
    rx: &mut VlanRx<R>,
    tx: &mut VlanTx<T>,
    work: Work,
    burst: usize,
    dur: Duration,
    clock: Clock,
) -> Result<(FwdStats, Duration)> {
    let mut batch = Vec::with_capacity(burst);
    let mut st = FwdStats::default();
    let mut acc = 0u64;
    let start = Instant::now();
    let (deadline, stalled) = (start + dur, start + dur.max(STALL));
    let (mut busy_time, mut last, mut got) = (Duration::ZERO, start, 0);
    let err = |e: QueueError| Error::InvalidConfig(format!("burst failed: {e}"));
    loop {
        for _ in 0..256 {
            if clock == Clock::Busy {
                let t = Instant::now();
                if got > 0 {
                    busy_time += t - last;
                }
                last = t;
            }
            let before = st.rx;
            match work {
                Work::Fwd => forward_burst(rx, tx, &mut batch, burst, &mut st).map(drop),
                Work::L2 => l2_burst(rx, tx, &mut batch, burst, &mut st, &mut acc),
            }
            .map_err(err)?;
            got = st.rx - before;
        }
        let now = Instant::now();
        if now >= deadline && (st.tx > 0 || now >= stalled) {
            break;
        }
    }
    let took = start.elapsed();
    if got > 0 {
        busy_time += start + took - last;
    }
    std::hint::black_box(acc);
    Ok((
        st,
        if clock == Clock::Busy {
            busy_time
        } else {
            took
        },
    ))
}
