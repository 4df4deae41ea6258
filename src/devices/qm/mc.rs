//! The management complex (MC) command interface: the 64-byte command (a header and seven
//! parameter words), its status codes, and the driver's side of the command portal.
//!
//! A command is written parameters first, then the header's high word (token and command id)
//! and last its low word with status READY, as DPDK's `mc_send_command` does (it writes
//! `word[1]` before `word[0]`); the MC answers by changing the status, and the parameters are
//! read back only when it is OK (`mc_read_response`). The ids and layouts are the data of
//! `regs/qbman.toml` (`platform::regs::qbman::cmd`).
//!
//! Sources: Linux `include/linux/fsl/mc.h` and `drivers/bus/fsl-mc/mc-sys.c`; DPDK
//! `drivers/bus/fslmc/mc/fsl_mc_cmd.h` and `mc_sys.c` (`docs/dpaa2-facts.md` section 9).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::platform::barrier::dma_rmb;
use crate::platform::mmio::Mmio;
use crate::platform::regs::McCommand;

/// Bytes of one command portal.
pub const PORTAL_BYTES: usize = 64;
/// How long the driver waits for a command (DPDK busy-polls for one second).
pub const TIMEOUT: Duration = Duration::from_secs(1);

/// A command's status byte (`enum mc_cmd_status`; there is no value 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum McStatus {
    /// Completed.
    Ok = 0,
    /// Submitted, not completed yet.
    Ready = 1,
    /// Authentication error (a token that opens nothing).
    AuthErr = 3,
    /// No privilege.
    NoPrivilege = 4,
    /// DMA or I/O error.
    DmaErr = 5,
    /// Configuration error.
    ConfigErr = 6,
    /// Timed out inside the MC.
    Timeout = 7,
    /// No resources.
    NoResource = 8,
    /// No memory.
    NoMemory = 9,
    /// Busy.
    Busy = 0xa,
    /// Unsupported operation (an unknown command id or version).
    UnsupportedOp = 0xb,
    /// Invalid state (a command out of order).
    InvalidState = 0xc,
}

impl McStatus {
    /// Decodes a status byte; unknown values are `None`.
    pub fn from_u8(v: u8) -> Option<McStatus> {
        use McStatus::*;
        Some(match v {
            0 => Ok,
            1 => Ready,
            3 => AuthErr,
            4 => NoPrivilege,
            5 => DmaErr,
            6 => ConfigErr,
            7 => Timeout,
            8 => NoResource,
            9 => NoMemory,
            0xa => Busy,
            0xb => UnsupportedOp,
            0xc => InvalidState,
            _ => return None,
        })
    }

    /// The name the MC headers give it.
    pub fn name(self) -> &'static str {
        use McStatus::*;
        match self {
            Ok => "OK",
            Ready => "READY",
            AuthErr => "AUTH_ERR",
            NoPrivilege => "NO_PRIVILEGE",
            DmaErr => "DMA_ERR",
            ConfigErr => "CONFIG_ERR",
            Timeout => "TIMEOUT",
            NoResource => "NO_RESOURCE",
            NoMemory => "NO_MEMORY",
            Busy => "BUSY",
            UnsupportedOp => "UNSUPPORTED_OP",
            InvalidState => "INVALID_STATE",
        }
    }

    /// What to do about it.
    pub fn hint(self) -> &'static str {
        use McStatus::*;
        match self {
            AuthErr => "the object's token is not open on this portal; reopen the port",
            UnsupportedOp => {
                "the MC firmware does not know this command or version; update the firmware"
            }
            InvalidState => "the command came out of order (the object is not open, or is enabled)",
            ConfigErr => "a parameter is out of range for this object",
            NoResource | NoMemory => "the MC ran out of resources; free objects or reboot the MC",
            Busy | Timeout => "the MC is busy; retry later",
            _ => "see the MC firmware log",
        }
    }
}

/// The 64-bit command header (`struct mc_cmd_header`): src_id, flags_hw, status, flags_sw,
/// token le16, cmd_id le16.
pub mod header {
    /// Builds a header.
    pub const fn new(cmd_id: u16, token: u16, status: u8) -> u64 {
        (status as u64) << 16 | (token as u64) << 32 | (cmd_id as u64) << 48
    }
    /// The status byte.
    pub const fn status(h: u64) -> u8 {
        (h >> 16) as u8
    }
    /// The token.
    pub const fn token(h: u64) -> u16 {
        (h >> 32) as u16
    }
    /// The command id (`id << 4 | version`).
    pub const fn cmd_id(h: u64) -> u16 {
        (h >> 48) as u16
    }
}

/// A completed command: the token in its header (the one `open` returns) and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The response header's token.
    pub token: u16,
    /// The response parameters.
    pub params: [u64; 7],
}

/// The driver's side of an MC command portal.
pub struct McPortal<M: Mmio> {
    regs: Arc<M>,
    device: String,
}

