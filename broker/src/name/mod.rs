//! File names: the canonical names sigbox writes, and every name form upstream Ralph writers use.
//!
//! A canonical name carries everything routing needs, so a checkpoint never opens a file it will
//! not deliver:
//!
//! ```text
//! signal.20261122T101500.123456Z.0193f0c2a4b07c3e9d2f5a6b7c8d9e0f.STEER.Executor.json
//!        └── instant (UTC, µs) ─┘ └──────── unique (UUIDv7) ──────┘ └type┘ └target┘
//! ```
//!
//! The target is an agent name, `ALL`, or `_` for "no target".

use std::ffi::OsStr;

use chrono::{DateTime, Local, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};

pub use crate::signal::valid_agent;
use crate::signal::{SignalType, Target};

pub(crate) mod own;

/// What a directory entry's name says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameKind<'a> {
    /// A write in progress (dot-file or `*.tmp`): never a signal, never touched.
    InProgress,
    /// A name sigbox wrote: routing comes from the name alone.
    Canonical(CanonicalName<'a>),
    /// A name of the canonical shape whose fields are invalid (say, month 13): never read as
    /// anything else; the mailbox quarantines it.
    BadCanonical,
    /// A `.json`, `.yaml` or `.yml` file under any other name; `instant` is set for the
    /// upstream Ralph forms (`signal.YYMMDD-HHmmss[...].yaml` and friends).
    Foreign {
        /// The instant the name encodes, in nanoseconds since the Unix epoch.
        instant: Option<i128>,
        /// The body's format.
        format: Format,
    },
    /// Any other name: not a signal file.
    Stray,
}

/// The body format of a signal file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// The parts of a canonical name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalName<'a> {
    /// Nanoseconds since the Unix epoch (microsecond precision).
    pub instant: i128,
    /// The unique part.
    pub unique: &'a str,
    /// The signal type as written in the name (upper case).
    pub type_name: &'a str,
    /// The target.
    pub target: &'a str,
}

impl CanonicalName<'_> {
    /// The target as a [`Target`].
    pub fn target(&self) -> Target {
        match self.target {
            "ALL" => Target::All,
            "_" => Target::None,
            other => Target::Agent(other.to_string()),
        }
    }

    /// The type, when it is one sigbox knows.
    pub fn signal_type(&self) -> Option<SignalType> {
        SignalType::parse(self.type_name)
    }
}

/// Classifies a directory entry by its name alone.
pub fn classify(name: &OsStr) -> NameKind<'_> {
    let Some(name) = name.to_str() else {
        // Not UTF-8: refused by the caller, which needs the raw name to move it aside.
        return NameKind::Stray;
    };
    if name.starts_with('.') || name.ends_with(".tmp") {
        return NameKind::InProgress;
    }
    if canonical_target(name).is_some() {
        return match parse_canonical(name) {
            Some(c) => NameKind::Canonical(c),
            None => NameKind::BadCanonical,
        };
    }
    let (stem, format) = if let Some(s) = name.strip_suffix(".json") {
        (s, Format::Json)
    } else if let Some(s) = name.strip_suffix(".yaml") {
        (s, Format::Yaml)
    } else if let Some(s) = name.strip_suffix(".yml") {
        (s, Format::Yaml)
    } else {
        return NameKind::Stray;
    };
    if stem.is_empty() {
        return NameKind::Stray;
    }
    NameKind::Foreign {
        instant: parse_ralph_instant(stem),
        format,
    }
}

/// The signal id of a file: its name without the extension.
pub fn signal_id(name: &str) -> &str {
    for ext in [".json", ".yaml", ".yml"] {
        if let Some(s) = name.strip_suffix(ext) {
            return s;
        }
    }
    name
}

/// The target field of a name of the canonical *shape* (`signal.` + 15 + `.` + 7 + `.` + 32
/// + `.TYPE.TARGET.json`, separators at fixed offsets), without validating the other fields.
///
/// A checkpoint uses this to skip other agents' signals at the cost of a few byte compares;
/// names of this shape are never read as foreign files, so skipping them is always right.
pub fn canonical_target(name: &str) -> Option<&str> {
    let b = name.as_bytes();
    if b.len() < 64 + 2 + 5
        || !b.starts_with(b"signal.")
        || !b.ends_with(b".json")
        || b[15] != b'T'
        || b[22] != b'.'
        || b[29] != b'Z'
        || b[30] != b'.'
        || b[63] != b'.'
    {
        return None;
    }
    let rest = &name[64..name.len() - 5];
    rest.split_once('.').map(|(_, target)| target)
}

