//! A cursor over one JSON message for the fast readers that run ahead of
//! serde in the decode stage (Kafka message → **decode** → assemble → …):
//! `native::scan` (rankpulse's own events) and `ubi::scan`. Each method
//! reads exactly what serde_json would read there, or answers `None`, and
//! the reader then leaves the whole message to serde, which decides (its
//! error, or its value). So a fast reader built on it is never different
//! from serde (a message it leaves is read twice, a cost paid by what
//! producers rarely send); each one's `same_as_serde` proptest and the
//! `decode_assemble` fuzz target hold it to that.

use super::{RawTimestamp, Text};
use std::borrow::Cow;

/// Nesting beyond this is left to serde (which reads 127 levels and skips
/// any number).
pub(in crate::event) const MAX_NESTING: u32 = 16;

/// Where the first quote, backslash or control character of `rest` is
/// (`None`: there is none). Eight bytes at a time, as serde_json's own
/// scan does (fewer instructions than memchr's vector search or a 16-byte
/// mask on these short strings, under callgrind); the lowest flagged byte
/// of a word is exact (a borrow only flags bytes above a true hit), so the
/// word that holds the hit also says where. The last, shorter word is
/// padded with zero bytes, which count as control characters: a hit there
/// at or beyond the end is no hit.
pub(in crate::event) fn special_at(rest: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let zero_in = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let flagged = |v: u64| {
        zero_in(v ^ (ONES * u64::from(b'"')))
            | zero_in(v ^ (ONES * u64::from(b'\\')))
            | (v.wrapping_sub(ONES * 0x20) & !v & HIGH)
    };
    let mut at = 0;
    let mut chunks = rest.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let special = flagged(u64::from_le_bytes(word));
        if special != 0 {
            return Some(at + (special.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    let tail = chunks.remainder();
    let mut word = [0u8; 8];
    word[..tail.len()].copy_from_slice(tail);
    let hit = (flagged(u64::from_le_bytes(word)).trailing_zeros() / 8) as usize;
    (hit < tail.len()).then_some(at + hit)
}

/// A member name of an object a fast reader reads, and its colon, as the
/// member it names: `$cursor.$known` by the list of known names, each
/// told by its first byte (checked against the name at compile time) and
/// one fixed-length compare ([`Scan::is_name`]), not scanned and then
/// matched; any other name is read by [`Scan::key`] (which leaves escapes
/// to serde) as `$other`, and cannot be a known name, whose bytes would
/// have matched. `None` where serde must decide.
macro_rules! known_member {
    ($scan:expr, { $($first:literal $name:literal => $member:expr,)+ } else $other:expr) => {{
        let scan: &mut $crate::event::toolkit::cursor::Scan<'_> = $scan;
        scan.ws();
        let known = match scan.text.as_bytes().get(scan.at + 1) {
            $(Some($first) if {
                const { assert!($name.as_bytes()[0] == $first, "a known name under another first byte") };
                scan.is_name($name)
            } => Some($member),)+
            _ => None,
        };
        match known {
            Some(member) => scan.eat(b':').map(|()| member),
            None => scan.key().map(|_| $other),
        }
    }};
}
pub(in crate::event) use known_member;

/// A cursor over the message. Every method returns `None` where the serde
/// reader must decide, and leaves the cursor anywhere then.
pub(in crate::event) struct Scan<'a> {
    pub(in crate::event) text: &'a str,
    pub(in crate::event) at: usize,
}

impl<'a> Scan<'a> {
    pub(in crate::event) fn byte(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// Skips JSON whitespace (exactly serde_json's four bytes).
    pub(in crate::event) fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.byte() {
            self.at += 1;
        }
    }

    pub(in crate::event) fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.byte()
    }

    fn eat_if(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        self.at += usize::from(hit);
        hit
    }

    pub(in crate::event) fn eat(&mut self, c: u8) -> Option<()> {
        self.eat_if(c).then_some(())
    }

    pub(in crate::event) fn literal(&mut self, word: &str) -> Option<()> {
        self.ws();
        let rest = self.text.as_bytes().get(self.at..)?;
        rest.starts_with(word.as_bytes()).then(|| self.at += word.len())
    }

    /// After a member or an element: `true` at `,` (another follows),
    /// `false` at the closing `close`.
    fn next(&mut self, close: u8) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.at += 1;
                Some(true)
            }
            c if c == close => {
                self.at += 1;
                Some(false)
            }
            _ => None,
        }
    }

    /// An object, each of its members read by `member` (its name
    /// included), the commas and braces between them here.
    #[inline(always)]
    pub(in crate::event) fn members(&mut self, member: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.list(b'{', b'}', member)
    }

    /// An array, each of its elements read by `element`, the commas and
    /// brackets between them here.
    #[inline(always)]
    pub(in crate::event) fn elements(&mut self, element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.list(b'[', b']', element)
    }

    #[inline(always)]
    fn list(&mut self, open: u8, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(open)?;
        if !self.eat_if(close) {
            loop {
                item(self)?;
                if !self.next(close)? {
                    break;
                }
            }
        }
        Some(())
    }

    /// A string with neither escapes nor control characters, borrowed.
    pub(in crate::event) fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let rest = self.text.as_bytes().get(start..)?;
        let len = special_at(rest)?;
        if rest.get(len) != Some(&b'"') {
            return None;
        }
        self.at = start + len + 1;
        self.text.get(start..start + len)
    }

    /// A string that is only skipped, escapes checked as serde_json checks
    /// them when it skips (a `\\u` escape need not make a valid code
    /// point there): producers that write non-ASCII text as `\\u` escapes
    /// (Python's `json.dumps`) are read here too.
    pub(in crate::event) fn skip_string(&mut self) -> Option<()> {
        self.eat(b'"')?;
        let bytes = self.text.as_bytes();
        loop {
            let rest = bytes.get(self.at..)?;
            let i = special_at(rest)?;
            self.at += i + 1;
            match *rest.get(i)? {
                b'"' => return Some(()),
                b'\\' => match *bytes.get(self.at)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 1,
                    b'u' => {
                        let hex = bytes.get(self.at + 1..self.at + 5)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        self.at += 5;
                    }
                    _ => return None,
                },
                _ => return None,
            }
        }
    }

    /// Reads the name at the cursor if it is exactly `name`, compared as
    /// bytes up to its closing quote: a name whose bytes match holds no
    /// escape, so it is that name. Cheaper than [`Self::key`] and a string
    /// compare (inlined, the compare is of a known length). `false` leaves
    /// the cursor where it was.
    #[inline(always)]
    pub(in crate::event) fn is_name(&mut self, name: &'static str) -> bool {
        let n = name.len();
        let hit = self
            .text
            .as_bytes()
            .get(self.at..self.at + n + 2)
            .is_some_and(|s| s[0] == b'"' && s[1..=n] == *name.as_bytes() && s[n + 1] == b'"');
        if hit {
            self.at += n + 2;
        }
        hit
    }

    /// A member name and its colon: one of `names` (each compared as
    /// [`Self::is_name`] does), else as [`Self::key`] reads it.
    #[inline(always)]
    pub(in crate::event) fn key_among(&mut self, names: &[&'static str]) -> Option<&'a str> {
        self.ws();
        for name in names {
            if self.is_name(name) {
                return self.eat(b':').map(|()| *name);
            }
        }
        self.key()
    }

    /// A member's name and its colon.
    pub(in crate::event) fn key(&mut self) -> Option<&'a str> {
        let key = self.string()?;
        self.eat(b':')?;
        Some(key)
    }

    /// A non-negative integer without fraction or exponent that fits a
    /// `u64` (exactly what serde_json visits as a `u64`), as its text and
    /// value.
    pub(in crate::event) fn uint(&mut self) -> Option<(&'a str, u64)> {
        self.ws();
        let start = self.at;
        let mut value = 0u64;
        // The value as the digits go (beyond u64: left to serde), rather
        // than a second pass through `str::parse`.
        while let Some(b) = self.byte().filter(u8::is_ascii_digit) {
            value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            self.at += 1;
        }
        let digits = self.text.get(start..self.at)?;
        let simple = !digits.is_empty() && (digits == "0" || !digits.starts_with('0'));
        if !simple || matches!(self.byte(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some((digits, value))
    }

    /// `null` as `None`, else what `value` reads (serde's `Option<T>`).
    pub(in crate::event) fn optional<T>(&mut self, value: impl FnOnce(&mut Self) -> Option<T>) -> Option<Option<T>> {
        if self.peek()? == b'n' {
            self.literal("null")?;
            return Some(None);
        }
        value(self).map(Some)
    }

    /// Any value, validated and dropped (serde's `IgnoredAny`); `nesting`
    /// is the depth of the value.
    pub(in crate::event) fn skip(&mut self, nesting: u32) -> Option<()> {
        match self.peek()? {
            b'"' => self.skip_string(),
            b'{' if nesting < MAX_NESTING => self.members(|s| {
                s.skip_string()?;
                s.eat(b':')?;
                s.skip(nesting + 1)
            }),
            b'[' if nesting < MAX_NESTING => self.elements(|s| s.skip(nesting + 1)),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// A number that is only skipped: `-?(0|[1-9][0-9]*)(\.[0-9]+)?`; one
    /// with an exponent is left to serde.
    pub(in crate::event) fn number(&mut self) -> Option<()> {
        if self.byte() == Some(b'-') {
            self.at += 1;
        }
        let digits = |s: &mut Self| {
            let start = s.at;
            while s.byte().is_some_and(|b| b.is_ascii_digit()) {
                s.at += 1;
            }
            s.at - start
        };
        let first = self.byte();
        match digits(self) {
            0 => return None,
            n if n > 1 && first == Some(b'0') => return None,
            _ => {}
        }
        if self.byte() == Some(b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return None;
            }
        }
        (!matches!(self.byte(), Some(b'e' | b'E'))).then_some(())
    }

    /// A string as [`Text`], borrowed.
    pub(in crate::event) fn text(&mut self) -> Option<Text<'a>> {
        self.string().map(|s| Text(Cow::Borrowed(s)))
    }

    /// [`RawTimestamp`]: a string, or an unsigned integer (serde visits a
    /// `u64`, taken `as f64`).
    pub(in crate::event) fn timestamp(&mut self) -> Option<RawTimestamp<'a>> {
        match self.peek()? {
            b'"' => self.string().map(|s| RawTimestamp::Text(Cow::Borrowed(s))),
            _ => self.uint().map(|(_, v)| RawTimestamp::Millis(v as f64)),
        }
    }
}

/// Generators of hostile JSON for the fast readers' `same_as_serde`
/// proptests: each reader's test names its own scalars and member names
/// ([`strategies::Words`]).
#[cfg(test)]
pub(in crate::event) mod strategies {
    use proptest::prelude::*;

    /// The scalars and member names one reader's messages are made of.
    #[derive(Clone, Copy)]
    pub struct Words {
        /// The reader's own values, as producers send them; any value is
        /// also drawn from [`EDGES`].
        pub scalars: &'static [&'static str],
        pub keys: &'static [&'static str],
    }

    /// The scalars at the edges of what a fast reader reads exactly as
    /// serde_json does, or leaves to it: escapes (valid, invalid, a lone
    /// surrogate), control and non-ASCII characters, negative zero,
    /// fractions and exponents, leading zeros, integers at 2^32, 2^53,
    /// `i64` and `u64` and one beyond, a score with 23 digits after its
    /// point, and the three literals. Every reader's values are drawn from
    /// these too.
    pub const EDGES: &[&str] = &[
        r#""""#,
        r#""t\u00e9""#,
        r#""a\"b""#,
        "\"x\u{1}y\"",
        "\"\u{e9}t\u{e9}\"",
        r#""\/\b\f\n\r\t\\""#,
        r#""\u00e9\ud800""#,
        r#""\u12""#,
        r#""\x""#,
        "0",
        "2",
        "7",
        "-3",
        "-0",
        "-0.0",
        "1.5",
        "2.0",
        "-2.25",
        "0.1",
        "1e3",
        "01",
        "1.",
        "4294967296",
        "9007199254740993",
        "0.12345678901234567890123",
        "9223372036854775807",
        "9223372036854775808",
        "12345678901234567890",
        "18446744073709551615",
        "18446744073709551616",
        "123456789012345678901",
        "null",
        "true",
        "false",
    ];

    impl Words {
        /// Any value of these words ([`value`]).
        pub fn value(self) -> impl Strategy<Value = String> {
            value(self.scalars, self.keys)
        }

        /// `typical` most of the time, else any value.
        pub fn mostly(self, typical: &'static [&'static str]) -> impl Strategy<Value = String> {
            prop_oneof![6 => prop::sample::select(typical).prop_map(str::to_string), 1 => self.value()]
        }

        /// Member `name`, its value mostly `typical`.
        pub fn member(self, name: &'static str, typical: &'static [&'static str]) -> BoxedStrategy<String> {
            self.mostly(typical).prop_map(move |v| format!("\"{name}\":{v}")).boxed()
        }

        /// An object of some of `members` ([`object`]).
        pub fn object(self, members: Vec<BoxedStrategy<String>>) -> impl Strategy<Value = String> {
            object(members, self.scalars, self.keys)
        }
    }

    /// Any value: one of `scalars`, or arrays and objects of them (members
    /// named from `keys`), four deep at most.
    fn value(scalars: &'static [&'static str], keys: &'static [&'static str]) -> impl Strategy<Value = String> {
        let leaf = prop_oneof![prop::sample::select(scalars), prop::sample::select(EDGES)].prop_map(str::to_string);
        leaf.prop_recursive(4, 24, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((prop::sample::select(keys), inner), 0..5).prop_map(|members| {
                    let m: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", m.join(","))
                }),
            ]
        })
    }

    /// An object of some of `members` (each kept or not, now and then
    /// twice), in any order, perhaps with another member named from `keys`.
    fn object(
        members: Vec<BoxedStrategy<String>>,
        scalars: &'static [&'static str],
        keys: &'static [&'static str],
    ) -> impl Strategy<Value = String> {
        let kept = members
            .into_iter()
            .flat_map(|m| [prop::option::weighted(0.85, m.clone()), prop::option::weighted(0.03, m)])
            .collect::<Vec<_>>();
        let extra = prop::collection::vec((prop::sample::select(keys), value(scalars, keys)), 0..2);
        let space = prop::sample::select(&["", " ", "\n\t", "\r "][..]);
        (kept, extra, space)
            .prop_map(|(kept, extra, space)| {
                let mut m: Vec<String> = kept.into_iter().flatten().collect();
                m.extend(extra.iter().map(|(k, v)| format!("\"{k}\"{space}:{space}{v}")));
                m
            })
            .prop_shuffle()
            .prop_map(|m| format!("{{{}}}", m.join(",")))
    }

    /// `message` as it is, or cut, or with one byte put in.
    pub fn damaged(message: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
        let change = prop_oneof![
            6 => Just(None),
            1 => (any::<prop::sample::Index>(), Just(None)).prop_map(Some),
            1 => (any::<prop::sample::Index>(), prop::sample::select(&b"{}[]\",:\\ 0-.eaxn\x01"[..]).prop_map(Some)).prop_map(Some),
        ];
        (message, change).prop_map(|(mut text, change)| {
            match change {
                Some((at, None)) => text.truncate(text.floor_char_boundary(at.index(text.len() + 1))),
                Some((at, Some(byte))) => {
                    text.insert(text.floor_char_boundary(at.index(text.len() + 1)), char::from(byte))
                }
                None => {}
            }
            text
        })
    }
}
