//! Our side of the checksum and TSO tests: our first port speaking IPv4 to Linux.
//!
//! [`IpPort`] is the port with its queues, sending frames with the transmit offloads asked of
//! the device and answering Linux's ARP requests for [`OUR_IP`] while it receives (the peer
//! has a static ARP entry for us, but Linux may still ask). [`Client`] is one TCP connection
//! from it to a Linux listener, built from the frames hwtests/tcp.rs writes: our SYN, Linux's
//! SYN-ACK, then our data segments while Linux's ACKs are noted. Every frame we send carries
//! 0xdead checksums for the device to overwrite, so a connection that works at all shows that
//! the device wrote them.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use vfio_nic::app::respond::{Responder, ResponderConfig};
use vfio_nic::device::{MacAddr, Port, RxQueue};
use vfio_nic::devices::{AnyPort, AnyRx, AnyTx};
use vfio_nic::platform::dma::{Packet, Pool};

use super::drv::{self, chain, send_all, text, WAIT};
use super::linux_peer::{OUR_IP, PEER_IP};
use super::tcp::{self, End, Flow, Seg, ACK, PSH, RST, SYN};
use super::{step, Ctx};

/// Our port, its queues and an ARP answerer, for the tests that talk IP to Linux.
pub struct IpPort {
    pub port: AnyPort,
    pub rx: AnyRx,
    pub tx: AnyTx,
    pub pool: Pool,
    pub mac: MacAddr,
    arp: Responder,
}

impl IpPort {
    pub fn open(ctx: &Ctx) -> Result<IpPort, String> {
        let mut port = drv::open(ctx.ports[0], false)?;
        let mac = port.info().mac;
        let (mut rx, mut tx) = port.take_queues().map_err(text)?;
        let (rx, tx) = (rx.remove(0), tx.remove(0));
        let pool = rx.pool().clone();
        let arp = Responder::new(ResponderConfig {
            mac,
            ip: format!("{OUR_IP}/24").parse().map_err(text)?,
            vlan: None,
        });
        Ok(IpPort {
            port,
            rx,
            tx,
            pool,
            mac,
            arp,
        })
    }

    /// Sends `frame` with the checksum offloads (and TSO with `tso_mss`), as a chain when it
    /// is longer than a buffer.
    pub fn send_offloaded(&mut self, frame: &[u8], tso_mss: Option<u16>) -> Result<(), String> {
        let mut p = chain(&self.pool, frame)?;
        p.set_tx_offload(tcp::offload(frame, tso_mss));
        self.send_packet(p)
    }

    /// Sends `p` as it is (no offload).
    pub fn send_packet(&mut self, p: Packet) -> Result<(), String> {
        send_all(&mut self.tx, &mut vec![p])
    }

    /// One receive burst: answers ARP requests for [`OUR_IP`] and returns the other frames
    /// (whole, copied).
    pub fn poll(&mut self) -> Result<Vec<Vec<u8>>, String> {
        let mut batch = Vec::new();
        if self.rx.rx_burst(&mut batch, 32).map_err(text)? == 0 {
            std::thread::sleep(Duration::from_micros(200));
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let mut reply = Vec::new();
        for p in batch {
            if self.arp.handle(p.data(), None, &mut reply).is_ok() {
                let r = drv::packet(&self.pool, &reply)?;
                self.send_packet(r)?;
            } else {
                out.push(p.to_vec());
            }
        }
        Ok(out)
    }
}

/// A connection from our port to a Linux listener, opened with our own SYN.
pub struct Client {
    pub us: IpPort,
    pub flow: Flow,
    /// Segments Linux sent on the connection after the SYN-ACK.
    pub acks: usize,
}

impl Client {
    /// Sends the SYN (retried each second) and waits for Linux's SYN-ACK, then ACKs it.
    pub fn connect(mut us: IpPort, peer_mac: MacAddr, port: u16) -> Result<(Client, Seg), String> {
        let ours = End {
            mac: us.mac,
            ip: OUR_IP,
            port: 40002,
        };
        let theirs = End {
            mac: peer_mac,
            ip: PEER_IP,
            port,
        };
        let isn = 0x1000_0000;
        let mut flow = Flow::new(ours, theirs, isn);
        step(format!(
            "TCP: SYN to {PEER_IP}:{port} (checksums by the device)"
        ));
        let start = Instant::now();
        let mut last_syn: Option<Instant> = None;
        let syn_ack = loop {
            if last_syn.is_none_or(|t| t.elapsed() > Duration::from_secs(1)) {
                flow.snd_nxt = isn;
                let syn = flow.syn();
                us.send_offloaded(&syn, None)?;
                last_syn = Some(Instant::now());
            }
            if let Some(seg) = us.poll()?.iter().find_map(|f| flow.parse(f)) {
                break seg;
            }
            if start.elapsed() > WAIT {
                return Err(format!(
                    "no SYN-ACK from Linux within {} s (SYNs sent with 0xdead checksums and TCP_CSUM|IP_CSUM)",
                    WAIT.as_secs()
                ));
            }
        };
        flow.on_syn_ack(&syn_ack)?;
        let ack = flow.segment(ACK, &[], &[]);
        us.send_offloaded(&ack, None)?;
        Ok((Client { us, flow, acks: 0 }, syn_ack))
    }

    /// Sends one data segment (PSH|ACK) with the checksum offloads.
    pub fn send_data(&mut self, payload: &[u8]) -> Result<(), String> {
        let f = self.flow.segment(PSH | ACK, &[], payload);
        self.us.send_offloaded(&f, None)
    }

    /// Receives (answering ARP, noting Linux's ACKs and window) until `done` has a result, at
    /// most `limit`.
    pub fn serve_until<T>(
        &mut self,
        done: &mpsc::Receiver<Result<T, String>>,
        limit: Duration,
    ) -> Result<T, String> {
        let start = Instant::now();
        loop {
            for f in self.us.poll()? {
                if let Some(seg) = self.flow.parse(&f) {
                    if seg.flags & RST != 0 {
                        return Err(format!("Linux reset the connection ({seg:?})"));
                    }
                    if seg.flags & SYN == 0 {
                        self.flow.on_segment(&seg);
                        self.acks += 1;
                    }
                }
            }
            match done.try_recv() {
                Ok(r) => return r,
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err("Linux's reader thread ended without a result".into())
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }
            if start.elapsed() > limit {
                return Err(format!(
                    "Linux's reader gave no result within {} s",
                    limit.as_secs()
                ));
            }
        }
    }

    /// Ends the connection with a RST (Linux then sends nothing more to a port about to close).
    pub fn reset(&mut self) -> Result<(), String> {
        let f = self.flow.rst();
        self.us.send_offloaded(&f, None)
    }
}
