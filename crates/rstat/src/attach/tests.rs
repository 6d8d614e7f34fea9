//! The allocator-facing accessor's contract: readable without a reference,
//! null outside groups, valid inside, and readable in thread-local
//! destructors, including after this module's own exit hook has run.

use std::cell::RefCell;
use std::ptr;

use super::current_group_ptr;
use crate::{Group, Rstat};

#[test]
fn the_raw_accessor_follows_enter_and_drop() {
    let rs = Rstat::builder().periodic_flush(None).build().unwrap();
    let a = rs.root().create_child("a").unwrap();
    assert!(current_group_ptr().is_null());
    let g = a.enter();
    assert_eq!(current_group_ptr(), a.inner_ptr().as_ptr().cast_const());
    // SAFETY: the guard holds a reference; the contract allows the read.
    assert_eq!(unsafe { &*current_group_ptr() }.id, a.id());
    drop(g);
    assert!(current_group_ptr().is_null());
}

/// A value whose destructor enters a group and reads the accessor while
/// the thread's thread-locals are being destroyed.
struct LateUser {
    group: Group,
    seen: std::sync::mpsc::Sender<(bool, bool, bool)>,
}

impl Drop for LateUser {
    fn drop(&mut self) {
        let before = current_group_ptr().is_null();
        let g = self.group.enter();
        let inside = current_group_ptr() == self.group.inner_ptr().as_ptr().cast_const();
        drop(g);
        let after = current_group_ptr().is_null();
        let _ = self.seen.send((before, inside, after));
    }
}

thread_local! {
    static LATE: RefCell<Option<LateUser>> = const { RefCell::new(None) };
}

#[test]
fn entering_works_in_thread_local_destructors() {
    let rs = Rstat::builder().periodic_flush(None).build().unwrap();
    let a = rs.root().create_child("a").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let a2 = a.clone();
    std::thread::spawn(move || {
        // Enter once first so the exit hook is registered before `LATE`:
        // destructors run in reverse order of registration on Linux, but
        // either order must work.
        drop(a2.enter());
        LATE.with(|l| {
            *l.borrow_mut() = Some(LateUser {
                group: a2,
                seen: tx,
            })
        });
    })
    .join()
    .unwrap();
    assert_eq!(rx.recv().unwrap(), (true, true, true));
}

