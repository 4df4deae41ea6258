//! The queues of an af_packet port: copies between the socket's rings and pool buffers, with
//! the tag put back or taken as metadata on receive, and inserted while copying on transmit.
//!
//! A ring frame holds the interface's longest frame, a pool buffer maybe less (2 KiB against
//! 9,014 bytes on an MTU-9000 link): a longer frame is received into a chain of buffers, each
//! filled to its room, and a chain is gathered into one ring frame to send. System calls: none
//! on receive, one kick per transmit burst (counted: [`AfpRx::syscalls`], [`AfpTx::syscalls`]).

use std::sync::atomic::Ordering;

use super::{VlanWord, STRIP};
use crate::device::{QueueError, QueueStats, RxQueue, TxQueue};
use crate::devices::offload::{soft, TxCaps};
use crate::error::Result;
use crate::platform::dma::{Meta, Packet, Pool};
use crate::platform::packet::{PacketRx, PacketSocket, PacketTx, RxFrame};
use crate::vlan::{SwVlanCounts, SwVlanTx, Tpid};

/// The receive and transmit queue of one socket.
pub(super) fn pair(
    socket: PacketSocket,
    pool: Pool,
    vlan: VlanWord,
    mtu: usize,
) -> Result<(AfpRx, AfpTx)> {
    let (rx, tx) = socket.split();
    let room = pool.buf_size().saturating_sub(pool.headroom());
    Ok((
        AfpRx {
            ring: rx,
            spare: Vec::new(),
            pool,
            vlan,
            room,
            stats: QueueStats::default(),
        },
        AfpTx {
            ring: tx,
            mtu,
            stats: QueueStats::default(),
            refused_logged: false,
            kick_logged: false,
            offload_logged: false,
        },
    ))
}

/// Receive queue of an af_packet port.
pub struct AfpRx {
    ring: PacketRx,
    pool: Pool,
    /// Buffers taken from the pool for the next frames (at most a burst's worth, kept across
    /// bursts so that an idle poll allocates nothing).
    spare: Vec<Packet>,
    vlan: VlanWord,
    /// The longest frame a buffer takes.
    room: usize,
    stats: QueueStats,
}

/// The tag to put back into a frame, or the metadata of one delivered stripped.
fn tag_plan(f: &RxFrame<'_>, word: u32) -> (Option<[u8; 4]>, Meta) {
    match f.vlan() {
        Some((tpid, tci)) if word & STRIP != 0 && u32::from(tpid) == word >> 16 => (
            None,
            Meta {
                vlan_tci: tci,
                flags: Meta::VLAN_STRIPPED,
                rss_hash: 0,
            },
        ),
        Some((tpid, tci)) if f.len() >= 12 => {
            let (a, b) = (tpid.to_be_bytes(), tci.to_be_bytes());
            (Some([a[0], a[1], b[0], b[1]]), Meta::default())
        }
        _ => (None, Meta::default()),
    }
}

/// Copies bytes `from..from + dst.len()` of frame `f` as delivered (with `tag`, if any, put
/// back after the 12 address bytes) into `dst`.
fn read_tagged(f: &RxFrame<'_>, tag: Option<[u8; 4]>, from: usize, dst: &mut [u8]) {
    let Some(t) = tag else {
        return f.read(from, dst);
    };
    let (mut at, mut out) = (from, 0);
    while out < dst.len() {
        let n = match at {
            0..12 => {
                let n = (12 - at).min(dst.len() - out);
                f.read(at, &mut dst[out..out + n]);
                n
            }
            12..16 => {
                let n = (16 - at).min(dst.len() - out);
                dst[out..out + n].copy_from_slice(&t[at - 12..at - 12 + n]);
                n
            }
            _ => {
                let n = dst.len() - out;
                f.read(at - 4, &mut dst[out..]);
                n
            }
        };
        at += n;
        out += n;
    }
}

/// Frame `f` (`len` bytes with `tag` put back) as a chain of `pool`'s buffers, each filled to
/// its room `room`, copied straight out of the ring; `None` when the pool has too few free
/// buffers (none is kept then).
#[cold]
fn chain_of(
    pool: &Pool,
    room: usize,
    f: &RxFrame<'_>,
    tag: Option<[u8; 4]>,
    len: usize,
) -> Option<Packet> {
    let n = len.div_ceil(room);
    let mut bufs = Vec::with_capacity(n);
    if pool.alloc_bulk(n, &mut bufs) < n {
        Pool::free_bulk(bufs);
        return None;
    }
    let mut bufs = bufs.into_iter();
    let mut head = bufs.next().expect("at least one buffer");
    let mut at = room.min(len);
    head.set_len(at);
    read_tagged(f, tag, 0, head.data_mut());
    for mut seg in bufs {
        let take = room.min(len - at);
        seg.set_len(take);
        read_tagged(f, tag, at, seg.data_mut());
        at += take;
        head.push_segment(seg);
    }
    Some(head)
}

