//! `CpuMode::Sampled`, in a process of its own (the mode is process-wide):
//! enter and exit read no clock; the charger's samples attribute each
//! interval to the group current at its end.

mod common;

use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

use common::cpu::{burn, usage};
use common::engine;
use rstat::attach::{charge_all_threads, set_charge_period, set_cpu_mode, CpuMode};

/// The hog's steps, each ended by a sample taken by the main thread.
fn step(done: &Sender<Duration>, go: &Receiver<()>, d: Duration) {
    done.send(d).unwrap();
    go.recv().unwrap();
}

#[test]
// Miri cannot read another thread's clock.
#[cfg_attr(miri, ignore)]
fn sampled_mode_charges_at_samples_only() {
    set_charge_period(None).unwrap(); // samples only when this test takes them
    set_cpu_mode(CpuMode::Sampled);
    assert_eq!(rstat::attach::cpu_mode(), CpuMode::Sampled);
    let rs = engine();
    let a = rs.root().create_child("a").unwrap();
    let b = rs.root().create_child("b").unwrap();
    let (done_tx, done) = channel();
    let (go, go_rx) = channel::<()>();
    std::thread::scope(|s| {
        let (a, b) = (&a, &b);
        s.spawn(move || {
            // 1: in a, burn; leave (no clock read, so nothing charged).
            let g = a.enter();
            let in_a = burn(Duration::from_millis(30));
            drop(g);
            step(&done_tx, &go_rx, in_a);
            // 2: in b, burn, then wait inside for a sample.
            let _g = b.enter();
            let in_b = burn(Duration::from_millis(30));
            step(&done_tx, &go_rx, in_b);
        });
        let go = go; // owned here: a failed assertion frees the hog
        let in_a = done.recv().unwrap();
        assert_eq!(usage(&rs, a), 0, "sampled mode read the clock on exit");
        // The sample finds the thread in no group: its time is dropped.
        charge_all_threads();
        assert_eq!(usage(&rs, a), 0);
        go.send(()).unwrap();
        let in_b = done.recv().unwrap();
        charge_all_threads();
        // The sample finds it in b: b gets the whole interval since the
        // last sample (its burn and the little before it entered).
        let ub = usage(&rs, b);
        assert!(ub >= in_b.as_micros() as i64, "{ub} < {in_b:?}");
        assert!(
            ub < (in_b + in_a).as_micros() as i64,
            "{ub}: time from before the last sample"
        );
        go.send(()).unwrap();
    });
    set_cpu_mode(CpuMode::Exact);
    set_charge_period(Some(rstat::attach::DEFAULT_CHARGE_PERIOD)).unwrap();
}
