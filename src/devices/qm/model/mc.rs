//! The model's management complex: the commands a driver brings a DPNI and a DPBP up with.
//!
//! Each command is decoded with the layouts of `regs/qbman.toml` and answered with the real
//! status codes. Which status a real MC firmware gives for each mistake is not public; the
//! model's choices, each tested: a token that opens nothing gets AUTH_ERR; an unknown command
//! id, or a known one with another version than the one in the map, UNSUPPORTED_OP; a command
//! out of order (enable before pools are set, pools changed while enabled) INVALID_STATE; a
//! parameter out of range (an object id that does not exist, a VID above 4094) CONFIG_ERR; a
//! full VLAN table NO_RESOURCE.

use super::state::{bpid_of, rx_fqid, tx_fqid, Obj, SocState, VLAN_ENTRIES};
use crate::devices::qm::mc::McStatus;
use crate::platform::regs::qbman::cmd::{self, *};
use crate::platform::regs::McCommand;

/// The answer to one command: status, token for the header, parameters.
pub struct Answer {
    pub status: McStatus,
    pub token: u16,
    pub params: [u64; 7],
}

fn fail(status: McStatus) -> Answer {
    Answer {
        status,
        token: 0,
        params: [0; 7],
    }
}

/// Finds the command with this `cmd_id`; a known id with another version is "unsupported".
fn lookup(cmd_id: u16, dpni: bool) -> Option<McCommand> {
    cmd::COMMANDS
        .iter()
        .copied()
        .filter(|c| c.cmd_id() == cmd_id)
        .find(|c| c.name.starts_with(if dpni { "DPNI" } else { "DPBP" }))
}

/// Executes one command sent with `token`.
pub fn execute(s: &mut SocState, cmd_id: u16, token: u16, p: [u64; 7]) -> Answer {
    // The open commands need no token: they make one.
    if cmd_id == DPNI_OPEN.cmd_id() {
        let d = dpni_open::DPNI_ID.get(&p) as usize;
        if d >= s.dpnis.len() {
            return fail(McStatus::ConfigErr);
        }
        return opened(s.open(Obj::Dpni(d)));
    }
    if cmd_id == DPBP_OPEN.cmd_id() {
        let b = dpbp_open::DPBP_ID.get(&p) as usize;
        if b >= s.dpbps.len() {
            return fail(McStatus::ConfigErr);
        }
        return opened(s.open(Obj::Dpbp(b)));
    }
    let Some(obj) = s.object(token) else {
        return fail(McStatus::AuthErr);
    };
    match obj {
        Obj::Dpni(d) => {
            if let Some(st) = s.faults.fail_next_command.take() {
                return fail(McStatus::from_u8(st).unwrap_or(McStatus::ConfigErr));
            }
            match lookup(cmd_id, true) {
                Some(c) => dpni(s, d, token, c, p),
                None => fail(McStatus::UnsupportedOp),
            }
        }
        Obj::Dpbp(b) => match lookup(cmd_id, false) {
            Some(c) => dpbp(s, b, token, c, p),
            None => fail(McStatus::UnsupportedOp),
        },
    }
}

fn opened(token: u16) -> Answer {
    Answer {
        status: McStatus::Ok,
        token,
        params: [0; 7],
    }
}

fn ok(params: [u64; 7]) -> Answer {
    Answer {
        status: McStatus::Ok,
        token: 0,
        params,
    }
}