impl<M: Mmio> McPortal<M> {
    /// The command portal in `regs` (64 bytes from offset 0), of the device named `device`.
    pub fn new(regs: Arc<M>, device: impl Into<String>) -> McPortal<M> {
        McPortal {
            regs,
            device: device.into(),
        }
    }

    /// Sends `cmd` for the object `token` names and waits for its answer; an error status is
    /// a typed error naming the command and the status.
    pub fn send(&self, cmd: McCommand, token: u16, params: [u64; 7]) -> Result<Reply> {
        let r = &*self.regs;
        for (i, p) in params.iter().enumerate() {
            r.write32(8 + 8 * i, *p as u32);
            r.write32(12 + 8 * i, (*p >> 32) as u32);
        }
        let h = header::new(cmd.cmd_id(), token, McStatus::Ready as u8);
        r.write32(4, (h >> 32) as u32);
        r.doorbell(0, h as u32);
        let deadline = Instant::now() + TIMEOUT;
        let status = loop {
            let lo = r.read32(0);
            if lo == u32::MAX && r.read32(4) == u32::MAX {
                return Err(Error::DeviceGone {
                    device: self.device.clone(),
                });
            }
            let s = header::status(u64::from(lo));
            if s != McStatus::Ready as u8 {
                // The answer is there: its parameters are read after the status (Linux's
                // `mc_read_response` reads the header with `readq`, whose arm64 `__io_ar` is
                // this `dma_rmb`).
                dma_rmb();
                break s;
            }
            if Instant::now() > deadline {
                return Err(Error::RegisterTimeout {
                    device: self.device.clone(),
                    register: cmd.name,
                    expect: "to leave status READY (the MC's answer)".into(),
                    timeout_ms: TIMEOUT.as_millis() as u64,
                    last: lo,
                });
            }
            std::hint::spin_loop();
        };
        match McStatus::from_u8(status) {
            Some(McStatus::Ok) => {}
            known => {
                return Err(Error::McCommand {
                    device: self.device.clone(),
                    command: cmd.name,
                    status: known.map_or("unknown", McStatus::name),
                    code: status,
                    hint: known
                        .map_or("the MC answered a status no header defines", McStatus::hint),
                })
            }
        }
        let token = header::token(u64::from(r.read32(4)) << 32);
        let mut out = [0u64; 7];
        for (i, p) in out.iter_mut().enumerate() {
            *p = u64::from(r.read32(8 + 8 * i)) | u64::from(r.read32(12 + 8 * i)) << 32;
        }
        Ok(Reply { token, params: out })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::mmio::RecordingMmio;
    use crate::platform::regs::qbman::cmd;

    #[test]
    fn header_fields_sit_where_mc_h_puts_them() {
        let h = header::new(cmd::DPNI_OPEN.cmd_id(), 0x1234, 1);
        assert_eq!(cmd::DPNI_OPEN.cmd_id(), 0x8011);
        assert_eq!(cmd::DPNI_GET_ATTR.cmd_id(), 0x0046);
        assert_eq!(cmd::DPNI_ADD_VLAN_ID.cmd_id(), 0x2312);
        let b = h.to_le_bytes();
        assert_eq!(b[2], 1, "status is byte 2");
        assert_eq!(
            u16::from_le_bytes([b[4], b[5]]),
            0x1234,
            "token is bytes 4..5"
        );
        assert_eq!(
            u16::from_le_bytes([b[6], b[7]]),
            0x8011,
            "cmd_id is bytes 6..7"
        );
        assert_eq!(header::status(h), 1);
        assert_eq!(header::token(h), 0x1234);
        assert_eq!(header::cmd_id(h), 0x8011);
    }

    #[test]
    fn every_status_code_decodes_and_two_does_not() {
        for v in 0..=0xc {
            assert_eq!(McStatus::from_u8(v).map(|s| s as u8), (v != 2).then_some(v));
        }
        assert_eq!(McStatus::from_u8(0xd), None);
    }

    #[test]
    fn an_error_status_names_the_command_and_the_status() {
        let m = Arc::new(RecordingMmio::new(PORTAL_BYTES));
        m.on_read(0, |_, _| u32::from(McStatus::InvalidState as u8) << 16);
        let mc = McPortal::new(m.clone(), "qm:0");
        let e = mc
            .send(cmd::DPNI_ENABLE, 5, [0; 7])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("DPNI_ENABLE") && e.contains("INVALID_STATE"),
            "{e}"
        );
        // The header went last, its low word (the status) after the high one.
        let w = m.writes();
        assert_eq!(
            &w[w.len() - 2..].iter().map(|x| x.0).collect::<Vec<_>>(),
            &[4, 0]
        );
        assert_eq!(w[w.len() - 2].1, 0x0021_0005, "token 5, DPNI_ENABLE 0x0021");
    }
}
