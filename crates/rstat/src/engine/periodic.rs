//! The periodic root flusher: every period, flush every controller's root,
//! whatever the policies and thresholds (the kernel's 2-second
//! `flush_memcg_stats_dwork`). Between periods it also answers paced
//! `Threshold` reads that asked for a root flush (see
//! [`policy`](crate::policy)'s "The pace"): it flushes the roots of the
//! domains that asked, at most once per a quarter of the read pace, so that
//! the readers keep finding a root stamp younger than the pace instead of
//! flushing themselves, however many of them ask.
//!
//! After each period's flush it runs the extensions' housekeeping
//! ([`GroupExt::periodic`](crate::group::ext::GroupExt::periodic)): the
//! memory controller returns idle groups' stock there.
//!
//! One thread per engine, started and stopped with it: stopping wakes the
//! thread and joins it, so no thread outlives the `Rstat` that started it.
//! It sleeps on the engine's [`Nudge`], which readers wake.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::engine::EngineInner;
use crate::group::Group;
use crate::stat::pace::{Nudge, Woken};

pub(crate) struct Periodic {
    nudge: Arc<Nudge>,
    thread: Option<JoinHandle<()>>,
    pub(crate) period: Duration,
}

impl Periodic {
    /// Start flushing every `period`, and on asks. `root` keeps the root
    /// group (and so every domain's root node) alive while the thread
    /// runs. At most one runs per engine (the caller stops the last one
    /// first).
    pub(crate) fn start(
        engine: Arc<EngineInner>,
        root: Group,
        period: Duration,
    ) -> std::io::Result<Self> {
        let nudge = Arc::clone(&engine.pace.nudge);
        nudge.set_stopped(false);
        // Asked root flushes at most once per P/4: a reader then finds a
        // root stamp at most P/4 plus one root flush old while the flusher
        // keeps up, well inside P.
        let gap = engine.pace.pace.map_or(period, |p| p / 4);
        let n = Arc::clone(&nudge);
        let thread = std::thread::Builder::new()
            .name("rstat-flush".into())
            .spawn(move || {
                let _root = root;
                let mut next = Instant::now() + period;
                // Asks that came while the flusher was stopped are
                // answered at once.
                let mut asks_from = Instant::now();
                loop {
                    match n.wait(next, asks_from) {
                        Woken::Stopped => return,
                        Woken::Tick => {
                            engine.flush_all_roots();
                            // E.g. the memory controller's idle stock.
                            engine.run_ext_periodic();
                            next += period;
                            let now = Instant::now();
                            if next < now {
                                next = now + period; // fell behind: don't burst
                            }
                            asks_from = now + gap;
                        }
                        Woken::Asked => {
                            engine.flush_asked_roots();
                            asks_from = Instant::now() + gap;
                        }
                    }
                }
            });
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                nudge.set_stopped(true);
                return Err(e);
            }
        };
        Ok(Periodic {
            nudge,
            thread: Some(thread),
            period,
        })
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        self.nudge.set_stopped(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
