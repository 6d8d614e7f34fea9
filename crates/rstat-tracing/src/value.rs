//! A span field's value as text: the same text however the field was
//! recorded (`"lit"`, `%display`, `?debug`, a number), read without a
//! heap allocation in the common cases (a `str` value; `Debug` text that
//! fits [`INLINE_TEXT`] bytes and, if a quoted literal, has no escapes).

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use tracing_core::field::{Field, Visit};

/// Hands the text of one field to `with`, if the visited values have it.
pub(crate) struct FieldValue<F: FnMut(&str)> {
    pub(crate) field: &'static str,
    pub(crate) with: F,
}

impl<F: FnMut(&str)> Visit for FieldValue<F> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == self.field {
            (self.with)(value);
        }
    }

    /// `%x` fields arrive here as their Display text, `?x` ones as their
    /// Debug text, and numbers and booleans (tracing's default
    /// `record_i64` and the like forward here) as their usual text. The
    /// Debug text of a string is quoted and escaped: it is read back to
    /// the string, so `tenant = ?name` selects the group `tenant = %name`
    /// does.
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() != self.field {
            return;
        }
        let mut text = Text::default();
        // A `Debug` impl that fails leaves what it wrote (as `format!`
        // would panic instead, this is the no-panic reading of it).
        let _ = write!(text, "{value:?}");
        let text = text.as_str();
        match unquote_debug(text) {
            Some(s) => (self.with)(&s),
            None => (self.with)(text),
        }
    }
}

/// Bytes of `Debug` text read on the stack; longer text goes to the heap.
pub(crate) const INLINE_TEXT: usize = 128;

/// Text written on the stack up to [`INLINE_TEXT`] bytes, then to a
/// `String`.
#[derive(Default)]
struct Text {
    inline: Inline,
    heap: Option<String>,
}

struct Inline {
    buf: [u8; INLINE_TEXT],
    len: usize,
}

impl Default for Inline {
    fn default() -> Self {
        Inline {
            buf: [0; INLINE_TEXT],
            len: 0,
        }
    }
}

impl Text {
    fn as_str(&self) -> &str {
        match &self.heap {
            Some(s) => s,
            // Only whole `str`s are copied in (`write_str`), so the bytes
            // are UTF-8; the empty fallback is never taken.
            None => std::str::from_utf8(&self.inline.buf[..self.inline.len]).unwrap_or_default(),
        }
    }
}

impl fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if let Some(h) = &mut self.heap {
            h.push_str(s);
            return Ok(());
        }
        let Inline { buf, len } = &mut self.inline;
        match buf.get_mut(*len..*len + s.len()) {
            Some(dst) => {
                dst.copy_from_slice(s.as_bytes());
                *len += s.len();
            }
            None => {
                let mut h = String::with_capacity(2 * (*len + s.len()));
                h.push_str(std::str::from_utf8(&buf[..*len]).unwrap_or_default());
                h.push_str(s);
                self.heap = Some(h);
            }
        }
        Ok(())
    }
}

/// The string whose `Debug` text is `text`, if `text` is one: a
/// double-quoted literal with the escapes `str`'s `Debug` writes (`\"`,
/// `\\`, `\'`, `\n`, `\r`, `\t`, `\0`, `\u{..}`), and no unescaped quote
/// inside. Anything else (`Some("x")`, `"a" "b"`, a bad escape) is not,
/// and is taken as written. Borrowed from `text` when there is no escape.
pub(crate) fn unquote_debug(text: &str) -> Option<Cow<'_, str>> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains(['"', '\\']) {
        return Some(Cow::Borrowed(inner));
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            // A quote `Debug` did not escape: the text is more than one
            // literal.
            '"' => return None,
            '\\' => out.push(match chars.next()? {
                '\\' => '\\',
                '"' => '"',
                '\'' => '\'',
                'n' => '\n',
                'r' => '\r',
                't' => '\t',
                '0' => '\0',
                'u' => {
                    if chars.next()? != '{' {
                        return None;
                    }
                    let mut code: u32 = 0;
                    let mut digits = 0;
                    loop {
                        let d = chars.next()?;
                        if d == '}' {
                            break;
                        }
                        digits += 1;
                        // At most six hex digits (U+10FFFF): no overflow.
                        if digits > 6 {
                            return None;
                        }
                        code = code * 16 + d.to_digit(16)?;
                    }
                    if digits == 0 {
                        return None;
                    }
                    char::from_u32(code)?
                }
                _ => return None,
            }),
            c => out.push(c),
        }
    }
    Some(Cow::Owned(out))
}

#[cfg(test)]
mod tests {
    use super::unquote_debug;

    #[test]
    fn the_debug_text_of_any_string_reads_back() {
        let mut samples: Vec<String> = vec![
            String::new(),
            "acme".into(),
            "o\"brien\\co".into(),
            "\"".into(),
            "\\".into(),
            "\\\"".into(),
            "tab\tnl\ncr\rnul\0".into(),
            "x\u{301}\u{200b}\u{7f}\u{10ffff}\u{feff}é日本".into(),
            "'single'".into(),
        ];
        // Every char of the first planes, alone and between others.
        for c in (0u32..0x3_0000).filter_map(char::from_u32) {
            samples.push(c.to_string());
            samples.push(format!("a{c}\"{c}\\"));
        }
        for s in &samples {
            let text = format!("{s:?}");
            assert_eq!(unquote_debug(&text).as_deref(), Some(s.as_str()), "{text}");
        }
    }

    #[test]
    fn other_text_is_not_a_string() {
        for t in [
            "",
            "\"",
            "acme",
            "Some(\"x\")",
            "\"a\" \"b\"",
            "\"a\"b\"",
            "\"ends in a backslash\\\"",
            "\"bad \\q escape\"",
            "\"\\u{}\"",
            "\"\\u{1234567}\"",
            "\"\\u{d800}\"",
            "\"\\u{zz}\"",
            "\"\\u1234\"",
            "'c'",
        ] {
            assert_eq!(unquote_debug(t), None, "{t}");
        }
    }
}
