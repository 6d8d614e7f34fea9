//! The kernel's memory-protection selftest (`test_memcg_protection` in
//! tools/testing/selftests/cgroup/test_memcontrol.c), expressed on rstat's
//! API, in pages and in bytes, for `memory.min` and `memory.low`; and the
//! reclaim properties it rests on: pressure shared in proportion however
//! small the requests, progress with page-sized objects charged in bytes
//! (and with reclaimers that free little per call), and protection that
//! holds against concurrent reclaims and against rounding to a granule.
//!
//! Under Miri the selftests are far too slow (some 120,000 charges each);
//! the other tests here take seconds to a minute each.
//!
//! The selftest's tree, with its page cache:
//!
//! ```text
//! A       memory.max = 200M
//! A/B     min|low = 50M
//! A/B/C   min|low = 75M,  50M of page cache
//! A/B/D   min|low = 25M,  50M of page cache
//! A/B/E   min|low = 0,    50M of page cache
//! A/B/F   min|low = 500M, nothing
//! A/G     anonymous memory (not reclaimable: no swap)
//! ```
//!
//! G takes 148M and lets it go: B must end at ~50M, C at ~29M and D at
//! ~21M (the kernel's model of proportional reclaim), F at 0. Then G asks
//! for 170M: `min` must refuse it, `low` must give way (B ends at ~30M),
//! and under `low` both C and D must see `low` events, E and F none, and no
//! child an `oom`. Finally `memory.reclaim` on C itself must take it to
//! ~10M: a reclaim's target is not protected from itself.
//!
//! The page cache frees whole pages and never more than it is asked, as the
//! kernel's LRU does; G charges one page at a time, as page faults do.

use std::sync::{Arc, Mutex, Weak};

use rstat::memory::{Charge, Limit, Memory, MemoryConfig, MemoryError, MemoryEvents, OwnedCharge};
use rstat::{Group, Rstat};

/// The selftest's `values_close`: `a` and `b` differ by at most `err`
/// percent of their sum (in the selftest's integer arithmetic).
fn values_close(a: u64, b: u64, err: u64) -> bool {
    a.abs_diff(b) <= (a + b) / 100 * err
}

/// Units of a run: what one page and one "M" are.
#[derive(Clone, Copy, Debug)]
struct Units {
    /// Units per page (1 when charging pages, 4096 when charging bytes).
    page: u64,
    /// Units per MiB of the selftest.
    mb: u64,
    /// Whether limits are written as the selftest writes them ("200M").
    text: bool,
}

/// Charging pages: 1 unit = one 4 KiB page, so 1M = 256 units.
const PAGES: Units = Units {
    page: 1,
    mb: 256,
    text: false,
};

/// Charging bytes: pages of 4096, limits written as text.
const BYTES: Units = Units {
    page: 4096,
    mb: 1 << 20,
    text: true,
};

impl Units {
    fn m(self, n: u64) -> u64 {
        n * self.mb
    }

    fn set(self, mem: &Memory, g: &Group, which: Limit, mib: u64) {
        if self.text {
            mem.write_limit(g, which, &format!("{mib}M")).unwrap();
        } else {
            mem.set_limit(g, which, self.m(mib)).unwrap();
        }
    }
}

/// A group's page cache: pages charged one by one, freed newest first by
/// its reclaimer, whole pages only and never more than asked. The
/// reclaimer holds it weakly (a strong reference would be a cycle: group →
/// reclaimer → charges → group).
struct PageCache {
    mem: Memory,
    group: Group,
    page: u64,
    pages: Mutex<Vec<OwnedCharge>>,
}

/// The reclaimer registered for a [`PageCache`].
struct PageCacheReclaimer(Weak<PageCache>);

impl rstat::memory::Reclaimer for PageCacheReclaimer {
    fn reclaim(&self, target: u64) -> u64 {
        self.0.upgrade().map_or(0, |c| c.shrink(target))
    }

