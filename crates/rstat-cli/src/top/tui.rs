//! The full-screen view (ratatui on crossterm).
//!
//! Keys: `q`/Esc quit; ↑/↓ or `k`/`j` select; Enter/Space collapse or
//! expand the selected subtree; `-` collapse all, `+` expand all; `p`
//! (tree order), `c` (CPU), `m` (memory), `x` (memory max), `e` (events)
//! sort, `<`/`>` move the sort column; `r` refresh now.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row as TRow, Table, TableState};
use ratatui::Frame;

use super::fetch::{self, Target};
use super::model::{self, SortKey, View};
use super::Options;
use rstat::report::Snapshot;

struct App<'a> {
    opts: &'a Options,
    view: View,
    prev: Option<(Instant, Snapshot)>,
    sort: SortKey,
    collapsed: HashSet<String>,
    /// The selected group's path (kept across refreshes and re-sorts).
    selected: Option<String>,
    error: Option<String>,
}

impl App<'_> {
    fn refresh(&mut self, target: &Target, timeout: Duration) {
        self.apply(fetch::fetch(target, timeout), Instant::now());
    }

    /// Take a fetched snapshot (or the error fetching it). A snapshot
    /// that cannot be shown leaves the last view on screen, with the
    /// reason on the title line. A sort column that is gone falls back to
    /// tree order.
    fn apply(&mut self, fetched: Result<Snapshot, String>, now: Instant) {
        let built = fetched.and_then(|cur| {
            let (prev, dt) = match &self.prev {
                Some((t, s)) => (Some(s), now.saturating_duration_since(*t)),
                None => (None, Duration::ZERO),
            };
            Ok((model::build(prev, &cur, dt)?, cur))
        });
        match built {
            Ok((view, cur)) => {
                self.view = view;
                self.prev = Some((now, cur));
                self.error = None;
            }
            Err(e) => self.error = Some(e),
        }
        self.sort = self.view.sort_key(self.sort);
    }

    fn rows(&self) -> Vec<&model::Row> {
        model::visible(&self.view, self.sort, &self.collapsed)
    }

    fn selected_index(&self, rows: &[&model::Row]) -> usize {
        self.selected
            .as_ref()
            .and_then(|p| rows.iter().position(|r| &r.path == p))
            .unwrap_or(0)
    }

    fn move_selection(&mut self, by: isize) {
        let rows = self.rows();
        if rows.is_empty() {
            return;
        }
        let i = self.selected_index(&rows) as isize + by;
        let i = i.clamp(0, rows.len() as isize - 1) as usize;
        self.selected = Some(rows[i].path.clone());
    }

    fn toggle(&mut self) {
        let rows = self.rows();
        let Some(r) = rows.get(self.selected_index(&rows)) else {
            return;
        };
        if !r.has_children {
            return;
        }
        let p = r.path.clone();
        if !self.collapsed.remove(&p) {
            self.collapsed.insert(p);
        }
    }

    fn ncols(&self) -> usize {
        5 + self.view.extra.len()
    }

    /// Handle a key; false to quit.
    fn key(&mut self, code: KeyCode, mods: KeyModifiers) -> bool {
        match code {
            KeyCode::Char('q') | KeyCode::Esc => return false,
            KeyCode::Char('c') if mods.contains(KeyModifiers::CONTROL) => return false,
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::PageUp => self.move_selection(-20),
            KeyCode::PageDown => self.move_selection(20),
            KeyCode::Enter | KeyCode::Char(' ') => self.toggle(),
            KeyCode::Char('-') => {
                self.collapsed = self
                    .view
                    .rows
                    .iter()
                    .filter(|r| r.has_children && r.depth > 0)
                    .map(|r| r.path.clone())
                    .collect();
            }
            KeyCode::Char('+') | KeyCode::Char('=') => self.collapsed.clear(),
            KeyCode::Char('p') | KeyCode::Char('n') => self.sort = SortKey::Path,
            KeyCode::Char('c') => self.sort = SortKey::Cpu,
            KeyCode::Char('m') => self.sort = SortKey::Mem,
            KeyCode::Char('x') => self.sort = SortKey::Max,
            KeyCode::Char('e') => self.sort = SortKey::Events,
            KeyCode::Char('>') | KeyCode::Right => {
                let n = self.ncols();
                self.sort = model::column_key((model::key_column(self.sort) + 1) % n);
            }
            KeyCode::Char('<') | KeyCode::Left => {
                let n = self.ncols();
                self.sort = model::column_key((model::key_column(self.sort) + n - 1) % n);
            }
            _ => {}
        }
        true
    }

    /// The title line's status: the last error, or what is shown.
    fn status(&self, headers: &[String], sorted: usize) -> String {
        match &self.error {
            Some(e) => format!("error: {e}"),
            None => format!(
                "{} groups, sorted by {}, every {:.1}s",
                self.view.rows.len(),
                headers.get(sorted).map_or("GROUP", String::as_str),
                self.opts.interval.as_secs_f64()
            ),
        }
    }

    fn draw(&self, f: &mut Frame) {
        let [title, body, help] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Min(1),
            Constraint::Length(1),
        ])
        .areas(f.area());
        let headers = model::headers(&self.view);
        let sorted = model::key_column(self.view.sort_key(self.sort));
        let status = self.status(&headers, sorted);
        f.render_widget(
            Paragraph::new(Line::from(format!(
                "rstat top - {} - {status}",
                self.opts.url
            )))
            .style(Style::default().add_modifier(Modifier::BOLD)),
            title,
        );
        let rows = self.rows();
        let header = TRow::new(headers.iter().enumerate().map(|(i, h)| {
            let mut h = h.clone();
            if i == sorted {
                h.push_str(if i == 0 { " ^" } else { " v" });
            }
            Cell::from(h)
        }))
        .style(Style::default().add_modifier(Modifier::REVERSED));
        let trows = rows.iter().map(|r| {
            let marker = if !r.has_children {
                "  "
            } else if self.collapsed.contains(&r.path) {
                "+ "
            } else {
                "- "
            };
            TRow::new(model::cells(r, marker))
        });
        let mut widths = vec![Constraint::Min(24)];
        widths.extend(headers[1..].iter().map(|h| {
            let w = u16::try_from(h.chars().count()).unwrap_or(u16::MAX);
            Constraint::Length(w.saturating_add(2).max(9))
        }));
        let table = Table::new(trows, widths)
            .header(header)
            .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
            .highlight_symbol("> ");
        let mut state = TableState::default().with_selected(Some(self.selected_index(&rows)));
        f.render_stateful_widget(table, body, &mut state);
        f.render_widget(
            Paragraph::new(
                "q quit  up/down select  enter collapse/expand  -/+ all  p c m x e sort  </> column  r refresh",
            ),
            help,
        );
    }
}

