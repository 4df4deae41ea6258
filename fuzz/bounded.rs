//! Bounded VLAN fuzzing on stable Rust, for CI: the invariants of `vlan_check.rs` (shared with
//! the cargo-fuzz target) over
//! 1. every frame of 0 to 26 bytes whose TPID fields (offsets 12, 16, 20) take every value of
//!    `FIELDS` (0x8100, 0x88a8, 0x9100, 0x0800 and byte-wise mixtures): every prefix of every
//!    single, double, triple, S/C and truncated tag layout, under seven receive contexts (normal
//!    and extended, C and S TPIDs) and two TCIs (VID 4095 included);
//! 2. seeded random and mutated inputs until the time or iteration bound: random bytes, valid
//!    tagged frames with bit flips, truncations, extensions and spliced TPIDs, lengths skewed
//!    short but up to the 2048-byte buffer;
//! 3. arbitrary text into the TCI/TPID/VID/mode parsers.
//!
//! ```sh
//! cargo run --release --example vlan-fuzz -- --seconds 20 [--seed N] [--iterations N]
//! ```
//!
//! A failing input is printed in hex with the seed and exits 1; the last line is
//! `vlan-fuzz: N passed, 0 failed`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vfio_nic::platform::dma::{IdentityMapper, Pool, PoolConfig};
use vfio_nic::vlan::{Tci, Tpid, VlanRxCtx};

#[path = "vlan_check.rs"]
mod vlan_check;

#[path = "../examples/common/out.rs"]
mod out;

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Values of a TPID field: the TPIDs in use, other ethertypes, and byte-wise mixtures of them.
const FIELDS: [[u8; 2]; 7] = [
    [0x81, 0x00],
    [0x88, 0xa8],
    [0x91, 0x00],
    [0x08, 0x00],
    [0x81, 0xa8],
    [0x88, 0x00],
    [0x00, 0x81],
];

const TPIDS: [[u8; 2]; 5] = [
    [0x81, 0x00],
    [0x88, 0xa8],
    [0x91, 0x00],
    [0x08, 0x00],
    [0x86, 0xdd],
];
const MAX_FRAME: usize = 2048;

/// A random input in the `decode` format: selector, TCI, frame.
fn generate(rng: &mut Rng, out: &mut Vec<u8>) {
    out.clear();
    let len = match rng.below(10) {
        0..=6 => rng.below(40),
        7 | 8 => rng.below(128),
        _ => rng.below(MAX_FRAME + 1),
    };
    for _ in 0..3 + len {
        out.push(rng.next() as u8);
    }
    let frame = 3;
    // Structure: TPIDs at 12 and 16 (and sometimes 20) most of the time.
    for at in [12, 16, 20] {
        if rng.below(4) != 0 && out.len() >= frame + at + 2 {
            let t = TPIDS[rng.below(TPIDS.len())];
            out[frame + at..frame + at + 2].copy_from_slice(&t);
        }
    }
    // Mutations.
    for _ in 0..rng.below(4) {
        match rng.below(4) {
            0 if out.len() > 3 => {
                let i = 3 + rng.below(out.len() - 3);
                out[i] ^= 1 << rng.below(8);
            }
            1 if out.len() > 3 => {
                let n = 3 + rng.below(out.len() - 2);
                out.truncate(n);
            }
            2 if out.len() < MAX_FRAME => out.push(rng.next() as u8),
            _ => {
                let v = rng.next() as u16;
                out[1..3].copy_from_slice(&v.to_be_bytes());
            }
        }
    }
}

fn fail(what: &str, input: &[u8], seed: u64, passed: u64) -> ! {
    let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
    eprintln!("vlan-fuzz: FAILED on {what} (seed {seed}): input {hex}");
    // The verdict stays status 1 even when nobody reads it.
    let _ = out::line(format_args!("vlan-fuzz: {passed} passed, 1 failed"));
    std::process::exit(1);
}