    fn reclaimable(&self) -> Option<u64> {
        self.0.upgrade().map(|c| c.size())
    }

    fn granularity(&self) -> u64 {
        self.0.upgrade().map_or(1, |c| c.page)
    }
}

impl PageCache {
    fn new(mem: &Memory, group: &Group, page: u64) -> Arc<PageCache> {
        let c = Arc::new(PageCache {
            mem: mem.clone(),
            group: group.clone(),
            page,
            pages: Mutex::new(Vec::new()),
        });
        mem.register_reclaimer(group, PageCacheReclaimer(Arc::downgrade(&c)))
            .unwrap();
        c
    }

    /// Read `n` units of file into the cache, a page at a time.
    fn fill(&self, n: u64) {
        for _ in 0..n / self.page {
            let c = self.mem.try_charge(&self.group, self.page).unwrap();
            self.pages.lock().unwrap().push(c.into_owned());
        }
    }

    fn shrink(&self, target: u64) -> u64 {
        let mut v = self.pages.lock().unwrap();
        let k = usize::try_from(target / self.page)
            .unwrap_or(usize::MAX)
            .min(v.len());
        let at = v.len() - k;
        v.truncate(at);
        k as u64 * self.page
    }

    fn size(&self) -> u64 {
        self.pages.lock().unwrap().len() as u64 * self.page
    }
}

/// Anonymous memory of `n` units charged a page at a time (page faults),
/// kept until dropped; stops at the first refused page.
fn alloc_anon<'a>(
    mem: &'a Memory,
    g: &'a Group,
    n: u64,
    page: u64,
) -> Result<Vec<Charge<'a>>, MemoryError> {
    let mut v = Vec::new();
    for _ in 0..n / page {
        v.push(mem.try_charge(g, page)?);
    }
    Ok(v)
}

/// An engine of 2 CPUs with the kernel's charge batch, 64 pages.
fn setup(u: Units) -> (Rstat, Memory) {
    setup_with_batch(64 * u.page)
}

fn setup_with_batch(batch: u64) -> (Rstat, Memory) {
    let rs = Rstat::builder()
        .nr_cpus(2)
        .periodic_flush(None)
        .build()
        .unwrap();
    let mem = Memory::register_with(
        &rs,
        MemoryConfig {
            batch,
            ..MemoryConfig::default()
        },
    )
    .unwrap();
    (rs, mem)
}

/// What a run of the selftest measured (printed for the record).
#[derive(Debug)]
#[allow(dead_code)] // read through Debug
struct Figures {
    /// B, C, D, E, F after G's 148M, in MiB.
    after_148m: [f64; 5],
    /// Whether G got its 170M.
    got_170m: bool,
    /// B after G's 170M, in MiB.
    b_after_170m: f64,
    /// C after `memory.reclaim` down to 10M, in MiB.
    c_after_reclaim: f64,
    /// `low` events of C, D, E, F.
    low: [u64; 4],
}

