//! From a [`Snapshot`] to the exposition: metric families, label escaping,
//! the `prometheus-client` collector, and the classic text variant.

use std::collections::HashSet;
use std::fmt::{self, Write as _};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelValue, LabelValueEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;
use rstat::memory::MemoryEvent;
use rstat::report::{GroupSnapshot, Snapshot};
use rstat::StatKind;

/// A label value, escaped on the way out as both text formats require:
/// `\` → `\\`, `"` → `\"`, newline → `\n` (everything else, any UTF-8,
/// as is). `prometheus-client` writes label values verbatim, so this is
/// where a group name such as `a"b\c` or one with a newline is made safe.
/// Group names are Rust strings, so always valid UTF-8 (a binding that
/// takes bytes, such as a C API, validates them when the group is
/// created): there is no invalid UTF-8 to carry into a label.
pub struct Escaped<'a>(pub &'a str);

impl EncodeLabelValue for Escaped<'_> {
    fn encode(&self, enc: &mut LabelValueEncoder) -> fmt::Result {
        escape_label_value(self.0, enc)
    }
}

/// Write `s` escaped as a label value (see [`Escaped`]).
pub fn escape_label_value(s: &str, out: &mut impl fmt::Write) -> fmt::Result {
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let rep = match b {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            b'\n' => "\\n",
            _ => continue,
        };
        out.write_str(&s[start..i])?;
        out.write_str(rep)?;
        start = i + 1;
    }
    out.write_str(&s[start..])
}

/// A metric or label name made of `[a-zA-Z0-9_]` only: anything else
/// becomes `_`.
pub fn sanitize_name(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
}

#[derive(Clone, Copy, Debug)]
enum Scale {
    One,
    /// Microseconds, exported as seconds.
    Micro,
    /// Charge units, exported as bytes.
    Bytes(u64),
}

#[derive(Clone, Copy, Debug)]
enum Source {
    Item {
        ctl: usize,
        item: usize,
    },
    MemCurrent,
    MemPeak,
    MemMax,
    MemHigh,
    MemLow,
    MemMin,
    MemEvents,
    /// `cpu.stat`'s bandwidth lines of a group with a `cpu.max` quota.
    CpuPeriods,
    CpuThrottled,
    CpuThrottledUsec,
    /// `cpu.pressure` / `memory.pressure` totals (`full` if true).
    CpuPressure(bool),
    MemPressure(bool),
    /// `cpu.max`'s quota and period, seconds (groups with a quota).
    CpuMaxQuota,
    CpuMaxPeriod,
    /// 1 for a killed group (no sample for the others).
    Killed,
}

#[derive(Debug)]
pub(crate) struct Family {
    /// Without the unit suffix (`prometheus-client` appends it).
    stem: String,
    help: String,
    unit: Option<Unit>,
    kind: Kind,
    source: Source,
    scale: Scale,
}

impl Family {
    /// The family name as exposed in OpenMetrics (`stem_unit`).
    pub(crate) fn name(&self) -> String {
        match &self.unit {
            Some(u) => format!("{}_{}", self.stem, u.as_str()),
            None => self.stem.clone(),
        }
    }
}

/// How the controllers' items become families.
#[derive(Clone, Debug)]
pub(crate) struct Naming {
    pub(crate) memory_unit_bytes: u64,
    /// `controller.item` or `controller.*` exported as gauges.
    pub(crate) gauges: Vec<String>,
    /// Each controller's declared item kinds
    /// ([`rstat::ControllerHandle::stat_kinds`]), by controller name. A
    /// controller missing here has counters only.
    pub(crate) kinds: Vec<(String, Vec<StatKind>)>,
}

/// `memory.stat` items in charge units: bytes once multiplied by
/// `memory_unit_bytes`.
const MEMORY_UNIT_ITEMS: [&str; 4] = ["charged", "uncharged", "reclaimed", "forced"];
/// `memory.stat` items counted in bytes by the accounting allocator,
/// whatever the charge unit.
const MEMORY_HEAP_BYTE_ITEMS: [&str; 3] = ["heap", "heap_overhead", "heap_reparented"];

