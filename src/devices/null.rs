//! The null device: a port with no hardware behind it, with the semantics of DPDK's `net_null`.
//!
//! Receive allocates up to N buffers from the queue's pool and hands them out as frames of a
//! configured size (64 bytes by default); with `copy` on, a template frame is written into each
//! (DPDK's `copy=1`). Transmit frees the buffers (with `copy` on, it first reads each frame into a
//! scratch buffer, as DPDK does). It measures the cost of the burst API, the pool and whatever the
//! application does, with no device in the way, and it is the baseline against which we compare
//! ourselves with DPDK's testpmd on two `net_null` ports.

use std::sync::Arc;

use crate::device::{
    LinkStatus, MacAddr, Port, PortInfo, PortStats, QueueError, QueueSet, QueueStats, RxQueue,
    TxQueue,
};
use crate::devices::offload::{soft, TxCaps};
use crate::error::{Error, Result};
use crate::platform::dma::{IdentityMapper, Packet, Pool, PoolConfig};
use crate::vlan::{SwVlanTx, Tpid, Vid, VlanCaps, VlanHardware};

/// Configuration of a null port.
#[derive(Clone, Debug)]
pub struct NullConfig {
    /// Number of queue pairs.
    pub queues: u16,
    /// Length of every received frame.
    pub frame_size: usize,
    /// Copy a template frame into every received buffer, and every transmitted frame out.
    pub copy: bool,
    /// The template written when `copy` is on; zero-filled when `None`. Longer templates are cut
    /// to `frame_size`.
    pub template: Option<Vec<u8>>,
    /// Pool of each receive queue.
    pub pool: PoolConfig,
}

impl Default for NullConfig {
    fn default() -> Self {
        NullConfig {
            queues: 1,
            frame_size: 64,
            copy: false,
            template: None,
            pool: PoolConfig {
                buffers: 4096,
                ..PoolConfig::default()
            },
        }
    }
}

/// A null port (`null:N`).
pub struct NullPort {
    name: String,
    mac: MacAddr,
    config: NullConfig,
    taken: bool,
}

impl NullPort {
    /// Opens null port number `index`.
    pub fn new(index: u32, config: NullConfig) -> Result<Self> {
        if config.queues == 0 {
            return Err(Error::InvalidConfig(
                "a null port needs at least one queue".into(),
            ));
        }
        // Nothing holds a null port's buffers: a pool needs a burst's worth.
        crate::devices::pool_rule::check_rx_pool(
            &format!("null:{index}"),
            "none held by a device",
            0,
            config.pool.buffers,
        )?;
        let max = config.pool.buf_size - config.pool.headroom;
        if config.frame_size == 0 || config.frame_size > max {
            return Err(Error::InvalidConfig(format!(
                "null frame size {} must be between 1 and {max} (the pool's buffer room)",
                config.frame_size
            )));
        }
        let i = index.to_be_bytes();
        Ok(NullPort {
            name: format!("null:{index}"),
            mac: MacAddr([0x02, 0x00, i[0], i[1], i[2], i[3]]),
            config,
            taken: false,
        })
    }
}

impl Port for NullPort {
    type Rx = NullRx;
    type Tx = NullTx;

    fn info(&self) -> PortInfo {
        PortInfo {
            name: self.name.clone(),
            driver: "null",
            model: "null device (DPDK net_null semantics)".into(),
            pci_id: None,
            mac: self.mac,
            rx_queues: self.config.queues,
            tx_queues: self.config.queues,
            rx_ring: 0,
            tx_ring: 0,
            mtu: None,
        }
    }

    fn link(&self) -> Result<LinkStatus> {
        Ok(LinkStatus {
            up: true,
            speed_mbps: 10_000,
            full_duplex: true,
        })
    }

    fn stats(&mut self) -> Result<PortStats> {
        Ok(PortStats::default())
    }

