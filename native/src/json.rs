//! A strict JSON (RFC 8259) parser into a flat tape, and the conversions the store's columns need.
//!
//! Theory of operation: one qlog record (an event: a few hundred bytes) is parsed at a time into
//! a reused `Vec<Tok>`: one token per value, in document order, containers first.  A token
//! knows where its text starts and ends in the input and where the token after its whole subtree
//! sits (`next`), so a member is found by hopping over siblings, never by re-reading text.  An
//! object's children alternate key and value.  Nothing is copied or unescaped until a column
//! asks for it; the raw text of any value (an event's `data`, a frame kept in `frames.details`)
//! is a byte range of the input.
//!
//! The input's UTF-8 is checked once per slice by the caller; this parser checks the rest of RFC
//! 8259 (no trailing commas, no control characters or bad escapes in strings, numbers as its
//! grammar says), because a slice of a JSON document is cut where a parse succeeds.
//!
//! The conversions (`f64`, `i64`, `text`, `boolean`) are those DuckDB's `json_transform` and
//! `TRY_CAST` apply, which the store's rows were first made with: a number logged as a string
//! ("296", as draft-era producers write) is a number; a value that is none is NULL.

use std::borrow::Cow;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Object,
    Array,
    String,
    Number,
    True,
    False,
    Null,
}

/// 16 bytes (positions as u32: a slice is at most a few slices' size, `quicack.qlog.slicing`):
/// the tape of a dense record — a number every two bytes — is 8 times its text.
#[derive(Clone, Copy, Debug)]
pub struct Tok {
    pub kind: Kind,
    /// a string holding a backslash escape
    pub escaped: bool,
    /// the value's text: from its first byte (quote, bracket) to after its last
    pub start: u32,
    pub end: u32,
    /// index of the token after this value's subtree
    pub next: u32,
}

#[derive(Debug, Clone)]
pub struct Error {
    pub pos: usize,
    pub what: &'static str,
    /// the member the bad token belongs to, as a path from the value's root (`data.frames[0].
    /// ack_delay`; empty at the root)
    pub field: String,
    /// the input ended before the value did (a cut inside it), rather than a token being wrong
    pub eof: bool,
}

fn err<T>(pos: usize, what: &'static str) -> Result<T, Error> {
    Err(Error { pos, what, field: String::new(), eof: false })
}

/// The largest magnitude a time or duration is read with (`Doc::finite`): beyond it the value is
/// out of range (no time comes near it, and scaling it to milliseconds must stay finite).  A
/// number that is not finite as a double at all (`1e400`) is refused by the parser, as NaN and
/// Infinity are (no JSON), and as orjson refuses it in a document read whole.
pub const MAX_MAGNITUDE: f64 = 1e300;

#[inline]
pub fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

#[inline]
pub fn skip_ws(buf: &[u8], mut pos: usize) -> usize {
    while pos < buf.len() && is_ws(buf[pos]) {
        pos += 1;
    }
    pos
}

/// Bytes that end the fast scan of a string: its closing quote, an escape, a control character.
static STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