/// The families for a snapshot's controllers (and memory state), names
/// unique: a name already taken (by the exporter's own metrics or an
/// earlier family) skips the later family; returns how many were skipped.
pub(crate) fn families(snap: &Snapshot, naming: &Naming, taken: &[&str]) -> (Vec<Family>, usize) {
    let mut out = Vec::new();
    let mut used: HashSet<String> = taken.iter().map(|s| s.to_string()).collect();
    let mut skipped = 0;
    let mut push = |f: Family, out: &mut Vec<Family>| {
        // A counter's samples carry `_total`; reserve both spellings.
        let name = f.name();
        let total = format!("{name}_total");
        if used.contains(&name) || used.contains(&total) {
            skipped += 1;
        } else {
            used.insert(name);
            used.insert(total);
            out.push(f);
        }
    };
    for (ci, c) in snap.controllers.iter().enumerate() {
        let ctl = sanitize_name(&c.name);
        let whole = format!("{}.*", c.name);
        let declared = naming
            .kinds
            .iter()
            .find(|(n, _)| *n == c.name)
            .map(|(_, k)| k.as_slice())
            .unwrap_or(&[]);
        for (ii, item) in c.items.iter().enumerate() {
            let is_gauge = declared.get(ii) == Some(&StatKind::Gauge)
                || naming
                    .gauges
                    .iter()
                    .any(|g| *g == whole || *g == format!("{}.{item}", c.name));
            let kind = if is_gauge { Kind::Gauge } else { Kind::Counter };
            let source = Source::Item { ctl: ci, item: ii };
            let help_of = |what: &str| {
                format!(
                    "{} of rstat controller {}, item {}, per group (hierarchical: the group and its descendants, removed ones included)",
                    what,
                    sanitize_name(&c.name),
                    sanitize_name(item)
                )
            };
            let f = if c.name == "memory" && MEMORY_UNIT_ITEMS.contains(&item.as_str()) {
                Family {
                    stem: format!("rstat_memory_{item}"),
                    help: format!("memory.stat {item}: units of memory {item}, in bytes, per group (hierarchical)"),
                    unit: Some(Unit::Bytes),
                    kind,
                    source,
                    scale: Scale::Bytes(naming.memory_unit_bytes),
                }
            } else if c.name == "memory" && MEMORY_HEAP_BYTE_ITEMS.contains(&item.as_str()) {
                Family {
                    stem: format!("rstat_memory_{item}"),
                    help: help_of("Bytes"),
                    unit: Some(Unit::Bytes),
                    kind,
                    source,
                    scale: Scale::One,
                }
            } else if let Some(stem) = item.strip_suffix("_usec") {
                Family {
                    stem: format!("rstat_{ctl}_{}", sanitize_name(stem)),
                    help: help_of("Time (from microseconds)"),
                    unit: Some(Unit::Seconds),
                    kind,
                    source,
                    scale: Scale::Micro,
                }
            } else if let Some(stem) = item.strip_suffix("_bytes") {
                Family {
                    stem: format!("rstat_{ctl}_{}", sanitize_name(stem)),
                    help: help_of("Bytes"),
                    unit: Some(Unit::Bytes),
                    kind,
                    source,
                    scale: Scale::One,
                }
            } else {
                Family {
                    stem: format!("rstat_{ctl}_{}", sanitize_name(item)),
                    help: help_of("Value"),
                    unit: None,
                    kind,
                    source,
                    scale: Scale::One,
                }
            };
            push(f, &mut out);
        }
    }
    // `cpu.max`'s counts, for the groups with a quota (the kernel's
    // cpu.stat bandwidth lines): only when some group has one.
    if snap.groups.iter().any(|g| g.cpu_max.is_some()) {
        for (stem, help, unit, source, scale) in [
            (
                "rstat_cpu_nr_periods",
                "cpu.stat nr_periods: periods in which the group's scoped work ran under its cpu.max quota",
                None,
                Source::CpuPeriods,
                Scale::One,
            ),
            (
                "rstat_cpu_nr_throttled",
                "cpu.stat nr_throttled: periods in which a poll of the group was deferred by its cpu.max",
                None,
                Source::CpuThrottled,
                Scale::One,
            ),
            (
                "rstat_cpu_throttled",
                "cpu.stat throttled_usec: time the group's deferred polls waited for the next period",
                Some(Unit::Seconds),
                Source::CpuThrottledUsec,
                Scale::Micro,
            ),
        ] {
            push(
                Family {
                    stem: stem.to_owned(),
                    help: help.to_owned(),
                    unit,
                    kind: Kind::Counter,
                    source,
                    scale,
                },
                &mut out,
            );
        }
    }
    if snap.groups.iter().any(|g| g.cpu_max_limit.is_some()) {
        for (stem, help, source) in [
            (
                "rstat_cpu_max_quota",
                "cpu.max: run time per period the group's scoped work may use",
                Source::CpuMaxQuota,
            ),
            (
                "rstat_cpu_max_period",
                "cpu.max: its period",
                Source::CpuMaxPeriod,
            ),
        ] {
            push(
                Family {
                    stem: stem.to_owned(),
                    help: help.to_owned(),
                    unit: Some(Unit::Seconds),
                    kind: Kind::Gauge,
                    source,
                    scale: Scale::Micro,
                },
                &mut out,
            );
        }
    }
    if snap.groups.iter().any(|g| g.killed) {
        push(
            Family {
                stem: "rstat_killed".to_owned(),
                help: "1 for a group whose work was killed (Group::kill, an OOM kill); no sample for the others".to_owned(),
                unit: None,
                kind: Kind::Gauge,
                source: Source::Killed,
                scale: Scale::One,
            },
            &mut out,
        );
    }
    // Pressure, for the groups that ever stalled (the kernel's PSI totals;
    // rates of these counters are the stalled shares).
    if snap
        .groups
        .iter()
        .any(|g| g.cpu_pressure.is_some() || g.memory_pressure.is_some())
    {
        for (stem, help, source) in [
            ("rstat_cpu_pressure_waiting", "cpu.pressure some: time some of the group's work waited for its cpu.max", Source::CpuPressure(false)),
            ("rstat_cpu_pressure_stalled", "cpu.pressure full: time all of the group's scoped work waited for its cpu.max", Source::CpuPressure(true)),
            ("rstat_memory_pressure_waiting", "memory.pressure some: time some of the group's work was delayed over memory.high or in reclaim", Source::MemPressure(false)),
            ("rstat_memory_pressure_stalled", "memory.pressure full: not tracked, 0 (see rstat's group::pressure)", Source::MemPressure(true)),
        ] {
            push(
                Family {
                    stem: stem.to_owned(),
                    help: help.to_owned(),
                    unit: Some(Unit::Seconds),
                    kind: Kind::Counter,
                    source,
                    scale: Scale::Micro,
                },
                &mut out,
            );
        }
    }
    let has_memory = snap.groups.iter().any(|g| g.memory.is_some());
    if has_memory {
        let b = Scale::Bytes(naming.memory_unit_bytes);
        let mem = |stem: &str, help: &str, kind, source, scale, unit| Family {
            stem: format!("rstat_memory_{stem}"),
            help: help.to_owned(),
            unit,
            kind,
            source,
            scale,
        };
        let gauges = [
            (
                "current",
                "memory.current: usage of the group and its descendants, stocks included",
                Source::MemCurrent,
            ),
            (
                "peak",
                "memory.peak: highest usage since creation or the last reset",
                Source::MemPeak,
            ),
            (
                "max",
                "memory.max: hard limit (no sample when unlimited, the file's max)",
                Source::MemMax,
            ),
            (
                "high",
                "memory.high: throttling threshold (no sample when unlimited)",
                Source::MemHigh,
            ),
            (
                "low",
                "memory.low: best-effort protection (no sample when unlimited)",
                Source::MemLow,
            ),
            (
                "min",
                "memory.min: hard protection (no sample when unlimited)",
                Source::MemMin,
            ),
        ];
        for (stem, help, src) in gauges {
            push(
                mem(stem, help, Kind::Gauge, src, b, Some(Unit::Bytes)),
                &mut out,
            );
        }
        push(
            mem(
                "events",
                "memory.events: limit and protection events of the group and its descendants, by kind",
                Kind::Counter,
                Source::MemEvents,
                Scale::One,
                None,
            ),
            &mut out,
        );
    }
    (out, skipped)
}

