//! Linux packet sockets (AF_PACKET) with TPACKET_V2 rings: the kernel interface of the
//! af_packet backend (`devices::afpacket`), with the `unsafe` it needs (socket options, ioctls,
//! the ring memory the kernel writes) kept here.
//!
//! One socket per queue, bound to one interface, with a receive ring and a transmit ring in one
//! mapping: receive first, transmit right after (Linux `Documentation/networking/
//! packet_mmap.rst`). Each ring frame starts with a `tpacket2_hdr` whose first word,
//! `tp_status`, says who owns the frame:
//! - receive: the kernel fills a frame and sets `TP_STATUS_USER`; we copy it out and give it
//!   back by writing `TP_STATUS_KERNEL` (0);
//! - transmit: a frame is ours while its status is `TP_STATUS_AVAILABLE` (0, with timestamp
//!   bits possibly OR-ed in); we write the bytes and `tp_len`, then `TP_STATUS_SEND_REQUEST`,
//!   and `send()` kicks the kernel, which sets the frame back to available once sent (with
//!   `PACKET_LOSS`, a malformed frame is skipped instead of stopping the ring).
//!
//! The status word is read with an acquire load and written with a release store (the kernel's
//! side pairs them with its barriers, packet_mmap.rst); the rest of a frame is read and written
//! only through raw pointers while we own it. No Rust reference to ring memory is ever made.
//!
//! Ring geometry ([`RingGeometry::for_frames`]) follows the longest frame the interface
//! carries, so that any MTU fits a ring frame (an MTU-9000 link, `lo` with 65,536): the rules of
//! packet_mmap.rst ("PACKET_MMAP settings") are that `tp_block_size` is a multiple of the page
//! size, `tp_frame_size` a multiple of `TPACKET_ALIGNMENT` (16) and larger than the header,
//! frames never cross a block (`frames_per_block = tp_block_size / tp_frame_size`, the rest of a
//! block is a gap in the mapping), and `tp_frame_nr = frames_per_block * tp_block_nr`. The
//! kernel allocates each block as a power of two of pages, so the block is a power of two too
//! (packet_mmap.rst: "or there will be a waste of memory"), chosen large enough that the gap at
//! its end is at most an eighth of it; the frames then share the block out between them.
//!
//! System calls: reading the receive ring takes none (the kernel's status words are in the
//! mapping); the transmit ring takes one `send()` per [`PacketTx::kick`], which the transmit
//! queue makes once per burst. [`PacketTx::syscalls`] counts them, so that a test can hold the
//! queues to that.
//!
//! Why TPACKET_V2 and not V3: a V3 receive block reaches user space only when full or when its
//! timeout expires, which adds up to that timeout of latency to a polled burst (DPDK's
//! af_packet driver uses V2 for the same reason).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};

/// The ring geometry of one socket (each of its two rings has it), as the kernel is asked for it
/// (`struct tpacket_req`); see the module doc for the rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGeometry {
    /// Bytes per frame, header included: a multiple of 16.
    pub frame_size: u32,
    /// Bytes per block: a power of two, at least a page.
    pub block_size: u32,
    /// Frames per block (`block_size / frame_size`).
    pub frames_per_block: u32,
    /// Blocks per ring.
    pub blocks: u32,
}

/// `TPACKET_ALIGNMENT` (linux/if_packet.h): frames and the data in them are aligned to it.
const ALIGN: usize = libc::TPACKET_ALIGNMENT;
/// Where a received Ethernet frame starts in its ring frame (`tp_mac`): the kernel puts the
/// network header at `TPACKET_ALIGN(TPACKET2_HDRLEN + 16)` (af_packet.c `tpacket_rcv`,
/// `netoff`, for a 14-byte link header) and the 14 bytes before it.
const RX_MAC: usize = (libc::TPACKET2_HDRLEN + 16).next_multiple_of(ALIGN) - 14;
/// The longest ring frame asked for (a block is at most 8 of them): 1 MiB, past any MTU Linux
/// has (`lo` has 65,536).
const MAX_FRAME_SIZE: usize = 1 << 20;

