//! Dates, times and durations for the rules: civil dates of timestamps (UTC), RFC 3339
//! parsing, and the `duration` and `timestamp` namespaces' arithmetic. Durations are whole
//! nanoseconds; timestamps keep Hearth's microsecond precision.

use hearth_core::value::Timestamp;

/// Nanoseconds in a second.
pub const NANOS_PER_SECOND: i128 = 1_000_000_000;
/// Seconds in a day.
const DAY: i64 = 86_400;

/// The civil date (year, month 1–12, day 1–31) of `days` since 1970-01-01 (Howard
/// Hinnant's algorithm).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Days since 1970-01-01 of a civil date; `None` for a month or day out of range.
pub fn days_from_civil(year: i64, month: i64, day: i64) -> Option<i64> {
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

fn leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The day of the year, 1–366, of `days` since the epoch.
pub fn day_of_year(days: i64) -> i64 {
    let (year, _, _) = civil_from_days(days);
    days - days_from_civil(year, 1, 1).unwrap_or(days) + 1
}

/// Parses RFC 3339 (`2026-11-26T12:00:00Z`, a fraction, an offset `+01:00`; `t` and `z`
/// in either case; a space for `T`).
pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    let digits = |from: usize, n: usize| -> Option<i64> {
        let part = b.get(from..from + n)?;
        part.iter().all(u8::is_ascii_digit).then_some(())?;
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let (year, month, day) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
    {
        return None;
    }
    let (hour, minute, second) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut at = 19;
    let mut nanos = 0i64;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            if at - start < 9 {
                nanos = nanos * 10 + i64::from(b[at] - b'0');
            }
            at += 1;
        }
        if at == start {
            return None;
        }
        for _ in (at - start).min(9)..9 {
            nanos *= 10;
        }
    }
    let offset = match b.get(at)? {
        b'Z' | b'z' if at + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if at + 6 == b.len() && b[at + 3] == b':' => {
            let (h, m) = (digits(at + 1, 2)?, digits(at + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 3600 + m * 60;
            if *sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day)?;
    let seconds = days * DAY + hour * 3600 + minute * 60 + second.min(59) - offset;
    Timestamp::new(seconds, nanos).ok()
}

/// Nanoseconds since the epoch of a timestamp.
pub fn nanos_of(t: Timestamp) -> i128 {
    i128::from(t.seconds()) * NANOS_PER_SECOND + i128::from(t.nanos())
}

/// The timestamp `nanos` after the epoch (truncated to microseconds), if in range.
pub fn timestamp_of(nanos: i128) -> Result<Timestamp, String> {
    let seconds =
        i64::try_from(nanos.div_euclid(NANOS_PER_SECOND)).map_err(|_| "timestamp out of range")?;
    let rest = nanos.rem_euclid(NANOS_PER_SECOND) as i64;
    Timestamp::new(seconds, rest).map_err(|_| "timestamp out of range".to_owned())
}

/// `t` moved by `d` nanoseconds (`None`: an overflowed duration).
pub fn shift(t: Timestamp, d: Option<i128>) -> Result<Timestamp, String> {
    d.and_then(|d| nanos_of(t).checked_add(d))
        .ok_or_else(|| "timestamp out of range".to_owned())
        .and_then(timestamp_of)
}

/// `duration.value(magnitude, unit)`: units `w d h m s ms us ns`.
pub fn duration_value(magnitude: i64, unit: &str) -> Result<i128, String> {
    let per: i128 = match unit {
        "w" => 7 * 86_400 * NANOS_PER_SECOND,
        "d" => 86_400 * NANOS_PER_SECOND,
        "h" => 3_600 * NANOS_PER_SECOND,
        "m" => 60 * NANOS_PER_SECOND,
        "s" => NANOS_PER_SECOND,
        "ms" => 1_000_000,
        "us" => 1_000,
        "ns" => 1,
        u => return Err(format!("unknown duration unit `{u}` (w d h m s ms us ns)")),
    };
    Ok(i128::from(magnitude) * per)
}

/// The start of the UTC day of `t`, and the time since it, in nanoseconds.
pub fn split_day(t: Timestamp) -> (Timestamp, i128) {
    let days = t.seconds().div_euclid(DAY);
    let midnight = Timestamp::new(days * DAY, 0).unwrap_or(t);
    (midnight, nanos_of(t) - nanos_of(midnight))
}

/// Whole days since the epoch of `t`.
pub fn days_of(t: Timestamp) -> i64 {
    t.seconds().div_euclid(DAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_round_trip_over_the_whole_range() {
        let first = days_from_civil(1, 1, 1).unwrap();
        let last = days_from_civil(9999, 12, 31).unwrap();
        let mut days = first;
        while days <= last {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), Some(days), "{y}-{m}-{d}");
            days += 97;
        }
        assert_eq!(days_from_civil(2024, 2, 30), None);
        assert_eq!(days_from_civil(2023, 2, 29), None);
        assert_eq!(day_of_year(days_from_civil(2024, 12, 31).unwrap()), 366);
        assert_eq!(day_of_year(days_from_civil(2025, 3, 1).unwrap()), 60);
    }

    #[test]
    fn rfc3339_parses_what_it_should_only() {
        let t = |s| parse_rfc3339(s).map(|t| (t.seconds(), t.nanos()));
        assert_eq!(t("1970-01-01T00:00:00Z"), Some((0, 0)));
        assert_eq!(t("1970-01-02T00:00:00.25Z"), Some((86_400, 250_000_000)));
        assert_eq!(t("1970-01-01T01:00:00+01:00"), Some((0, 0)));
        assert_eq!(t("1969-12-31t23:00:00-01:00"), Some((0, 0)));
        assert_eq!(t("2026-11-26 12:00:00z"), Some((1_795_694_400, 0)));
        for bad in [
            "",
            "2026-11-26",
            "2026-13-01T00:00:00Z",
            "2026-11-26T24:00:00Z",
            "2026-11-26T00:00:00",
            "2026-11-26T00:00:00.Z",
            "2026-11-26T00:00:00+1:00",
            "２026-11-26T00:00:00Z",
            "2026-11-26T00:00:00Zjunk",
            "10000-01-01T00:00:00Z",
        ] {
            assert_eq!(t(bad), None, "{bad}");
        }
    }
}
