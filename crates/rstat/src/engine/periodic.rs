//! The periodic root flusher: every period, flush every controller's root,
//! whatever the policies and thresholds (the kernel's 2-second
//! `flush_memcg_stats_dwork`). One thread per engine, started and stopped
//! with it: stopping wakes the thread and joins it, so no thread outlives
//! the `Rstat` that started it.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::engine::EngineInner;
use crate::group::Group;

pub(crate) struct Periodic {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    pub(crate) period: Duration,
}

impl Periodic {
    /// Start flushing every `period`. `root` keeps the root group (and so
    /// every domain's root node) alive while the thread runs.
    pub(crate) fn start(
        engine: Arc<EngineInner>,
        root: Group,
        period: Duration,
    ) -> std::io::Result<Self> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("rstat-flush".into())
            .spawn(move || {
                let _root = root;
                let (m, cv) = &*s;
                let mut next = Instant::now() + period;
                loop {
                    let mut stopped = m.lock().unwrap_or_else(|p| p.into_inner());
                    loop {
                        if *stopped {
                            return;
                        }
                        let now = Instant::now();
                        if now >= next {
                            break;
                        }
                        stopped = cv
                            .wait_timeout(stopped, next - now)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                    drop(stopped);
                    engine.flush_all_roots();
                    next += period;
                    let now = Instant::now();
                    if next < now {
                        next = now + period; // fell behind: don't burst
                    }
                }
            })?;
        Ok(Periodic {
            stop,
            thread: Some(thread),
            period,
        })
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        let (m, cv) = &*self.stop;
        *m.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