/// Self-metrics of one scrape, encoded after the families.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SelfStats {
    pub(crate) groups: u64,
    pub(crate) removed_reported_total: u64,
    pub(crate) removed_lost_total: u64,
    pub(crate) scrapes_total: u64,
    pub(crate) last_scrape_seconds: f64,
    pub(crate) skipped_samples_total: u64,
    pub(crate) skipped_families: u64,
}

/// The exporter's own families' names (reserved before the controllers').
pub(crate) const SELF_NAMES: [&str; 7] = [
    "rstat_exporter_groups",
    "rstat_exporter_removed_groups_reported",
    "rstat_exporter_removed_groups_lost",
    "rstat_exporter_scrapes",
    "rstat_exporter_last_scrape_duration_seconds",
    "rstat_exporter_skipped_samples",
    "rstat_exporter_skipped_families",
];

/// One scrape's data: what the collector encodes.
#[derive(Debug)]
pub(crate) struct ScrapeData {
    pub(crate) families: Vec<Family>,
    pub(crate) live: Vec<GroupSnapshot>,
    pub(crate) removed: Vec<GroupSnapshot>,
    pub(crate) stats: SelfStats,
}

/// The collector: reads nothing itself; encodes one scrape's data.
#[derive(Debug)]
pub(crate) struct ScrapeCollector {
    pub(crate) data: ScrapeData,
    /// Negative values of counter items, not exposed (a counter cannot go
    /// down); counted here during `encode`.
    pub(crate) skipped: std::sync::atomic::AtomicU64,
    pub(crate) series: std::sync::atomic::AtomicU64,
}