const LOW: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte lane of `w` that is zero (exact for the lowest such lane; a lane
/// above a zero one may be flagged too, which only stops the scan early).
#[inline]
fn zero_lanes(w: u64) -> u64 {
    w.wrapping_sub(LOW) & !w & HIGH
}

/// The high bit of each byte lane of `w` below 0x20 (as `zero_lanes`: exact for the lowest).
#[inline]
fn below_0x20(w: u64) -> u64 {
    w.wrapping_sub(0x2020_2020_2020_2020) & !w & HIGH
}

/// The string starting at the quote at `pos`: (position after its closing quote, escaped?).
#[inline]
fn scan_string(buf: &[u8], pos: usize) -> Result<(usize, bool), Error> {
    let mut i = pos + 1;
    let mut escaped = false;
    let n = buf.len();
    loop {
        // eight bytes at a time while none of them stops the scan (SWAR: a byte of the word is
        // '"', '\\' or below 0x20 when the high bit of its lane in `stops` is set)
        while i + 8 <= n {
            let w = u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
            let stops = zero_lanes(w ^ 0x2222_2222_2222_2222) | zero_lanes(w ^ 0x5C5C_5C5C_5C5C_5C5C) | below_0x20(w);
            if stops != 0 {
                i += (stops.trailing_zeros() / 8) as usize;
                break;
            }
            i += 8;
        }
        while i < n && !STRING_STOP[buf[i] as usize] {
            i += 1;
        }
        if i >= n {
            return err(pos, "unterminated string");
        }
        match buf[i] {
            b'"' => return Ok((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                match buf.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                    Some(b'u') => {
                        if i + 6 > n || !buf[i + 2..i + 6].iter().all(|b| b.is_ascii_hexdigit()) {
                            return err(i, "invalid \\u escape in string");
                        }
                        i += 6;
                    }
                    None => return err(pos, "unterminated string"),
                    _ => return err(i, "invalid escape in string"),
                }
            }
            _ => return err(i, "control character in string"),
        }
    }
}

#[inline]
fn scan_number(buf: &[u8], pos: usize) -> Result<usize, Error> {
    let n = buf.len();
    let mut i = pos;
    if buf[i] == b'-' {
        i += 1;
    }
    match buf.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while i < n && buf[i].is_ascii_digit() {
                i += 1;
            }
        }
        _ => return err(pos, "invalid number"),
    }
    let integer_end = i;
    // a fraction, an exponent: each needs at least one digit
    let digits = |from: usize| from + buf[from..].iter().take_while(|b| b.is_ascii_digit()).count();
    if i < n && buf[i] == b'.' {
        let end = digits(i + 1);
        if end == i + 1 {
            return err(pos, "invalid number");
        }
        i = end;
    }
    if i < n && (buf[i] == b'e' || buf[i] == b'E') {
        i += 1;
        if i < n && (buf[i] == b'+' || buf[i] == b'-') {
            i += 1;
        }
        let end = digits(i);
        if end == i {
            return err(pos, "invalid number");
        }
        i = end;
    }
    // (a number with an exponent, or of more digits than a double's range, may overflow: read it)
    if (i > integer_end && buf[integer_end..i].iter().any(|&b| b == b'e' || b == b'E')) || integer_end - pos > 300 {
        let v = fast_f64(&buf[pos..i]).unwrap_or(f64::INFINITY);
        if !v.is_finite() {
            return err(pos, "number out of range");
        }
    }
    Ok(i)
}

#[inline]
fn literal(buf: &[u8], pos: usize, word: &[u8]) -> Result<usize, Error> {
    if buf.len() >= pos + word.len() && &buf[pos..pos + word.len()] == word {
        Ok(pos + word.len())
    } else {
        err(pos, "invalid literal")
    }
}

/// Parse the one JSON value that starts at `pos` (after optional whitespace) into `tape`
/// (cleared first); return the position just after it.  A refusal names the byte, the member
/// it happened in (`Error::field`) and whether the input ended inside the value (`Error::eof`).
pub fn parse(buf: &[u8], pos: usize, tape: &mut Vec<Tok>) -> Result<usize, Error> {
    if buf.len() > u32::MAX as usize {
        return err(0, "input of 4 GB or more"); // (positions are u32; no slice comes near)
    }
    let mut stack: Vec<usize> = Vec::new();
    parse_value(buf, pos, tape, &mut stack).map_err(|mut e| {
        e.eof = e.pos >= buf.len() || e.what == "unterminated string";
        e.field = field_path(buf, tape, &stack);
        e
    })
}

/// Where the parse stood when it failed: the keys and indexes of the containers still open
/// (error path only: walks the tape once).
fn field_path(buf: &[u8], tape: &[Tok], stack: &[usize]) -> String {
    let mut path = String::new();
    for (depth, &open) in stack.iter().enumerate() {
        let inner = stack.get(depth + 1).copied();
        let mut i = open + 1;
        if tape[open].kind == Kind::Array {
            let mut index = 0;
            while i < tape.len() && Some(i) != inner {
                i = tape[i].next as usize;
                index += 1;
            }
            path.push_str(&format!("[{index}]"));
            continue;
        }
        let mut key = None;
        while i < tape.len() {
            key = Some(&tape[i]);
            if i + 1 >= tape.len() || Some(i + 1) == inner {
                break;
            }
            i = tape[i + 1].next as usize;
        }
        if let Some(k) = key {
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&unescape(&buf[k.start as usize + 1..k.end as usize - 1]));
        }
    }
    path
}

