//! `rstat top` as a person uses it: full-screen in a real terminal (a
//! detached tmux session on a private tmux server), keys sent with
//! `tmux send-keys`, the screen read back with `tmux capture-pane`.
//!
//! Skips, saying so, only when tmux is not installed; with
//! `RSTAT_REQUIRE_TMUX=1` (set by CI, which installs tmux) a missing tmux
//! is a failure.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rstat");

struct Cleanup {
    demo: Child,
    socket: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
        let _ = self.demo.kill();
        let _ = self.demo.wait();
    }
}

fn tmux(socket: &str, args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(["-L", socket])
        .args(args)
        .output()
        .expect("run tmux");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn screen(socket: &str) -> String {
    tmux(socket, &["capture-pane", "-p", "-t", "top"])
}

/// Wait until the screen satisfies `ok`; panics with the last screen.
fn wait_for(socket: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = screen(socket);
        if ok(&s) {
            return s;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}; the screen was:\n{s}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The screen's group rows: (name, cells) for lines of the table.
fn rows(s: &str) -> Vec<(String, Vec<String>)> {
    s.lines()
        .skip_while(|l| !l.trim_start().starts_with("GROUP"))
        .skip(1)
        .take_while(|l| !l.starts_with("q quit"))
        .filter_map(|l| {
            let l = l.trim_start_matches("> ");
            let mut parts = l.split_whitespace().peekable();
            // The tree marker: "-" expanded, "+" collapsed.
            if parts.peek().is_some_and(|p| *p == "-" || *p == "+") {
                parts.next();
            }
            let name = parts.next()?.to_owned();
            Some((name, parts.map(str::to_owned).collect()))
        })
        .collect()
}

fn count(s: &str, name: &str) -> usize {
    rows(s).iter().filter(|(n, _)| n == name).count()
}

fn mem_value(cell: &str) -> f64 {
    let (num, mul) = match cell.chars().last() {
        Some('K') => (&cell[..cell.len() - 1], 1024.0),
        Some('M') => (&cell[..cell.len() - 1], 1024.0 * 1024.0),
        Some('G') => (&cell[..cell.len() - 1], 1024.0 * 1024.0 * 1024.0),
        _ => (cell, 1.0),
    };
    num.parse::<f64>().map(|v| v * mul).unwrap_or(-1.0)
}

#[test]
fn top_full_screen_sorts_collapses_and_quits() {
    if Command::new("tmux").arg("-V").output().is_err() {
        if std::env::var_os("RSTAT_REQUIRE_TMUX").is_some() {
            panic!("tmux is not installed but RSTAT_REQUIRE_TMUX is set");
        }
        println!("SKIPPED top_full_screen_sorts_collapses_and_quits: tmux is not installed (apt-get install tmux to run it)");
        return;
    }
    let mut demo = Command::new(BIN)
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--duration",
            "120",
            "--interval",
            "1000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start rstat demo");
    let stdout = demo.stdout.take().expect("demo stdout");
    let socket = format!("rstat-top-test-{}", std::process::id());
    let _cleanup = Cleanup {
        demo,
        socket: socket.clone(),
    };
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        let line = lines.next().expect("demo output").expect("demo output");
        if let Some(rest) = line.strip_prefix("serving metrics at http://") {
            let addr = rest.split('/').next().expect("address");
            break format!("http://{addr}");
        }
    };
    // Keep draining the demo's output so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});

    let cmd = format!("{BIN} top --url {url} --interval 0.3");
    tmux(
        &socket,
        &[
            "-u",
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "160",
            "-y",
            "30",
            &cmd,
        ],
    );
    // The first screen comes from one sample; rates (CPU%) need a second.
    let s = wait_for(&socket, "the group tree with rates", |s| {
        count(s, "api") == 3
            && rows(s)
                .first()
                .is_some_and(|(n, c)| n == "/" && c[0].parse::<f64>().is_ok())
    });
    assert!(
        s.contains("CPU%") && s.contains("MEM MAX") && s.contains("requests.requests/s"),
        "{s}"
    );
    assert!(s.contains("sorted by GROUP"), "{s}");
    let names: Vec<String> = rows(&s).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["/", "acme", "api", "batch", "globex", "api", "batch", "initech", "api", "batch"],
        "{s}"
    );

    // Sort by memory: siblings by MEM, largest first.
    tmux(&socket, &["send-keys", "-t", "top", "m"]);
    let s = wait_for(&socket, "sorting by MEM", |s| s.contains("sorted by MEM"));
    let tenants: Vec<(String, f64)> = rows(&s)
        .into_iter()
        .filter(|(n, _)| ["acme", "globex", "initech"].contains(&n.as_str()))
        .map(|(n, c)| (n, mem_value(&c[1])))
        .collect();
    assert_eq!(tenants.len(), 3, "{s}");
    assert!(
        tenants.windows(2).all(|w| w[0].1 >= w[1].1),
        "tenants not in descending MEM order: {tenants:?}\n{s}"
    );

    // Sort by events: initech (64K memory.max) is the tenant turned away
    // at its limit, so it comes first, out of name order.
    tmux(&socket, &["send-keys", "-t", "top", "e"]);
    let s = wait_for(&socket, "sorting by EVENTS", |s| {
        s.contains("sorted by EVENTS") && rows(s).iter().any(|(n, c)| n == "initech" && c[3] != "0")
    });
    let tenants: Vec<(String, u64)> = rows(&s)
        .into_iter()
        .filter(|(n, _)| ["acme", "globex", "initech"].contains(&n.as_str()))
        .map(|(n, c)| (n, c[3].parse().unwrap_or(0)))
        .collect();
    assert_eq!(tenants[0].0, "initech", "{s}");
    assert!(
        tenants.windows(2).all(|w| w[0].1 >= w[1].1),
        "{tenants:?}\n{s}"
    );

    // Back to tree order; select acme (second row) and collapse it.
    tmux(&socket, &["send-keys", "-t", "top", "p", "Down", "Enter"]);
    let s = wait_for(&socket, "acme collapsed", |s| {
        s.contains("sorted by GROUP") && count(s, "api") == 2
    });
    assert!(
        s.lines()
            .any(|l| l.starts_with('>') && l.contains("+ acme")),
        "the selected, collapsed row is marked:\n{s}"
    );
    let names: Vec<String> = rows(&s).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names[..3], ["/", "acme", "globex"], "{s}");
    // Expand it again.
    tmux(&socket, &["send-keys", "-t", "top", "Enter"]);
    wait_for(&socket, "acme expanded", |s| count(s, "api") == 3);
    // Collapse all, expand all.
    tmux(&socket, &["send-keys", "-t", "top", "-"]);
    wait_for(&socket, "all collapsed", |s| {
        count(s, "api") == 0 && count(s, "initech") == 1
    });
    tmux(&socket, &["send-keys", "-t", "top", "+"]);
    wait_for(&socket, "all expanded", |s| count(s, "api") == 3);

    // Quit: the session's only command ends, so the session does.
    tmux(&socket, &["send-keys", "-t", "top", "q"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Command::new("tmux")
        .args(["-L", &socket, "has-session", "-t", "top"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        assert!(Instant::now() < deadline, "rstat top did not quit on 'q'");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn top_once_prints_a_plain_table_and_bad_urls_are_explained() {
    let out = Command::new(BIN)
        .args(["top", "--once", "--url", "http://127.0.0.1:9"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot reach the exporter") && err.contains("rstat demo --listen"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["top", "--once", "--url", "https://x"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("http://HOST:PORT"));

    let mut demo = Command::new(BIN)
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--duration",
            "30",
            "--interval",
            "1000",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(demo.stdout.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().unwrap().unwrap();
        if let Some(rest) = line.strip_prefix("serving metrics at http://") {
            break format!("http://{}", rest.split('/').next().unwrap());
        }
    };
    std::thread::spawn(move || for _ in lines {});
    // Piped stdout is not a terminal: plain text even without --once.
    let out = Command::new(BIN)
        .args([
            "top",
            "--once",
            "--interval",
            "0.2",
            "--sort",
            "cpu",
            "--url",
            &url,
        ])
        .output()
        .unwrap();
    let _ = demo.kill();
    let _ = demo.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("GROUP") && text.contains("CPU%*"), "{text}");
    for g in ["acme", "globex", "initech", "api", "batch"] {
        assert!(text.contains(g), "{g} missing:\n{text}");
    }
    assert!(
        !text.contains('\x1b'),
        "no escape sequences in plain mode:\n{text}"
    );
}
