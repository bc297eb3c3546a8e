//! Durations as people write them on command lines and in environment variables, shared by the
//! `sigbox`, `sigbox-mcp` and `sigbox-bridge` programs: one rule for every duration of every
//! command (spec/cli.md, "Durations").

use std::time::Duration;

/// The units a duration may carry, as the refusals name them.
const UNITS: &str = "ms, s, m or h (such as 500ms, 30s, 5m, 1h)";

/// Parses a duration: a number and its unit, `ms`, `s`, `m` or `h` (`500ms`, `1.5s`, `2m`,
/// `1h`), or `0` alone. A bare number other than `0` is refused, its two readings shown
/// (`1500` could be 25 minutes or a second and a half). A duration longer than a
/// [`Duration`] holds (about 585 billion years) is [`Duration::MAX`]: as good as for ever,
/// and every wait takes it so.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(format!(
            "the duration is empty: write a number and its unit, {UNITS}"
        ));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = match num.parse() {
        Ok(n) if num.bytes().any(|b| b.is_ascii_digit()) => n,
        _ => {
            return Err(format!(
                "{t:?} is not a duration: write a number (0 or more) and its unit, {UNITS}"
            ));
        }
    };
    let secs = match unit.trim_start() {
        "" if n == 0.0 => 0.0,
        "" => {
            return Err(format!(
                "{t:?} has no unit: write {num}s for {num} seconds or {num}ms for {num} \
                 milliseconds (m and h are minutes and hours)"
            ));
        }
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        other => {
            return Err(format!(
                "{t:?}: unknown unit {other:?}; the unit is {UNITS}"
            ));
        }
    };
    Ok(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

/// The longest settle window accepted: a longer one would hold files written in place for
/// so long that they look lost.
pub const MAX_SETTLE: Duration = Duration::from_secs(3600);

/// A settle window: a duration as [`parse_duration`] reads it, at most [`MAX_SETTLE`].
pub fn parse_settle(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d > MAX_SETTLE {
        return Err(format!(
            "settle window {:?} is over the 1h maximum: files written in place would wait \
             that long",
            s.trim()
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_duration_has_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration(" 1.5s "), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0.0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0ms"), Ok(Duration::ZERO));
        // Too long to hold: for ever.
        assert_eq!(
            parse_duration("18446744073709551615000s"),
            Ok(Duration::MAX)
        );
        assert_eq!(
            parse_duration(&format!("{}h", "9".repeat(400))),
            Ok(Duration::MAX)
        );
        // A bare number: both readings shown.
        let e = parse_duration("1500").unwrap_err();
        assert!(e.contains("1500s") && e.contains("1500ms"), "{e}");
        let e = parse_duration("2").unwrap_err();
        assert!(e.contains("2s") && e.contains("2ms"), "{e}");
        for bad in [
            "",
            "  ",
            "x",
            "s",
            ".",
            "-1s",
            "5 parsecs",
            "1e3s",
            "inf",
            "NaNs",
            "5d",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("ms, s, m or h"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn settle_windows() {
        assert_eq!(parse_settle("0"), Ok(Duration::ZERO));
        assert_eq!(parse_settle("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_settle("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_settle("1h"), Ok(Duration::from_secs(3600)));
        for bad in [
            "2",
            "1.5",
            "61m",
            "2h",
            "99999999999999999999s",
            "-1s",
            "",
            "x",
        ] {
            assert!(parse_settle(bad).is_err(), "{bad}");
        }
    }
}