fn parse_value(buf: &[u8], pos: usize, tape: &mut Vec<Tok>, stack: &mut Vec<usize>) -> Result<usize, Error> {
    tape.clear();
    let mut pos = pos;
    'value: loop {
        pos = skip_ws(buf, pos);
        let Some(&c) = buf.get(pos) else {
            return err(pos, "unexpected end of input");
        };
        let idx = tape.len();
        match c {
            b'{' | b'[' => {
                let kind = if c == b'{' { Kind::Object } else { Kind::Array };
                tape.push(Tok { kind, escaped: false, start: pos as u32, end: 0, next: 0 });
                stack.push(idx);
                pos = skip_ws(buf, pos + 1);
                let close = if c == b'{' { b'}' } else { b']' };
                if buf.get(pos) == Some(&close) {
                    pos += 1;
                    tape[idx].end = pos as u32;
                    tape[idx].next = tape.len() as u32;
                    stack.pop();
                } else if c == b'{' {
                    pos = key(buf, pos, tape)?;
                    continue 'value;
                } else {
                    continue 'value;
                }
            }
            b'"' => {
                let (end, escaped) = scan_string(buf, pos)?;
                tape.push(Tok { kind: Kind::String, escaped, start: pos as u32, end: end as u32, next: idx as u32 + 1 });
                pos = end;
            }
            b'-' | b'0'..=b'9' => {
                let end = scan_number(buf, pos)?;
                tape.push(Tok { kind: Kind::Number, escaped: false, start: pos as u32, end: end as u32, next: idx as u32 + 1 });
                pos = end;
            }
            b't' | b'f' | b'n' => {
                let (kind, word): (Kind, &[u8]) = match c {
                    b't' => (Kind::True, b"true"),
                    b'f' => (Kind::False, b"false"),
                    _ => (Kind::Null, b"null"),
                };
                let end = literal(buf, pos, word)?;
                tape.push(Tok { kind, escaped: false, start: pos as u32, end: end as u32, next: idx as u32 + 1 });
                pos = end;
            }
            _ => return err(pos, "expected a JSON value"),
        }
        // after a value: a comma and the next member, or the end of containers
        loop {
            let Some(&top) = stack.last() else {
                return Ok(pos);
            };
            pos = skip_ws(buf, pos);
            let object = tape[top].kind == Kind::Object;
            match buf.get(pos) {
                Some(b',') => {
                    pos += 1;
                    if object {
                        pos = key(buf, skip_ws(buf, pos), tape)?;
                    }
                    continue 'value;
                }
                Some(b'}') if object => {}
                Some(b']') if !object => {}
                None => return err(pos, "unexpected end of input"),
                _ => {
                    return err(pos, if object { "expected ',' or '}'" } else { "expected ',' or ']'" });
                }
            }
            pos += 1;
            tape[top].end = pos as u32;
            tape[top].next = tape.len() as u32;
            stack.pop();
        }
    }
}

/// An object member's key and its colon, at `pos`; the position after the colon.
#[inline]
fn key(buf: &[u8], pos: usize, tape: &mut Vec<Tok>) -> Result<usize, Error> {
    if buf.get(pos) != Some(&b'"') {
        return err(pos, "expected a string key");
    }
    let (end, escaped) = scan_string(buf, pos)?;
    let idx = tape.len();
    tape.push(Tok { kind: Kind::String, escaped, start: pos as u32, end: end as u32, next: idx as u32 + 1 });
    let pos = skip_ws(buf, end);
    if buf.get(pos) != Some(&b':') {
        return err(pos, "expected ':'");
    }
    Ok(pos + 1)
}

/// A parsed value: the input and its tape.
#[derive(Clone, Copy)]
pub struct Doc<'a> {
    pub buf: &'a [u8],
    pub tape: &'a [Tok],
}