    fn take_queues(&mut self) -> Result<QueueSet<NullRx, NullTx>> {
        if self.taken {
            return Err(Error::InvalidConfig(format!(
                "{}: queues were already taken",
                self.name
            )));
        }
        let mut template = vec![0u8; self.config.frame_size];
        if let Some(t) = &self.config.template {
            let n = t.len().min(template.len());
            template[..n].copy_from_slice(&t[..n]);
        }
        let template: Arc<[u8]> = template.into();
        let mut rx = Vec::new();
        let mut tx = Vec::new();
        for _ in 0..self.config.queues {
            rx.push(NullRx {
                pool: Pool::new(self.config.pool, Arc::new(IdentityMapper))?,
                frame_size: self.config.frame_size,
                copy: self.config.copy,
                template: template.clone(),
                stats: QueueStats::default(),
            });
            tx.push(NullTx {
                copy: self.config.copy,
                scratch: vec![0; self.config.pool.buf_size].into_boxed_slice(),
                stats: QueueStats::default(),
                logged: false,
            });
        }
        self.taken = true;
        Ok((rx, tx))
    }
}

/// Receive queue of a null port.
pub struct NullRx {
    pool: Pool,
    frame_size: usize,
    copy: bool,
    template: Arc<[u8]>,
    stats: QueueStats,
}

impl RxQueue for NullRx {
    #[inline]
    fn rx_burst(&mut self, batch: &mut Vec<Packet>, max: usize) -> Result<usize, QueueError> {
        let start = batch.len();
        let n = self.pool.alloc_bulk_len(max, self.frame_size, batch);
        if n < max {
            self.stats.no_room += 1;
        }
        if self.copy {
            for p in &mut batch[start..] {
                p.data_mut().copy_from_slice(&self.template);
            }
        }
        self.stats.packets += n as u64;
        self.stats.bytes += (n * self.frame_size) as u64;
        Ok(n)
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }
}

/// Transmit queue of a null port.
pub struct NullTx {
    copy: bool,
    scratch: Box<[u8]>,
    stats: QueueStats,
    /// A dropped frame's reason has been logged.
    logged: bool,
}

impl TxQueue for NullTx {
    #[inline]
    fn tx_burst(&mut self, batch: &mut Vec<Packet>) -> Result<usize, QueueError> {
        // One pass for the usual burst: its bytes, and whether any frame is chained or asks
        // for an offload (then the software fallback runs, as a wire-bound device without
        // them would, and the bytes are counted again over the result).
        let (mut bytes, mut plain) = (0u64, true);
        for p in batch.iter() {
            bytes += p.len() as u64;
            plain &= p.is_plain();
        }
        if !plain || self.copy {
            bytes = self.slow_pass(batch);
        }
        let n = batch.len();
        Pool::free_vec(batch);
        self.stats.packets += n as u64;
        self.stats.bytes += bytes;
        Ok(n)
    }

    fn stats(&self) -> QueueStats {
        self.stats
    }
}

impl NullTx {
    /// What a burst with chains, offload requests or `copy` on needs: the offloads done in
    /// software, every frame read into the scratch buffer when `copy` is on; returns the
    /// bytes of what is left to send.
    #[cold]
    fn slow_pass(&mut self, batch: &mut Vec<Packet>) -> u64 {
        soft::resolve_for_queue(
            batch,
            TxCaps::CHAINS,
            &mut self.stats.dropped,
            &mut self.logged,
        );
        let mut bytes = 0u64;
        for p in batch.iter() {
            bytes += p.frame_len() as u64;
            if self.copy {
                let mut at = 0;
                for s in p.segments() {
                    let len = s.len().min(self.scratch.len() - at);
                    self.scratch[at..at + len].copy_from_slice(&s[..len]);
                    at += len;
                }
            }
        }
        bytes
    }
}

fn no_vlan_hardware(port: &NullPort, what: &str) -> Error {
    Error::NotSupported {
        device: port.name.clone(),
        what: what.into(),
        why: "the null device has no VLAN hardware; use the sw (or deferred) VLAN modes".into(),
    }
}

