//! `rstat bench all`: runs every experiment of the lab as a child
//! `rstat bench NAME --json` (this same binary), then writes the report,
//! `results.json` and the plots.

use std::path::{Path, PathBuf};
use std::process::Command;

use rstat_lab::lab::{self, Options, RunError};
use serde_json::Value;

/// What the command line asked for.
pub struct Args {
    pub out: PathBuf,
    pub quick: bool,
    pub repeat: usize,
    pub cpus: Option<usize>,
    pub only: Vec<String>,
    pub markdown: Option<PathBuf>,
}

/// Run one experiment as a child process; its JSON is its last stdout
/// line.
fn run_child(exe: &Path, name: &str, args: &[String]) -> Result<Value, RunError> {
    if lab::find(name).is_none() {
        return Err(RunError::NotInBuild);
    }
    let out = Command::new(exe)
        .arg("bench")
        .arg(name)
        .args(args)
        .output()
        .map_err(|e| RunError::Failed(format!("could not start {}: {e}", exe.display())))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail = |s: &str| {
        let lines: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(3)..].join(" / ")
    };
    if !out.status.success() {
        return Err(RunError::Failed(format!(
            "`rstat bench {name} {}` exited with {}: {}",
            args.join(" "),
            out.status,
            tail(&stderr)
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    serde_json::from_str(last).map_err(|e| {
        RunError::Failed(format!(
            "`rstat bench {name}` printed no JSON object as its last line ({e})"
        ))
    })
}

/// The path from `from_dir` to `to` as a Markdown link prefix (both
/// relative to the current directory or both absolute).
fn link_prefix(from_dir: &Path, to: &Path) -> String {
    let abs = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            std::env::current_dir().unwrap_or_default().join(p)
        }
    };
    let norm = |p: PathBuf| -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for c in p.components() {
            match c {
                std::path::Component::ParentDir => {
                    v.pop();
                }
                std::path::Component::Normal(s) => v.push(s.to_string_lossy().into_owned()),
                _ => {}
            }
        }
        v
    };
    let (a, b) = (norm(abs(from_dir)), norm(abs(to)));
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut s = String::new();
    for _ in common..a.len() {
        s += "../";
    }
    for c in &b[common..] {
        s += c;
        s.push('/');
    }
    s
}

/// Run the lab and write its files. Returns whether every experiment
/// that could run gave figures.
pub fn run(a: &Args) -> Result<bool, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find this program's own path to run the experiments: {e}"))?;
    std::fs::create_dir_all(&a.out).map_err(|e| {
        format!(
            "cannot create the output directory {}: {e}",
            a.out.display()
        )
    })?;
    // Before any experiment runs (a full lab takes minutes): the output
    // directory takes a file, and the markdown report names a file.
    let probe = a.out.join(".rstat-lab-write-check");
    std::fs::write(&probe, b"").map_err(|e| {
        format!(
            "cannot write into the output directory {}: {e}; pick a writable --out",
            a.out.display()
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    if let Some(md) = a.markdown.as_ref().filter(|m| m.is_dir()) {
        return Err(format!(
            "--markdown {} is a directory; give the path of the markdown file to write (e.g. BENCHMARKS.md)",
            md.display()
        ));
    }
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    argv.insert(0, "rstat".into());
    let opts = Options {
        quick: a.quick,
        repeat: a.repeat,
        cpus: a.cpus.unwrap_or_else(rstat_lab::machine::online_cpus),
        only: a.only.clone(),
        command: argv.join(" "),
        rustc: env!("RSTAT_RUSTC_VERSION").to_owned(),
    };
    let mut runner = |name: &str, args: &[String]| run_child(&exe, name, args);
    let mut progress = |m: &str| eprintln!("lab: {m}");
    let result = lab::run_all(&opts, &mut runner, &mut progress)?;
    let write = |p: PathBuf, s: &str| {
        std::fs::write(&p, s).map_err(|e| format!("writing {}: {e}", p.display()))
    };
    for (file, svg) in &result.plots {
        write(a.out.join(file), svg)?;
    }
    write(a.out.join("results.json"), &result.json()?)?;
    write(a.out.join("report.md"), &result.report(""))?;
    if let Some(md) = &a.markdown {
        let dir = md.parent().filter(|p| !p.as_os_str().is_empty());
        let prefix = link_prefix(dir.unwrap_or(Path::new(".")), &a.out);
        write(md.clone(), &result.report(&prefix))?;
    }
    let failed: Vec<&str> = result
        .experiments
        .iter()
        .filter(|o| o.status == "failed")
        .map(|o| o.name.as_str())
        .collect();
    eprintln!(
        "lab: wrote {} (report.md, results.json, {} plots){}",
        a.out.display(),
        result.plots.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!("; failed: {}", failed.join(", "))
        }
    );
    Ok(failed.is_empty())
}

#[cfg(test)]
mod tests {
    use super::link_prefix;
    use std::path::Path;

    #[test]
    fn link_prefixes() {
        assert_eq!(
            link_prefix(Path::new("."), Path::new("docs/lab")),
            "docs/lab/"
        );
        assert_eq!(
            link_prefix(Path::new("docs/lab"), Path::new("docs/lab")),
            ""
        );
        assert_eq!(link_prefix(Path::new("a/b"), Path::new("a/c")), "../c/");
        assert_eq!(link_prefix(Path::new("/x/y"), Path::new("/x/y/z")), "z/");
    }
}
