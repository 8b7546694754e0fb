//! Issue 7: the simulator against reality. Stores on tmpfs (`store_dir`): inode numbers follow
//! creation order there, as the simulator allocates them.

mod common;

use common::*;

/// Every strategy, mark and sweep, on `tiny`: the simulation of the generator's shape gives
/// the same touch, listing, stat and unlink counts as the GC through a shadow mount, and the
/// same modelled cost within 5%.
#[test]
fn simulation_matches_the_mount_on_tiny() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "s", &["--preset", "tiny", "--seed", "5"]);
    let sims = simulate(&store, "tiny", "5", &["--model", "zfs-hdd"]);
    assert_eq!(sims.len(), 5);
    for sim in &sims {
        let strategy = sim["strategy"].as_str().unwrap();
        let d = dir.path().join(strategy);
        std::fs::create_dir(&d).unwrap();
        let mut m = Mount::start(
            &store,
            &d,
            true,
            &["--shadow", "--model", "zfs-hdd", "--time-scale", "0"],
        );
        let (code, report, out) = gc(&m.mnt, &["--no-lock", "--strategy", strategy]);
        assert_eq!(code, 0, "{out}");
        m.stop();
        let totals = replayed_totals(m.trace.as_ref().unwrap());
        assert_sim_matches(strategy, &report["counters"], &totals, sim, 0.05);
        assert!(report["counters"]["removed_chunks"].as_u64().unwrap() > 0);
    }
}

#[test]
fn bad_simulation_arguments_are_named() {
    let o = run(&["simulate", "--preset", "huge"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--preset huge"), "{}", stderr(&o));
    let o = run(&[
        "simulate",
        "--preset",
        "tiny",
        "--cache-capacity",
        "9000000",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("exceeds PBS's maximum"),
        "{}",
        stderr(&o)
    );
    let o = run(&["simulate", "--preset", "tiny", "--model", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--model nope"), "{}", stderr(&o));
}