/// Parses a canonical name; `None` when `name` is not one.
///
/// This runs for every entry of the drop zone at every checkpoint, so it is one pass over the
/// bytes with no allocation and no calendar library: the fixed-width fields sit at fixed
/// offsets.
pub fn parse_canonical(name: &str) -> Option<CanonicalName<'_>> {
    // signal.YYYYMMDDTHHMMSS.ffffffZ.<32 hex>.TYPE.TARGET.json
    // 0      7              22      30       63
    const HEAD: usize = 64;
    canonical_target(name)?;
    let b = name.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let mut n = 0u32;
        for &c in &b[r] {
            if !c.is_ascii_digit() {
                return None;
            }
            n = n * 10 + u32::from(c - b'0');
        }
        Some(n)
    };
    let (year, month, day) = (num(7..11)?, num(11..13)?, num(13..15)?);
    let (hour, min, sec) = (num(16..18)?, num(18..20)?, num(20..22)?);
    let micros = num(23..29)?;
    let unique = &name[31..63];
    if !unique.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let rest = &name[HEAD..name.len() - 5];
    let (type_name, target) = rest.split_once('.')?;
    if type_name.is_empty() || !type_name.bytes().all(|c| c.is_ascii_uppercase()) {
        return None;
    }
    if !(target == "ALL" || target == "_" || valid_agent(target)) {
        return None;
    }
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || min > 59
        || sec > 59
    {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    let secs = days * 86_400 + i64::from(hour * 3600 + min * 60 + sec);
    let instant = i128::from(secs) * 1_000_000_000 + i128::from(micros) * 1000;
    Some(CanonicalName {
        instant,
        unique,
        type_name,
        target,
    })
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Formats a canonical name.
pub fn canonical_name(at: DateTime<Utc>, unique: &str, type_name: &str, target: &Target) -> String {
    let target = match target {
        Target::All => "ALL",
        Target::None => "_",
        Target::Agent(a) => a.as_str(),
    };
    format!(
        "signal.{}.{}.{}.{}.json",
        at.format("%Y%m%dT%H%M%S.%6fZ"),
        unique,
        type_name,
        target
    )
}

/// The body format a file name implies (canonical and `.json` names are JSON).
pub fn format_of(file_name: &str) -> Format {
    if file_name.ends_with(".yaml") || file_name.ends_with(".yml") {
        Format::Yaml
    } else {
        Format::Json
    }
}

/// A run of ASCII digits as a number. Byte-based: callers slice by byte offsets, and a name
/// may hold multi-byte characters anywhere.
fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 18 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0i64, |n, d| n * 10 + i64::from(d - b'0')))
}

fn naive(year: i64, month: u32, day: u32, hhmmss: i64) -> Option<NaiveDateTime> {
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    let time = NaiveTime::from_hms_opt(
        (hhmmss / 10_000) as u32,
        (hhmmss / 100 % 100) as u32,
        (hhmmss % 100) as u32,
    )?;
    Some(date.and_time(time))
}

/// Parses the instant of an upstream Ralph name stem (the name without its extension):
///
/// `signal.YYMMDD-HHmmss` or `signal.YYYYMMDD-HHmmss`, then any of: `Z`, `+HHMM`, `+HH:MM`,
/// `-HH:MM` (a zone), `-NNN` (1 to 3 digits: milliseconds), `-xxxx` (any other letters and
/// digits: a uniqueness suffix, ignored). Without a zone the time is local. A 4-digit `-NNNN`
/// is a suffix, not a negative offset: upstream's `-<random4>` would otherwise be misread.
pub fn parse_ralph_instant(stem: &str) -> Option<i128> {
    let rest = stem.strip_prefix("signal.")?.as_bytes();
    let dash = rest.iter().position(|&b| b == b'-')?;
    let (date, rest) = (&rest[..dash], &rest[dash + 1..]);
    let year = match date.len() {
        6 => 2000 + digits(&date[..2])?,
        8 => digits(&date[..4])?,
        _ => return None,
    };
    let md = digits(&date[date.len() - 4..])?;
    if rest.len() < 6 {
        return None;
    }
    let time = digits(&rest[..6])?;
    let dt = naive(year, (md / 100) as u32, (md % 100) as u32, time)?;
    let mut tail = &rest[6..];
    let mut offset_secs: Option<i64> = None;
    let mut millis = 0i64;
    while let Some(&first) = tail.first() {
        if first == b'Z' {
            offset_secs = Some(0);
            tail = &tail[1..];
        } else if let Some((secs, t)) = zone(tail) {
            offset_secs = Some(secs);
            tail = t;
        } else if first == b'-' {
            let t = &tail[1..];
            let end = t
                .iter()
                .position(|c| !c.is_ascii_alphanumeric())
                .unwrap_or(t.len());
            let part = &t[..end];
            if part.is_empty() {
                return None;
            }
            if part.len() <= 3 && part.iter().all(u8::is_ascii_digit) {
                millis = digits(part)?;
            }
            tail = &t[end..];
        } else {
            return None;
        }
    }
    let nanos_of = |ts: i64| i128::from(ts) * 1_000_000_000 + i128::from(millis) * 1_000_000;
    match offset_secs {
        Some(off) => Some(nanos_of(dt.and_utc().timestamp() - off)),
        None => Local
            .from_local_datetime(&dt)
            .earliest()
            .map(|l| nanos_of(l.timestamp())),
    }
}

