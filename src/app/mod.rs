//! Application helpers: what tools and appliances build on the burst API, through the device
//! contract only (no driver is named here except by the port-opening helpers they are given).
//!
//! - [`wire`]: typed views of Ethernet, ARP, IPv4, ICMP and UDP headers;
//! - [`respond`]: an ARP and ICMP echo responder;
//! - [`capture`]: writing received frames to pcap;
//! - [`compare`]: paired, interleaved comparisons with confidence intervals and a noise floor;
//! - [`bench`](mod@bench): the VLAN-placement bench built on them (rigs, plan, measuring, verdicts);
//! - [`forward`]: the forwarding loop;
//! - [`pipeline`]: forwarding as two stages on two threads (buffers freed on another core);
//! - [`selftest`]: the register and loopback self-test.

pub mod bench;
pub mod capture;
pub mod compare;
pub mod forward;
pub mod idle;
pub mod pipeline;
pub mod respond;
pub mod selftest;
pub mod wire;