/// The null device has no VLAN hardware: it reports no capabilities, so the control handle
/// never calls the other methods, which refuse.
impl VlanHardware for NullPort {
    fn vlan_caps(&self) -> VlanCaps {
        VlanCaps::none(self.name.clone())
    }
    fn set_rx_strip(&mut self, _queue: u16, _on: bool) -> Result<()> {
        Err(no_vlan_hardware(self, "VLAN tag stripping"))
    }
    fn set_vlan_filter(&mut self, _on: bool) -> Result<()> {
        Err(no_vlan_hardware(self, "VLAN filtering"))
    }
    fn add_vlan(&mut self, _vid: Vid) -> Result<()> {
        Err(no_vlan_hardware(self, "a VLAN filter table"))
    }
    fn remove_vlan(&mut self, _vid: Vid) -> Result<()> {
        Err(no_vlan_hardware(self, "a VLAN filter table"))
    }
    fn set_tpid(&mut self, _tpid: Tpid) -> Result<()> {
        Err(no_vlan_hardware(self, "setting the VLAN TPID"))
    }
    fn set_extended_vlan(&mut self, _on: bool, _outer_tpid: Tpid) -> Result<()> {
        Err(no_vlan_hardware(self, "extended (QinQ) VLAN mode"))
    }
}

/// Software insertion by the VLAN layer's default pass: the null device looks at no flags.
impl SwVlanTx for NullTx {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_and_wrappers_can_cross_threads() {
        fn control<T: Clone + Send + Sync + 'static>() {}
        fn queue<T: Send>() {}
        control::<crate::vlan::VlanControl>();
        queue::<crate::vlan::VlanRx<NullRx>>();
        queue::<crate::vlan::VlanTx<NullTx>>();
        queue::<crate::vlan::VlanRxCtx>();
    }

    #[test]
    fn the_null_device_reports_no_vlan_hardware() {
        let mut port = NullPort::new(3, NullConfig::default()).unwrap();
        assert_eq!(port.vlan_caps(), VlanCaps::none("null:3"));
        let e = port.set_rx_strip(0, true).unwrap_err().to_string();
        assert!(
            e.contains("null:3") && e.contains("no VLAN hardware"),
            "{e}"
        );
    }

    fn port(cfg: NullConfig) -> (NullRx, NullTx) {
        let mut p = NullPort::new(0, cfg).unwrap();
        let (mut rx, mut tx) = p.take_queues().unwrap();
        assert!(p.take_queues().is_err());
        (rx.remove(0), tx.remove(0))
    }

    #[test]
    fn receive_hands_out_frames_and_transmit_frees_them() {
        let (mut rx, mut tx) = port(NullConfig::default());
        let mut batch = Vec::new();
        assert_eq!(rx.rx_burst(&mut batch, 32).unwrap(), 32);
        assert!(batch.iter().all(|p| p.len() == 64));
        assert_eq!(rx.pool().stats().in_use, 32);
        assert_eq!(tx.tx_burst(&mut batch).unwrap(), 32);
        assert!(batch.is_empty());
        assert_eq!(rx.pool().stats().in_use, 0);
        assert_eq!(tx.stats().bytes, 32 * 64);
    }

    #[test]
    fn template_is_copied_when_asked() {
        let (mut rx, _tx) = port(NullConfig {
            copy: true,
            frame_size: 60,
            template: Some((0..100).collect()),
            ..NullConfig::default()
        });
        let mut batch = Vec::new();
        rx.rx_burst(&mut batch, 2).unwrap();
        assert_eq!(batch[1].data(), &(0..60).collect::<Vec<u8>>()[..]);
    }

    #[test]
    fn exhaustion_shortens_the_burst_and_is_counted() {
        let (mut rx, mut tx) = port(NullConfig {
            pool: PoolConfig {
                buffers: 40,
                ..PoolConfig::default()
            },
            ..NullConfig::default()
        });
        let mut held = Vec::new();
        assert_eq!(rx.rx_burst(&mut held, 32).unwrap(), 32);
        assert_eq!(rx.rx_burst(&mut held, 32).unwrap(), 8);
        assert_eq!(rx.stats().no_room, 1);
        tx.tx_burst(&mut held).unwrap();
        assert_eq!(
            rx.rx_burst(&mut held, 32).unwrap(),
            32,
            "recovers once buffers return"
        );
    }

    #[test]
    fn bad_frame_size_is_refused() {
        assert!(NullPort::new(
            0,
            NullConfig {
                frame_size: 0,
                ..Default::default()
            }
        )
        .is_err());
        assert!(NullPort::new(
            0,
            NullConfig {
                frame_size: 5000,
                ..Default::default()
            }
        )
        .is_err());
    }
}