type Labels<'a> = [(&'static str, Escaped<'a>)];

fn counter(m: &mut MetricEncoder, labels: &Labels, v: CounterValue) -> fmt::Result {
    let mut f = m.encode_family(&labels)?;
    match v {
        CounterValue::Int(v) => f.encode_counter::<NoLabelSet, u64, f64>(&v, None),
        CounterValue::Float(v) => f.encode_counter::<NoLabelSet, f64, f64>(&v, None),
    }
}

fn gauge(m: &mut MetricEncoder, labels: &Labels, v: i64) -> fmt::Result {
    m.encode_family(&labels)?.encode_gauge(&v)
}

enum CounterValue {
    Int(u64),
    Float(f64),
}

/// One sample of `f`'s kind from a raw value: scaled (seconds from
/// microseconds, bytes from charge units), as a float for seconds. A
/// counter's negative value has no sample (`None`): a counter cannot be
/// negative.
fn sample(f: &Family, v: i64, m: &mut MetricEncoder, labels: &Labels) -> Option<fmt::Result> {
    Some(match (f.kind, f.scale) {
        (Kind::Gauge, Scale::Micro) => m
            .encode_family(&labels)
            .and_then(|mut m| m.encode_gauge(&(v as f64 / 1e6))),
        (Kind::Gauge, Scale::Bytes(k)) => gauge(
            m,
            labels,
            v.saturating_mul(i64::try_from(k).unwrap_or(i64::MAX)),
        ),
        (Kind::Gauge, Scale::One) => gauge(m, labels, v),
        (Kind::Counter, scale) => {
            let u = u64::try_from(v).ok()?;
            let cv = match scale {
                Scale::Micro => CounterValue::Float(u as f64 / 1e6),
                Scale::Bytes(k) => CounterValue::Int(u.saturating_mul(k)),
                Scale::One => CounterValue::Int(u),
            };
            counter(m, labels, cv)
        }
    })
}

impl ScrapeCollector {
    fn encode_group(&self, f: &Family, g: &GroupSnapshot, m: &mut MetricEncoder) -> fmt::Result {
        use std::sync::atomic::Ordering::Relaxed;
        let path = [("path", Escaped(&g.path))];
        let one = |m: &mut MetricEncoder, v: i64| -> fmt::Result {
            match sample(f, v, m, &path) {
                Some(r) => {
                    self.series.fetch_add(1, Relaxed);
                    r
                }
                None => {
                    self.skipped.fetch_add(1, Relaxed);
                    Ok(())
                }
            }
        };
        match f.source {
            Source::Item { ctl, item } => {
                let Some(v) = g.stats.get(ctl).and_then(|s| s.hierarchical.get(item)) else {
                    return Ok(());
                };
                one(m, *v)
            }
            Source::MemEvents => {
                let Some(mem) = &g.memory else { return Ok(()) };
                for ev in MemoryEvent::ALL {
                    self.series.fetch_add(1, Relaxed);
                    let labels = [("path", Escaped(&g.path)), ("event", Escaped(ev.name()))];
                    counter(m, &labels, CounterValue::Int(mem.events.get(ev)))?;
                }
                Ok(())
            }
            Source::CpuMaxQuota | Source::CpuMaxPeriod => {
                let Some(c) = g.cpu_max_limit else {
                    return Ok(());
                };
                let v = match f.source {
                    Source::CpuMaxQuota => c.quota_us.unwrap_or(0),
                    _ => c.period_us,
                };
                one(m, i64::try_from(v).unwrap_or(i64::MAX))
            }
            Source::Killed => {
                if g.killed {
                    one(m, 1)
                } else {
                    Ok(())
                }
            }
            Source::CpuPressure(full) | Source::MemPressure(full) => {
                let p = match f.source {
                    Source::CpuPressure(_) => g.cpu_pressure,
                    _ => g.memory_pressure,
                };
                let Some(p) = p else { return Ok(()) };
                let v = if full { p.full_usec } else { p.some_usec };
                one(m, i64::try_from(v).unwrap_or(i64::MAX))
            }
            Source::CpuPeriods | Source::CpuThrottled | Source::CpuThrottledUsec => {
                let Some(c) = &g.cpu_max else { return Ok(()) };
                let v = match f.source {
                    Source::CpuPeriods => c.nr_periods,
                    Source::CpuThrottled => c.nr_throttled,
                    _ => c.throttled_usec,
                };
                one(m, i64::try_from(v).unwrap_or(i64::MAX))
            }
            src => {
                let Some(mem) = &g.memory else { return Ok(()) };
                let v = match src {
                    Source::MemCurrent => Some(mem.current),
                    Source::MemPeak => Some(mem.peak),
                    Source::MemMax => mem.max,
                    Source::MemHigh => mem.high,
                    Source::MemLow => mem.low,
                    Source::MemMin => mem.min,
                    _ => None,
                };
                match v {
                    Some(v) => one(m, i64::try_from(v).unwrap_or(i64::MAX)),
                    None => Ok(()),
                }
            }
        }
    }