fn dpni(s: &mut SocState, d: usize, token: u16, c: McCommand, p: [u64; 7]) -> Answer {
    let mut r = [0u64; 7];
    match c.name {
        "DPNI_CLOSE" => {
            s.tokens.retain(|t| t.0 != token);
            return ok(r);
        }
        "DPNI_RESET" => {
            for fd in s.dpnis[d].reset() {
                s.release(fd.bpid(), fd.addr());
            }
            return ok(r);
        }
        _ => {}
    }
    let n = &mut s.dpnis[d];
    match c.name {
        "DPNI_ENABLE" => {
            if n.pool.is_none() {
                return fail(McStatus::InvalidState);
            }
            n.enabled = true;
        }
        "DPNI_DISABLE" => n.enabled = false,
        "DPNI_GET_ATTR" => {
            dpni_get_attr::NUM_QUEUES.put(&mut r, 1);
            dpni_get_attr::NUM_RX_TCS.put(&mut r, 1);
            dpni_get_attr::NUM_TX_TCS.put(&mut r, 1);
            dpni_get_attr::VLAN_FILTER_ENTRIES.put(&mut r, VLAN_ENTRIES as u64);
            // WRIOP 1.0.0 as `DPAA2_WRIOP_VERSION(1, 0, 0)` encodes it.
            dpni_get_attr::WRIOP_VERSION.put(&mut r, 1 << 10);
        }
        "DPNI_SET_POOLS" => {
            if n.enabled {
                return fail(McStatus::InvalidState);
            }
            let b = dpni_set_pools::DPBP_ID_0.get(&p) as usize;
            let size = dpni_set_pools::BUFFER_SIZE_0.get(&p) as u16;
            if dpni_set_pools::NUM_DPBP.get(&p) == 0 || b >= s.dpbps.len() || size < 128 {
                return fail(McStatus::ConfigErr);
            }
            n.pool = Some((b, size));
        }
        "DPNI_SET_BUFFER_LAYOUT" => {
            if n.enabled {
                return fail(McStatus::InvalidState);
            }
            // Receive queue type 0; the others' layouts are accepted and not used.
            if dpni_set_buffer_layout::QTYPE.get(&p) == 0 {
                let head = dpni_set_buffer_layout::HEAD_ROOM.get(&p);
                // The frame's offset (annotation + head room) must fit the FD's 12 bits.
                if head + crate::devices::qm::layout::hwa::SIZE as u64 > 0xfff {
                    return fail(McStatus::ConfigErr);
                }
                n.head_room = head as u16;
            }
        }
        "DPNI_SET_MAX_FRAME_LENGTH" => {
            let len = dpni_set_max_frame_length::MAX_FRAME_LENGTH.get(&p) as u16;
            if len < 64 {
                return fail(McStatus::ConfigErr);
            }
            n.max_frame = len;
        }
        "DPNI_GET_LINK_STATE" => {
            dpni_get_link_state::UP.put(&mut r, u64::from(n.link_up && n.enabled));
            dpni_get_link_state::RATE.put(&mut r, if n.link_up { 10_000 } else { 0 });
        }
        "DPNI_SET_PRIMARY_MAC_ADDR" => {
            let mut m = dpni_set_primary_mac_addr::MAC.get(&p).to_le_bytes();
            m[..6].reverse();
            n.mac.0.copy_from_slice(&m[..6]);
        }
        "DPNI_GET_PRIMARY_MAC_ADDR" => {
            let mut m = [0u8; 8];
            m[..6].copy_from_slice(&n.mac.0);
            m[..6].reverse();
            dpni_get_primary_mac_addr::MAC.put(&mut r, u64::from_le_bytes(m));
        }
        "DPNI_ENABLE_VLAN_FILTER" => n.vlan_filter = dpni_enable_vlan_filter::EN.get(&p) & 1 == 1,
        "DPNI_ADD_VLAN_ID" => {
            let vid = dpni_add_vlan_id::VLAN_ID.get(&p) as u16;
            if vid > 4094 {
                return fail(McStatus::ConfigErr);
            }
            if !n.vids.contains(&vid) {
                if n.vids.len() == VLAN_ENTRIES {
                    return fail(McStatus::NoResource);
                }
                n.vids.push(vid);
            }
        }
        "DPNI_REMOVE_VLAN_ID" => {
            let vid = dpni_remove_vlan_id::VLAN_ID.get(&p) as u16;
            n.vids.retain(|&v| v != vid);
        }
        "DPNI_GET_STATISTICS" => {
            let page: &[u64] = match dpni_get_statistics::PAGE_NUMBER.get(&p) {
                0 => &n.counters.ingress,
                1 => &n.counters.egress,
                2 => &n.counters.drops,
                _ => return fail(McStatus::ConfigErr),
            };
            r[..page.len()].copy_from_slice(page);
        }
        "DPNI_GET_QUEUE" => {
            let fqid = match dpni_get_queue::QTYPE.get(&p) {
                0 => rx_fqid(d),
                1 => tx_fqid(d),
                _ => return fail(McStatus::ConfigErr),
            };
            if dpni_get_queue::TC.get(&p) != 0 || dpni_get_queue::INDEX.get(&p) != 0 {
                return fail(McStatus::ConfigErr);
            }
            dpni_get_queue::FQID.put(&mut r, u64::from(fqid));
        }
        "DPNI_SET_TAILDROP" => {
            // Congestion point 0 (the queue), receive queue 0, frames (units 1).
            let units = dpni_set_taildrop::UNITS.get(&p);
            if dpni_set_taildrop::QTYPE.get(&p) != 0 || units != 1 {
                return fail(McStatus::ConfigErr);
            }
            n.taildrop = (dpni_set_taildrop::ENABLE.get(&p) == 1)
                .then(|| dpni_set_taildrop::THRESHOLD.get(&p) as u32);
        }
        _ => return fail(McStatus::UnsupportedOp),
    }
    ok(r)
}

fn dpbp(s: &mut SocState, b: usize, token: u16, c: McCommand, _p: [u64; 7]) -> Answer {
    let mut r = [0u64; 7];
    if c.name == "DPBP_CLOSE" {
        s.tokens.retain(|t| t.0 != token);
        return ok(r);
    }
    let pool = &mut s.dpbps[b];
    match c.name {
        "DPBP_ENABLE" => pool.enabled = true,
        "DPBP_DISABLE" => pool.enabled = false,
        "DPBP_GET_ATTR" => {
            dpbp_get_attr::BPID.put(&mut r, u64::from(bpid_of(b)));
            dpbp_get_attr::ID.put(&mut r, b as u64);
        }
        "DPBP_GET_FREE_BUFFERS_NUM" => {
            dpbp_get_free_buffers_num::NUM_FREE_BUFS.put(&mut r, pool.bufs.len() as u64)
        }
        _ => return fail(McStatus::UnsupportedOp),
    }
    ok(r)
}