impl RingGeometry {
    /// The geometry of a ring of at least `frames` frames, each taking a link-layer frame of
    /// `max_frame` bytes both as received (behind the header, at `tp_mac`) and to send (behind
    /// the header, where the kernel reads it), for pages of `page` bytes.
    pub fn for_frames(max_frame: usize, frames: u32, page: usize) -> Result<RingGeometry> {
        let least = (RX_MAC.max(TX_DATA) + max_frame).next_multiple_of(ALIGN);
        if least > MAX_FRAME_SIZE || frames == 0 || !page.is_power_of_two() {
            return Err(Error::InvalidConfig(format!(
                "packet ring: {frames} frames of {max_frame} bytes (ring frames of {least}, at most {MAX_FRAME_SIZE}); there must be some frames, and the interface's MTU must be below 1 MiB"
            )));
        }
        // The smallest power of two (of at least a page) that wastes at most an eighth of
        // itself; at 8 frames per block the gap is below one frame, so this ends by then.
        let mut block = page.max(least.next_power_of_two());
        while block % least > block / 8 {
            block *= 2;
        }
        let per_block = block / least;
        // The frames share the block out: what is left over is room in every frame.
        let frame_size = (block / per_block) / ALIGN * ALIGN;
        let blocks = (frames as usize).div_ceil(per_block);
        let g = RingGeometry {
            frame_size: frame_size as u32,
            block_size: u32::try_from(block).expect("at most 8 MiB"),
            frames_per_block: per_block as u32,
            blocks: u32::try_from(blocks).map_err(|_| {
                Error::InvalidConfig(format!("packet ring: {frames} frames is too many"))
            })?,
        };
        g.ring_bytes().ok_or_else(|| {
            Error::InvalidConfig(format!(
                "packet ring: {frames} frames of {frame_size} bytes do not fit the address space"
            ))
        })?;
        Ok(g)
    }

    /// Frames per ring.
    pub fn frames(&self) -> u32 {
        self.frames_per_block * self.blocks
    }

    /// The longest frame a ring frame takes, received or sent.
    pub fn room(&self) -> usize {
        self.frame_size as usize - RX_MAC.max(TX_DATA)
    }

    /// Bytes of one ring (whole blocks), if two of them fit the address space.
    fn ring_bytes(&self) -> Option<usize> {
        let one = (self.block_size as usize).checked_mul(self.blocks as usize)?;
        one.checked_mul(2).map(|_| one)
    }
}

/// What the kernel says of an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Its index in this network namespace.
    pub index: i32,
    /// Its MAC address.
    pub mac: [u8; 6],
    /// Its MTU (bytes of payload behind the 14-byte Ethernet header).
    pub mtu: u32,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Up with a carrier (`IFF_RUNNING`).
    pub running: bool,
}

/// Bytes before a transmit frame's data: `TPACKET2_HDRLEN - sizeof(sockaddr_ll)`, where the
/// kernel looks for it when `PACKET_TX_HAS_OFF` is not set (packet_mmap.rst).
const TX_DATA: usize = libc::TPACKET2_HDRLEN - std::mem::size_of::<libc::sockaddr_ll>();
/// Where the `sockaddr_ll` of a receive frame starts (behind the aligned header).
const RX_SLL: usize = 32;
/// `sll_pkttype` of a frame this host sent (`PACKET_OUTGOING`).
const OUTGOING: u8 = 4;

/// The system's page size (what ring blocks are multiples of).
pub fn page_size() -> usize {
    // SAFETY: plain query; no memory is involved.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096).max(4096)
}

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn permission(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
}

/// An `ifreq` naming `name` (at most 15 bytes).
fn ifreq(name: &str) -> Result<libc::ifreq> {
    let c = CString::new(name).map_err(|_| Error::NoSuchInterface { name: name.into() })?;
    let bytes = c.as_bytes_with_nul();
    if bytes.len() > libc::IFNAMSIZ {
        return Err(Error::NoSuchInterface { name: name.into() });
    }
    // SAFETY: `ifreq` is plain old data (a name and a union of integers and addresses), for
    // which all zeroes is a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, &s) in r.ifr_name.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    Ok(r)
}

