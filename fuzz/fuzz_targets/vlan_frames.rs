//! libFuzzer target: the VLAN tag parser and the strip/insert/wire-view paths on arbitrary bytes.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use vfio_nic::platform::dma::{IdentityMapper, Pool, PoolConfig};

#[path = "../vlan_check.rs"]
mod vlan_check;

static POOL: OnceLock<Pool> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let pool = POOL.get_or_init(|| {
        Pool::new(
            PoolConfig {
                buffers: 2,
                ..PoolConfig::default()
            },
            Arc::new(IdentityMapper),
        )
        .expect("fuzz pool")
    });
    let (ctx, tci, frame) = vlan_check::decode(data);
    vlan_check::check(frame, ctx, tci, pool);
    vlan_check::check_text(data);
});
