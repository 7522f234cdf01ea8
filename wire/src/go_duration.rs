//! Go's `time.ParseDuration`, which the apiserver reads a request's `?timeout=` with: a
//! sequence of decimal numbers, each with an optional fraction and a unit (`ns`, `us`, `µs`,
//! `ms`, `s`, `m`, `h`), optionally signed: `30s`, `1m30s`, `1.5h`, `250ms`. A negative
//! duration is read as zero (the apiserver treats a timeout of zero or less as none given).

use std::time::Duration;

/// The duration `text` says, or `None` when Go would refuse it.
pub fn parse(text: &str) -> Option<Duration> {
    let (negative, mut rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total_ns: u128 = 0;
    while !rest.is_empty() {
        let digits = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        let (number, tail) = rest.split_at(digits);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let unit_len = tail
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(tail.len(), |(i, _)| i);
        let (unit, tail) = tail.split_at(unit_len);
        let per_unit: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().ok()?
        };
        let mut part = whole.checked_mul(per_unit)?;
        // The fraction's first digits, as far as they can still count at this unit.
        let mut scale = per_unit;
        for d in fraction.bytes().take(20) {
            scale /= 10;
            part += u128::from(d - b'0') * scale;
        }
        total_ns = total_ns.checked_add(part)?;
        rest = tail;
    }
    // Go refuses more than about 292 years; so does this.
    if total_ns > i64::MAX as u128 {
        return None;
    }
    Some(if negative {
        Duration::ZERO
    } else {
        Duration::from_nanos(total_ns as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_go_reads_is_read_alike() {
        let table = [
            ("30s", Some(Duration::from_secs(30))),
            ("1m30s", Some(Duration::from_secs(90))),
            ("1.5h", Some(Duration::from_secs(5400))),
            ("250ms", Some(Duration::from_millis(250))),
            ("1h0m0s", Some(Duration::from_secs(3600))),
            (".5s", Some(Duration::from_millis(500))),
            ("10µs", Some(Duration::from_micros(10))),
            ("0", Some(Duration::ZERO)),
            ("-5s", Some(Duration::ZERO)),
            ("", None),
            ("5", None),
            ("s", None),
            ("5x", None),
            ("1..5s", None),
            ("3000000h", None),
        ];
        for (text, want) in table {
            assert_eq!(parse(text), want, "{text:?}");
        }
    }
}