/// One `SIOCGIF*` ioctl on `fd` for `name`.
fn if_ioctl(fd: RawFd, name: &str, req: libc::c_ulong) -> Result<libc::ifreq> {
    let mut r = ifreq(name)?;
    // SAFETY: `r` is a valid, writable `ifreq` for the duration of the call; the SIOCGIF*
    // requests only write into it.
    if unsafe { libc::ioctl(fd, req as _, &mut r) } < 0 {
        let e = errno();
        if e.raw_os_error() == Some(libc::ENODEV) {
            return Err(Error::NoSuchInterface { name: name.into() });
        }
        return Err(Error::io(
            format!("reading interface {name} (ioctl {req:#x})"),
            e,
        ));
    }
    Ok(r)
}

/// The facts of interface `name` in the calling thread's network namespace.
pub fn interface(name: &str) -> Result<Interface> {
    // Any socket serves for these ioctls; a datagram socket needs no privilege.
    // SAFETY: plain syscall; the result is checked.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(Error::io("opening a socket to query interfaces", errno()));
    }
    // SAFETY: `raw` is a new descriptor we own.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    interface_via(&fd, name)
}

/// The facts of interface `name` in the network namespace of socket `fd` (whatever the
/// calling thread's).
fn interface_via(fd: &OwnedFd, name: &str) -> Result<Interface> {
    let index = if_ioctl(fd.as_raw_fd(), name, libc::SIOCGIFINDEX)?;
    let hw = if_ioctl(fd.as_raw_fd(), name, libc::SIOCGIFHWADDR)?;
    let mtu = if_ioctl(fd.as_raw_fd(), name, libc::SIOCGIFMTU)?;
    let flags = if_ioctl(fd.as_raw_fd(), name, libc::SIOCGIFFLAGS)?;
    // SAFETY: each union member read is the one its request filled in.
    let (index, sa, mtu, flags) = unsafe {
        (
            index.ifr_ifru.ifru_ifindex,
            hw.ifr_ifru.ifru_hwaddr,
            mtu.ifr_ifru.ifru_mtu,
            flags.ifr_ifru.ifru_flags,
        )
    };
    let mut mac = [0u8; 6];
    for (m, &b) in mac.iter_mut().zip(&sa.sa_data) {
        *m = b as u8;
    }
    let flags = i32::from(flags);
    Ok(Interface {
        index,
        mac,
        mtu: mtu.max(0) as u32,
        up: flags & libc::IFF_UP != 0,
        running: flags & libc::IFF_RUNNING != 0,
    })
}

fn set_int(fd: RawFd, opt: libc::c_int, value: libc::c_int, what: &str) -> Result<()> {
    // SAFETY: `value` is a valid `int` option value for the call's duration.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            opt,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(Error::io(
            format!("setting {what} on a packet socket"),
            errno(),
        ));
    }
    Ok(())
}

/// A ring of one socket: where it starts in the mapping, its geometry, and the next frame (its
/// block and its place in the block, so that stepping on costs an add and a compare, no
/// division).
#[derive(Debug)]
struct Ring {
    start: usize,
    geo: RingGeometry,
    /// Bytes of the ring (`blocks * block_size`).
    len: usize,
    /// The next frame's block, as its offset from `start`.
    block_at: usize,
    /// The next frame's place in its block.
    slot: u32,
}

impl Ring {
    fn new(start: usize, geo: RingGeometry) -> Ring {
        Ring {
            start,
            geo,
            len: geo.block_size as usize * geo.blocks as usize,
            block_at: 0,
            slot: 0,
        }
    }

    /// The next frame.
    #[inline(always)]
    fn frame(&self, map: NonNull<u8>) -> *mut u8 {
        // In bounds: `block_at < len`, `slot < frames_per_block`, and the ring's blocks are
        // within the mapping (made so in `open`).
        map.as_ptr().wrapping_add(
            self.start + self.block_at + self.slot as usize * self.geo.frame_size as usize,
        )
    }

    /// The frame `k` frames after the next one (cold: for callers that look ahead).
    fn frame_ahead(&self, map: NonNull<u8>, k: u32) -> *mut u8 {
        let per = self.geo.frames_per_block as usize;
        let i = self.slot as usize + k as usize % self.geo.frames() as usize;
        let block =
            (self.block_at / self.geo.block_size as usize + i / per) % self.geo.blocks as usize;
        map.as_ptr().wrapping_add(
            self.start
                + block * self.geo.block_size as usize
                + (i % per) * self.geo.frame_size as usize,
        )
    }

