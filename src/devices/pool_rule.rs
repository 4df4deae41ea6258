//! The one rule every receive pool must meet: room for what the device holds, plus one burst.
//!
//! A pool whose buffers all sit with the device (in the receive ring's slots, or lent to a
//! hardware pool) stalls receive for ever: a frame received cannot be handed over, because the
//! slot it came from has no buffer to be re-armed with (or the hardware pool none to write the
//! next frame into), so nothing is ever freed. One burst more keeps it moving. Every family
//! states what its device holds and checks it here, so the rule and its error are written once:
//! the Intel rings and virtio-net hold their receive ring's size, the queue-manager device the
//! buffers the driver keeps in its hardware pool, af_packet (which copies frames out of the
//! kernel's ring into pool buffers only as bursts ask) nothing, the null device nothing.

use crate::error::{Error, Result};
use crate::platform::dma::slots::RX_RESERVE;

/// Buffers a receive pool needs beyond what the device holds: one burst (32), which can be in
/// the application's hands while the device is given buffers again.
pub const MIN_RX_SPARE: usize = 32;

/// Refuses a receive pool of `buffers` buffers for a device that holds `held` of them
/// (`what_is_held` says what: "rx_ring", "hw_buffers"), naming the numbers and the fix (the
/// advice: [`RX_RESERVE`] more than the device holds avoids allocation failures on a busy
/// queue).
pub fn check_rx_pool(device: &str, what_is_held: &str, held: usize, buffers: usize) -> Result<()> {
    let reserve = RX_RESERVE;
    let need = held + MIN_RX_SPARE;
    if buffers < need {
        return Err(Error::InvalidConfig(format!(
            "{device}: each receive pool needs at least {what_is_held} + {MIN_RX_SPARE} = {need} buffers (what the device holds, plus one burst that can be in the application's hands while it is given buffers again), not {buffers}; raise pool.buffers ({what_is_held} + {reserve} avoids allocation failures on a busy queue)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_one_burst_over_what_the_device_holds_is_enough() {
        assert!(check_rx_pool("x", "rx_ring", 512, 544).is_ok());
        let e = check_rx_pool("igb", "rx_ring", 512, 543)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("rx_ring + 32 = 544") && e.contains("not 543") && e.contains("rx_ring + 96"),
            "{e}"
        );
    }
}
