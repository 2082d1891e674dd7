//! The character-level scanner the text parser is built on: whitespace and `//` comments,
//! MLIR's lexical tokens (identifiers, `%`/`@`/`#`/`!`/`^` names, strings, numbers) and
//! `file:line:col` positions for locations and errors.

use std::borrow::Cow;
use std::sync::Arc;

use crate::error::Error;
use crate::ir::Location;
use crate::Result;

/// A position in the source: its byte offset.
pub(super) type Pos = usize;

/// A numeric literal as written: sign, digits and kind, converted by the caller once the
/// type it stands for is known.
#[derive(Clone, Copy, Debug)]
pub(super) struct Number<'a> {
    /// A leading `-`.
    pub negative: bool,
    /// The digits without sign (and without `0x` for hex).
    pub digits: &'a str,
    /// What the digits are.
    pub kind: NumberKind,
}

/// The lexical kind of a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NumberKind {
    /// `[0-9]+`.
    Decimal,
    /// `0x[0-9a-fA-F]+`: an integer, or the bit pattern of a float.
    Hex,
    /// Has a `.` or an exponent.
    Float,
}

impl Number<'_> {
    /// The value as an integer (decimal or hex); `None` if it is a float or out of range.
    pub fn to_i128(self) -> Option<i128> {
        let magnitude = match self.kind {
            NumberKind::Decimal => self.digits.parse::<u128>().ok()?,
            NumberKind::Hex => u128::from_str_radix(self.digits, 16).ok()?,
            NumberKind::Float => return None,
        };
        let v = i128::try_from(magnitude).ok()?;
        Some(if self.negative { -v } else { v })
    }

    /// The value as f64 (a hex literal is read as an integer value here, not bits).
    pub fn to_f64(self) -> Option<f64> {
        let v = match self.kind {
            NumberKind::Hex => self.to_i128()? as f64,
            _ => self.digits.parse::<f64>().ok()?,
        };
        Some(if self.negative { -v } else { v })
    }

    /// The value as f32, rounded once from the decimal text.
    pub fn to_f32(self) -> Option<f32> {
        let v = match self.kind {
            NumberKind::Hex => self.to_i128()? as f32,
            _ => self.digits.parse::<f32>().ok()?,
        };
        Some(if self.negative { -v } else { v })
    }
}

/// Scans one source text, tracking where it is for locations and errors.
pub(super) struct Cursor<'a> {
    /// The whole text.
    pub src: &'a str,
    /// Current byte offset.
    pub pos: Pos,
    /// The file name used in locations and errors.
    pub filename: Arc<str>,
    /// File line number of the text's first line (chunks of a split file start later).
    first_line: u32,
    /// Byte offset of the start of every line.
    line_starts: Vec<usize>,
}

/// Characters allowed in a bare identifier after the first.
fn is_id_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c == b'.'
}

