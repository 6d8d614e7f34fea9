//! `rstat bench all` end to end: the child runs, the files, the reasons.

use std::path::PathBuf;
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rstat-lab-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("sub")).expect("scratch dir");
    d
}

#[test]
fn all_quick_writes_the_report_the_data_and_the_plots() {
    let d = scratch("quick");
    let st = Command::new(env!("CARGO_BIN_EXE_rstat"))
        .args([
            "bench",
            "all",
            "--quick",
            "--only",
            "accuracy,enter",
            "--out",
        ])
        .arg(&d)
        .arg("--markdown")
        .arg(d.join("sub/BENCH.md"))
        .status()
        .expect("runs");
    assert!(st.success());
    let report = std::fs::read_to_string(d.join("report.md")).expect("report.md");
    assert!(
        report.contains("## accuracy") && report.contains("seed 003"),
        "{report}"
    );
    // `enter` is in this build: it ran as a child like every other (the
    // not-in-build path is covered by the lab's unit tests, with a runner
    // that refuses a name).
    assert!(report.contains("## enter"), "{report}");
    assert!(report.contains("](05-accuracy.svg)"), "{report}");
    let md = std::fs::read_to_string(d.join("sub/BENCH.md")).expect("--markdown file");
    assert!(md.contains("](../05-accuracy.svg)"), "{md}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("results.json")).expect("json"))
            .expect("results.json parses");
    let acc = &json["experiments"][0];
    assert_eq!(acc["name"], "accuracy");
    assert_eq!(acc["status"], "ok");
    // The child's own JSON, as `rstat bench accuracy --quick --json` printed it.
    assert_eq!(acc["runs"][0]["updates"], 20_000);
    assert_eq!(json["experiments"][1]["name"], "enter");
    assert_eq!(json["experiments"][1]["status"], "ok");
    let svg = std::fs::read_to_string(d.join("05-accuracy.svg")).expect("plot");
    assert!(svg.starts_with("<svg"));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn more_cpus_than_the_machine_has_is_a_reason_in_the_report() {
    let d = scratch("cpus");
    let st = Command::new(env!("CARGO_BIN_EXE_rstat"))
        .args([
            "bench", "all", "--quick", "--cpus", "4096", "--only", "charge", "--out",
        ])
        .arg(&d)
        .status()
        .expect("runs");
    assert!(st.success());
    let report = std::fs::read_to_string(d.join("report.md")).expect("report.md");
    assert!(report.contains("**No figures: cannot run.**"), "{report}");
    assert!(report.contains("--cpus 4096"), "{report}");
    let _ = std::fs::remove_dir_all(&d);
}

/// A printing interval below a millisecond is refused with a clear
/// message (a sub-nanosecond one used to round to zero, and the demo then
/// printed its tree forever).
#[test]
fn a_sub_millisecond_interval_is_refused_with_a_reason() {
    for (sub, args) in [
        (
            "demo",
            &["demo", "--duration", "0.2", "--interval", "1e-300"][..],
        ),
        ("top", &["top", "--once", "--interval", "0.0001"][..]),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rstat"))
            .args(args)
            .output()
            .expect("run rstat");
        assert!(
            !out.status.success(),
            "`rstat {sub}` accepted a tiny interval"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("at least 0.001"),
            "`rstat {sub}`: no reason given: {err}"
        );
    }
}

/// `rstat bench all` checks where it writes before it runs anything: an
/// output directory it cannot write into, or a `--markdown` that is a
/// directory, fail at once (they used to fail after the whole lab ran).
#[test]
fn unwritable_outputs_fail_before_any_experiment_runs() {
    let dir = scratch("unwritable");
    let t0 = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_rstat"))
        .args(["bench", "all", "--quick", "--only", "update", "--out"])
        .arg(&dir)
        .arg("--markdown")
        .arg(&dir)
        .output()
        .expect("run rstat");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is a directory"), "{err}");
    assert!(!dir.join("report.md").exists(), "the lab ran first");
    // `/proc/self` exists and takes no new file, even for root.
    let out = Command::new(env!("CARGO_BIN_EXE_rstat"))
        .args([
            "bench",
            "all",
            "--quick",
            "--only",
            "update",
            "--out",
            "/proc/self",
        ])
        .output()
        .expect("run rstat");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot write into the output directory"),
        "{err}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(30),
        "an experiment ran first"
    );
}
