//! ISO 8601 event times → epoch milliseconds, for the decoders.
//!
//! Part of decoding: a `timestamp` given as text (always in UBI logs, often
//! in mapped ones) is read here. chrono decides what is accepted; this
//! module only adds a fast path for the few shapes logs are written in
//! (`2024-12-10T00:01:29.378Z`, `…+01:00`, `…+0000`, no zone), because
//! chrono's `parse_from_str` interprets its format string on every call and
//! made the `+0000` and zoneless shapes cost a large share of decoding a
//! UBI event (docs/performance.md, `rankpulse-bench ubi`). The fast path
//! accepts a strict subset of what chrono accepts and gives the same value
//! (`fast_path_agrees_with_chrono`); anything else, valid or not, goes to
//! chrono, so the accepted set is chrono's.

/// `text` as epoch milliseconds: RFC 3339; with `zoneless`, also an offset
/// without a colon (`+0000`) and no zone at all (UTC). `None` if chrono
/// refuses it too.
pub(super) fn millis(text: &str, zoneless: bool) -> Option<i64> {
    fast(text.as_bytes(), zoneless).or_else(|| chrono_millis(text, zoneless))
}

/// What chrono accepts and gives: the definition the fast path follows.
fn chrono_millis(text: &str, zoneless: bool) -> Option<i64> {
    let parsed = chrono::DateTime::parse_from_rfc3339(text).map(|t| t.timestamp_millis());
    if !zoneless {
        return parsed.ok();
    }
    parsed
        .or_else(|_| chrono::DateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f%z").map(|t| t.timestamp_millis()))
        .or_else(|_| {
            chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").map(|t| t.and_utc().timestamp_millis())
        })
        .ok()
}

/// `YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|±HH:MM)`, and with `zoneless` also
/// `±HHMM` or nothing after the seconds. Every field in its everyday range
/// (no leap second, offsets below 24 h); anything else is left to chrono.
fn fast(b: &[u8], zoneless: bool) -> Option<i64> {
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let (hour, minute, second) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &b[19..];
    let mut milli = 0;
    if let Some((b'.', fraction)) = rest.split_first() {
        let n = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > 9 {
            return None;
        }
        // Milliseconds truncate, as chrono's `timestamp_millis` does.
        for i in 0..3 {
            milli = milli * 10 + fraction.get(i).filter(|_| i < n).map_or(0, |c| i64::from(c - b'0'));
        }
        rest = &fraction[n..];
    }
    let offset_minutes = match rest {
        [b'Z'] => 0,
        [] if zoneless => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => offset(*sign, &[*h1, *h2], &[*m1, *m2])?,
        [sign @ (b'+' | b'-'), h1, h2, m1, m2] if zoneless => offset(*sign, &[*h1, *h2], &[*m1, *m2])?,
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1_000 + milli)
}

fn offset(sign: u8, hours: &[u8], minutes: &[u8]) -> Option<i64> {
    let (h, m) = (digits(hours)?, digits(minutes)?);
    if h > 23 || m > 59 {
        return None;
    }
    Some(if sign == b'-' { -(h * 60 + m) } else { h * 60 + m })
}

fn digits(b: &[u8]) -> Option<i64> {
    b.iter().try_fold(0i64, |n, c| c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0')))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_shapes_logs_use_take_the_fast_path() {
        // Reference values from `date -u -d …` (GNU coreutils).
        let cases = [
            ("1970-01-01T00:00:00Z", 0),
            ("2024-12-10T00:01:29.378Z", 1_733_788_889_378),
            ("2024-12-10T01:01:29.378+01:00", 1_733_788_889_378),
            ("2024-12-10T00:01:29.378+0000", 1_733_788_889_378),
            ("2024-12-09T23:31:29.3789-00:30", 1_733_788_889_378),
            ("2000-02-29T00:00:00.000", 951_782_400_000),
            ("2100-02-28T23:59:59.999", 4_107_542_399_999),
        ];
        for (text, ms) in cases {
            assert_eq!(fast(text.as_bytes(), true), Some(ms), "{text}");
            assert_eq!(millis(text, true), Some(ms), "{text}");
        }
        // RFC 3339 alone: the colon-less offset and the zoneless shape are
        // not RFC 3339, and chrono refuses them too.
        assert_eq!(fast(b"2024-12-10T00:01:29.378+0000", false), None);
        assert_eq!(millis("2024-12-10T00:01:29.378+0000", false), None);
        assert_eq!(millis("2024-12-10T00:01:29.378", false), None);
        assert_eq!(millis("2024-12-10T00:01:29.378Z", false), Some(1_733_788_889_378));
    }

    #[test]
    fn what_the_fast_path_leaves_is_chronos_to_decide() {
        // A leap second and a lowercase separator: valid RFC 3339.
        for text in ["2016-12-31T23:59:60Z", "2024-12-10t00:01:29z", "2024-12-10 00:01:29Z"] {
            assert_eq!(fast(text.as_bytes(), true), None, "{text}");
            assert_eq!(millis(text, true), chrono_millis(text, true), "{text}");
            assert!(millis(text, true).is_some(), "{text}");
        }
        for text in
            ["2023-02-29T00:00:00Z", "2024-13-01T00:00:00Z", "2024-12-10T24:00:00Z", "2024-12-10T00:00:00.Z", ""]
        {
            assert_eq!(millis(text, true), None, "{text}");
        }
    }

    /// A timestamp-like text built from fields that may each be out of
    /// range, with every separator and zone shape the fast path looks at.
    fn near_iso() -> impl Strategy<Value = String> {
        let zone = prop_oneof![
            Just(String::new()),
            Just("Z".to_string()),
            Just("z".to_string()),
            (prop::bool::ANY, 0u32..30, 0u32..70, prop::bool::ANY).prop_map(|(neg, h, m, colon)| {
                format!("{}{h:02}{}{m:02}", if neg { '-' } else { '+' }, if colon { ":" } else { "" })
            }),
        ];
        let fraction = prop_oneof![Just(String::new()), Just(".".to_string()), "\\.[0-9]{1,12}"];
        (
            1600i64..2500,
            0i64..14,
            0i64..33,
            prop_oneof![Just('T'), Just('t'), Just(' ')],
            0i64..26,
            0i64..61,
            0i64..62,
            fraction,
            zone,
        )
            .prop_map(|(y, mo, d, t, h, mi, s, f, z)| format!("{y:04}-{mo:02}-{d:02}{t}{h:02}:{mi:02}:{s:02}{f}{z}"))
    }

    /// The shapes the fast path takes, every field in range.
    fn everyday_iso() -> impl Strategy<Value = (String, bool)> {
        let zone = prop_oneof![
            Just((String::new(), true)),
            Just(("Z".to_string(), false)),
            (prop::bool::ANY, 0u32..24, 0u32..60)
                .prop_map(|(neg, h, m)| { (format!("{}{h:02}:{m:02}", if neg { '-' } else { '+' }), false) }),
            (prop::bool::ANY, 0u32..24, 0u32..60)
                .prop_map(|(neg, h, m)| { (format!("{}{h:02}{m:02}", if neg { '-' } else { '+' }), true) }),
        ];
        let fraction = prop_oneof![Just(String::new()), "\\.[0-9]{1,9}"];
        (1600i64..2500, 1i64..13, 1i64..29, 0i64..24, 0i64..60, 0i64..60, fraction, zone).prop_map(
            |(y, mo, d, h, mi, s, f, (z, needs_zoneless))| {
                (format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{f}{z}"), needs_zoneless)
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn the_fast_path_takes_every_everyday_shape((text, needs_zoneless) in everyday_iso()) {
            for zoneless in [true, false] {
                let fast = fast(text.as_bytes(), zoneless);
                prop_assert_eq!(fast.is_some(), zoneless || !needs_zoneless, "{}", text);
                prop_assert_eq!(fast.or(chrono_millis(&text, zoneless)), chrono_millis(&text, zoneless), "{}", text);
            }
        }

        #[test]
        fn fast_path_agrees_with_chrono(text in near_iso(), zoneless in prop::bool::ANY) {
            if let Some(ms) = fast(text.as_bytes(), zoneless) {
                prop_assert_eq!(Some(ms), chrono_millis(&text, zoneless), "{}", text);
            }
            prop_assert_eq!(millis(&text, zoneless), chrono_millis(&text, zoneless), "{}", text);
        }
    }
}