/// Characters allowed in a suffix id (`%name`, `@name`, `#name`, `^name`).
fn is_suffix_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.' | b'-')
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `src`, whose first line is line `first_line` of `filename`.
    pub fn new(src: &'a str, filename: &str, first_line: u32) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(src.match_indices('\n').map(|(i, _)| i + 1));
        Cursor {
            src,
            pos: 0,
            filename: filename.into(),
            first_line: first_line.max(1),
            line_starts,
        }
    }

    /// 1-based (line, column) of byte offset `pos`, lines counted in the original file.
    pub fn line_col(&self, pos: Pos) -> (u32, u32) {
        let pos = pos.min(self.src.len());
        let line_idx = match self.line_starts.binary_search(&pos) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        };
        let start = self.line_starts.get(line_idx).copied().unwrap_or(0);
        let col = self
            .src
            .get(start..pos)
            .map_or(pos - start, |s| s.chars().count());
        (
            self.first_line.saturating_add(line_idx as u32),
            col as u32 + 1,
        )
    }

    /// The source location of byte offset `pos`.
    pub fn location(&self, pos: Pos) -> Location {
        let (line, col) = self.line_col(pos);
        Location::FileLineCol {
            file: self.filename.clone(),
            line,
            col,
        }
    }

    /// An INVALID_ARGUMENT error at `pos`: `file:line:col: message`.
    pub fn error_at(&self, pos: Pos, message: impl std::fmt::Display) -> Error {
        let (line, col) = self.line_col(pos);
        Error::invalid(format!("{}:{line}:{col}: {message}", self.filename))
    }

    /// An error at the next token.
    pub fn error(&mut self, message: impl std::fmt::Display) -> Error {
        self.skip_ws();
        self.error_at(self.pos, message)
    }

    /// An error naming what was expected and showing what was found.
    pub fn expected(&mut self, what: &str) -> Error {
        self.skip_ws();
        let found = self.describe_next();
        self.error_at(self.pos, format!("expected {what}, found {found}"))
    }

    /// A short description of the next token for error messages.
    fn describe_next(&self) -> String {
        let rest = self.rest();
        if rest.is_empty() {
            return "end of input".to_string();
        }
        let token: String = rest
            .chars()
            .take_while(|c| !c.is_whitespace())
            .take(20)
            .collect();
        format!("`{token}`")
    }

    /// The text from the current position on.
    pub fn rest(&self) -> &'a str {
        self.src.get(self.pos..).unwrap_or("")
    }

    /// True at the end of the text (after whitespace).
    pub fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.pos >= self.src.len()
    }

    /// Skips whitespace and `//` comments.
    pub fn skip_ws(&mut self) {
        let bytes = self.src.as_bytes();
        while let Some(&c) = bytes.get(self.pos) {
            if c == b' ' || c == b'\n' || c == b'\t' || c == b'\r' {
                self.pos += 1;
            } else if c == b'/' && bytes.get(self.pos + 1) == Some(&b'/') {
                self.pos = match self.rest().find('\n') {
                    Some(i) => self.pos + i + 1,
                    None => self.src.len(),
                };
            } else {
                break;
            }
        }
    }

    /// The byte `n` places after the current position, without skipping whitespace.
    pub fn byte_at(&self, n: usize) -> Option<u8> {
        self.src.as_bytes().get(self.pos + n).copied()
    }

    /// The next byte after whitespace, not consumed.
    pub fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.byte_at(0)
    }

    /// True if the text continues with `s` (after whitespace); nothing is consumed.
    pub fn peek_str(&mut self, s: &str) -> bool {
        self.skip_ws();
        self.rest().starts_with(s)
    }

    /// Consumes the punctuation byte `c` if it comes next; `-` is not taken from `->`.
    pub fn eat(&mut self, c: u8) -> bool {
        if self.peek() != Some(c) {
            return false;
        }
        if c == b'-' && self.byte_at(1) == Some(b'>') {
            return false;
        }
        self.pos += 1;
        true
    }

    /// Consumes `s` if it comes next.
    pub fn eat_str(&mut self, s: &str) -> bool {
        if self.peek_str(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    /// Consumes `->`.
    pub fn eat_arrow(&mut self) -> bool {
        self.eat_str("->")
    }

    /// Requires the punctuation byte `c`.
    pub fn expect(&mut self, c: u8) -> Result<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{}`", c as char)))
        }
    }

    /// Requires `->`.
    pub fn expect_arrow(&mut self) -> Result<()> {
        if self.eat_arrow() {
            Ok(())
        } else {
            Err(self.expected("`->`"))
        }
    }

    /// The bare identifier that comes next (`[A-Za-z_][A-Za-z0-9_$.]*`), not consumed.
    pub fn peek_bare_id(&mut self) -> Option<&'a str> {
        self.skip_ws();
        let bytes = self.rest().as_bytes();
        let first = *bytes.first()?;
        if !(first.is_ascii_alphabetic() || first == b'_') {
            return None;
        }
        let len = bytes.iter().take_while(|&&c| is_id_char(c)).count();
        self.rest().get(..len)
    }

    /// Consumes a bare identifier.
    pub fn bare_id(&mut self) -> Option<&'a str> {
        let id = self.peek_bare_id()?;
        self.pos += id.len();
        Some(id)
    }

    /// Requires a bare identifier.
    pub fn expect_bare_id(&mut self, what: &str) -> Result<&'a str> {
        match self.bare_id() {
            Some(id) => Ok(id),
            None => Err(self.expected(what)),
        }
    }

    /// Consumes the keyword `kw` if the next bare identifier is exactly it.
    pub fn eat_keyword(&mut self, kw: &str) -> bool {
        if self.peek_bare_id() == Some(kw) {
            self.pos += kw.len();
            true
        } else {
            false
        }
    }

    /// Requires the keyword `kw`.
    pub fn expect_keyword(&mut self, kw: &str) -> Result<()> {
        if self.eat_keyword(kw) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{kw}`")))
        }
    }

    /// Consumes a suffix id right at the cursor (after a sigil): digits or
    /// `[A-Za-z_$.-][A-Za-z0-9_$.-]*`, or a quoted string.
    pub fn suffix_id(&mut self) -> Result<Cow<'a, str>> {
        if self.byte_at(0) == Some(b'"') {
            return self.string_lit();
        }
        let bytes = self.rest().as_bytes();
        let len = bytes.iter().take_while(|&&c| is_suffix_char(c)).count();
        if len == 0 {
            return Err(self.error_at(self.pos, "expected a name after the sigil"));
        }
        let id = self.rest().get(..len).unwrap_or("");
        self.pos += len;
        Ok(Cow::Borrowed(id))
    }

    /// Consumes `sigil` followed by a suffix id (`%x`, `@f`, `^bb0`, `#loc1`).
    pub fn sigil_id(&mut self, sigil: u8) -> Result<Option<Cow<'a, str>>> {
        if self.peek() != Some(sigil) {
            return Ok(None);
        }
        self.pos += 1;
        self.suffix_id().map(Some)
    }

    /// Consumes a string literal, resolving escapes (`\\`, `\"`, `\n`, `\t`, `\XX`). Bytes that
    /// are not UTF-8 are replaced.
    pub fn string_lit(&mut self) -> Result<Cow<'a, str>> {
        let raw = self.string_raw()?;
        if !raw.contains('\\') {
            return Ok(Cow::Borrowed(raw));
        }
        let bytes = unescape(raw);
        Ok(Cow::Owned(match String::from_utf8(bytes) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }))
    }

    /// Consumes a string literal and returns its text between the quotes, escapes unresolved.
    pub fn string_raw(&mut self) -> Result<&'a str> {
        if self.peek() != Some(b'"') {
            return Err(self.expected("a string"));
        }
        let start = self.pos;
        let body = self.pos + 1;
        let mut i = body;
        let bytes = self.src.as_bytes();
        loop {
            let rest = self.src.get(i..).unwrap_or("");
            let Some(q) = rest.find('"') else {
                return Err(self.error_at(start, "unterminated string"));
            };
            let candidate = i + q;
            // The quote is escaped if preceded by an odd number of backslashes.
            let slashes = bytes
                .get(body..candidate)
                .map_or(0, |b| b.iter().rev().take_while(|&&c| c == b'\\').count());
            if slashes % 2 == 0 {
                let text = self.src.get(body..candidate).unwrap_or("");
                if text.contains('\n') {
                    return Err(self.error_at(start, "unterminated string"));
                }
                self.pos = candidate + 1;
                return Ok(text);
            }
            i = candidate + 1;
        }
    }

    /// Consumes a number: `-`? then decimal, `0x` hex, or float (`1.5`, `1.5e-3`, `2e10`).
    pub fn number(&mut self) -> Result<Number<'a>> {
        self.skip_ws();
        let start = self.pos;
        let negative = self.byte_at(0) == Some(b'-');
        let digits_start = if negative { start + 1 } else { start };
        let bytes = self.src.as_bytes();
        let at = |i: usize| bytes.get(i).copied();
        if !at(digits_start).is_some_and(|c| c.is_ascii_digit()) {
            return Err(self.expected("a number"));
        }
        if at(digits_start) == Some(b'0')
            && at(digits_start + 1) == Some(b'x')
            && at(digits_start + 2).is_some_and(|c| c.is_ascii_hexdigit())
        {
            let hex_start = digits_start + 2;
            let mut end = hex_start;
            while at(end).is_some_and(|c| c.is_ascii_hexdigit()) {
                end += 1;
            }
            self.pos = end;
            return Ok(Number {
                negative,
                digits: self.src.get(hex_start..end).unwrap_or(""),
                kind: NumberKind::Hex,
            });
        }
        let mut end = digits_start;
        while at(end).is_some_and(|c| c.is_ascii_digit()) {
            end += 1;
        }
        let mut kind = NumberKind::Decimal;
        if at(end) == Some(b'.') {
            kind = NumberKind::Float;
            end += 1;
            while at(end).is_some_and(|c| c.is_ascii_digit()) {
                end += 1;
            }
        }
        if matches!(at(end), Some(b'e' | b'E')) {
            let mut e = end + 1;
            if matches!(at(e), Some(b'+' | b'-')) {
                e += 1;
            }
            if at(e).is_some_and(|c| c.is_ascii_digit()) {
                while at(e).is_some_and(|c| c.is_ascii_digit()) {
                    e += 1;
                }
                kind = NumberKind::Float;
                end = e;
            }
        }
        self.pos = end;
        Ok(Number {
            negative,
            digits: self.src.get(digits_start..end).unwrap_or(""),
            kind,
        })
    }

    /// True if a number comes next.
    pub fn at_number(&mut self) -> bool {
        match self.peek() {
            Some(c) if c.is_ascii_digit() => true,
            Some(b'-') => self.byte_at(1).is_some_and(|c| c.is_ascii_digit()),
            _ => false,
        }
    }

    /// Consumes an integer literal that fits in i64.
    pub fn int_lit(&mut self) -> Result<i64> {
        let start = {
            self.skip_ws();
            self.pos
        };
        let n = self.number()?;
        n.to_i128()
            .and_then(|v| i64::try_from(v).ok())
            .ok_or_else(|| self.error_at(start, "expected an integer that fits in 64 bits"))
    }

    /// Skips a balanced bracketed span starting at the current `<`, `(`, `[` or `{`, across
    /// strings and `->`; returns the skipped text.
    pub fn skip_balanced(&mut self) -> Result<&'a str> {
        self.skip_ws();
        let start = self.pos;
        let bytes = self.src.as_bytes();
        let mut stack: Vec<u8> = Vec::new();
        let mut i = self.pos;
        while let Some(&c) = bytes.get(i) {
            match c {
                b'"' => {
                    self.pos = i;
                    self.string_raw()?;
                    i = self.pos;
                    continue;
                }
                b'-' if bytes.get(i + 1) == Some(&b'>') => {
                    i += 2;
                    continue;
                }
                b'<' | b'(' | b'[' | b'{' => stack.push(c),
                b'>' | b')' | b']' | b'}' => {
                    let open = match c {
                        b'>' => b'<',
                        b')' => b'(',
                        b']' => b'[',
                        _ => b'{',
                    };
                    match stack.last() {
                        Some(&top) if top == open => {
                            stack.pop();
                        }
                        // `>` inside parentheses or brackets (a comparison) is not a closer.
                        Some(&top) if c == b'>' && top != b'<' => {}
                        _ => return Err(self.error_at(i, format!("unbalanced `{}`", c as char))),
                    }
                }
                _ => {}
            }
            i += 1;
            if stack.is_empty() {
                break;
            }
            if stack.len() > super::MAX_DEPTH {
                return Err(self.error_at(i, "nesting too deep"));
            }
        }
        if !stack.is_empty() {
            return Err(self.error_at(start, "unterminated bracket"));
        }
        self.pos = i;
        Ok(self.src.get(start..i).unwrap_or(""))
    }
}