    /// Steps to the frame after the next.
    #[inline(always)]
    fn advance(&mut self) {
        self.slot += 1;
        if self.slot == self.geo.frames_per_block {
            self.slot = 0;
            self.block_at += self.geo.block_size as usize;
            if self.block_at == self.len {
                self.block_at = 0;
            }
        }
    }
}

/// A handle on a packet socket for its port: the kernel's counters of the socket, and the
/// interface's state in the socket's network namespace, readable from any thread (the port
/// reads them while the queue runs elsewhere, maybe in another namespace).
#[derive(Clone, Debug)]
pub struct SocketCounters(Arc<OwnedFd>);

impl SocketCounters {
    /// The facts of interface `name` now, as the socket's network namespace has them.
    pub fn interface(&self, name: &str) -> Result<Interface> {
        interface_via(&self.0, name)
    }

    /// Frames the socket received and frames it dropped (ring full) since the last call: the
    /// kernel clears both on every read (`PACKET_STATISTICS`).
    pub fn take(&self) -> Result<(u64, u64)> {
        let mut st = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid and writable, `len` its size.
        let r = unsafe {
            libc::getsockopt(
                self.0.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if r < 0 {
            return Err(Error::io("reading a packet socket's counters", errno()));
        }
        Ok((u64::from(st.tp_packets), u64::from(st.tp_drops)))
    }
}

/// What both halves of a socket share: the descriptor and the mapping of its rings.
struct Mapped {
    fd: Arc<OwnedFd>,
    map: MmapRaw,
    /// The kernel filters out our own transmissions (`PACKET_IGNORE_OUTGOING`, Linux 4.20);
    /// without it the receive path drops them itself.
    ignores_outgoing: bool,
}

impl Mapped {
    fn base(&self) -> NonNull<u8> {
        NonNull::new(self.map.as_mut_ptr()).expect("a mapping is never at address 0")
    }

    /// The status word of `frame` (a frame of one of this socket's rings), as an atomic: it is
    /// 4-byte aligned (frames are 16-byte aligned in a page-aligned mapping).
    fn status_of(&self, frame: *mut u8) -> &AtomicU32 {
        // SAFETY: `frame` is the start of a ring frame inside the mapping, which lives as long
        // as `self`. The kernel and we access the word atomically (the kernel with its
        // barriers), and an `AtomicU32` may alias memory another party writes.
        unsafe { AtomicU32::from_ptr(frame.cast()) }
    }
}

/// A packet socket bound to one interface, with its two rings mapped; [`split`](Self::split)
/// gives its receive and transmit halves to the two queues of a pair.
pub struct PacketSocket {
    m: Arc<Mapped>,
    rx: Ring,
    tx: Ring,
}

impl std::fmt::Debug for PacketSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketSocket")
            .field("fd", &self.m.fd.as_raw_fd())
            .field("rx", &self.rx)
            .field("tx", &self.tx)
            .finish()
    }
}

