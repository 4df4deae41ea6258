//! Writing received frames to a pcap file, exactly as they were on the wire.
//!
//! # Why "as on the wire"
//! Where a VLAN tag is removed is a runtime switch in this crate (device, receive burst, or the
//! application). A capture must not depend on it: [`PcapSink::write_packet`] writes
//! [`wire_frame_into`](crate::vlan::PacketVlan::wire_frame_into)'s bytes, which put a stripped
//! tag back where it was, so the same traffic gives the same file in every receive mode.
//!
//! # Format
//! Classic pcap (not pcapng: every tool reads it), Ethernet link type, microsecond timestamps,
//! written by the `pcap-file` crate. Timestamps are wall-clock time by default;
//! [`Timestamps::Zero`] and [`Timestamps::Index`] make files comparable byte for byte.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};

use crate::error::{Error, Result};
use crate::platform::dma::Packet;
use crate::vlan::{PacketVlan, VlanRxCtx};

/// How packets are timestamped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Timestamps {
    /// Wall-clock time of the write.
    #[default]
    Wall,
    /// Every packet at 0 (deterministic files).
    Zero,
    /// Packet i at i microseconds (deterministic, and still ordered for viewers).
    Index,
}

/// Largest frame written whole (longer frames are cut, with their original length recorded).
pub const SNAPLEN: u32 = 65535;

/// A pcap file being written.
pub struct PcapSink<W: Write> {
    writer: PcapWriter<W>,
    path: PathBuf,
    ts: Timestamps,
    frames: u64,
    bytes: u64,
    scratch: Vec<u8>,
}

impl PcapSink<BufWriter<File>> {
    /// Creates (or truncates) `path` and writes the file header. Call it before opening ports,
    /// so a bad path fails before any device is touched.
    pub fn create(path: &Path, ts: Timestamps) -> Result<Self> {
        let file = File::create(path).map_err(|e| {
            Error::io(
                format!(
                    "cannot create capture file {} (give a path in an existing, writable directory)",
                    path.display()
                ),
                e,
            )
        })?;
        PcapSink::new(BufWriter::new(file), path, ts)
    }
}

impl<W: Write> PcapSink<W> {
    /// Writes the file header to `w`; `path` is only used in error messages.
    pub fn new(w: W, path: &Path, ts: Timestamps) -> Result<Self> {
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: SNAPLEN,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::MicroSecond,
            endianness: Endianness::Little,
        };
        let writer = PcapWriter::with_header(w, header).map_err(|e| write_error(path, e))?;
        Ok(PcapSink {
            writer,
            path: path.to_path_buf(),
            ts,
            frames: 0,
            bytes: 0,
            scratch: Vec::with_capacity(2048),
        })
    }

    fn timestamp(&self) -> Duration {
        match self.ts {
            Timestamps::Wall => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
            Timestamps::Zero => Duration::ZERO,
            Timestamps::Index => Duration::from_micros(self.frames),
        }
    }

    /// Writes one frame's bytes.
    pub fn write_frame(&mut self, frame: &[u8]) -> Result<()> {
        let ts = self.timestamp();
        let cut = &frame[..frame.len().min(SNAPLEN as usize)];
        let p = PcapPacket::new(ts, frame.len() as u32, cut);
        self.writer
            .write_packet(&p)
            .map_err(|e| write_error(&self.path, e))?;
        self.frames += 1;
        self.bytes += frame.len() as u64;
        Ok(())
    }

    /// Writes a received packet as it was on the wire (a stripped tag re-inserted), whatever the
    /// receive mode; `ctx` is the receive context of the burst that delivered it.
    pub fn write_packet(&mut self, p: &Packet, ctx: VlanRxCtx) -> Result<()> {
        let mut buf = std::mem::take(&mut self.scratch);
        p.wire_frame_into(ctx, &mut buf);
        let r = self.write_frame(&buf);
        self.scratch = buf;
        r
    }

    /// Frames written.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Frame bytes written (original lengths).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Flushes and returns the writer.
    pub fn finish(self) -> Result<W> {
        let mut w = self.writer.into_writer();
        w.flush()
            .map_err(|e| Error::io(format!("writing capture file {}", self.path.display()), e))?;
        Ok(w)
    }
}

fn write_error(path: &Path, e: pcap_file::PcapError) -> Error {
    let source = match e {
        pcap_file::PcapError::IoError(io) => io,
        other => std::io::Error::other(other.to_string()),
    };
    Error::io(
        format!(
            "writing capture file {} (check free space and permissions)",
            path.display()
        ),
        source,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_records_follow_the_pcap_format() {
        let mut sink = PcapSink::new(Vec::new(), Path::new("mem"), Timestamps::Index).unwrap();
        sink.write_frame(&[1, 2, 3]).unwrap();
        sink.write_frame(&[4; 70]).unwrap();
        assert_eq!((sink.frames(), sink.bytes()), (2, 73));
        let b = sink.finish().unwrap();
        assert_eq!(&b[..4], &0xa1b2_c3d4u32.to_le_bytes());
        assert_eq!(&b[20..24], &1u32.to_le_bytes(), "link type Ethernet");
        // First record: ts 0 s 0 us, incl 3, orig 3.
        assert_eq!(
            &b[24..40],
            &[0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0]
        );
        assert_eq!(&b[40..43], &[1, 2, 3]);
        // Second record at 1 us.
        assert_eq!(&b[47..51], &1u32.to_le_bytes());
        assert_eq!(b.len(), 24 + 16 + 3 + 16 + 70);
    }

    #[test]
    fn an_unwritable_path_fails_with_one_line_saying_what_to_do() {
        let e = PcapSink::create(Path::new("/nonexistent/x.pcap"), Timestamps::Zero)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("/nonexistent/x.pcap") && e.contains("writable"),
            "{e}"
        );
        assert!(!e.contains('\n'));
    }
}