/// Resolves MLIR string escapes into bytes.
pub(super) fn unescape(raw: &str) -> Vec<u8> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        match bytes.get(i + 1) {
            Some(b'n') => out.push(b'\n'),
            Some(b't') => out.push(b'\t'),
            Some(b'\\') => out.push(b'\\'),
            Some(b'"') => out.push(b'"'),
            Some(&h) if h.is_ascii_hexdigit() => {
                let l = bytes.get(i + 2).copied().unwrap_or(b'0');
                let v = hex_val(h) * 16 + hex_val(l);
                out.push(v);
                i += 3;
                continue;
            }
            Some(&other) => out.push(other),
            None => {}
        }
        i += 2;
    }
    out
}

/// The value of an ASCII hex digit (0 for anything else).
pub(super) fn hex_val(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_positions() {
        let mut c = Cursor::new("  -1.5e3 0x7FC00000\n  42 // c\n 7", "f.mlir", 10);
        let n = c.number().unwrap();
        assert_eq!(n.kind, NumberKind::Float);
        assert_eq!(n.to_f64(), Some(-1500.0));
        let h = c.number().unwrap();
        assert_eq!(h.kind, NumberKind::Hex);
        assert_eq!(h.to_i128(), Some(0x7FC00000));
        assert_eq!(c.int_lit().unwrap(), 42);
        c.skip_ws();
        assert_eq!(c.line_col(c.pos), (12, 2));
        let e = c.error("boom");
        assert_eq!(e.message, "f.mlir:12:2: boom");
    }

    #[test]
    fn strings_with_escapes() {
        let mut c = Cursor::new(r#""a\"b\0A\\" "x"#, "f", 1);
        assert_eq!(c.string_lit().unwrap(), "a\"b\n\\");
        assert!(c.string_lit().is_err());
    }

    #[test]
    fn balanced_skips_arrows_and_strings() {
        let mut c = Cursor::new(r#"<(d0) -> (d0), "]>">, rest"#, "f", 1);
        assert_eq!(c.skip_balanced().unwrap(), r#"<(d0) -> (d0), "]>">"#);
        assert!(c.eat(b','));
    }
}
