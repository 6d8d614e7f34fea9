//! The error codes `include/rstat.h` documents for each function: the
//! `RSTAT_E*` names in the paragraph of its comment that starts with
//! `Errors:`. Tests check the codes calls return against it, so a code a
//! call can return and its documentation does not list fails a test.

use std::collections::{HashMap, HashSet};

use rstat_capi::*;

const HEADER: &str = include_str!("../../include/rstat.h");

/// Every code's name and value.
const CODES: [(&str, i32); 19] = [
    ("RSTAT_EPERM", RSTAT_EPERM),
    ("RSTAT_ENOENT", RSTAT_ENOENT),
    ("RSTAT_E2BIG", RSTAT_E2BIG),
    ("RSTAT_EBADF", RSTAT_EBADF),
    ("RSTAT_EAGAIN", RSTAT_EAGAIN),
    ("RSTAT_ENOMEM", RSTAT_ENOMEM),
    ("RSTAT_EFAULT", RSTAT_EFAULT),
    ("RSTAT_EBUSY", RSTAT_EBUSY),
    ("RSTAT_EEXIST", RSTAT_EEXIST),
    ("RSTAT_EXDEV", RSTAT_EXDEV),
    ("RSTAT_ENODEV", RSTAT_ENODEV),
    ("RSTAT_EINVAL", RSTAT_EINVAL),
    ("RSTAT_EMFILE", RSTAT_EMFILE),
    ("RSTAT_ENOSPC", RSTAT_ENOSPC),
    ("RSTAT_ERANGE", RSTAT_ERANGE),
    ("RSTAT_EOVERFLOW", RSTAT_EOVERFLOW),
    ("RSTAT_EPROTOTYPE", RSTAT_EPROTOTYPE),
    ("RSTAT_EOPNOTSUPP", RSTAT_EOPNOTSUPP),
    ("RSTAT_ENOTRECOVERABLE", RSTAT_ENOTRECOVERABLE),
];

/// Function name -> the codes its `Errors:` paragraph names (functions
/// without one are absent). Parsed once per test binary (a parse per check
/// made the Miri run of the boundary tests take minutes).
pub fn documented() -> &'static HashMap<String, HashSet<i32>> {
    static DOCS: std::sync::OnceLock<HashMap<String, HashSet<i32>>> = std::sync::OnceLock::new();
    DOCS.get_or_init(parse)
}

fn parse() -> HashMap<String, HashSet<i32>> {
    let mut out = HashMap::new();
    let mut doc: Vec<&str> = Vec::new();
    for line in HEADER.lines() {
        if let Some(text) = line.strip_prefix("//") {
            doc.push(text.trim());
            continue;
        }
        let decl = line.split('(').next().unwrap_or("");
        if let Some(name) = decl.split([' ', '*']).rfind(|w| w.starts_with("rstat_")) {
            if line.contains('(') && !line.starts_with('#') {
                // The `Errors:` paragraph: from that line to the next empty
                // comment line.
                let errors = doc
                    .iter()
                    .skip_while(|l| !l.starts_with("Errors:"))
                    .take_while(|l| !l.is_empty())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(" ");
                if !errors.is_empty() {
                    let codes = CODES
                        .iter()
                        .filter(|(n, _)| {
                            errors.match_indices(n).any(|(i, _)| {
                                !errors[i + n.len()..]
                                    .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                            })
                        })
                        .map(|&(_, v)| v)
                        .collect();
                    out.insert(name.to_owned(), codes);
                }
            }
        }
        doc.clear();
    }
    out
}

/// The name of code `rc`, for messages.
pub fn name(rc: i32) -> &'static str {
    CODES
        .iter()
        .find(|&&(_, v)| v == rc)
        .map_or("an unknown code", |&(n, _)| n)
}