/// A guard kept in a thread-local: the thread exits inside the group.
struct HeldGuard(#[allow(dead_code)] Option<super::EnterGuard>);

thread_local! {
    static HELD: RefCell<HeldGuard> = const { RefCell::new(HeldGuard(None)) };
}

#[test]
fn a_thread_exiting_inside_a_group_releases_it() {
    let rs = Rstat::builder().periodic_flush(None).build().unwrap();
    let a = rs.root().create_child("a").unwrap();
    let a2 = a.clone();
    std::thread::spawn(move || {
        HELD.with(|h| h.borrow_mut().0 = Some(a2.enter()));
        assert_eq!(current_group_ptr(), a2.inner_ptr().as_ptr().cast_const());
    })
    .join()
    .unwrap();
    // The guard's reference was dropped with the thread: removing the
    // group frees it at once (no zombie left behind).
    a.remove().unwrap();
    drop(a);
    assert_eq!(rs.zombie_count(), 0);
    assert!(ptr::eq(current_group_ptr(), ptr::null()));
}

#[test]
fn stat_lines_are_read_past_any_thread_name() {
    use super::clock::parse_stat_times;
    // Fields 14 and 15 (utime, stime) are 1234 and 56; the name holds
    // spaces and both parentheses.
    let line = b"4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 0 0 20 0 1 0 7 0 0\n";
    assert_eq!(parse_stat_times(line), Some((1234, 56)));
    assert_eq!(parse_stat_times(b"4242 (x) S 1 2 3"), None);
    assert_eq!(parse_stat_times(b"no name here"), None);
}

#[test]
// Miri has neither /proc nor rusage.
#[cfg_attr(miri, ignore)]
fn proc_times_match_the_threads_own_within_a_tick() {
    use super::clock::{proc_thread_times_us, thread_rusage_us, tick_us};
    // A name with the characters that could mislead the parser.
    std::thread::Builder::new()
        .name("x) y (z)".into())
        .spawn(|| {
            let mut x = 0u64;
            let start = std::time::Instant::now();
            // Mostly user time (a clock read per 100,000 rounds).
            while super::clock::thread_cpu_ns().unwrap() < 50_000_000
                && start.elapsed() < std::time::Duration::from_secs(60)
            {
                for i in 0..100_000 {
                    x = x.wrapping_mul(31).wrapping_add(i);
                }
                std::hint::black_box(x);
            }
            // SAFETY: `gettid` has no preconditions.
            let tid = unsafe { libc::gettid() };
            let (u0, s0) = thread_rusage_us().unwrap();
            let (pu, ps) = proc_thread_times_us(tid).unwrap();
            let (u1, s1) = thread_rusage_us().unwrap();
            let tick = tick_us().unwrap();
            // /proc cuts the same figures down to whole ticks.
            assert!(pu <= u1 && pu + tick > u0, "user: {u0} {pu} {u1}");
            assert!(ps <= s1 && ps + tick > s0, "system: {s0} {ps} {s1}");
            assert!(pu > 0, "50 ms of user time not seen: {pu}");
        })
        .unwrap()
        .join()
        .unwrap();
}

/// A charge made with a stale split (all user, say, before the thread's
/// first sample) is made good by the next ones: the thread's user µs
/// charged follow its sampled split of all its time, not only the last
/// interval's.
#[test]
fn charges_catch_up_with_the_sampled_split() {
    use super::clock::{SplitSample, SPLIT_ONE};
    use super::feed::Feed;
    let rs = Rstat::builder().periodic_flush(None).build().unwrap();
    let a = rs.root().create_child("a").unwrap();
    let _held = a.clone(); // keeps `a` alive while the feed points at it
    let mut f = Feed::new();
    f.restart(0, 0, None, (SplitSample::default(), SPLIT_ONE));
    f.group = a.inner_ptr().as_ptr().cast_const();
    // 100 µs charged as all user (the prior), then a sample shows half of
    // the thread's time was system: the next 100 µs are all system.
    drop(f.reconcile(100_000, 1_000));
    f.split = SplitSample::for_test((0, 0), (100, 100));
    drop(f.reconcile(200_000, 2_000));
    // An interval that cannot make up all of a larger gap gives what it
    // has (all system), never a negative user charge.
    f.split = SplitSample::for_test((0, 0), (0, 210));
    drop(f.reconcile(210_000, 3_000));
    f.group = ptr::null();
    let (u, user, system) = local_cpu(&rs, &a);
    assert_eq!((u, user, system), (210, 100, 110));
}

/// The split follows the sample's microseconds, not a rounded fraction:
/// after an hour of system time, 4 ms of user time are charged as user
/// time (a fraction in 1/65536 would round them to system), and time in no
/// group counts towards the thread's split as the groups' time does.
#[test]
fn a_long_lived_threads_split_is_as_fine_as_a_new_ones() {
    use super::clock::{SplitSample, SPLIT_ONE};
    use super::feed::Feed;
    const HOUR_US: u64 = 3_600_000_000;
    let rs = Rstat::builder().periodic_flush(None).build().unwrap();
    let a = rs.root().create_child("a").unwrap();
    let _held = a.clone(); // keeps `a` alive while the feed points at it
    let mut f = Feed::new();
    f.restart(0, 0, None, (SplitSample::default(), SPLIT_ONE));
    // An hour in no group, all system time by the sample.
    f.split = SplitSample::for_test((0, 0), (0, HOUR_US));
    drop(f.reconcile(HOUR_US * 1000, 1_000));
    // 4 ms in `a`, all user time by the next sample.
    f.group = a.inner_ptr().as_ptr().cast_const();
    f.split = SplitSample::for_test((0, 0), (4_000, HOUR_US));
    drop(f.reconcile((HOUR_US + 4_000) * 1000, 2_000));
    f.group = ptr::null();
    let (u, user, system) = local_cpu(&rs, &a);
    assert_eq!((u, user, system), (4_000, 4_000, 0));
}

/// `g`'s own `(usage_usec, user_usec, system_usec)`, read exactly.
fn local_cpu(rs: &Rstat, g: &Group) -> (i64, i64, i64) {
    let s = rs.cpu().unwrap().read_exact(g).unwrap();
    let get = |name| s.get_local(name).unwrap();
    (get("usage_usec"), get("user_usec"), get("system_usec"))
}
