//! The value types configuration keys share, each parsed and checked where
//! it is read so that a bad value is refused naming its key: durations
//! ([`Span`]), moments ([`Moment`]) and `[mapped]`'s paths ([`Paths`]).
//! Their text is kept as written, for `--print-config` and labels.

use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::time::Duration;

/// The longest duration a setting takes: 1000 years of 365.25 days, far
/// beyond any window or horizon ("100y" turns a check off) and far from
/// overflowing an epoch millisecond.
pub(super) const MAX_DURATION: Duration = Duration::from_secs(31_557_600_000);

/// A duration written as text ("30s", "5m", "1h30m"); the text is kept
/// because window spans are also label values.
#[derive(Clone, PartialEq, Eq)]
pub struct Span {
    pub text: String,
    pub duration: Duration,
}

impl Span {
    pub fn ms(&self) -> i64 {
        i64::try_from(self.duration.as_millis()).unwrap_or(i64::MAX)
    }
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Span {
    type Err = String;
    fn from_str(s: &str) -> Result<Span, String> {
        let duration = humantime::parse_duration(s.trim())
            .map_err(|e| format!("{s:?} is not a duration like \"30s\", \"5m\" or \"1h\" ({e})"))?;
        // Time is kept in whole milliseconds: "500us" would be 0 (a gap of
        // nothing; a drift of 0 means "never hold", the opposite).
        if duration.subsec_nanos() % 1_000_000 != 0 {
            return Err(format!("{s:?} is not a whole number of milliseconds"));
        }
        // Event times are epoch milliseconds; a longer duration added to
        // one could overflow, and no window or horizon needs it.
        if duration > MAX_DURATION {
            return Err(format!("{s:?} is longer than 1000 years"));
        }
        Ok(Span { text: s.trim().to_string(), duration })
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Span, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Span {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// A moment, written in RFC 3339 (`"2000-01-01T00:00:00Z"`): the text as
/// written, for `--print-config`, and its epoch milliseconds.
#[derive(Clone, PartialEq, Eq)]
pub struct Moment {
    pub text: String,
    pub ms: i64,
}

impl fmt::Debug for Moment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Moment {
    type Err = String;
    fn from_str(s: &str) -> Result<Moment, String> {
        let text = s.trim();
        let ms = rankpulse_core::event::rfc3339_ms(text).ok_or_else(|| {
            format!("{s:?} is not an RFC 3339 time between 1970 and 9999 like \"2000-01-01T00:00:00Z\"")
        })?;
        Ok(Moment { text: text.to_string(), ms })
    }
}

impl<'de> Deserialize<'de> for Moment {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Moment, D::Error> {
        // Quoted, or a TOML date-time written bare (`2000-01-01T00:00:00Z`).
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Text(String),
            Toml(toml::value::Datetime),
            // Epoch milliseconds, as events carry them: refused with what
            // to write instead, not serde's "no variant matched".
            Number(i64),
        }
        let text = match Written::deserialize(d)? {
            Written::Text(text) => text,
            Written::Toml(t) => t.to_string(),
            Written::Number(n) => {
                return Err(serde::de::Error::custom(format!(
                    "{n} is a number: write a date-time (RFC 3339), e.g. \"2000-01-01T00:00:00Z\""
                )));
            }
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Moment {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// One `[mapped]` path or a list of alternatives (the first present one
/// wins): `time = "ts"` or `time = ["ts", "clicked_at"]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Paths(pub Vec<String>);

impl Paths {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de> Deserialize<'de> for Paths {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Paths, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Paths;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a path (\"a.b\" or \"/a/b\") or a list of paths")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Paths, E> {
                Ok(Paths(vec![v.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Paths, A::Error> {
                let mut out = Vec::new();
                while let Some(p) = seq.next_element::<String>()? {
                    out.push(p);
                }
                Ok(Paths(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Paths {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.serialize_str(one),
            many => many.serialize(s),
        }
    }
}

/// A duration of the built-in defaults.
pub(super) fn span(s: &str) -> Span {
    // Only called with the defaults' literals, which parse.
    s.parse().unwrap_or(Span { text: s.to_string(), duration: Duration::from_secs(30) })
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::testing::{env, from_toml};

    /// `input.min_timestamp` is a moment in RFC 3339, from a file or the
    /// environment; anything else is refused naming the key.
    #[test]
    fn min_timestamp_reads_rfc3339_and_refuses_anything_else() {
        assert_eq!(Config::default().input.min_timestamp.ms, 946_684_800_000);
        let c = from_toml("[input]\nmin_timestamp = \"1990-06-01T12:00:00+02:00\"\n").unwrap();
        assert_eq!(c.pipeline_settings().min_timestamp_ms, 644_234_400_000);
        // A TOML date-time written bare is the same moment.
        let c = from_toml("[input]\nmin_timestamp = 1990-06-01T12:00:00+02:00\n").unwrap();
        assert_eq!(c.input.min_timestamp.ms, 644_234_400_000);
        let c =
            Config::load_with_env(None, env(&[("RANKPULSE__INPUT__MIN_TIMESTAMP", "1970-01-01T00:00:00Z")])).unwrap();
        assert_eq!(c.input.min_timestamp.ms, 0);
        for bad in ["\"2000-01-01\"", "2000-01-01", "\"yesterday\"", "946684800000", "\"1969-12-31T23:59:59Z\""] {
            let e = from_toml(&format!("[input]\nmin_timestamp = {bad}\n")).unwrap_err().to_string();
            assert!(e.starts_with("config key input.min_timestamp:"), "{bad}: {e}");
        }
        // Epoch milliseconds say what to write instead.
        let e = from_toml("[input]\nmin_timestamp = 946684800000\n").unwrap_err().to_string();
        assert!(e.contains("946684800000 is a number: write a date-time (RFC 3339)"), "{e}");
    }
}
