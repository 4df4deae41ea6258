//! The VLAN-placement bench as a library call (`vfio_nic::app::bench::run`), the way an
//! appliance's own test suite runs it: on the null device, two pairs of very short repetitions.
//! No figure is asserted (benchmarks report); the shape of the results is.

use std::sync::atomic::AtomicBool;

use vfio_nic::app::bench::{self, family_size, BenchConfig, Device, Traffic, Work};
use vfio_nic::app::compare::Verdict;

fn null_config() -> BenchConfig {
    BenchConfig {
        pairs: 2,
        seconds: 0.002,
        devices: vec![Device::Null],
        traffic: vec![Traffic::Untagged],
        works: vec![Work::Fwd, Work::L2],
        ..BenchConfig::default()
    }
}

#[test]
fn the_bench_runs_from_a_test_and_judges_every_comparison() {
    let stop = AtomicBool::new(false);
    let mut reported = 0;
    let rows = bench::run(&null_config(), &stop, |p| {
        reported += 1;
        assert!(p.pair >= 1 && p.pair <= p.pairs && p.done_reps <= p.total_reps);
    })
    .expect("the null device's bench runs");
    // The plan, in order; an "A/A anew" row may follow any comparison whose baseline moved.
    let planned: Vec<(&str, &str)> = rows
        .iter()
        .filter(|r| r.c.kind != "A/A anew")
        .map(|r| (r.c.work.name(), r.c.kind))
        .collect();
    assert_eq!(
        planned,
        [
            ("fwd", "A/A"),
            ("fwd", "receive"),
            ("fwd", "pipeline"),
            ("fwd", "return"),
            ("l2", "A/A"),
            ("l2", "receive"),
        ]
    );
    assert_eq!(reported, 2 * rows.len(), "a progress report per pair");
    // The family Holm corrected for: the four comparisons, not the floors.
    assert_eq!(family_size(&rows), 4);
    for r in &rows {
        let c = &r.c;
        assert_eq!((c.device, c.traffic), ("null", "untagged"));
        assert_eq!(
            (c.a_ns.len(), c.b_ns.len()),
            (2, 2),
            "{}: two pairs",
            c.kind
        );
        assert!(c.a_ns.iter().chain(&c.b_ns).all(|ns| *ns > 0.0));
        if c.is_floor() {
            assert!(r.p_holm.is_none(), "an A/A row is a floor, not tested");
            assert!(matches!(r.verdict, Verdict::NoDifference { .. }));
        } else {
            let p = r.p_holm.expect("a comparison has its Holm-adjusted p");
            assert!((c.p..=1.0).contains(&p), "{}: Holm never lowers p", c.kind);
        }
    }
    // The rows serialize as `vfio-nic bench --json`'s comparisons.
    let json = serde_json::to_value(&rows).expect("the rows serialize");
    assert_eq!(json[1]["kind"], "receive");
    let verdict = json[1]["verdict"]["verdict"].as_str();
    assert!(matches!(
        verdict,
        Some("no_difference" | "slower" | "faster")
    ));
}

#[test]
fn a_stopped_bench_says_so_and_returns_what_it_measured() {
    let stop = AtomicBool::new(true);
    let stopped = bench::run(&null_config(), &stop, |_| {}).expect_err("stop was set");
    assert!(stopped.rows.is_empty());
    // An interruption, not a configuration the bench refused.
    assert!(
        matches!(stopped.error, vfio_nic::Error::Interrupted(_)),
        "{:?}",
        stopped.error
    );
    assert_eq!(
        stopped.error.to_string(),
        "bench: interrupted (Ctrl-C) before the end"
    );
}

#[test]
fn the_bench_refuses_a_config_it_cannot_measure() {
    let stop = AtomicBool::new(false);
    let one_pair = BenchConfig {
        pairs: 1,
        ..null_config()
    };
    assert!(bench::run(&one_pair, &stop, |_| {}).is_err());
}
