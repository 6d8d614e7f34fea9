//! The checks of `rstat bench peers` can fail: a contender whose total is
//! off by one, whose total goes down under load, which loses a removed
//! group's counts or leaves a request group behind is reported, naming it.
//! And every real contender passes them.

use std::sync::Arc;
use std::time::Duration;

use super::contenders::{Contender, EagerC, MetricsC, PerRequest, PromC, RstatC, Shape};
use super::workload::{draw, seed, xorshift, Load, MAX_BYTES};
use super::{request, workload};

const SHAPE: Shape = Shape { tenants: 4 };

fn load(threads: usize, hot: bool) -> Load {
    Load {
        shape: SHAPE,
        threads,
        hot,
        duration: Duration::from_millis(5),
        period: Duration::from_millis(1),
    }
}

/// The eager tracker with one of its reads made wrong.
struct Wrong {
    inner: EagerC,
    /// Added to the exact total after the join.
    exact_off: u64,
    /// Reads under load return 0.
    zero_under_load: bool,
}

impl Wrong {
    fn new(exact_off: u64, zero_under_load: bool) -> Arc<Self> {
        Arc::new(Wrong {
            inner: EagerC::new(SHAPE),
            exact_off,
            zero_under_load,
        })
    }
}

impl Contender for Wrong {
    fn add(&self, leaf: usize, bytes: u64) {
        self.inner.add(leaf, bytes);
    }

    fn tenant_total(&self, t: usize) -> Result<u64, String> {
        if self.zero_under_load {
            Ok(0)
        } else {
            self.inner.tenant_total(t)
        }
    }

    fn tenant_exact(&self, t: usize) -> Result<u64, String> {
        Ok(self.inner.tenant_exact(t)? + self.exact_off)
    }
}

#[test]
fn a_total_off_by_one_fails_the_exact_check() {
    let c = Wrong::new(1, false);
    let mut expected = vec![0; SHAPE.tenants];
    let Err(e) = workload::sample(&c, "wrong", &load(2, false), 0, &mut expected, || {}) else {
        panic!("a contender whose total is off by one passed the exact check");
    };
    assert!(
        e.starts_with("wrong: tenant 0") && e.contains("off by 1"),
        "{e}"
    );
}

#[test]
fn a_total_that_goes_down_under_load_fails() {
    let c = Wrong::new(0, true);
    // The tenants start at 1: a read of 0 is below what was there before.
    let mut expected = vec![1; SHAPE.tenants];
    let Err(e) = workload::sample(&c, "wrong", &load(1, false), 0, &mut expected, || {}) else {
        panic!("a total that went down under load passed");
    };
    assert!(e.contains("went down while writers ran"), "{e}");
}

fn passes<C: Contender>(c: C, threads: usize, hot: bool) {
    let c = Arc::new(c);
    let mut expected = vec![0; SHAPE.tenants];
    for no in 0..2 {
        let before: u64 = expected.iter().sum();
        let s = workload::sample(&c, "real", &load(threads, hot), no, &mut expected, || {})
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.exact_checks, SHAPE.tenants as u64);
        assert!(!s.read_ns.is_empty(), "no sweep of the reader");
        assert!(expected.iter().sum::<u64>() >= before);
    }
    if hot {
        assert!(expected[1..].iter().all(|&e| e == 0), "{expected:?}");
    }
}

#[test]
fn every_contender_reads_exactly_what_the_writers_added() {
    passes(RstatC::new(SHAPE).expect("an engine"), 2, false);
    passes(PromC::new(SHAPE).expect("a vec"), 2, false);
    passes(MetricsC::new(SHAPE), 2, false);
    passes(EagerC::new(SHAPE), 2, true);
}

/// The eager tracker as a request server, with one of its checks made
/// wrong.
struct WrongRequests {
    inner: EagerC,
    history_off: u64,
    groups_left: usize,
}

impl PerRequest for WrongRequests {
    fn request(&self, t: usize, name: &str, deltas: [u64; 3]) -> Result<(), String> {
        self.inner.request(t, name, deltas)
    }

    fn tenant_history(&self, t: usize) -> Result<Option<u64>, String> {
        Ok(self.inner.tenant_history(t)?.map(|v| v + self.history_off))
    }

    fn request_groups_left(&self) -> usize {
        self.groups_left
    }
}

#[test]
fn a_request_server_that_loses_counts_or_groups_fails() {
    let d = Duration::from_millis(5);
    for (off, left, want) in [(1, 0, "off by 1"), (0, 1, "1 request groups are left")] {
        let c = Arc::new(WrongRequests {
            inner: EagerC::new(SHAPE),
            history_off: off,
            groups_left: left,
        });
        let mut expected = vec![0; SHAPE.tenants];
        let Err(e) = request::sample(&c, "wrong", 2, d, 0, &mut expected) else {
            panic!("a request server with a wrong check passed ({want})");
        };
        assert!(e.contains(want), "{e}");
    }
}

#[test]
fn every_contender_serves_requests_exactly() {
    fn serve<C: PerRequest>(c: C, checks: u64) {
        let c = Arc::new(c);
        let mut expected = vec![0; SHAPE.tenants];
        for no in 0..2 {
            let (rps, n) =
                request::sample(&c, "real", 2, Duration::from_millis(5), no, &mut expected)
                    .unwrap_or_else(|e| panic!("{e}"));
            assert!(rps >= 0.0);
            assert_eq!(n, checks);
        }
    }
    serve(RstatC::new(SHAPE).expect("an engine"), SHAPE.tenants as u64);
    serve(PromC::new(SHAPE).expect("a vec"), 0);
    serve(MetricsC::new(SHAPE), 0);
    serve(EagerC::new(SHAPE), SHAPE.tenants as u64);
}

#[test]
fn draws_stay_in_range_and_replay() {
    let mut x = seed(3, 1);
    let mut y = x;
    for _ in 0..10_000 {
        x = xorshift(x);
        y = xorshift(y);
        assert_ne!(x, 0);
        let (leaf, bytes) = draw(x, 255, false);
        assert!(leaf < 256 && (1..=MAX_BYTES).contains(&bytes));
        assert_eq!(draw(x, 255, true).0, 0);
        assert_eq!(draw(y, 255, false), (leaf, bytes));
    }
    assert_ne!(seed(0, 0), seed(0, 1));
    assert_ne!(seed(0, 0), seed(1, 0));
}