impl<'a> Doc<'a> {
    #[inline]
    pub fn kind(&self, i: usize) -> Kind {
        self.tape[i].kind
    }

    /// The raw text of value `i`.
    #[inline]
    pub fn raw(&self, i: usize) -> &'a [u8] {
        let t = &self.tape[i];
        &self.buf[t.start as usize..t.end as usize]
    }

    #[inline]
    pub fn range(&self, i: usize) -> (usize, usize) {
        (self.tape[i].start as usize, self.tape[i].end as usize)
    }

    /// The member `key` of object `obj` (the first, if logged twice), or None (also when `obj`
    /// is no object).
    pub fn get(&self, obj: Option<usize>, key: &str) -> Option<usize> {
        let obj = obj?;
        let t = &self.tape[obj];
        if t.kind != Kind::Object {
            return None;
        }
        let mut i = obj + 1;
        let key = key.as_bytes();
        while i < t.next as usize {
            let k = &self.tape[i];
            let value = i + 1;
            let matches = if k.escaped {
                unescape(&self.buf[k.start as usize + 1..k.end as usize - 1]).as_bytes() == key
            } else {
                &self.buf[k.start as usize + 1..k.end as usize - 1] == key
            };
            if matches {
                return Some(value);
            }
            i = self.tape[value].next as usize;
        }
        None
    }

    /// The members of object `obj`: (key as written, escapes resolved; value), in order (none
    /// when `obj` is no object).
    pub fn members(&self, obj: Option<usize>) -> Members<'_, 'a> {
        match obj {
            Some(o) if self.tape[o].kind == Kind::Object => Members { doc: self, at: o + 1, end: self.tape[o].next as usize },
            _ => Members { doc: self, at: 0, end: 0 },
        }
    }

    /// The first of `keys` whose value converts (to a number, text, …) with `f`.
    #[inline]
    pub fn first<T>(&self, obj: Option<usize>, keys: &[&str], f: impl Fn(&Self, usize) -> Option<T>) -> Option<T> {
        keys.iter().find_map(|k| self.get(obj, k).and_then(|v| f(self, v)))
    }

    /// The elements of array `arr` (nothing when it is no array).
    pub fn elements(&self, arr: Option<usize>) -> Elements<'_, 'a> {
        match arr {
            Some(a) if self.tape[a].kind == Kind::Array => Elements { doc: self, at: a + 1, end: self.tape[a].next as usize },
            _ => Elements { doc: self, at: 0, end: 0 },
        }
    }

    pub fn is_array(&self, i: Option<usize>) -> bool {
        matches!(i, Some(i) if self.tape[i].kind == Kind::Array)
    }

    pub fn is_object(&self, i: Option<usize>) -> bool {
        matches!(i, Some(i) if self.tape[i].kind == Kind::Object)
    }

    /// VARCHAR: a string's content; another value's JSON text (minified); NULL for null.
    pub fn text(&self, i: usize) -> Option<Cow<'a, str>> {
        let t = &self.tape[i];
        match t.kind {
            Kind::Null => None,
            Kind::String => {
                let inner = &self.buf[t.start as usize + 1..t.end as usize - 1];
                if t.escaped {
                    Some(Cow::Owned(unescape(inner)))
                } else {
                    // (the caller checked the slice's UTF-8)
                    Some(Cow::Borrowed(unsafe { std::str::from_utf8_unchecked(inner) }))
                }
            }
            Kind::Object | Kind::Array => Some(Cow::Owned(minified(self.raw(i)))),
            _ => Some(Cow::Borrowed(unsafe { std::str::from_utf8_unchecked(self.raw(i)) })),
        }
    }

    /// DOUBLE: a number, or a string holding one (surrounding blanks allowed); true/false as 1/0.
    pub fn f64(&self, i: usize) -> Option<f64> {
        let t = &self.tape[i];
        match t.kind {
            Kind::Number => fast_f64(self.raw(i)),
            Kind::String => str_f64(&self.text(i)?),
            Kind::True => Some(1.0),
            Kind::False => Some(0.0),
            _ => None,
        }
    }

    /// BIGINT: an integral number; another number rounded half to even, a string's half away from
    /// zero (as DuckDB does); NULL beyond 64 bits.
    pub fn i64(&self, i: usize) -> Option<i64> {
        let t = &self.tape[i];
        match t.kind {
            Kind::Number => {
                let raw = self.raw(i);
                if raw.iter().all(|&b| b.is_ascii_digit() || b == b'-') {
                    parse_i64(raw)
                } else {
                    float_to_i64(fast_f64(raw)?.round_ties_even())
                }
            }
            Kind::String => str_i64(&self.text(i)?),
            Kind::True => Some(1),
            Kind::False => Some(0),
            _ => None,
        }
    }

    /// A count, packet number, size, offset or id: a non-negative integer below 2^63 (a string
    /// holding one, "296" or "0x10", too; true/false as 1/0).  A number that is negative, has a
    /// fraction or is too large is out of range; a value that is no number is none.
    pub fn count(&self, i: usize) -> Checked<i64> {
        let t = &self.tape[i];
        let v = match t.kind {
            Kind::Number => {
                let raw = self.raw(i);
                if raw.iter().all(|&b| b.is_ascii_digit()) {
                    return parse_i64(raw).map_or(Checked::OutOfRange, Checked::Value);
                }
                fast_f64(raw)
            }
            Kind::String => {
                let Some(text) = self.text(i) else { return Checked::NotNumber };
                let text = text.trim_matches(|c: char| c.is_ascii_whitespace());
                if let Ok(v) = text.parse::<i64>() {
                    return if v < 0 { Checked::OutOfRange } else { Checked::Value(v) };
                }
                if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
                    return i64::from_str_radix(hex, 16).map_or(Checked::OutOfRange, Checked::Value);
                }
                if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
                    return Checked::OutOfRange; // (beyond 64 bits)
                }
                str_f64(text)
            }
            Kind::True => return Checked::Value(1),
            Kind::False => return Checked::Value(0),
            _ => return Checked::NotNumber,
        };
        match v {
            None => Checked::NotNumber,
            Some(v) if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 9_223_372_036_854_775_808.0 => {
                Checked::Value(v as i64)
            }
            Some(_) => Checked::OutOfRange,
        }
    }

    /// A time: a finite number (a string holding one, true/false as 1/0) of at most
    /// `MAX_MAGNITUDE`; beyond that, or NaN/Infinity in a string, out of range.
    pub fn finite(&self, i: usize) -> Checked<f64> {
        match self.f64(i) {
            None => Checked::NotNumber,
            Some(v) if v.abs() <= MAX_MAGNITUDE => Checked::Value(v),
            Some(_) => Checked::OutOfRange,
        }
    }

    /// A duration (an ACK delay, an RTT, a timeout): as `finite`, and not negative.
    pub fn duration(&self, i: usize) -> Checked<f64> {
        match self.finite(i) {
            Checked::Value(v) if v < 0.0 => Checked::OutOfRange,
            other => other,
        }
    }

    /// BOOLEAN from the value's text (TRY_CAST of VARCHAR): true/t/yes/y/1, false/f/no/n/0.
    pub fn boolean(&self, i: usize) -> Option<bool> {
        let text = self.text(i)?;
        match text.to_ascii_lowercase().as_str() {
            "true" | "t" | "yes" | "y" | "1" => Some(true),
            "false" | "f" | "no" | "n" | "0" => Some(false),
            _ => None,
        }
    }
}