impl AfpRx {
    /// System calls this queue has made: none, as receiving reads the mapped ring (no poll,
    /// also when it is empty).
    pub fn syscalls(&self) -> u64 {
        self.ring.syscalls()
    }

    /// Whether the kernel has put `n` frames in the ring that the next burst would take. A
    /// burst needs no such test; it is for a caller that must not poll before a burst is there
    /// (the instruction-count harness, so that every measured burst does the same work).
    pub fn ready(&self, n: usize) -> bool {
        self.ring.filled(u32::try_from(n).unwrap_or(u32::MAX))
    }
}

impl RxQueue for AfpRx {
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        // One load per burst: the strip bit and the TPID that counts.
        let word = self.vlan.load(Ordering::Relaxed);
        if self.spare.len() < max {
            let want = max - self.spare.len();
            if self.pool.alloc_bulk(want, &mut self.spare) < want {
                self.stats.no_room += 1;
            }
        }
        let (mut n, mut bytes) = (0, 0u64);
        while n < max && !self.spare.is_empty() {
            let Some(f) = self.ring.rx_next() else {
                break;
            };
            let (tag, meta) = tag_plan(&f, word);
            let len = f.len() + if tag.is_some() { 4 } else { 0 };
            // A frame cut short by the ring: dropped and counted.
            if f.len() < f.wire_len() {
                self.stats.dropped += 1;
                continue;
            }
            if len > self.room {
                // Longer than a buffer (a jumbo frame): a chain.
                match chain_of(&self.pool, self.room, &f, tag, len) {
                    Some(mut p) => {
                        drop(f);
                        p.meta = meta;
                        bytes += len as u64;
                        batch.push(p);
                        n += 1;
                    }
                    None => self.stats.no_room += 1,
                }
                continue;
            }
            // A fresh buffer (length 0, default headroom): it takes `len <= room`.
            let mut p = self.spare.pop().expect("checked not empty");
            p.set_len(len);
            let d = p.data_mut();
            // The frame is copied as its 12 address bytes and the rest, tag or no tag: one copy
            // of a whole 60-byte frame out of the ring measured 15 to 30 ns per packet slower
            // than the two (`vfio-nic bench --device afp`, tagged, Hardware vs Deferred
            // receive; the cause, inside the C library's copy of cold lines, is not established).
            let at = f.len().min(12);
            f.read(0, &mut d[..at]);
            match tag {
                Some(t) => {
                    d[12..16].copy_from_slice(&t);
                    f.read(12, &mut d[16..]);
                }
                None => f.read(at, &mut d[at..]),
            }
            drop(f);
            p.meta = meta;
            bytes += len as u64;
            batch.push(p);
            n += 1;
        }
        self.stats.packets += n as u64;
        self.stats.bytes += bytes;
        Ok(n)
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }
}

/// Transmit queue of an af_packet port.
pub struct AfpTx {
    ring: PacketTx,
    mtu: usize,
    stats: QueueStats,
    /// A refused frame has been logged (once per queue; the counter keeps counting).
    refused_logged: bool,
    /// A failed kick has been logged (once per queue).
    kick_logged: bool,
    /// A frame dropped by the software offloads has been logged (once per queue).
    offload_logged: bool,
}

/// Frames shorter than this leave padded with zeros (the TxQueue contract).
const MIN_FRAME: usize = 60;

impl AfpTx {
    /// Whether the kernel takes a frame of `len` bytes with ethertype `ethertype`: MTU + 14,
    /// or MTU + 18 with 0x8100 (`packet_extra_vlan_len_allowed`).
    fn fits(&self, len: usize, ethertype: u16) -> bool {
        len <= self.mtu + 14 || (len <= self.mtu + 18 && ethertype == 0x8100)
    }

    fn refuse(&mut self, len: usize) {
        self.stats.dropped += 1;
        if !self.refused_logged {
            self.refused_logged = true;
            tracing::warn!(len, mtu = self.mtu,
                "af_packet transmit: frame longer than the interface takes (MTU + 14, or + 18 with an 802.1Q tag) dropped; counted in the queue's `dropped`");
        }
    }