impl PacketSocket {
    /// Opens a packet socket on interface `index` with two rings of geometry `geo` each, the
    /// kernel's queueing discipline bypassed and malformed transmit frames skipped
    /// (`PACKET_LOSS`).
    pub fn open(index: i32, geo: RingGeometry) -> Result<PacketSocket> {
        // Protocol 0: nothing is received before `bind` names the interface.
        // SAFETY: plain syscall; the result is checked.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = errno();
            if permission(&e) {
                return Err(Error::NotPermitted {
                    what: "opening a packet socket".into(),
                });
            }
            return Err(Error::io("opening a packet socket", e));
        }
        // SAFETY: `raw` is a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        set_int(
            s,
            libc::PACKET_VERSION,
            libc::tpacket_versions::TPACKET_V2 as _,
            "PACKET_VERSION",
        )?;
        set_int(s, libc::PACKET_LOSS, 1, "PACKET_LOSS")?;
        set_int(s, libc::PACKET_QDISC_BYPASS, 1, "PACKET_QDISC_BYPASS")?;
        let ignores_outgoing = set_int(s, libc::PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING")
            .map_err(|e| tracing::debug!(error = %e, "kernel without PACKET_IGNORE_OUTGOING; own frames dropped by the receive path"))
            .is_ok();
        let req = libc::tpacket_req {
            tp_block_size: geo.block_size,
            tp_block_nr: geo.blocks,
            tp_frame_size: geo.frame_size,
            tp_frame_nr: geo.frames(),
        };
        let ring_bytes = geo.ring_bytes().ok_or_else(|| {
            Error::InvalidConfig(format!(
                "packet ring {geo:?}: too large for the address space"
            ))
        })?;
        for (opt, what) in [
            (libc::PACKET_RX_RING, "receive"),
            (libc::PACKET_TX_RING, "transmit"),
        ] {
            // SAFETY: `req` is a valid `tpacket_req` for the call's duration.
            let r = unsafe {
                libc::setsockopt(
                    s,
                    libc::SOL_PACKET,
                    opt,
                    (&req as *const libc::tpacket_req).cast(),
                    std::mem::size_of::<libc::tpacket_req>() as libc::socklen_t,
                )
            };
            if r < 0 {
                return Err(Error::RingRefused {
                    bytes: ring_bytes,
                    reason: format!("{what} ring: {}", errno()),
                });
            }
        }
        let map = MmapOptions::new()
            .len(2 * ring_bytes)
            .populate()
            .map_raw(s)
            .map_err(|e| Error::RingRefused {
                bytes: 2 * ring_bytes,
                reason: format!("mapping the rings: {e}"),
            })?;
        // SAFETY: `sockaddr_ll` is plain old data; all zeroes is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = index;
        // SAFETY: `sll` is a valid address of the stated size for the call's duration.
        let r = unsafe {
            libc::bind(
                s,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            let e = errno();
            if e.raw_os_error() == Some(libc::ENODEV) {
                return Err(Error::NoSuchInterface {
                    name: format!("index {index}"),
                });
            }
            return Err(Error::io(
                format!("binding a packet socket to interface {index}"),
                e,
            ));
        }
        Ok(PacketSocket {
            m: Arc::new(Mapped {
                fd: Arc::new(fd),
                map,
                ignores_outgoing,
            }),
            rx: Ring::new(0, geo),
            tx: Ring::new(ring_bytes, geo),
        })
    }

    /// Joins fanout group `group`: the kernel spreads the interface's frames over the group's
    /// sockets by flow hash (a full socket's share rolled over to the others). Not with
    /// `PACKET_FANOUT_FLAG_DEFRAG`: it would hand the socket reassembled datagrams, frames that
    /// were never on the wire (and longer than the MTU); the flow hash keeps a datagram's
    /// fragments together anyway.
    pub fn join_fanout(&self, group: u16) -> Result<()> {
        let kind = libc::PACKET_FANOUT_HASH | libc::PACKET_FANOUT_FLAG_ROLLOVER;
        set_int(
            self.m.fd.as_raw_fd(),
            libc::PACKET_FANOUT,
            (u32::from(group) | kind << 16) as libc::c_int,
            "PACKET_FANOUT",
        )
    }

    /// The socket's counters, for whoever reports them.
    pub fn counters(&self) -> SocketCounters {
        SocketCounters(self.m.fd.clone())
    }

    /// The receive and the transmit half (they share the socket, which closes with the last).
    pub fn split(self) -> (PacketRx, PacketTx) {
        (
            PacketRx {
                m: self.m.clone(),
                ring: self.rx,
            },
            PacketTx {
                m: self.m,
                ring: self.tx,
                syscalls: 0,
            },
        )
    }
}

/// The receive ring of a packet socket.
pub struct PacketRx {
    m: Arc<Mapped>,
    ring: Ring,
}

impl PacketRx {
    /// Whether the kernel has filled the next `n` frames (at most a ring's worth), which
    /// [`rx_next`](Self::rx_next) would return without waiting. Polling needs no such test;
    /// it is for a caller that must know a burst is there before it polls (the
    /// instruction-count harness, which must poll full rings only).
    pub fn filled(&self, n: u32) -> bool {
        (0..n.min(self.ring.geo.frames())).all(|k| {
            let frame = self.ring.frame_ahead(self.m.base(), k);
            self.m.status_of(frame).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
        })
    }

    /// System calls the receive ring has made: none, as frames are read from the mapping
    /// (kept so that the queue's count of both directions reads the same way).
    pub fn syscalls(&self) -> u64 {
        0
    }

    /// The ring's geometry.
    pub fn geometry(&self) -> RingGeometry {
        self.ring.geo
    }