/// A number read for a column that holds only some numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Checked<T> {
    Value(T),
    /// not a number (text, an object, null): NULL, as the store reads any such value
    NotNumber,
    /// a number the column cannot hold, or that the field cannot take (a negative packet number,
    /// an ACK delay of −1 ms, a NaN in a string): NULL too, and counted in a warning
    OutOfRange,
}

pub struct Members<'d, 'a> {
    doc: &'d Doc<'a>,
    at: usize,
    end: usize,
}

impl<'a> Iterator for Members<'_, 'a> {
    type Item = (Cow<'a, [u8]>, usize);
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.end {
            return None;
        }
        let k = self.doc.tape[self.at];
        let value = self.at + 1;
        self.at = self.doc.tape[value].next as usize;
        let inner = &self.doc.buf[k.start as usize + 1..k.end as usize - 1];
        let key = if k.escaped { Cow::Owned(unescape(inner).into_bytes()) } else { Cow::Borrowed(inner) };
        Some((key, value))
    }
}

pub struct Elements<'d, 'a> {
    doc: &'d Doc<'a>,
    at: usize,
    end: usize,
}

impl Iterator for Elements<'_, '_> {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.at >= self.end {
            return None;
        }
        let i = self.at;
        self.at = self.doc.tape[i].next as usize;
        Some(i)
    }
}

