//! Criterion micro-benchmarks of the engine's hot and read paths, each beside
//! its baseline. `cargo bench -p rstat-lab`. The seed experiments with
//! ratios and machine lines are `rstat bench ...`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{criterion_group, criterion_main, Criterion};
use rstat::{FlushPolicy, Rstat};

fn update(c: &mut Criterion) {
    let rs = Rstat::builder()
        .periodic_flush(None)
        .build()
        .expect("engine");
    let ctl = rs.register_counters("bench", &["ops"]).expect("controller");
    let g = rs.root().create_child("g").expect("group");
    let h = ctl.stat_handle(&g).expect("handle");
    let shared = AtomicU64::new(0);
    let mut grp = c.benchmark_group("update");
    grp.bench_function("rstat StatHandle::add", |b| {
        b.iter(|| h.add(0, black_box(1)))
    });
    let item = h.item(0).expect("item");
    grp.bench_function("rstat StatItem::add", |b| b.iter(|| item.add(black_box(1))));
    grp.bench_function("rstat ControllerHandle::add", |b| {
        b.iter(|| ctl.add(&g, 0, black_box(1)))
    });
    grp.bench_function("baseline AtomicU64::fetch_add", |b| {
        b.iter(|| black_box(&shared).fetch_add(black_box(1), Ordering::Relaxed))
    });
    grp.finish();
}

fn read(c: &mut Criterion) {
    let rs = Rstat::builder()
        .periodic_flush(None)
        .flush_policy(FlushPolicy::Threshold)
        .build()
        .expect("engine");
    let ctl = rs
        .register_counters("bench", &["a", "b", "c", "d"])
        .expect("controller");
    let parent = rs.root().create_child("p").expect("group");
    let leaves: Vec<_> = (0..8)
        .map(|i| parent.create_child(&format!("l{i}")).expect("leaf"))
        .collect();
    let mut grp = c.benchmark_group("read");
    grp.bench_function("read_exact, 8 leaves updated", |b| {
        b.iter(|| {
            for l in &leaves {
                ctl.add(l, 0, 1).expect("add");
            }
            black_box(ctl.read_exact(&parent).expect("read"))
        })
    });
    grp.bench_function("read (threshold, below it)", |b| {
        b.iter(|| black_box(ctl.read(&parent).expect("read")))
    });
    grp.finish();
}

criterion_group!(benches, update, read);
criterion_main!(benches);