fn main() {
    let mut seconds = 20.0f64;
    let mut seed = 0x5eed_0f71_a9e5_u64;
    let mut iterations = u64::MAX;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--seconds" => seconds = v.parse().expect("--seconds takes a number"),
            "--seed" => seed = v.parse().expect("--seed takes a number"),
            "--iterations" => iterations = v.parse().expect("--iterations takes a number"),
            _ => {
                eprintln!("usage: vlan-fuzz [--seconds S] [--seed N] [--iterations N]");
                std::process::exit(2);
            }
        }
    }
    let pool = Pool::new(
        PoolConfig {
            buffers: 2,
            ..PoolConfig::default()
        },
        Arc::new(IdentityMapper),
    )
    .expect("fuzz pool");
    // The seed first, so that a run stopped or killed midway can be repeated; and a first
    // write, so that a reader already gone (`| head -0`) ends the run here, not after the
    // exhaustive checks (about 10 s of CPU in a debug build).
    if let Err(e) = out::line(format_args!(
        "vlan-fuzz: seed {seed}, the exhaustive checks then {seconds} s of random inputs"
    )) {
        out::exit("vlan-fuzz", Err(e));
    }
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(seconds);
    let mut passed = 0u64;
    // 1. Exhaustive over the tag-relevant fields of short frames: each of the three TPID fields
    //    (offsets 12, 16, 20) takes every value of FIELDS, under every length and context.
    let tcis = [Tci::from_raw(0xa064), Tci::from_raw(0xffff)];
    let contexts = [
        VlanRxCtx::new(Tpid::C_TAG),
        VlanRxCtx::new(Tpid::S_TAG),
        VlanRxCtx::new(Tpid::new(0x9100).unwrap()),
        VlanRxCtx::extended(Tpid::C_TAG, Tpid::S_TAG),
        VlanRxCtx::extended(Tpid::C_TAG, Tpid::C_TAG),
        VlanRxCtx::extended(Tpid::S_TAG, Tpid::S_TAG),
        VlanRxCtx::extended(Tpid::S_TAG, Tpid::C_TAG),
    ];
    let mut frame: Vec<u8> = (0..26u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
    for combo in 0..FIELDS.len().pow(3) {
        let mut c = combo;
        for at in [12, 16, 20] {
            frame[at..at + 2].copy_from_slice(&FIELDS[c % FIELDS.len()]);
            c /= FIELDS.len();
        }
        for len in 0..=frame.len() {
            if len < 14 && combo != 0 {
                continue; // no TPID field in the frame: the same input as combo 0
            }
            for &ctx in &contexts {
                for &tci in &tcis {
                    let f = &frame[..len];
                    if catch_unwind(AssertUnwindSafe(|| vlan_check::check(f, ctx, tci, &pool)))
                        .is_err()
                    {
                        eprintln!("context {ctx:?}");
                        let mut input = vec![0xff];
                        input.extend_from_slice(&tci.raw().to_be_bytes());
                        input.extend_from_slice(f);
                        fail("an exhaustive frame", &input, seed, passed);
                    }
                    passed += 1;
                }
            }
        }
    }
    let exhaustive = passed;
    let t1 = t0.elapsed();

    // 2 + 3. Random and mutated inputs until the bound.
    let mut rng = Rng(seed | 1);
    let mut input = Vec::with_capacity(MAX_FRAME + 3);
    let mut n = 0u64;
    while n < iterations && (n % 1024 != 0 || Instant::now() < deadline) {
        generate(&mut rng, &mut input);
        let ok = catch_unwind(AssertUnwindSafe(|| {
            let (ctx, tci, f) = vlan_check::decode(&input);
            vlan_check::check(f, ctx, tci, &pool);
            vlan_check::check_text(&input[..input.len().min(16)]);
        }));
        if ok.is_err() {
            fail("a random input", &input, seed, passed);
        }
        n += 1;
        passed += 1;
    }
    let report = out::line(format_args!(
        "vlan-fuzz: {exhaustive} exhaustive checks in {:.1} s, {n} random inputs (seed {seed}) in {:.1} s",
        t1.as_secs_f64(),
        (t0.elapsed() - t1).as_secs_f64()
    ))
    .and_then(|()| out::line(format_args!("vlan-fuzz: {passed} passed, 0 failed")));
    out::exit("vlan-fuzz", report);
}