/// The selftest. Panics (with the figures) where the kernel's would fail.
fn test_memcg_protection(u: Units, min: bool) -> Figures {
    let attribute = if min { Limit::Min } else { Limit::Low };
    let (rs, mem) = setup(u);
    let a = rs.root().create_child("memcg_test_0").unwrap();
    let b = a.create_child("memcg_test_1").unwrap();
    let g = a.create_child("memcg_test_2").unwrap();
    u.set(&mem, &a, Limit::Max, 200);
    let children: Vec<Group> = (0..4)
        .map(|i| b.create_child(&format!("child_memcg_{i}")).unwrap())
        .collect();
    let caches: Vec<Arc<PageCache>> = children[..3]
        .iter()
        .map(|c| PageCache::new(&mem, c, u.page))
        .collect();
    for c in &caches {
        c.fill(u.m(50));
    }
    u.set(&mem, &b, attribute, 50);
    u.set(&mem, &children[0], attribute, 75);
    u.set(&mem, &children[1], attribute, 25);
    u.set(&mem, &children[2], attribute, 0);
    u.set(&mem, &children[3], attribute, 500);

    let current = |g: &Group| mem.current(g).unwrap();
    let mib = |v: u64| v as f64 / u.mb as f64;
    assert!(values_close(current(&b), u.m(150), 3), "{}", current(&b));

    // G takes 148M and exits.
    drop(alloc_anon(&mem, &g, u.m(148), u.page).expect("148M fits beside 52M of cache"));

    let c: Vec<u64> = children.iter().map(current).collect();
    let after_148m = [mib(current(&b)), mib(c[0]), mib(c[1]), mib(c[2]), mib(c[3])];
    let ctx = format!("min={min} {u:?}: B, C, D, E, F after 148M (MiB): {after_148m:?}");
    assert!(values_close(current(&b), u.m(50), 3), "{ctx}");
    assert!(values_close(c[0], u.m(29), 15), "{ctx}");
    assert!(values_close(c[1], u.m(21), 20), "{ctx}");
    assert_eq!(c[3], 0, "{ctx}");
    // Beyond the selftest, which does not check it: its description says
    // E (unprotected) ends at ~0; allow what a stock may hold.
    assert!(c[2] <= u.m(150) / 100, "{ctx}");

    // G asks for 170M: min must refuse it, low must give way.
    let got = alloc_anon(&mem, &g, u.m(170), u.page);
    let got_170m = got.is_ok();
    drop(got);
    let b_after_170m = mib(current(&b));
    let ctx = format!("{ctx}; got 170M: {got_170m}, B after (MiB): {b_after_170m}");
    assert_eq!(got_170m, !min, "{ctx}");
    let want = if min { u.m(50) } else { u.m(30) };
    assert!(values_close(current(&b), want, 3), "{ctx}");

    // memory.reclaim on C down to 10M ignores C's own protection.
    let ctx = format!(
        "{ctx}; C before memory.reclaim: {}",
        mib(current(&children[0]))
    );
    assert!(reclaim_until(&mem, &children[0], u.m(10)), "{ctx}");
    let c_after_reclaim = mib(current(&children[0]));

    let events: Vec<MemoryEvents> = children.iter().map(|c| mem.events(c).unwrap()).collect();
    let low = [events[0].low, events[1].low, events[2].low, events[3].low];
    let figures = Figures {
        after_148m,
        got_170m,
        b_after_170m,
        c_after_reclaim,
        low,
    };
    if !min {
        // No recursive protection here: E's low is 0 and its events too.
        for (i, ev) in events.iter().enumerate() {
            assert_eq!(ev.oom, 0, "child {i}: {figures:?}");
            if i <= 1 {
                assert!(ev.low > 0, "child {i} saw no low event: {figures:?}");
            } else {
                assert_eq!(ev.low, 0, "child {i}: {figures:?}");
            }
        }
    }
    println!("min={min} {u:?}: {figures:?}");
    drop(caches);
    figures
}

/// The selftest's `reclaim_until`: write `memory.reclaim` (here
/// [`Memory::reclaim`]) until usage is within 3% of `goal`, at most 5
/// times; false if a reclaim reported success but usage did not follow.
fn reclaim_until(mem: &Memory, g: &Group, goal: u64) -> bool {
    let mut reclaimed = false;
    for _ in 0..5 {
        let current = mem.current(g).unwrap();
        if current < goal || values_close(current, goal, 3) {
            break;
        } else if reclaimed {
            return false;
        }
        let to_reclaim = current - goal;
        // memory.reclaim succeeds when it reclaimed what was asked, else
        // says "try again".
        if mem.reclaim(g, to_reclaim).unwrap() >= to_reclaim {
            reclaimed = true;
        }
    }
    reclaimed
}

#[test]
fn selftest_memcg_min_in_pages() {
    test_memcg_protection(PAGES, true);
}