#[inline]
fn parse_i64(raw: &[u8]) -> Option<i64> {
    unsafe { std::str::from_utf8_unchecked(raw) }.parse().ok()
}

#[inline]
fn fast_f64(raw: &[u8]) -> Option<f64> {
    unsafe { std::str::from_utf8_unchecked(raw) }.parse().ok()
}

/// A double (already rounded) as BIGINT; None beyond 64 bits, or not a number.
pub fn float_to_i64(v: f64) -> Option<i64> {
    // (the largest double below 2^63 converts; 2^63 itself does not)
    (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&v).then_some(v as i64)
}

/// DOUBLE from text: blanks around it allowed, decimal forms and inf/nan as DuckDB reads them.
pub fn str_f64(text: &str) -> Option<f64> {
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    if t.is_empty() {
        return None;
    }
    t.parse().ok()
}

/// BIGINT from text: an integer (also hexadecimal 0x…), or a decimal rounded half away from zero.
pub fn str_i64(text: &str) -> Option<i64> {
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    if let Ok(v) = t.parse::<i64>() {
        return Some(v);
    }
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        let v = i64::from_str_radix(hex, 16).ok()?;
        return Some(if negative { -v } else { v });
    }
    let v: f64 = t.parse().ok()?;
    if v.is_nan() || v.is_infinite() {
        return None;
    }
    float_to_i64(v.round())
}

/// A JSON string's content (between its quotes) with its escapes resolved.
pub fn unescape(inner: &[u8]) -> String {
    let mut out: Vec<u8> = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        let b = inner[i];
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let e = inner.get(i + 1).copied().unwrap_or(b'\\');
        i += 2;
        let c = match e {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = hex4(inner, i);
                i += 4;
                if (0xD800..0xDC00).contains(&hi) && inner.get(i) == Some(&b'\\') && inner.get(i + 1) == Some(&b'u') {
                    let lo = hex4(inner, i + 2);
                    if (0xDC00..0xE000).contains(&lo) {
                        i += 6;
                        char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)).unwrap_or('\u{FFFD}')
                    } else {
                        '\u{FFFD}'
                    }
                } else {
                    char::from_u32(hi).unwrap_or('\u{FFFD}')
                }
            }
            _ => '\u{FFFD}',
        };
        let mut tmp = [0u8; 4];
        out.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn hex4(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|h| u32::from_str_radix(unsafe { std::str::from_utf8_unchecked(h) }, 16).ok())
        .unwrap_or(0xFFFD)
}

/// JSON text without the blanks between its tokens (strings kept as written).
pub fn minified(raw: &[u8]) -> String {
    let mut out = Vec::with_capacity(raw.len());
    minify_into(raw, &mut out);
    // (valid UTF-8 in, only ASCII blanks removed)
    unsafe { String::from_utf8_unchecked(out) }
}

/// Append `raw` without the blanks between its tokens to `out`.
pub fn minify_into(raw: &[u8], out: &mut Vec<u8>) {
    if !raw.iter().any(|&b| is_ws(b)) {
        out.extend_from_slice(raw);
        return;
    }
    let mut in_string = false;
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if in_string {
            out.push(b);
            if b == b'\\' {
                if let Some(&n) = raw.get(i + 1) {
                    out.push(n);
                }
                i += 2;
                continue;
            }
            if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
            out.push(b);
        } else if !is_ws(b) {
            out.push(b);
        }
        i += 1;
    }
}