    /// The next received frame, if the kernel has filled one; frames this host sent are given
    /// back and skipped. The frame goes back to the kernel when the returned view is dropped.
    pub fn rx_next(&mut self) -> Option<RxFrame<'_>> {
        loop {
            let frame = self.ring.frame(self.m.base());
            let status = self.m.status_of(frame).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                return None;
            }
            let h = frame.cast::<libc::tpacket2_hdr>();
            // SAFETY: the frame is ours (TP_STATUS_USER, acquired), so the kernel wrote its
            // header before and does not write it now; fields are read through the raw
            // pointer, with no reference to ring memory.
            let (len, snaplen, mac) = unsafe {
                (
                    std::ptr::addr_of!((*h).tp_len).read_volatile(),
                    std::ptr::addr_of!((*h).tp_snaplen).read_volatile(),
                    std::ptr::addr_of!((*h).tp_mac).read_volatile(),
                )
            };
            // Our own transmissions, when the kernel does not filter them (`sll_pkttype`).
            let own = |frame: *mut u8| {
                // SAFETY: as above; `RX_SLL + 10` is `sll_pkttype`, inside the frame's header.
                unsafe { frame.add(RX_SLL + 10).read_volatile() == OUTGOING }
            };
            if !self.m.ignores_outgoing && own(frame) {
                self.m
                    .status_of(frame)
                    .store(libc::TP_STATUS_KERNEL, Ordering::Release);
                self.ring.advance();
                continue;
            }
            let room = self.ring.geo.frame_size as usize;
            return Some(RxFrame {
                data: frame.wrapping_add(mac as usize),
                // Never past the frame, whatever the header says.
                in_ring: (snaplen as usize).min(room.saturating_sub(mac as usize)),
                on_wire: len as usize,
                status,
                rx: self,
                frame,
            });
        }
    }
}

/// The transmit ring of a packet socket.
pub struct PacketTx {
    m: Arc<Mapped>,
    ring: Ring,
    /// System calls made (kicks), for [`syscalls`](Self::syscalls).
    syscalls: u64,
}

impl PacketTx {
    /// The next free transmit frame, if the kernel has sent what was in it.
    pub fn tx_next(&mut self) -> Option<TxFrame<'_>> {
        let frame = self.ring.frame(self.m.base());
        // Timestamp bits may be OR-ed into an available frame's status.
        let status = self.m.status_of(frame).load(Ordering::Acquire);
        let busy = libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING;
        if status & busy != 0 {
            return None;
        }
        Some(TxFrame { frame, tx: self })
    }

    /// Whether the next `n` frames (at most a ring's worth) are free: the kernel has sent what
    /// was in them. For a caller that must know before it sends (the instruction-count
    /// harness); sending needs no such test.
    pub fn free(&self, n: u32) -> bool {
        let busy = libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING;
        (0..n.min(self.ring.geo.frames())).all(|k| {
            let frame = self.ring.frame_ahead(self.m.base(), k);
            self.m.status_of(frame).load(Ordering::Acquire) & busy == 0
        })
    }

    /// The longest frame a transmit frame takes.
    pub fn tx_room(&self) -> usize {
        self.ring.geo.frame_size as usize - TX_DATA
    }

    /// System calls the transmit ring has made: one per [`kick`](Self::kick).
    pub fn syscalls(&self) -> u64 {
        self.syscalls
    }

    /// Tells the kernel to send the frames marked so far (does not wait): one system call.
    pub fn kick(&mut self) -> Result<()> {
        self.syscalls += 1;
        // SAFETY: a zero-length send with a null buffer is the documented kick of a transmit
        // ring (packet_mmap.rst); nothing is read from the pointer.
        let r = unsafe {
            libc::send(
                self.m.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            let e = errno();
            // The device queue is busy: the frames stay marked and go with the next kick.
            if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) {
                return Ok(());
            }
            return Err(Error::io("kicking a packet socket's transmit ring", e));
        }
        Ok(())
    }
}

/// A received frame, ours until dropped (then the kernel's again).
pub struct RxFrame<'a> {
    rx: &'a mut PacketRx,
    frame: *mut u8,
    data: *mut u8,
    in_ring: usize,
    on_wire: usize,
    status: u32,
}