#[test]
fn selftest_memcg_low_in_pages() {
    test_memcg_protection(PAGES, false);
}

#[test]
fn selftest_memcg_min_in_bytes() {
    test_memcg_protection(BYTES, true);
}

#[test]
fn selftest_memcg_low_in_bytes() {
    test_memcg_protection(BYTES, false);
}

/// 300 and 100 reclaimable units, reclaimed one unit at a time: each small
/// request must not go to the first group in tree order; together they
/// must share the pressure as one request of 100 does (225/75).
#[test]
fn small_requests_share_pressure_in_proportion() {
    let (rs, mem) = setup(PAGES);
    let p = rs.root().create_child("p").unwrap();
    let a = p.create_child("a").unwrap();
    let b = p.create_child("b").unwrap();
    let ca = PageCache::new(&mem, &a, 1);
    let cb = PageCache::new(&mem, &b, 1);
    ca.fill(300);
    cb.fill(100);
    for _ in 0..100 {
        assert_eq!(mem.reclaim(&p, 1).unwrap(), 1);
    }
    let left = (ca.size(), cb.size());
    println!("300/100 after 100 requests of 1: {left:?}");
    assert_eq!(left.0 + left.1, 300);
    assert!(left.0.abs_diff(225) <= 5, "{left:?}, want about (225, 75)");
}

/// Charges of 100 bytes over a limit, with a cache of 4 KiB pages to
/// reclaim: every request is for less than a page, and a cache that never
/// frees more than asked would free nothing. Its granularity makes each
/// request a whole page, so the charges succeed, freeing no more pages
/// than they need plus one.
#[test]
fn sub_page_requests_free_whole_pages() {
    // No stock: every charge reaches the page counter, so the figures are
    // exact.
    let (rs, mem) = setup_with_batch(0);
    let p = rs.root().create_child("p").unwrap();
    let a = p.create_child("a").unwrap();
    let b = p.create_child("b").unwrap();
    mem.write_limit(&p, Limit::Max, "256K").unwrap();
    let cache = PageCache::new(&mem, &a, 4096);
    cache.fill(50 * 4096);
    let mut objects = Vec::new();
    for i in 0..1000 {
        match mem.try_charge(&b, 100) {
            Ok(c) => objects.push(c),
            Err(e) => panic!("object {i}: {e} (cache: {} pages)", cache.size() / 4096),
        }
    }
    assert!(mem.current(&p).unwrap() <= 256 << 10);
    // 204,800 + 100,000 − 262,144 = 42,656 bytes had to go: 10.4 pages.
    let freed = 50 - cache.size() / 4096;
    println!("pages freed for 1000 objects of 100 bytes: {freed}");
    assert!((11..=12).contains(&freed), "{freed} pages freed");
}

/// Rounding a request up to a reclaimer's granularity never reaches into
/// the group's protection: with 2,000 bytes above `memory.min`, a page
/// cannot be freed, and the charge that needs it fails.
#[test]
fn granularity_never_rounds_into_protection() {
    let (rs, mem) = setup_with_batch(0);
    let p = rs.root().create_child("p").unwrap();
    let a = p.create_child("a").unwrap();
    let b = p.create_child("b").unwrap();
    let cache = PageCache::new(&mem, &a, 4096);
    cache.fill(200 * 4096);
    let min = 200 * 4096 - 2000;
    mem.set_limit(&a, Limit::Min, min).unwrap();
    mem.set_limit(&p, Limit::Max, 200 * 4096).unwrap();
    let e = mem.try_charge(&b, 100).unwrap_err();
    assert!(matches!(e, MemoryError::OverLimit(_)), "{e}");
    assert_eq!(cache.size(), 200 * 4096);
    assert!(mem.current(&a).unwrap() >= min);
}

/// A cache that frees at most one unit per call, however much it is asked.
struct OneAtATime(Weak<PageCache>);

