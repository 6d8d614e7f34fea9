//! A span field's value as text: the same text however the field was
//! recorded (`"lit"`, `%display`, `?debug`, a number).

use std::fmt;

use tracing_core::field::{Field, Visit};

/// Collects the value of one field as text.
pub(crate) struct FieldValue {
    pub(crate) field: &'static str,
    pub(crate) value: Option<String>,
}

impl Visit for FieldValue {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == self.field {
            self.value = Some(value.to_owned());
        }
    }

    /// `%x` fields arrive here as their Display text, `?x` ones as their
    /// Debug text, and numbers and booleans (tracing's default
    /// `record_i64` and the like forward here) as their usual text. The
    /// Debug text of a string is quoted and escaped: it is read back to
    /// the string, so `tenant = ?name` selects the group `tenant = %name`
    /// does.
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == self.field {
            let text = format!("{value:?}");
            self.value = Some(unquote_debug(&text).unwrap_or(text));
        }
    }
}

/// The string whose `Debug` text is `text`, if `text` is one: a
/// double-quoted literal with the escapes `str`'s `Debug` writes (`\"`,
/// `\\`, `\'`, `\n`, `\r`, `\t`, `\0`, `\u{..}`), and no unescaped quote
/// inside. Anything else (`Some("x")`, `"a" "b"`, a bad escape) is not,
/// and is taken as written.
pub(crate) fn unquote_debug(text: &str) -> Option<String> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
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
    Some(out)
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
