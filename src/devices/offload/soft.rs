//! Transmit offloads in software: what a device without checksum insertion, TSO or gather
//! (af_packet, null, the queue-manager device, virtio-net without its offload features) does
//! instead, with the bytes the Intel chips would send (module rules in [`super`]).
//!
//! [`resolve`] runs at the top of such a device's transmit burst. Frames that ask for nothing
//! the device lacks cost one flag test (and, on devices without gather, one more for the
//! chain); the others are replaced in the batch by their result, so a TSO frame leaves the
//! burst as its segments: the burst's count is of frames queued.

use super::{OffloadError, Request, TxCaps, L4};
use crate::platform::checksum::{checksum, checksum_add, checksum_finish, checksum_fold};
use crate::platform::dma::{Packet, Pool, TxOffload};

/// The 16-bit ones'-complement sum of `bytes` placed at byte offset `at` of a longer run: a
/// run starting at an odd offset sums byte-swapped (RFC 1071 section 2(B)).
fn sum_at(at: usize, bytes: &[u8]) -> u32 {
    let s = checksum_fold(checksum_add(0, bytes));
    if at % 2 == 1 {
        s.swap_bytes().into()
    } else {
        s.into()
    }
}

/// The sum of the frame's bytes from `from` to its end, across its segments.
fn sum_from(p: &Packet, from: usize) -> u32 {
    let (mut at, mut sum) = (0usize, 0u32);
    for s in p.segments() {
        let end = at + s.len();
        if end > from {
            let skip = from.saturating_sub(at);
            sum += sum_at(at + skip - from, &s[skip..]);
        }
        at = end;
    }
    sum
}

/// The pseudo-header sum of an L4 segment of `l4_len` bytes (RFC 793 / RFC 8200 8.1), from the
/// addresses of the IP header at `ip` of `head`.
pub fn pseudo_header(head: &[u8], ip: usize, ipv4: bool, proto: u8, l4_len: usize) -> u32 {
    let addrs = if ipv4 {
        &head[ip + 12..ip + 20]
    } else {
        &head[ip + 8..ip + 40]
    };
    let len = l4_len as u32;
    checksum_add(0, addrs) + u32::from(proto) + (len >> 16) + (len & 0xffff)
}