impl rstat::memory::Reclaimer for OneAtATime {
    fn reclaim(&self, target: u64) -> u64 {
        self.0.upgrade().map_or(0, |c| c.shrink(target.min(1)))
    }
}

/// A charge fails only when reclaim stops making progress, not after a
/// fixed number of rounds: 100 units from a reclaimer that frees one per
/// call take 100 calls, more than 16 rounds of 4 passes. So does a
/// `memory.max` write.
#[test]
fn a_charge_retries_while_reclaim_makes_progress() {
    let (rs, mem) = setup_with_batch(0);
    let g = rs.root().create_child("g").unwrap();
    let cache = Arc::new(PageCache {
        mem: mem.clone(),
        group: g.clone(),
        page: 1,
        pages: Mutex::new(Vec::new()),
    });
    mem.register_reclaimer(&g, OneAtATime(Arc::downgrade(&cache)))
        .unwrap();
    cache.fill(300);
    mem.set_limit(&g, Limit::Max, 300).unwrap();
    let c = mem.try_charge(&g, 100).expect("300 units are reclaimable");
    assert_eq!(cache.size(), 200);
    let w = mem.set_limit(&g, Limit::Max, 200).unwrap();
    assert!(w.reached, "{w:?}");
    assert_eq!(cache.size(), 100);
    drop(c);
}

/// Two reclaims of one target at once must not together take a group
/// below its `memory.min`: each sees the same usage, 50 units above the
/// protection, and without a reservation of what is in flight each would
/// ask for those 50. The reclaimer holds the first call until a second
/// call arrives or the other reclaim returns, so the two overlap whatever
/// the scheduling.
#[test]
fn concurrent_reclaims_never_take_a_group_below_its_min() {
    use std::sync::Condvar;
    use std::time::Duration;

    #[derive(Default)]
    struct Meeting {
        calls: u32,
        finished: u32,
    }

    struct Held {
        cache: Weak<PageCache>,
        meeting: Arc<(Mutex<Meeting>, Condvar)>,
    }

    impl rstat::memory::Reclaimer for Held {
        fn reclaim(&self, target: u64) -> u64 {
            let (m, cv) = &*self.meeting;
            let mut g = m.lock().unwrap();
            g.calls += 1;
            cv.notify_all();
            // A bound so that a bug cannot hang the test; no figure depends
            // on it.
            let (g, _) = cv
                .wait_timeout_while(g, Duration::from_secs(30), |g| {
                    g.calls < 2 && g.finished == 0
                })
                .unwrap();
            drop(g);
            self.cache.upgrade().map_or(0, |c| c.shrink(target))
        }
    }

    let rounds = if cfg!(miri) { 2 } else { 20 };
    for _ in 0..rounds {
        let (rs, mem) = setup_with_batch(0);
        let p = rs.root().create_child("p").unwrap();
        let a = p.create_child("a").unwrap();
        let cache = Arc::new(PageCache {
            mem: mem.clone(),
            group: a.clone(),
            page: 1,
            pages: Mutex::new(Vec::new()),
        });
        let meeting = Arc::new((Mutex::new(Meeting::default()), Condvar::new()));
        mem.register_reclaimer(
            &a,
            Held {
                cache: Arc::downgrade(&cache),
                meeting: Arc::clone(&meeting),
            },
        )
        .unwrap();
        cache.fill(150);
        mem.set_limit(&a, Limit::Min, 100).unwrap();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (mem, p, meeting) = (mem.clone(), p.clone(), Arc::clone(&meeting));
                std::thread::spawn(move || {
                    let got = mem.reclaim(&p, 50).unwrap();
                    let (m, cv) = &*meeting;
                    m.lock().unwrap().finished += 1;
                    cv.notify_all();
                    got
                })
            })
            .collect();
        let got: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        let left = mem.current(&a).unwrap();
        assert!(left >= 100, "reclaimed {got}, left {left} below min 100");
        assert_eq!((got, left), (50, 100));
    }
}
