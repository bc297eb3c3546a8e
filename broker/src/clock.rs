//! Protocol instants: the clocks every dialect stamps its files with, the settle rule, and the
//! default size cap. Pure: no filesystem access.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{SecondsFormat, Utc};

use crate::sys::Stamp;

/// Files larger than this are refused unread, in every dialect, unless configured otherwise.
pub(crate) const DEFAULT_MAX_FILE_SIZE: u64 = 1024 * 1024;

/// Microseconds since the epoch, strictly increasing within this process, so that one
/// producer's signals keep their order even within one microsecond.
pub(crate) fn next_micros() -> i64 {
    static LAST: AtomicI64 = AtomicI64::new(0);
    let now = Utc::now().timestamp_micros();
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// The precision of a written instant. Each dialect keeps the one its upstream writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Precision {
    /// Whole seconds (Goblin and mux files).
    Secs,
    /// Milliseconds (Goblin `watch` events).
    Millis,
    /// Microseconds (mailbox records).
    Micros,
}

/// Now, as RFC 3339 in UTC (`Z`), at `precision`.
pub(crate) fn now_rfc3339(precision: Precision) -> String {
    let p = match precision {
        Precision::Secs => SecondsFormat::Secs,
        Precision::Millis => SecondsFormat::Millis,
        Precision::Micros => SecondsFormat::Micros,
    };
    Utc::now().to_rfc3339_opts(p, true)
}

/// Nanoseconds since the Unix epoch (negative before it).
pub(crate) fn ns_of(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    }
}

/// The instant `ns` nanoseconds after the Unix epoch (before it when negative).
/// Saturating: an instant past what `u64` nanoseconds hold (the year 2554, reached by a settle
/// window of centuries) is that far instant, never one wrapped around into the past.
pub(crate) fn time_of(ns: i128) -> SystemTime {
    let far = |n: i128| Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX));
    if ns >= 0 {
        UNIX_EPOCH + far(ns)
    } else {
        UNIX_EPOCH - far(-ns)
    }
}

/// The settle rule for a signal file in a drop zone (spec/mailbox.md §5): a file that arrived
/// by rename or link after its last write (its ctime later than its mtime: a rename, a link,
/// a `chmod` or `utimensat` change the ctime alone) is complete and may be read at once; any
/// other is [`settling`]. Equal timestamps (one clock tick, or a filesystem with coarse
/// timestamps) count as written in place. Only a regular file can be half written: a
/// symlink, FIFO, socket, device or directory is what it is at once (and refused at once).
pub(crate) fn settling_file(
    stamp: &Stamp,
    window: Duration,
    now: SystemTime,
) -> Option<SystemTime> {
    if stamp.ctime_ns > stamp.mtime_ns || stamp.kind != crate::sys::EntryKind::File {
        return None;
    }
    settling(stamp, window, now)
}

/// The least time a regular file with more than one link is given to lose its other name
/// before the hard-link rule refuses it (spec/mailbox.md §3.3): a maildir-style delivery
/// (`ln tmp/x inputs/x; rm tmp/x`) or another consumer's claim by link between its link and
/// its unlink holds two links for a moment.
pub(crate) const LINK_GRACE: Duration = Duration::from_secs(2);

/// The hard-link rule's wait (spec/mailbox.md §3.3): a regular file with more than one link
/// whose links or content changed (its ctime or mtime) less than the settle window, and at
/// least [`LINK_GRACE`], before `now` may still be losing its other name: `Some(eligible_at)`
/// until then. `None` for a file with one link, or whose second link has stayed that long.
pub(crate) fn links_settling(
    stamp: &Stamp,
    window: Duration,
    now: SystemTime,
) -> Option<SystemTime> {
    if stamp.nlink < 2 || stamp.kind != crate::sys::EntryKind::File {
        return None;
    }
    settling(stamp, window.max(LINK_GRACE), now)
}