    /// Copies packets from the front of `batch` into the ring, each with its tag pushed
    /// while copying when `tpid` is given and it is marked [`Meta::TX_VLAN`]; one kick for
    /// the burst (and one when the ring is full, so that frames a failed kick left behind
    /// go). Frames the interface cannot take are dropped and counted (`dropped`); the rest
    /// stay in the batch when the ring is full. Returns how many left the batch: queued, or
    /// dropped so.
    fn send(
        &mut self,
        batch: &mut Vec<Packet>,
        mut vlan: Option<(Tpid, &mut SwVlanCounts)>,
    ) -> Result<usize, QueueError> {
        // Checksums and TSO in software (the copy below gathers chains), for a burst that asks
        // for them or has chains: one bit test per packet for the usual burst.
        let mut refused = 0;
        if !batch.iter().all(Packet::is_plain) {
            refused = soft::resolve_for_queue(
                batch,
                TxCaps::CHAINS,
                &mut self.stats.dropped,
                &mut self.offload_logged,
            ) as u64;
        }
        let mut done = 0;
        let mut sent = 0;
        let mut sent_or_full = false;
        let mut bytes = 0u64;
        for p in batch.iter_mut() {
            let d = p.data();
            let tag = match &mut vlan {
                Some((tpid, counts)) if p.meta.flags & Meta::TX_VLAN != 0 => {
                    if d.len() < 12 {
                        counts.malformed += 1;
                        self.stats.dropped += 1;
                        done += 1;
                        continue;
                    }
                    let (a, b) = (tpid.get().to_be_bytes(), p.meta.vlan_tci.to_be_bytes());
                    Some([a[0], a[1], b[0], b[1]])
                }
                _ => None,
            };
            let len = p.frame_len() + if tag.is_some() { 4 } else { 0 };
            let ethertype = match tag {
                Some(t) => u16::from_be_bytes([t[0], t[1]]),
                None => d
                    .get(12..14)
                    .map_or(0, |e| u16::from_be_bytes([e[0], e[1]])),
            };
            if !self.fits(len, ethertype) {
                self.refuse(len);
                refused += 1;
                done += 1;
                continue;
            }
            let Some(frame) = self.ring.tx_next() else {
                // Full: frames marked earlier wait for a kick that failed (link down, device
                // queue stopped). Kick again, or nothing would ever send them.
                self.stats.no_room += 1;
                sent_or_full = true;
                break;
            };
            let ok = if p.is_plain() {
                match &tag {
                    Some(t) => frame.send([&d[..12], t, &d[12..]], MIN_FRAME),
                    None => frame.send([d], MIN_FRAME),
                }
            } else {
                // A chain: its segments gathered by the copy.
                let mut parts: Vec<&[u8]> = Vec::with_capacity(p.segment_count() + 2);
                match &tag {
                    Some(t) => parts.extend([&d[..12], &t[..], &d[12..]]),
                    None => parts.push(d),
                }
                parts.extend(p.tail_segments().iter().map(Packet::data));
                frame.send_parts(&parts, MIN_FRAME)
            };
            if !ok {
                // Longer than a ring frame (cannot happen for what `fits` lets through, as the
                // ring frames are sized for the MTU): dropped and counted like a refusal.
                self.refuse(len);
                refused += 1;
            } else {
                if let Some((_, counts)) = &mut vlan {
                    if tag.is_some() {
                        counts.inserted += 1;
                    }
                }
                sent += 1;
                bytes += len.max(MIN_FRAME) as u64;
            }
            done += 1;
        }
        if (sent > 0 || sent_or_full) && self.ring.kick().is_err() && !self.kick_logged {
            self.kick_logged = true;
            tracing::warn!("af_packet transmit: the kernel refused the ring kick (interface down?); the frames stay in the ring and go with a later kick (logged once per queue)");
        }
        if done == batch.len() {
            // The usual burst: all of it gone, freed in one pass.
            Pool::free_vec(batch);
        } else {
            Pool::free_bulk(batch.drain(..done));
        }
        self.stats.packets += sent;
        self.stats.bytes += bytes;
        // Removed from the batch: queued, or refused (dropped and counted), as the VLAN
        // layer's transmit wrapper counts its own drops; the rest stay.
        Ok((sent + refused) as usize)
    }
}

impl AfpTx {
    /// System calls this queue has made: one kick (`send()`) per burst that queued a frame
    /// (or found the ring full), none per packet.
    pub fn syscalls(&self) -> u64 {
        self.ring.syscalls()
    }

    /// Whether the next `n` ring frames are free (the kernel has sent what was in them). A
    /// burst needs no such test; it is for the instruction-count harness, as
    /// [`AfpRx::ready`].
    pub fn has_room(&self, n: usize) -> bool {
        self.ring.free(u32::try_from(n).unwrap_or(u32::MAX))
    }
}

impl TxQueue for AfpTx {
    /// Copies the frames as they are (a [`Meta::TX_VLAN`] mark is the VLAN layer's to act on).
    fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        self.send(batch, None)
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }
}

/// Software insertion while copying: no move of the frame in its buffer.
impl SwVlanTx for AfpTx {
    fn tx_burst_sw_vlan(
        &mut self,
        batch: &mut Vec<Packet>,
        tpid: Tpid,
        counts: &mut SwVlanCounts,
    ) -> Result<usize, QueueError> {
        self.send(batch, Some((tpid, counts)))
    }
}
