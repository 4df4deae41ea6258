//! The control virtqueue (virtio 1.2, 5.1.6.5): one command at a time, each a chain of three
//! descriptors (class and command, the data, the device's one-byte ack) in the ring's own
//! driver area, answered before the next is sent. A command the device does not answer in time
//! stays the device's: its buffers are not touched again, and every later command fails with
//! the name of the one that hangs (unless the device has answered it meanwhile). Used for the receive mode (promiscuous,
//! all-multicast: class VIRTIO_NET_CTRL_RX) and the VLAN filter table (VIRTIO_NET_CTRL_VLAN).
//! Every wait has a deadline and names the command it waited for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ring::{SplitRing, DESC_F_NEXT, DESC_F_WRITE};
use super::transport::{Doorbell, Transport};
use crate::error::{Error, Result};
use crate::platform::dma::DmaMapper;
use crate::platform::mmio::Mmio;

/// `VIRTIO_NET_CTRL_RX` and its commands.
pub const CLASS_RX: u8 = 0;
/// Promiscuous mode on/off.
pub const RX_PROMISC: u8 = 0;
/// All-multicast on/off.
pub const RX_ALLMULTI: u8 = 1;
/// `VIRTIO_NET_CTRL_VLAN` and its commands.
pub const CLASS_VLAN: u8 = 2;
/// Adds a VID (le16) to the filter table.
pub const VLAN_ADD: u8 = 0;
/// Removes a VID.
pub const VLAN_DEL: u8 = 1;
/// `VIRTIO_NET_OK`.
const ACK_OK: u8 = 0;

const HDR: usize = 0;
const DATA: usize = 16;
const ACK: usize = 48;
const AREA: usize = 64;
/// The longest command data sent here.
const MAX_DATA: usize = ACK - DATA;

/// The control queue.
pub struct Ctrl<M: Mmio> {
    ring: SplitRing,
    bell: Doorbell<M>,
    name: Arc<str>,
    timeout: Duration,
    /// A command the device has not answered (its chain and buffers are still the device's).
    pending: Option<&'static str>,
}

impl<M: Mmio> Ctrl<M> {
    /// Sets up queue `q` as the control queue (at most 64 descriptors: three are used).
    pub fn new(
        t: &Transport<M>,
        q: u16,
        mapper: Arc<dyn DmaMapper>,
        timeout: Duration,
    ) -> Result<Ctrl<M>> {
        let max = super::transport::check_queue_max(t, q, "control")?;
        let mut ring = SplitRing::new(max.min(64), AREA, mapper)?;
        if ring.size() < 4 {
            return Err(Error::DeviceState {
                device: t.name.to_string(),
                what: format!(
                    "its control queue has {} descriptors; a command needs 3",
                    ring.size()
                ),
            });
        }
        let bell = t.setup_queue(q, &mut ring, super::transport::NO_VECTOR)?;
        Ok(Ctrl {
            ring,
            bell,
            name: t.name.clone(),
            timeout,
            pending: None,
        })
    }

    /// Sends one command and waits for the device's ack.
    pub fn command(&mut self, class: u8, cmd: u8, data: &[u8], what: &'static str) -> Result<()> {
        assert!(data.len() <= MAX_DATA, "control command data too long");
        if let Some(prev) = self.pending {
            if self.ring.pop_used()?.is_none() {
                return Err(Error::DeviceState {
                    device: self.name.to_string(),
                    what: format!(
                        "the control queue never answered {prev}, so it cannot take {what}; reopen the port (the open resets the device)"
                    ),
                });
            }
            self.pending = None;
        }
        let r = &mut self.ring;
        r.write_extra(HDR, &[class, cmd]);
        r.write_extra(DATA, data);
        r.write_extra(ACK, &[0xff]);
        r.set_desc(0, r.extra_iova(HDR), 2, DESC_F_NEXT, 1);
        r.set_desc(1, r.extra_iova(DATA), data.len() as u32, DESC_F_NEXT, 2);
        r.set_desc(2, r.extra_iova(ACK), 1, DESC_F_WRITE, 0);
        r.push(0);
        if r.publish() {
            self.bell.ring();
        }
        let start = Instant::now();
        let mut pause = Duration::from_micros(1);
        loop {
            if let Some((id, _)) = self.ring.pop_used()? {
                debug_assert_eq!(id, 0);
                break;
            }
            if start.elapsed() >= self.timeout {
                self.pending = Some(what);
                return Err(Error::DeviceState {
                    device: self.name.to_string(),
                    what: format!(
                        "the control queue did not answer {what} within {} ms; the device is stuck: reopen the port (the open resets it)",
                        self.timeout.as_millis()
                    ),
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
        let mut ack = [0u8];
        self.ring.read_extra(ACK, &mut ack);
        if ack[0] != ACK_OK {
            return Err(Error::DeviceState {
                device: self.name.to_string(),
                what: format!(
                    "the device refused control command {what} (ack {}); it does not support it",
                    ack[0]
                ),
            });
        }
        tracing::debug!(port = %self.name, command = what, "virtio control command done");
        Ok(())
    }
}