/// Writes the checksums `r` asks for into `p` (fields in its first segment, sums over the
/// whole frame).
pub fn fill_checksums(p: &mut Packet, r: &Request) {
    if r.ip_csum {
        let d = p.data_mut();
        let ip = &mut d[r.l2..r.l2 + r.l3];
        ip[10..12].copy_from_slice(&[0, 0]);
        let c = checksum(ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    }
    if let Some(proto) = r.l4_csum {
        let l4_at = r.l2 + r.l3;
        let field = l4_at + proto.csum_offset();
        let l4_len = p.frame_len() - l4_at;
        p.data_mut()[field..field + 2].copy_from_slice(&[0, 0]);
        let sum =
            pseudo_header(p.data(), r.l2, r.ipv4, proto.protocol(), l4_len) + sum_from(p, l4_at);
        let mut c = checksum_finish(sum);
        if proto == L4::Udp && c == 0 {
            c = 0xffff;
        }
        p.data_mut()[field..field + 2].copy_from_slice(&c.to_be_bytes());
    }
}

/// The segments of TSO request `r` (with MSS `mss`) on `p`, as new frames of `p`'s pool with
/// checksums written and no offload request left; `p` is untouched. A payload that fits one
/// segment still gets a segment's treatment (one frame, with the last segment's flags).
pub fn segment(p: &Packet, r: &Request, mss: u16) -> Result<Vec<Packet>, OffloadError> {
    let (hl, mss) = (r.header_len(), usize::from(mss));
    let payload = p.frame_len() - hl;
    let pool = p.pool_handle();
    let header = &p.data()[..hl];
    let ip = r.l2;
    let tcp = r.l2 + r.l3;
    let id0 = u16::from_be_bytes([header[ip + 4], header[ip + 5]]);
    let seq0 = u32::from_be_bytes(header[tcp + 4..tcp + 8].try_into().expect("4 bytes"));
    let count = payload.div_ceil(mss).max(1);
    let mut out = Vec::with_capacity(count);
    let mut bytes = Vec::with_capacity(hl + mss);
    for i in 0..count {
        let chunk = mss.min(payload - i * mss);
        bytes.clear();
        bytes.extend_from_slice(header);
        bytes.resize(hl + chunk, 0);
        p.read_at(hl + i * mss, &mut bytes[hl..]);
        let last = i + 1 == count;
        if r.ipv4 {
            let total = (r.l3 + r.l4 + chunk) as u16;
            bytes[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
            let id = id0.wrapping_add(i as u16);
            bytes[ip + 4..ip + 6].copy_from_slice(&id.to_be_bytes());
        } else {
            let plen = (r.l3 - 40 + r.l4 + chunk) as u16;
            bytes[ip + 4..ip + 6].copy_from_slice(&plen.to_be_bytes());
        }
        let seq = seq0.wrapping_add((i * mss) as u32);
        bytes[tcp + 4..tcp + 8].copy_from_slice(&seq.to_be_bytes());
        // The 82599's default flag masks (DTXTCPFLGL 0x0FF6_0FF6, DTXTCPFLGH 0x0F7F, as
        // FreeBSD read them from a part; see `devices::sim`): FIN (bit 0) and PSH (bit 3) on
        // the last segment only, CWR (bit 7) cleared on the last.
        bytes[tcp + 13] &= if last { !0x80 } else { !0x09 };
        let Some(mut q) = pool.packet_from(&bytes) else {
            Pool::free_bulk(out);
            return Err(OffloadError::NoBuffer);
        };
        q.meta = p.meta;
        let each = Request {
            tso: None,
            l4_csum: Some(L4::Tcp),
            ..*r
        };
        fill_checksums(&mut q, &each);
        out.push(q);
    }
    Ok(out)
}

/// Why [`resolve`] could not keep a frame of several buffers on a device without gather.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("this device sends one buffer per frame, and a {len}-byte frame does not fit one {room}-byte buffer; send it through a port that takes chains, or from a pool of larger buffers")]
pub struct NoGather {
    /// The frame's length.
    pub len: usize,
    /// What the head buffer holds behind its headroom.
    pub room: usize,
}

/// What [`resolve`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Frames dropped: a request that cannot be honoured, or a chain the device cannot gather.
    pub dropped: u64,
    /// The first reason seen, for the queue to log once.
    pub first_error: Option<SoftError>,
}

/// Why [`resolve`] dropped a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SoftError {
    /// The offload request.
    #[error(transparent)]
    Offload(#[from] OffloadError),
    /// The chain.
    #[error(transparent)]
    NoGather(#[from] NoGather),
}

/// Whether `p` asks for work a device of `caps` does not do: any offload, or gathering (what
/// [`resolve`] does for it). A queue that tests this in a pass of its own calls [`resolve`]
/// only when a frame needs it.
#[inline(always)]
pub fn needs_software(p: &Packet, caps: TxCaps) -> bool {
    if p.is_plain() {
        return false;
    }
    p.tx_offload().flags != 0 || (!caps.chains && p.is_chained())
}

/// Does in software, for every frame of `batch`, the work `caps` says the device lacks:
/// checksums written, TSO frames replaced by their segments, chains linearized for a device
/// without gather. Frames that cannot be helped are dropped (counted in the result). Order is
/// kept.
pub fn resolve(batch: &mut Vec<Packet>, caps: TxCaps) -> Resolved {
    let mut done = Resolved::default();
    let Some(first) = batch.iter().position(|p| needs_software(p, caps)) else {
        return done;
    };
    let rest: Vec<Packet> = batch.drain(first..).collect();
    for p in rest {
        if !needs_software(&p, caps) {
            batch.push(p);
            continue;
        }
        if let Err(e) = resolve_one(p, caps, batch) {
            done.dropped += 1;
            done.first_error.get_or_insert(e);
        }
    }
    done
}

/// [`resolve`] of one frame, whose results are appended to `out`.
fn resolve_one(mut p: Packet, caps: TxCaps, out: &mut Vec<Packet>) -> Result<(), SoftError> {
    let start = out.len();
    match Request::of(&p)? {
        Some(r) => match r.tso {
            Some(mss) => out.extend(segment(&p, &r, mss)?),
            None => {
                fill_checksums(&mut p, &r);
                p.set_tx_offload(TxOffload::default());
                out.push(p);
            }
        },
        None => out.push(p),
    }
    if !caps.chains {
        for q in &mut out[start..] {
            if q.is_chained() {
                let (len, room) = (q.frame_len(), q.capacity());
                if q.linearize().is_err() {
                    Pool::free_bulk(out.drain(start..));
                    return Err(NoGather { len, room }.into());
                }
            }
        }
    }
    Ok(())
}

/// [`resolve`] for a queue: frames dropped are added to `dropped` (the queue's counter), and
/// the first reason is logged once per queue (`logged`). Returns how many were dropped now.
pub fn resolve_for_queue(
    batch: &mut Vec<Packet>,
    caps: TxCaps,
    dropped: &mut u64,
    logged: &mut bool,
) -> usize {
    let r = resolve(batch, caps);
    if r.dropped > 0 {
        *dropped += r.dropped;
        if let (Some(e), false) = (r.first_error, *logged) {
            *logged = true;
            tracing::warn!(reason = %e, "transmit: frame dropped, counted in the queue's `dropped` (logged once per queue)");
        }
    }
    r.dropped as usize
}
