//! Group extensions: state created parents-first, offline and release hooks
//! run exactly once, zombies keep their state until released.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::engine;
use rstat::{Error, GroupExt, Rstat};

#[derive(Default)]
struct Counts {
    created: AtomicUsize,
    offlined: AtomicUsize,
    released: AtomicUsize,
}

struct Depth(Arc<Counts>);

struct DepthState {
    depth: usize,
    offline: std::sync::atomic::AtomicBool,
}

impl GroupExt for Depth {
    type State = DepthState;
    fn name(&self) -> &str {
        "depth"
    }
    fn create(&self, parent: Option<&DepthState>) -> DepthState {
        self.0.created.fetch_add(1, Ordering::Relaxed);
        DepthState {
            depth: parent.map_or(0, |p| p.depth + 1),
            offline: false.into(),
        }
    }
    fn offline(&self, s: &DepthState, parent: Option<&DepthState>) {
        assert_eq!(parent.map(|p| p.depth + 1), Some(s.depth));
        s.offline.store(true, Ordering::Relaxed);
        self.0.offlined.fetch_add(1, Ordering::Relaxed);
    }
    fn release(&self, s: &DepthState, _parent: Option<&DepthState>) {
        assert!(
            s.depth == 0 || s.offline.load(Ordering::Relaxed),
            "released while online"
        );
        self.0.released.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn lifecycle_hooks_run_once_and_in_order() {
    let counts = Arc::new(Counts::default());
    let rs = engine();
    let a = rs.root().create_child("a").unwrap();
    let ext = rs.register_ext(Depth(counts.clone())).unwrap();
    assert_eq!(
        counts.created.load(Ordering::Relaxed),
        2,
        "registered after root and a existed"
    );
    assert!(matches!(
        rs.register_ext(Depth(counts.clone())),
        Err(Error::ExtensionExists { .. })
    ));
    let b = a.create_child("b").unwrap();
    assert_eq!(ext.get(&b).unwrap().depth, 2);
    b.remove().unwrap();
    assert_eq!(counts.offlined.load(Ordering::Relaxed), 1);
    assert_eq!(
        counts.released.load(Ordering::Relaxed),
        0,
        "a zombie keeps its state"
    );
    assert!(ext.get(&b).unwrap().offline.load(Ordering::Relaxed));
    drop(b);
    assert_eq!(counts.released.load(Ordering::Relaxed), 1);
    let other = Rstat::new();
    assert!(matches!(ext.get(other.root()), Err(Error::ForeignGroup)));
    drop(a);
    drop(rs);
    // Dropping the engine releases every group, the root last.
    assert_eq!(counts.released.load(Ordering::Relaxed), 3);
    assert_eq!(counts.created.load(Ordering::Relaxed), 3);
}
