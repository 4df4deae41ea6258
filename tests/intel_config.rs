//! The configuration checks of both Intel drivers refuse what their chip cannot do, each with
//! its own limits (the checks are one program, `devices/intel/config.rs`; the limits are each
//! chip's).

use vfio_nic::devices::igb::Chip82576;
use vfio_nic::devices::intel::config::Chip;
use vfio_nic::devices::intel::{IntelConfig, IrqConfig};
use vfio_nic::devices::ixgbe::Chip82599;

/// A configuration that passes: small rings and pool.
fn small<C: Chip>() -> IntelConfig<C> {
    let d = IntelConfig::<C>::default();
    IntelConfig {
        rx_ring: 64,
        tx_ring: 64,
        pool: vfio_nic::platform::dma::PoolConfig {
            buffers: 128,
            ..d.pool
        },
        ..d
    }
}

/// A change to a configuration, named.
type Change<C> = (&'static str, fn(&mut IntelConfig<C>));

/// `small()` changed by `change` is refused; `small()` itself passes.
fn refused<C: Chip>(what: &str, change: fn(&mut IntelConfig<C>)) {
    small::<C>().check().unwrap();
    let mut c = small::<C>();
    change(&mut c);
    let e = c.check().expect_err(what);
    assert!(!e.to_string().is_empty(), "{what}");
}

#[test]
fn each_chip_refuses_what_it_cannot_do() {
    let igb: &[Change<Chip82576>] = &[
        ("9 rx queues", |c| c.rx_queues = 9),
        ("tx ring 8192", |c| c.tx_ring = 8192),
        ("MTU 9217", |c| c.mtu = 9217),
        ("VID 4095", |c| c.vlans = vec![4095]),
        ("a throttle beyond EITR's 13 bits", |c| {
            c.interrupts = Some(IrqConfig { throttle_us: 8192 })
        }),
    ];
    let ixgbe: &[Change<Chip82599>] = &[
        ("no rx queue", |c| c.rx_queues = 0),
        ("17 rx queues", |c| c.rx_queues = 17),
        ("rx ring 100", |c| c.rx_ring = 100),
        ("rx ring 16384", |c| c.rx_ring = 16384),
        ("VID 4095", |c| c.vlans = vec![4095]),
        ("a throttle beyond EITR's 2 us units", |c| {
            c.interrupts = Some(IrqConfig { throttle_us: 1024 })
        }),
    ];
    // Jumbo frames in 2 KB buffers are chains: accepted.
    let mut jumbo = small::<Chip82576>();
    jumbo.mtu = 9000;
    jumbo.check().unwrap();
    for &(what, change) in igb {
        refused::<Chip82576>(what, change);
    }
    for &(what, change) in ixgbe {
        refused::<Chip82599>(what, change);
    }
}
