//! Test support for the per-CPU building blocks and the modules built on
//! them: how a test that needs restartable sections (or glibc's rseq
//! registration) behaves where they are missing. A leaf: it imports
//! neither `cpu` nor `rseq`, so both (and `percpu_ref`'s tests) can use it.

/// The environment variable that makes tests of restartable sections fail,
/// instead of skipping, where the sections are unavailable. CI sets it for
/// its native test run (not for Miri or loom, which have no rseq).
pub(crate) const REQUIRE_ENV: &str = "RSTAT_REQUIRE_RSEQ";

/// For tests of restartable sections (or of glibc's rseq registration):
/// what `test` needs (`needed`: the section offset, a counter, ...), or
/// `None` if it is missing here, and then the caller returns. With
/// [`REQUIRE_ENV`] set (and not under Miri, which never has rseq) a
/// missing `needed` fails the test instead, so that a machine without rseq
/// cannot pass these tests by skipping them. A skip says so on stderr,
/// past the test harness's capture, so it shows in a plain `cargo test`.
pub(crate) fn rseq_for_test<T>(test: &str, needed: Option<T>) -> Option<T> {
    if needed.is_some() {
        return needed;
    }
    let why = if cfg!(miri) {
        "Miri has no restartable sequences"
    } else {
        "restartable sections are unavailable here (they need x86-64 Linux with \
         glibc's rseq registration, which GLIBC_TUNABLES=glibc.pthread.rseq=0 turns \
         off, the membarrier rseq commands of Linux 5.10, and RSTAT_PERCPU_REF unset)"
    };
    use std::io::Write;
    if cfg!(miri) {
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
        return None;
    }
    if std::env::var_os(REQUIRE_ENV).is_some() {
        panic!("{test}: {why}, but {REQUIRE_ENV} is set: this test must run");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (set {REQUIRE_ENV}=1 to make this a failure)"
    );
    None
}
