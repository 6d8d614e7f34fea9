//! `rstat top`: a live view of the group tree of any process that runs the
//! rstat exporter, like `systemd-cgtop` or `below`'s cgroup view.
//!
//! It fetches the exporter's `/snapshot.json` (the live tree with every
//! controller's local and hierarchical totals and the memory state) every
//! interval; CPU % and the controllers' per-second columns are the change
//! between two fetches. Those columns count up: a value that went down
//! means a new series (the exporter restarted, or a group was created
//! again under the same path), and no rate is shown across it (`-` for
//! that frame, never a negative figure); when the root's CPU time went
//! down the whole process restarted and no row has rates in that frame.
//! An item that is a gauge (it can go down) shows `-` when it fell.
//! On a terminal it is full-screen ([`tui`]): sortable
//! columns, collapsible subtrees. With `--once`, or when stdout is not a
//! terminal, it prints plain tables (`--once`: one, after two fetches an
//! interval apart), as `systemd-cgtop` does.

mod fetch;
pub mod model;
mod tui;

use std::io::IsTerminal;
use std::time::{Duration, Instant};

pub use model::SortKey;

/// Options.
pub struct Options {
    pub url: String,
    pub once: bool,
    pub interval: Duration,
    pub sort: SortKey,
}

/// The demo exporter's default address.
pub const DEFAULT_URL: &str = "http://127.0.0.1:9756";

pub fn run(opts: &Options) -> Result<(), String> {
    let target = fetch::parse_url(&opts.url)?;
    let timeout = Duration::from_secs(5).max(opts.interval);
    if !opts.once && std::io::stdout().is_terminal() {
        return tui::run(opts, &target, timeout);
    }
    let mut prev = (Instant::now(), fetch::fetch(&target, timeout)?);
    loop {
        std::thread::sleep(opts.interval);
        let now = Instant::now();
        let cur = match fetch::fetch(&target, timeout) {
            Ok(s) => s,
            Err(e) if !opts.once => {
                eprintln!("rstat top: {e}");
                continue;
            }
            Err(e) => return Err(e),
        };
        let view = match model::build(Some(&prev.1), &cur, now - prev.0) {
            Ok(v) => v,
            Err(e) if !opts.once => {
                eprintln!("rstat top: {e}");
                continue;
            }
            Err(e) => return Err(e),
        };
        println!(
            "rstat top: {} - {} groups, rates over {:.1}s",
            opts.url,
            view.rows.len(),
            (now - prev.0).as_secs_f64()
        );
        println!("{}", model::plain(&view, opts.sort));
        if opts.once {
            return Ok(());
        }
        prev = (now, cur);
    }
}