pub fn run(opts: &Options, target: &Target, timeout: Duration) -> Result<(), String> {
    // Fail before taking over the screen if nothing answers.
    let first = fetch::fetch(target, timeout)?;
    let mut app = App {
        opts,
        view: model::build(None, &first, Duration::ZERO)?,
        prev: Some((Instant::now(), first)),
        sort: opts.sort,
        collapsed: HashSet::new(),
        selected: None,
        error: None,
    };
    let mut term = ratatui::try_init().map_err(|e| format!("cannot use the terminal: {e}"))?;
    let result = (|| -> std::io::Result<()> {
        let mut next = Instant::now() + opts.interval;
        loop {
            term.draw(|f| app.draw(f))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(k) = event::read()? {
                    if k.kind == KeyEventKind::Press {
                        if !app.key(k.code, k.modifiers) {
                            return Ok(());
                        }
                        if k.code == KeyCode::Char('r') {
                            next = Instant::now();
                        }
                    }
                }
            }
            if Instant::now() >= next {
                app.refresh(target, timeout);
                next = Instant::now() + opts.interval;
            }
        }
    })();
    ratatui::restore();
    result.map_err(|e| format!("terminal error: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstat::report::Reporter;
    use rstat::Rstat;

    fn opts() -> Options {
        Options {
            url: "http://127.0.0.1:1".into(),
            once: false,
            interval: Duration::from_secs(1),
            sort: SortKey::Path,
        }
    }

    #[test]
    fn refreshes_that_drop_the_sort_column_or_send_garbage_do_not_crash() {
        let rs = Rstat::new();
        let a = rs.register_counters("a", &["x"]).unwrap();
        let b = rs.register_counters("b", &["y", "z"]).unwrap();
        let g = rs.root().create_child("g").unwrap();
        a.add(&g, 0, 1).unwrap();
        b.add(&g, 1, 1).unwrap();
        let full = Reporter::new(&rs).snapshot_all().unwrap();
        let opts = opts();
        let t0 = Instant::now();
        let mut app = App {
            opts: &opts,
            view: model::build(None, &full, Duration::ZERO).unwrap(),
            prev: Some((t0, full.clone())),
            sort: SortKey::Path,
            collapsed: HashSet::new(),
            selected: None,
            error: None,
        };
        // Sort by the last column (`<` from the first wraps to it).
        assert!(app.key(KeyCode::Char('<'), KeyModifiers::NONE));
        assert_eq!(app.sort, SortKey::Extra(2));
        // The exporter now has one controller fewer.
        let mut v = serde_json::to_value(&full).unwrap();
        v["controllers"].as_array_mut().unwrap().pop();
        for g in v["groups"].as_array_mut().unwrap() {
            g["stats"].as_array_mut().unwrap().pop();
        }
        let fewer: Snapshot = serde_json::from_value(v).unwrap();
        let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(100, 12)).unwrap();
        term.draw(|f| app.draw(f)).unwrap();
        app.apply(Ok(fewer), t0 + Duration::from_secs(1));
        // What the screen does after a refresh: the sort column must not
        // index past the headers.
        term.draw(|f| app.draw(f)).unwrap();
        assert_eq!(app.error, None);
        assert_eq!(app.sort, SortKey::Path, "the sort column is gone");
        let headers = model::headers(&app.view);
        let status = app.status(&headers, model::key_column(app.view.sort_key(app.sort)));
        assert!(status.contains("sorted by GROUP"), "{status}");
        assert!(app.key(KeyCode::Char('>'), KeyModifiers::NONE));
        assert_eq!(app.sort, SortKey::Cpu);
        // A hostile snapshot: the view stays, the reason is shown.
        let mut v = serde_json::to_value(&full).unwrap();
        v["groups"][1]["depth"] = serde_json::json!(usize::MAX);
        let bad: Snapshot = serde_json::from_value(v).unwrap();
        let rows = app.view.rows.len();
        app.apply(Ok(bad), t0 + Duration::from_secs(2));
        let e = app.error.clone().unwrap();
        assert!(e.contains("inconsistent snapshot"), "{e}");
        assert_eq!(app.view.rows.len(), rows);
        term.draw(|f| app.draw(f)).unwrap();
        let screen: String = term
            .backend()
            .buffer()
            .content()
            .iter()
            .map(|c| c.symbol())
            .collect();
        assert!(
            screen.contains("error: the exporter sent an inconsistent"),
            "{screen}"
        );
        assert!(app
            .status(&headers, 0)
            .starts_with("error: the exporter sent"));
        // A fetch error likewise.
        app.apply(Err("cannot reach".into()), t0 + Duration::from_secs(3));
        assert_eq!(app.error.as_deref(), Some("cannot reach"));
    }
}
