//! The software/firmware semaphore of the 82599's shared resources, for AUTOC.
//!
//! Manageability firmware (LESM, BMC pass-through) may own the MAC's link registers too, so a
//! driver writes AUTOC only while it holds SW_FW_SYNC's software bit for the MAC CSRs and the
//! firmware bit is clear (Linux and DPDK `prot_autoc_write_82599`, `ixgbe_acquire_swfw_sync`).
//! SW_FW_SYNC itself is changed only under the EEPROM semaphore of SWSM: a read of SWSM that
//! sees SMBI clear sets it (the reader owns it), then SWESMBI is set and read back
//! (`ixgbe_get_eeprom_semaphore`). Linux takes the MAC CSR semaphore only when LESM firmware
//! is enabled in the NVM; taking it always is harmless without firmware and simpler.
//!
//! Every wait is bounded by a count of short sleeps, as in Linux: 2000 x 50 us for SMBI and for
//! SWESMBI, 200 x 5 ms for the resource. Failing to get it is an error naming who holds it.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::platform::mmio::Mmio;
use crate::platform::regs::ixgbe::{self as r};

const SEM_TRIES: u32 = 2000;
const SEM_PAUSE: Duration = Duration::from_micros(50);
const SYNC_TRIES: u32 = 200;
const SYNC_PAUSE: Duration = Duration::from_millis(5);

/// The MAC CSR semaphore, held until dropped.
pub(crate) struct MacCsr<'a, M: Mmio + ?Sized> {
    m: &'a M,
    name: &'a str,
}

impl<'a, M: Mmio + ?Sized> MacCsr<'a, M> {
    /// Takes SW_FW_SYNC.SW_MAC_CSR_SM once the firmware's bit is clear.
    pub(crate) fn acquire(m: &'a M, name: &'a str) -> Result<Self> {
        let sw = r::sw_fw_sync::SW_MAC_CSR_SM.bit();
        let fw = r::sw_fw_sync::FW_MAC_CSR_SM.bit();
        let mut last = 0;
        for _ in 0..SYNC_TRIES {
            eeprom_semaphore(m, name)?;
            last = m.read(r::SW_FW_SYNC);
            if last & (sw | fw) == 0 {
                m.write(r::SW_FW_SYNC, last | sw);
                release_eeprom_semaphore(m);
                return Ok(MacCsr { m, name });
            }
            release_eeprom_semaphore(m);
            std::thread::sleep(SYNC_PAUSE);
        }
        if last == u32::MAX {
            return Err(Error::DeviceGone {
                device: name.to_string(),
            });
        }
        Err(Error::RegisterTimeout {
            device: name.to_string(),
            register: "SW_FW_SYNC.SW_MAC_CSR_SM/FW_MAC_CSR_SM",
            expect: format!(
                "clear (held by {})",
                if last & fw != 0 {
                    "firmware"
                } else {
                    "another driver"
                }
            ),
            timeout_ms: (SYNC_PAUSE * SYNC_TRIES).as_millis() as u64,
            last,
        })
    }
}

impl<M: Mmio + ?Sized> Drop for MacCsr<'_, M> {
    fn drop(&mut self) {
        let sw = r::sw_fw_sync::SW_MAC_CSR_SM.bit();
        match eeprom_semaphore(self.m, self.name) {
            Ok(()) => {
                self.m.modify(r::SW_FW_SYNC, sw, 0);
                release_eeprom_semaphore(self.m);
            }
            // Without the EEPROM semaphore, clearing our own bit is still better than keeping
            // the resource (Linux does the same on its release path's failure).
            Err(e) => {
                tracing::warn!(port = %self.name, error = %e, "releasing SW_FW_SYNC without the EEPROM semaphore");
                self.m.modify(r::SW_FW_SYNC, sw, 0);
            }
        }
    }
}

/// Takes SWSM's EEPROM semaphore: SMBI (set by the read that finds it clear), then SWESMBI.
fn eeprom_semaphore<M: Mmio + ?Sized>(m: &M, name: &str) -> Result<()> {
    let smbi = r::swsm::SMBI.bit();
    let swesmbi = r::swsm::SWESMBI.bit();
    let mut got = false;
    let mut last = 0;
    for _ in 0..SEM_TRIES {
        last = m.read(r::SWSM);
        if last == u32::MAX {
            return Err(Error::DeviceGone {
                device: name.to_string(),
            });
        }
        if last & smbi == 0 {
            got = true;
            break;
        }
        std::thread::sleep(SEM_PAUSE);
    }
    if !got {
        // Linux: a stale SMBI left by a driver that died; clear it and try once more.
        release_eeprom_semaphore(m);
        last = m.read(r::SWSM);
        if last & smbi != 0 {
            return Err(timeout(name, "SWSM.SMBI", "clear", last));
        }
    }
    for _ in 0..SEM_TRIES {
        m.modify(r::SWSM, 0, swesmbi);
        last = m.read(r::SWSM);
        if last & swesmbi != 0 {
            return Ok(());
        }
        std::thread::sleep(SEM_PAUSE);
    }
    release_eeprom_semaphore(m);
    Err(timeout(
        name,
        "SWSM.SWESMBI",
        "set (firmware holds the EEPROM semaphore)",
        last,
    ))
}

fn release_eeprom_semaphore<M: Mmio + ?Sized>(m: &M) {
    m.modify(r::SWSM, r::swsm::SMBI.bit() | r::swsm::SWESMBI.bit(), 0);
}

fn timeout(name: &str, register: &'static str, expect: &str, last: u32) -> Error {
    Error::RegisterTimeout {
        device: name.to_string(),
        register,
        expect: expect.into(),
        timeout_ms: (SEM_PAUSE * SEM_TRIES).as_millis() as u64,
        last,
    }
}