    fn encode_self(&self, enc: &mut DescriptorEncoder) -> fmt::Result {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.data.stats;
        let skipped = s.skipped_samples_total + self.skipped.load(Relaxed);
        let g = |enc: &mut DescriptorEncoder, name: &str, help: &str, v: i64| {
            enc.encode_descriptor(name, help, None, MetricType::Gauge)?
                .encode_gauge(&v)
        };
        let c = |enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64| {
            enc.encode_descriptor(name, help, None, MetricType::Counter)?
                .encode_counter::<NoLabelSet, u64, f64>(&v, None)
        };
        g(
            enc,
            "rstat_exporter_groups",
            "Live groups in this scrape",
            s.groups as i64,
        )?;
        c(
            enc,
            "rstat_exporter_removed_groups_reported",
            "Removed groups reported with their final values",
            s.removed_reported_total,
        )?;
        c(enc, "rstat_exporter_removed_groups_lost", "Removed groups not reported: the removal queue was full, or a live or later-removed group had the same path in the same scrape", s.removed_lost_total)?;
        c(
            enc,
            "rstat_exporter_scrapes",
            "Scrapes served, this one included",
            s.scrapes_total,
        )?;
        enc.encode_descriptor(
            "rstat_exporter_last_scrape_duration",
            "Time the previous scrape took to read the tree and encode it",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?
        .encode_gauge(&s.last_scrape_seconds)?;
        c(enc, "rstat_exporter_skipped_samples", "Counter samples not exposed because the value was negative, which a counter cannot be (declare items that go up and down as gauges: rstat::StatKind::Gauge)", skipped)?;
        g(
            enc,
            "rstat_exporter_skipped_families",
            "Families not exposed in this scrape because their sanitized name was taken",
            s.skipped_families as i64,
        )
    }
}

impl Collector for ScrapeCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        for f in &self.data.families {
            let ty = match f.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
            };
            let mut m = enc.encode_descriptor(&f.stem, &f.help, f.unit.as_ref(), ty)?;
            for g in self.data.live.iter().chain(&self.data.removed) {
                self.encode_group(f, g, &mut m)?;
            }
        }
        self.encode_self(&mut enc)
    }
}

/// The classic Prometheus text format (0.0.4) from `prometheus-client`'s
/// OpenMetrics text: the two differ, for what this exporter writes, only
/// in that a classic counter family is named with its `_total` suffix,
/// and that classic text has no `# UNIT` lines and no `# EOF`. Samples,
/// label escaping and values are the same, so they pass through.
pub fn openmetrics_to_classic(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<&str> = None;
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if line.starts_with("# HELP ") {
            help = Some(line);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.rsplit_once(' ').unwrap_or((rest, "unknown"));
            let (name, ty) = match ty {
                "counter" => (format!("{name}_total"), "counter"),
                "unknown" => (name.to_owned(), "untyped"),
                t => (name.to_owned(), t),
            };
            if let Some(h) = help.take() {
                let text = h
                    .strip_prefix("# HELP ")
                    .and_then(|r| r.split_once(' '))
                    .map_or("", |(_, t)| t);
                let _ = writeln!(out, "# HELP {name} {text}");
            }
            let _ = writeln!(out, "# TYPE {name} {ty}");
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}