/// How much older than the listing the directory's last change must be for the listing to be
/// kept. Directory timestamps come from a coarse clock (a scheduler tick: 1 to 10 ms), so a
/// change made after the listing, within the same tick as an earlier change, could leave the
/// timestamp as it was. With this margin, any later change gets a later timestamp (git's
/// "racy index" rule).
const RACY_MARGIN_NS: i128 = 50_000_000;
/// The margin where timestamps look like whole seconds (filesystems with coarse timestamps).
const RACY_MARGIN_COARSE_NS: i128 = 2_000_000_000;

/// True when a directory whose `lstat` gave `st` (taken before its listing) last changed
/// long enough before the listing started at `listed_at` (ns since the epoch) that any later
/// change gets a later timestamp: an identical stamp then proves the listing current.
pub(crate) fn settled_before(st: &Stamp, listed_at: i128) -> bool {
    let whole_seconds = st.mtime_ns % 1_000_000_000 == 0 && st.ctime_ns % 1_000_000_000 == 0;
    let margin = if whole_seconds {
        RACY_MARGIN_COARSE_NS
    } else {
        RACY_MARGIN_NS
    };
    listed_at - st.changed_ns() > margin
}

/// The settle rule (spec/mailbox.md §5, spec/goblin.md): an entry last changed (the later of
/// mtime and ctime) less than `window` before `now` may still be being written.
/// `Some(eligible_at)` while it is inside the window, `None` once it has settled.
pub(crate) fn settling(stamp: &Stamp, window: Duration, now: SystemTime) -> Option<SystemTime> {
    let eligible = stamp.changed_ns() + window.as_nanos() as i128;
    (ns_of(now) < eligible).then(|| time_of(eligible))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(mtime_ns: i128, ctime_ns: i128) -> Stamp {
        Stamp {
            dev: 0,
            ino: 0,
            size: 0,
            nlink: 1,
            mtime_ns,
            ctime_ns,
            birth_ns: None,
            kind: crate::sys::EntryKind::File,
        }
    }

    #[test]
    fn micros_strictly_increase() {
        let a = next_micros();
        let b = next_micros();
        assert!(b > a);
    }

    #[test]
    fn instants_round_trip_on_both_sides_of_the_epoch() {
        for ns in [-1_500_000_000_i128, 0, 1, 1_700_000_000_123_456_789] {
            assert_eq!(ns_of(time_of(ns)), ns);
        }
    }

    #[test]
    fn an_entry_settles_a_window_after_its_last_change() {
        let w = Duration::from_secs(2);
        let at = |s: i128| time_of(s * 1_000_000_000);
        // The later of mtime and ctime counts.
        let st = stamp(10_000_000_000, 11_000_000_000);
        assert_eq!(settling(&st, w, at(12)), Some(at(13)));
        assert_eq!(settling(&st, w, at(13)), None);
        assert_eq!(settling(&st, Duration::ZERO, at(11)), None);
    }

    #[test]
    fn a_second_link_is_given_at_least_the_grace_to_go() {
        let at = |ms: i128| time_of(ms * 1_000_000);
        let mut st = stamp(10_000_000_000, 10_500_000_000);
        // One link: nothing to wait for.
        assert_eq!(links_settling(&st, Duration::ZERO, at(10_600)), None);
        st.nlink = 2;
        // Measured from the last change (the link's ctime), never less than the grace.
        assert_eq!(
            links_settling(&st, Duration::ZERO, at(10_600)),
            Some(at(12_500))
        );
        assert_eq!(links_settling(&st, Duration::ZERO, at(12_500)), None);
        // A longer settle window counts instead.
        let w = Duration::from_secs(5);
        assert_eq!(links_settling(&st, w, at(12_600)), Some(at(15_500)));
        // A directory is never waited for.
        st.kind = crate::sys::EntryKind::Dir;
        assert_eq!(links_settling(&st, Duration::ZERO, at(10_600)), None);
    }

    #[test]
    fn precisions_are_what_they_say() {
        assert!(now_rfc3339(Precision::Secs).ends_with('Z'));
        assert_eq!(now_rfc3339(Precision::Secs).len(), 20);
        assert_eq!(now_rfc3339(Precision::Micros).len(), 27);
    }
}
