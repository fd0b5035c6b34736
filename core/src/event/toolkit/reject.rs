//! What a message that cannot be read is rejected as, in every format:
//! too large, not UTF-8, or the [`RejectReason`] of serde_json's error.
//!
//! Part of the decoding toolkit (Kafka message → **decode** → assemble →
//! …). A reason is a label value and a public contract (docs/formats.md),
//! so it is told from the error's category and position, never from its
//! wording, and every decoder gets it from here.

use crate::event::{DecodeLimits, RejectReason};

/// The message as text, within the size limit.
pub(in crate::event) fn message_text<'a>(bytes: &'a [u8], limits: &DecodeLimits) -> Result<&'a str, RejectReason> {
    if bytes.len() > limits.max_message_bytes {
        return Err(RejectReason::TooLarge);
    }
    std::str::from_utf8(bytes).map_err(|_| RejectReason::InvalidUtf8)
}

/// The reason for a failed parse of `text`, from the error's category and
/// position, never its wording (which a serde_json release may change).
pub(in crate::event) fn classify(e: &serde_json::Error, text: &str) -> RejectReason {
    use serde_json::error::Category;
    match e.classify() {
        // serde_json reports a number beyond f64's range as a syntax error
        // of no category of its own, detected on the number itself.
        Category::Syntax if overflows_at(text, e.line(), e.column()) => RejectReason::NonFinite,
        Category::Syntax | Category::Eof | Category::Io => RejectReason::InvalidJson,
        Category::Data => RejectReason::WrongType,
    }
}

/// Whether serde_json stopped, at `line` and `column` (1-based, the last
/// byte it read), inside a well-formed JSON number whose value is beyond
/// f64's range: past the number's first byte, so not merely looking at it
/// (trailing characters that happen to be such a number are not one).
fn overflows_at(text: &str, line: usize, column: usize) -> bool {
    let bytes = text.as_bytes();
    let line_start = match line {
        0 => return false,
        1 => 0,
        n => match memchr::memchr_iter(b'\n', bytes).nth(n - 2) {
            Some(newline) => newline + 1,
            None => return false,
        },
    };
    let Some(at) = line_start.checked_add(column).and_then(|end| end.checked_sub(1)) else { return false };
    let in_number = |b: &u8| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E');
    if !bytes.get(at).is_some_and(in_number) {
        return false;
    }
    let start = at - bytes[..at].iter().rev().take_while(|b| in_number(b)).count();
    let len = json_number_len(&bytes[start..]);
    (start < at && at < start + len)
        && text.get(start..start + len).and_then(|n| n.parse::<f64>().ok()).is_some_and(f64::is_infinite)
}

