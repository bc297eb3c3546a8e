//! Durations as people write them on command lines and in environment variables, shared by the
//! `sigbox` and `sigbox-mcp` programs.

use std::time::Duration;

/// Parses `500ms`, `5s`, `2m`, `1h`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected a number then ms, s, m or h"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: unit must be ms, s, m or h"
            ));
        }
    };
    // Longer than a Duration holds (about 585 billion years): as good as for ever.
    Ok(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

/// The longest settle window accepted: a longer one would hold files written in place for
/// so long that they look lost.
pub const MAX_SETTLE: Duration = Duration::from_secs(3600);

/// A settle window: `0`, or a number with its unit (a bare `2` could be seconds or
/// milliseconds, so it is refused), at most [`MAX_SETTLE`].
pub fn parse_settle(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.chars().all(|c| c.is_ascii_digit() || c == '.') && t.parse::<f64>().is_ok_and(|n| n != 0.0)
    {
        return Err(format!(
            "settle window {t:?} has no unit: write {t}s or {t}ms (0 needs none)"
        ));
    }
    let d = parse_duration(t)?;
    if d > MAX_SETTLE {
        return Err(format!(
            "settle window {t:?} is over the 1h maximum: files written in place would wait that long"
        ));
    }
    Ok(d)
}
