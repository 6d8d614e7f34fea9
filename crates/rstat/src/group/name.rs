//! Group names and paths: what a name may be, and how errors print a
//! user-given name or path.

use crate::error::{Error, Result};

/// Longest name, in bytes: of a group (as a file name in cgroupfs), a
/// controller, a group extension or a stat item.
pub const MAX_NAME_LEN: usize = 255;

/// Check a group name: 1..=255 bytes, no `/`, no NUL, not `.` or `..`.
pub fn validate_name(name: &str) -> Result<()> {
    // Byte tests here and in `name_problem` ('/' and NUL are ASCII, so a
    // byte test is exact in UTF-8): names are short, and `str::contains`
    // of a char sets up a searcher per call.
    let reason = if name.bytes().any(|b| b == b'/') {
        "it contains '/' (use create on the parent group to nest)"
    } else {
        match name_problem(name) {
            Some(r) => r,
            None => return Ok(()),
        }
    };
    Err(Error::InvalidName {
        name: shown(name),
        reason,
    })
}

/// What is wrong with `name` as a group name, `/` aside (a path component
/// cannot contain one).
pub(super) fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("it is longer than 255 bytes")
    } else if name.bytes().any(|b| b == 0) {
        Some("it contains a NUL byte")
    } else if name == "." || name == ".." {
        Some("'.' and '..' are reserved")
    } else {
        None
    }
}

/// A user-given path, cut to 4096 bytes (the kernel's PATH_MAX) for an
/// error message.
pub(super) fn shown_path(path: &str) -> String {
    let mut end = path.len().min(4096);
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    path[..end].to_owned()
}

pub(crate) use crate::error::shown;