impl RxFrame<'_> {
    /// Bytes of the frame in the ring (`tp_snaplen`): fewer than [`wire_len`](Self::wire_len)
    /// when it did not fit the ring frame.
    pub fn len(&self) -> usize {
        self.in_ring
    }

    /// Whether the frame has no bytes.
    pub fn is_empty(&self) -> bool {
        self.in_ring == 0
    }

    /// The frame's length as received (`tp_len`), without the tag the kernel took.
    pub fn wire_len(&self) -> usize {
        self.on_wire
    }

    /// The tag the kernel took out of the frame, with its TPID (`TP_STATUS_VLAN_VALID`; the
    /// TPID is 0x8100 when the kernel does not report one, as before Linux 3.14).
    pub fn vlan(&self) -> Option<(u16, u16)> {
        if self.status & libc::TP_STATUS_VLAN_VALID == 0 {
            return None;
        }
        let h = self.frame.cast::<libc::tpacket2_hdr>();
        // SAFETY: the frame is ours until `self` drops (its status was TP_STATUS_USER); the
        // header's fields are read through the raw pointer. Read only for a tagged frame.
        let (tci, tpid) = unsafe {
            (
                std::ptr::addr_of!((*h).tp_vlan_tci).read_volatile(),
                std::ptr::addr_of!((*h).tp_vlan_tpid).read_volatile(),
            )
        };
        let tpid = if self.status & libc::TP_STATUS_VLAN_TPID_VALID != 0 {
            tpid
        } else {
            0x8100
        };
        Some((tpid, tci))
    }

    /// Copies `dst.len()` bytes of the frame from byte `from` on into `dst`.
    ///
    /// # Panics
    /// If that reaches past [`len`](Self::len).
    pub fn read(&self, from: usize, dst: &mut [u8]) {
        assert!(
            from.checked_add(dst.len())
                .is_some_and(|end| end <= self.in_ring),
            "read past a received frame"
        );
        // SAFETY: the frame is ours until `self` drops, `from..from + dst.len()` is inside
        // its data (checked above against a snaplen bounded by the ring frame), and `dst`
        // is ordinary memory that does not overlap the ring.
        unsafe { std::ptr::copy_nonoverlapping(self.data.add(from), dst.as_mut_ptr(), dst.len()) };
    }
}

impl Drop for RxFrame<'_> {
    fn drop(&mut self) {
        self.rx
            .m
            .status_of(self.frame)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.rx.ring.advance();
    }
}

/// A free transmit frame.
pub struct TxFrame<'a> {
    tx: &'a mut PacketTx,
    frame: *mut u8,
}