/// Length of the JSON number (RFC 8259) at the start of `bytes`, 0 if none.
fn json_number_len(bytes: &[u8]) -> usize {
    let digits =
        |from: usize| bytes.get(from..).map_or(0, |rest| rest.iter().take_while(|b| b.is_ascii_digit()).count());
    let mut end = usize::from(bytes.first() == Some(&b'-'));
    match bytes.get(end) {
        Some(b'0') => end += 1,
        Some(b'1'..=b'9') => end += digits(end),
        _ => return 0,
    }
    if bytes.get(end) == Some(&b'.') && digits(end + 1) > 0 {
        end += 1 + digits(end + 1);
    }
    if matches!(bytes.get(end), Some(b'e' | b'E')) {
        let exponent = end + 1 + usize::from(matches!(bytes.get(end + 1), Some(b'+' | b'-')));
        if digits(exponent) > 0 {
            end = exponent + digits(exponent);
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::decode;

    /// The reason the native decoder gives `json`.
    fn reason(json: &str) -> RejectReason {
        decode(json.as_bytes(), &DecodeLimits::default()).unwrap_err()
    }

    /// `non_finite`: serde_json's syntax error on a number too large for
    /// an f64, told by the number at the error's position, wherever the
    /// number is (any field, any line) and however it is too large.
    #[test]
    fn non_finite_is_the_overflowing_number_at_the_error() {
        let imp = |score: &str| {
            format!(
                "{{\"type\":\"impression\",\"event_id\":\"e\",\"session_id\":\"s\",\"timestamp\":1,\n\
                 \"results\":[{{\"doc_id\":\"a\",\n  \"score\": {score} }}]}}"
            )
        };
        let huge = format!("1{}", "0".repeat(400));
        for number in ["1e999", "-1e999", "1.5E+400", "17976931348623159e292", &huge, "1e99999999999999999999"] {
            assert_eq!(reason(&imp(number)), RejectReason::NonFinite, "{number}");
        }
        assert!(
            decode(imp("1.7976931348623157e308").as_bytes(), &DecodeLimits::default()).is_ok(),
            "f64::MAX is a number"
        );
        let j = |field: &str| {
            format!(r#"{{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","timestamp":1,{field}}}"#)
        };
        assert_eq!(reason(&j(r#""grade":1e400"#)), RejectReason::NonFinite);
        let timestamp =
            r#"{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","grade":1,"timestamp":-2e308}"#;
        assert_eq!(reason(timestamp), RejectReason::NonFinite);
        assert_eq!(reason("1e999"), RejectReason::NonFinite, "a lone number");
        // Text is text, and an unknown field is skipped without converting its number.
        assert!(decode(j(r#""grade":1,"query_id":"1e999""#).as_bytes(), &DecodeLimits::default()).is_ok());
        assert!(decode(j(r#""grade":1,"extra":9e999"#).as_bytes(), &DecodeLimits::default()).is_ok());
    }

    /// `invalid_json`: every other syntax error, and a document cut short,
    /// a number right beside the error included.
    #[test]
    fn invalid_json_is_any_other_syntax_or_eof_error() {
        let j =
            |rest: &str| format!(r#"{{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","grade":1{rest}"#);
        for rest in [
            r#","timestamp":1 2}"#,
            r#","timestamp":01}"#,
            r#","timestamp":1e}"#,
            r#","timestamp":-}"#,
            r#","timestamp":1.}"#,
            r#","timestamp":1,}"#,
            r#","timestamp":1} 1e999"#,
            r#","timestamp":1,"extra":1e999x}"#,
            r#","timestamp":1,"extra":1e999e}"#,
            r#","timestamp":1,"query_id":"\ud800"}"#,
            r#","timestamp":1,"query_id":"1e9\ud999"}"#,
            ",\"timestamp\":1\n\n\n1e999}",
            r#","timestamp":"#,
            "",
        ] {
            assert_eq!(reason(&j(rest)), RejectReason::InvalidJson, "{rest}");
        }
        assert_eq!(reason(""), RejectReason::InvalidJson);
    }

    /// `wrong_type`: serde_json's data errors, a well-formed value of the
    /// wrong kind, whatever number it holds.
    #[test]
    fn wrong_type_is_a_data_error() {
        let j = |field: &str| {
            format!(r#"{{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","timestamp":1,{field}}}"#)
        };
        for field in [
            r#""grade":"2""#,
            r#""grade":2.5"#,
            r#""grade":[1e999]"#,
            r#""grade":{"x":1}"#,
            r#""grade":1,"query_id":7"#,
        ] {
            assert_eq!(reason(&j(field)), RejectReason::WrongType, "{field}");
        }
        let imp = r#"{"type":"impression","event_id":"e","session_id":"s","timestamp":1,"results":[{"doc_id":"a","position":99999999999999999999}]}"#;
        assert_eq!(reason(imp), RejectReason::WrongType, "beyond i64 but within f64");
        assert_eq!(reason("[1e308]"), RejectReason::WrongType, "a finite number where an event belongs");
    }

    #[test]
    fn json_numbers_are_measured_by_the_grammar() {
        for (text, len) in [
            ("1e999}", 5),
            ("-0.5E+3,", 7),
            ("01", 1),
            ("1.", 1),
            ("1e", 1),
            ("1e+", 1),
            ("-", 0),
            ("+1", 0),
            ("e5", 0),
            ("", 0),
        ] {
            assert_eq!(json_number_len(text.as_bytes()), len, "{text}");
        }
    }
}
