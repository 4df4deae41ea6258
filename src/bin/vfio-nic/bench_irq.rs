//! `vfio-nic bench --device irq`: the interrupt row of [`vfio_nic::app::bench::irq`] (polling
//! against the adaptive loop on the threaded software 82599, under load and for the wake-up
//! latency), run from the command line and printed: the progress line, the table or `--json`.
//! The table says that no A/A floor is measured for this row: a verdict rests on the interval
//! and the corrected p alone.

use std::sync::atomic::AtomicBool;

use serde_json::json;
use vfio_nic::app::bench::irq::GAP;
use vfio_nic::app::bench::{run_irq, BenchConfig};
use vfio_nic::app::compare;
use vfio_nic::{Error, Result};

use crate::bench::BenchArgs;

/// The interrupt row: `load`, `wake median`, `wake p99`, poll (A) against adaptive (B).
pub fn run(args: &BenchArgs, json_out: bool, stop: &AtomicBool) -> Result<()> {
    if args.idle_polls == 0 || args.pairs < 2 || args.seconds <= 0.0 || args.burst == 0 {
        return Err(Error::InvalidConfig(
            "--idle-polls >= 1, --pairs >= 2, --seconds > 0 and --burst >= 1".into(),
        ));
    }
    let config = BenchConfig {
        pairs: args.pairs,
        seconds: args.seconds,
        burst: args.burst,
        ring: args.ring,
        pin: args.pin.clone(),
        idle_polls: args.idle_polls,
        ..BenchConfig::default()
    };
    let rows = run_irq(&config, stop, |p| {
        if !json_out {
            eprint!("\rinterrupt row: pair {}/{}", p.pair, p.pairs);
        }
    })?;
    if !json_out {
        eprint!("\r\x1b[2K");
    }
    if json_out {
        let v: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({"measure": r.measure, "a_poll": r.a_poll, "b_adaptive": r.b_adaptive, "diff": r.diff, "p": r.p, "p_holm": r.p_holm, "verdict": r.verdict})
            })
            .collect();
        outln!(
            "{}",
            json!({"device": "sim (threaded)", "pairs": args.pairs, "seconds": args.seconds,
                   "idle_polls": args.idle_polls, "gap_ms": GAP.as_secs_f64() * 1e3,
                   "correction": {"method": "holm", "family_size": 3, "alpha": compare::ALPHA},
                   "floor": "none measured for this row", "rows": v})
        );
        return Ok(());
    }
    outln!(
        "interrupt row, threaded software 82599: A polls, B sleeps after {} empty polls (interrupt mode); {} interleaved pairs of {} s; wake-up: single frames {} ms apart, send to burst returned",
        args.idle_polls,
        args.pairs,
        args.seconds,
        GAP.as_millis()
    );
    outln!("B - A with its 95 % interval (paired t); p(Holm) over these 3 comparisons; no A/A floor measured for this row");
    for r in &rows {
        let (am, bm, ph, verdict) = (&r.a_poll, &r.b_adaptive, r.p_holm, &r.verdict);
        outln!(
            "{:<15} A {:>10.1} +-{:<8.1} B {:>10.1} +-{:<8.1} {verdict}, p(Holm) {}",
            r.measure,
            am.mean,
            am.half_width(),
            bm.mean,
            bm.half_width(),
            if ph < 0.001 {
                "<0.001".to_string()
            } else {
                format!("{ph:.3}")
            }
        );
    }
    Ok(())
}
