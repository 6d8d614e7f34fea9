//! How busy the machine was while the lab ran: CPU time used by other
//! processes (from `/proc/stat`, less this process's and its children's
//! own time) and time stolen by the hypervisor.

use std::time::Instant;

/// A reading of the machine's CPU clocks.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    at: Instant,
    /// Non-idle seconds of all CPUs (user, nice, system, irq, softirq).
    busy: Option<f64>,
    /// Seconds stolen by the hypervisor, all CPUs.
    steal: Option<f64>,
    /// This process's and its waited-for children's CPU seconds.
    ours: f64,
}

/// What happened between two readings.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Load {
    /// Wall seconds.
    pub seconds: f64,
    /// CPUs' worth of time other processes used, on average (0 = the lab
    /// had the machine to itself); null where `/proc/stat` is unreadable.
    pub other_cpus: Option<f64>,
    /// CPUs' worth of time the hypervisor stole, on average.
    pub steal_cpus: Option<f64>,
}

/// Read the clocks now.
pub fn now() -> Clock {
    let (busy, steal) = proc_stat().map_or((None, None), |(b, s)| (Some(b), Some(s)));
    Clock {
        at: Instant::now(),
        busy,
        steal,
        ours: rusage(libc::RUSAGE_SELF) + rusage(libc::RUSAGE_CHILDREN),
    }
}

/// The load between two readings.
pub fn between(a: &Clock, b: &Clock) -> Load {
    let secs = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let ours = (b.ours - a.ours).max(0.0);
    Load {
        seconds: secs,
        other_cpus: match (a.busy, b.busy) {
            (Some(x), Some(y)) => Some(((y - x - ours).max(0.0) / secs * 100.0).round() / 100.0),
            _ => None,
        },
        steal_cpus: match (a.steal, b.steal) {
            (Some(x), Some(y)) => Some(((y - x).max(0.0) / secs * 100.0).round() / 100.0),
            _ => None,
        },
    }
}

/// The 1-minute load average, if readable.
pub fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// (busy, steal) seconds summed over all CPUs, from the first line of
/// `/proc/stat`.
fn proc_stat() -> Option<(f64, f64)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let line = s.lines().next()?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if f.len() < 8 {
        return None;
    }
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as f64 } else { 100.0 };
    // user nice system idle iowait irq softirq steal ...
    let busy = f[0] + f[1] + f[2] + f[5] + f[6];
    Some((busy as f64 / hz, f[7] as f64 / hz))
}

fn rusage(who: libc::c_int) -> f64 {
    // SAFETY: a zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer; `who` is RUSAGE_SELF or RUSAGE_CHILDREN.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return 0.0;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// Now as `YYYY-MM-DD HH:MM UTC`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_are_the_busy_time_less_our_own() {
        let t0 = Instant::now();
        let a = Clock {
            at: t0,
            busy: Some(100.0),
            steal: Some(1.0),
            ours: 5.0,
        };
        let b = Clock {
            at: t0 + std::time::Duration::from_secs(2),
            busy: Some(110.0),
            steal: Some(2.0),
            ours: 8.0,
        };
        let l = between(&a, &b);
        // 10 busy seconds in 2 s, 3 of them ours: others used 3.5 CPUs.
        assert_eq!(l.other_cpus, Some(3.5));
        assert_eq!(l.steal_cpus, Some(0.5));
        let c = Clock { busy: None, ..b };
        assert_eq!(between(&a, &c).other_cpus, None);
    }

    #[test]
    fn a_real_reading_has_the_clocks() {
        let a = now();
        assert!(
            a.busy.is_some() && a.steal.is_some(),
            "/proc/stat unreadable"
        );
        assert!(a.ours > 0.0);
    }

    #[test]
    fn utc_now_is_shaped_like_a_date() {
        let s = utc_now();
        assert_eq!(s.len(), 20, "{s}");
        assert!(s.starts_with("20") && s.ends_with(" UTC"), "{s}");
    }
}