impl TxFrame<'_> {
    /// Writes the frame made of `parts` (one after the other), with zeros behind it up to
    /// `min_len` bytes when it is shorter (Ethernet padding), and hands it to the kernel for
    /// the next [`kick`](PacketTx::kick). Returns false, writing nothing, when that is longer
    /// than [`tx_room`](PacketTx::tx_room). A fixed number of parts (an array), so that the
    /// usual frame of one or three is copied without a loop.
    #[inline(always)]
    pub fn send<const N: usize>(self, parts: [&[u8]; N], min_len: usize) -> bool {
        self.send_parts(&parts, min_len)
    }

    /// [`send`](Self::send) for any number of parts (a chain's segments).
    #[inline(always)]
    pub fn send_parts(self, parts: &[&[u8]], min_len: usize) -> bool {
        let data: usize = parts.iter().map(|p| p.len()).sum();
        let len = data.max(min_len);
        if len > self.tx.tx_room() {
            return false;
        }
        let mut at = TX_DATA;
        for p in parts {
            // SAFETY: the frame is ours (available, acquired); `TX_DATA + len` is within the
            // ring frame (checked above); `p` is ordinary memory that does not overlap the ring.
            unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), self.frame.add(at), p.len()) };
            at += p.len();
        }
        if data < len {
            // SAFETY: as above: `at..TX_DATA + len` is inside the frame, which is ours.
            unsafe { std::ptr::write_bytes(self.frame.add(at), 0, len - data) };
        }
        let h = self.frame.cast::<libc::tpacket2_hdr>();
        // SAFETY: as above; the header's length field is written through the raw pointer.
        unsafe { std::ptr::addr_of_mut!((*h).tp_len).write_volatile(len as u32) };
        self.tx
            .m
            .status_of(self.frame)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx.ring.advance();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_keeps_the_kernels_rules_for_any_mtu() {
        for page in [4096usize, 16384, 65536] {
            for mtu in [
                0usize, 68, 1500, 1522, 4000, 9000, 9216, 16110, 65535, 65536,
            ] {
                let max_frame = mtu + 22;
                for frames in [1u32, 2, 64, 512, 513, 65536] {
                    let g = RingGeometry::for_frames(max_frame, frames, page).unwrap();
                    let what = format!("MTU {mtu}, {frames} frames, page {page}: {g:?}");
                    let (fs, block) = (g.frame_size as usize, g.block_size as usize);
                    assert_eq!(fs % libc::TPACKET_ALIGNMENT, 0, "{what}");
                    assert!(fs > libc::TPACKET2_HDRLEN, "{what}");
                    assert!(block % page == 0 && block.is_power_of_two(), "{what}");
                    assert_eq!(g.frames_per_block as usize, block / fs, "{what}");
                    assert!(
                        block - fs * g.frames_per_block as usize <= block / 8,
                        "{what}"
                    );
                    assert!(g.frames() >= frames, "{what}");
                    assert!(g.frames() - frames < g.frames_per_block, "{what}");
                    assert!(g.room() >= max_frame, "{what}");
                    assert!(
                        RX_MAC + max_frame <= fs && TX_DATA + max_frame <= fs,
                        "{what}"
                    );
                }
            }
        }
        // An MTU-1500 link: 5 frames of 1,632 bytes in 8 KiB.
        let g = RingGeometry::for_frames(1522, 512, 4096).unwrap();
        assert_eq!((g.frame_size, g.block_size, g.frames()), (1632, 8192, 515));
        assert!(RingGeometry::for_frames(1522, 0, 4096).is_err());
        assert!(RingGeometry::for_frames(2 << 20, 8, 4096).is_err());
    }

    #[test]
    fn walking_a_ring_visits_every_frame_once_and_skips_block_gaps() {
        let g = RingGeometry::for_frames(9022, 20, 4096).unwrap();
        assert!(
            g.block_size % g.frame_size != 0,
            "a geometry with gaps: {g:?}"
        );
        let base = NonNull::<u8>::dangling();
        let mut r = Ring::new(4096, g);
        let mut seen = Vec::new();
        for _ in 0..g.frames() {
            seen.push(r.frame(base) as usize - base.as_ptr() as usize);
            r.advance();
        }
        assert_eq!(
            r.frame(base),
            base.as_ptr().wrapping_add(4096),
            "back to the start"
        );
        let per = g.frames_per_block as usize;
        let expect: Vec<usize> = (0..g.frames() as usize)
            .map(|i| 4096 + i / per * g.block_size as usize + i % per * g.frame_size as usize)
            .collect();
        assert_eq!(seen, expect);
        // Looking ahead agrees with walking, from anywhere, wrapping.
        for start in 0..g.frames() {
            let mut w = Ring::new(4096, g);
            for _ in 0..start {
                w.advance();
            }
            for k in 0..2 * g.frames() {
                let i = ((start + k) % g.frames()) as usize;
                assert_eq!(
                    w.frame_ahead(base, k) as usize - base.as_ptr() as usize,
                    expect[i]
                );
            }
        }
    }

    #[test]
    fn the_kernel_takes_the_geometry_of_lo_and_of_jumbo_frames() {
        let lo = match interface("lo") {
            Ok(i) => i,
            Err(e) => return eprintln!("skipped: no lo ({e})"),
        };
        for mtu in [1500usize, 9000, lo.mtu as usize] {
            let g = RingGeometry::for_frames(mtu + 22, 16, 4096).unwrap();
            match PacketSocket::open(lo.index, g) {
                Ok(s) => {
                    let (rx, tx) = s.split();
                    assert_eq!(rx.geometry(), g);
                    assert!(tx.tx_room() >= mtu + 22);
                    assert!(tx.free(g.frames()), "a new transmit ring is free");
                    assert_eq!((rx.syscalls(), tx.syscalls()), (0, 0));
                }
                Err(Error::NotPermitted { .. }) => return eprintln!("skipped: not root"),
                Err(e) => panic!("MTU {mtu}, {g:?}: {e}"),
            }
        }
    }
}