/// `+HHMM`, `+HH:MM` or `-HH:MM` at the start of `s`: (offset seconds east, rest).
fn zone(s: &[u8]) -> Option<(i64, &[u8])> {
    let sign = match s.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (hh, mm, len) = if s.len() >= 6 && s[3] == b':' {
        (digits(&s[1..3])?, digits(&s[4..6])?, 6)
    } else if sign == 1 && s.len() >= 5 {
        (digits(&s[1..3])?, digits(&s[3..5])?, 5)
    } else {
        return None;
    };
    if hh > 14 || mm > 59 {
        return None;
    }
    Some((sign * (hh * 3600 + mm * 60), &s[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_round_trip() {
        let at = DateTime::parse_from_rfc3339("2026-11-22T10:15:00.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let u = "0193f0c2a4b07c3e9d2f5a6b7c8d9e0f";
        let name = canonical_name(at, u, "STEER", &Target::Agent("Executor".into()));
        assert_eq!(
            name,
            "signal.20261122T101500.123456Z.0193f0c2a4b07c3e9d2f5a6b7c8d9e0f.STEER.Executor.json"
        );
        let c = parse_canonical(&name).unwrap();
        assert_eq!(c.instant, at.timestamp_nanos_opt().unwrap() as i128);
        assert_eq!(c.target(), Target::Agent("Executor".into()));
        assert_eq!(c.type_name, "STEER");
        assert_eq!(c.unique, u);
    }

    #[test]
    fn canonical_rejects_escaping_targets() {
        let u = "0193f0c2a4b07c3e9d2f5a6b7c8d9e0f";
        for t in ["..", "", "a/b", "1abc"] {
            let name = format!("signal.20261122T101500.123456Z.{u}.STEER.{t}.json");
            assert_eq!(parse_canonical(&name), None, "{name}");
        }
    }

    #[test]
    fn canonical_checks_the_calendar() {
        let u = "0193f0c2a4b07c3e9d2f5a6b7c8d9e0f";
        for ts in [
            "20260230T101500.000000Z",
            "20261322T101500.000000Z",
            "20261122T241500.000000Z",
        ] {
            let name = format!("signal.{ts}.{u}.STEER.Executor.json");
            assert_eq!(parse_canonical(&name), None, "{name}");
        }
        let leap = format!("signal.20240229T000000.000001Z.{u}.INFO._.json");
        let c = parse_canonical(&leap).unwrap();
        let want = DateTime::parse_from_rfc3339("2024-02-29T00:00:00.000001Z").unwrap();
        assert_eq!(c.instant, want.timestamp_nanos_opt().unwrap() as i128);
        assert_eq!(c.target(), Target::None);
    }

    #[test]
    fn ralph_forms() {
        let utc = |s: &str| {
            DateTime::parse_from_rfc3339(s)
                .unwrap()
                .timestamp_nanos_opt()
                .unwrap() as i128
        };
        assert_eq!(
            parse_ralph_instant("signal.260208-143000Z"),
            Some(utc("2026-02-08T14:30:00Z"))
        );
        assert_eq!(
            parse_ralph_instant("signal.20260208-143000Z"),
            Some(utc("2026-02-08T14:30:00Z"))
        );
        assert_eq!(
            parse_ralph_instant("signal.260208-143000+0700"),
            Some(utc("2026-02-08T07:30:00Z"))
        );
        assert_eq!(
            parse_ralph_instant("signal.260208-143000-05:00"),
            Some(utc("2026-02-08T19:30:00Z"))
        );
        assert_eq!(
            parse_ralph_instant("signal.260208-143000Z-123"),
            Some(utc("2026-02-08T14:30:00.123Z"))
        );
        assert_eq!(
            parse_ralph_instant("signal.260208-143000Z-a1b2"),
            Some(utc("2026-02-08T14:30:00Z"))
        );
        assert_eq!(
            parse_ralph_instant("signal.260208-143000-1234Z"),
            Some(utc("2026-02-08T14:30:00Z"))
        );
        assert!(parse_ralph_instant("signal.260208-143000").is_some());
        assert_eq!(parse_ralph_instant("signal.261308-143000Z"), None);
        assert_eq!(parse_ralph_instant("notes"), None);
        // Found by fuzzing: multi-byte characters where digits are expected.
        assert_eq!(
            parse_ralph_instant("signal.260208-143000+07.\u{f5}60208-0"),
            None
        );
        assert_eq!(parse_ralph_instant("signal.26\u{e9}208-143000Z"), None);
        assert_eq!(parse_ralph_instant("signal.260208-14\u{e9}000Z"), None);
    }

    #[test]
    fn in_progress_and_strays() {
        assert_eq!(classify(OsStr::new(".x.yaml")), NameKind::InProgress);
        assert_eq!(classify(OsStr::new("a.yaml.tmp")), NameKind::InProgress);
        assert_eq!(classify(OsStr::new("README.md")), NameKind::Stray);
        assert!(matches!(
            classify(OsStr::new("hello.yml")),
            NameKind::Foreign {
                instant: None,
                format: Format::Yaml
            }
        ));
    }
}
