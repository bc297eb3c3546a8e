//! Listing and classifying a directory of pending signals (spec/mailbox.md §2, §4, §5): FIFO
//! order, the settle window for dropped files, the parse cache for them, and the reuse of a
//! listing that a directory's stamp proves current (§5.1).

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::Mailbox;
use super::route::{Item, Source};
use crate::body::{self, Body};
use crate::clock::{self, ns_of};
use crate::error::Result;
use crate::io::ReadOutcome;
use crate::name::{self, Format, NameKind};
use crate::signal::SignalType;
use crate::sys::{EntryKind, Stamp};

/// A file the next pass quarantines, and why.
#[derive(Clone, Debug)]
pub(super) struct Reject {
    pub(super) name: OsString,
    pub(super) source: Source,
    pub(super) reason: String,
}

/// A dropped file still inside the settle window.
#[derive(Clone, Debug)]
pub(super) struct Settling {
    pub(super) name: OsString,
    /// It waits for a second link to go (spec §3.3), not for a writer to finish.
    pub(super) links: bool,
    /// When it becomes eligible if it does not change again.
    pub(super) until: SystemTime,
}

/// What a scan found: routable items in FIFO order, and the rest.
#[derive(Clone, Debug, Default)]
pub(super) struct Scan {
    pub(super) items: Vec<Item>,
    pub(super) rejects: Vec<Reject>,
    pub(super) settling: Vec<Settling>,
    /// The earliest time a settling file becomes eligible: check again then.
    pub(super) next_check: Option<SystemTime>,
    /// A dropped (non-canonical) file was seen: its content can change in place without the
    /// directory changing, so this listing is never reused.
    pub(super) foreign: bool,
}

impl Scan {
    /// Says to look again at `at` at the latest.
    pub(super) fn note_check(&mut self, at: SystemTime) {
        self.next_check = Some(self.next_check.map_or(at, |t| t.min(at)));
    }

    fn note_settling(&mut self, name: OsString, until: SystemTime) {
        self.next_check = Some(self.next_check.map_or(until, |t| t.min(until)));
        self.settling.push(Settling {
            name,
            links: false,
            until,
        });
    }

    fn reject(&mut self, name: OsString, source: Source, reason: String) {
        self.rejects.push(Reject {
            name,
            source,
            reason,
        });
    }
}

/// A dropped file as parsed: its body and the instant the body gives.
#[derive(Clone, Debug)]
pub(super) struct Peek {
    body_instant: Option<i128>,
    body: Body,
}

/// A dropped file's parse result: the file, or the reason it is invalid.
type Peeked = std::result::Result<Peek, String>;

/// A listing kept because the directory's stamp proves it current.
#[derive(Clone, Debug)]
struct Listing {
    stamp: Stamp,
    scan: Scan,
}

/// What a handle remembers between scans.
#[derive(Default)]
pub(super) struct ScanCache {
    /// Parsed foreign files, valid while the file's stamp is unchanged.
    peeks: HashMap<OsString, (Stamp, Peeked)>,
    /// Listings proven current, per agent and directory.
    listings: HashMap<String, HashMap<PathBuf, Listing>>,
}

/// The directory being scanned, and the instant the settle window is measured against.
struct ScanAt<'a> {
    dir: &'a Path,
    source: Source,
    now: SystemTime,
}

impl Mailbox {
    /// Lists `dir` and classifies each entry. `relevant` filters canonical names before any
    /// further work, so that a checkpoint skips foreign targets by name alone.
    pub(super) fn scan(
        &self,
        dir: &Path,
        source: Source,
        relevant: &dyn Fn(&str) -> bool,
        now: SystemTime,
    ) -> Result<Scan> {
        let entries = self.io.list(dir, source == Source::Buffer)?;
        let at = ScanAt { dir, source, now };
        let mut scan = Scan::default();
        let mut cache = self.scans.lock().unwrap_or_else(|e| e.into_inner());
        for entry in entries {
            if entry.kind == EntryKind::File {
                // The fast path: another agent's signal is skipped on its name's shape alone.
                if let Some(target) = entry.name.to_str().and_then(name::canonical_target)
                    && !relevant(target)
                {
                    continue;
                }
            }
            let kind = match entry.kind {
                EntryKind::File => name::classify(&entry.name),
                _ => NameKind::Stray,
            };
            let canon = match kind {
                NameKind::InProgress => continue,
                NameKind::Canonical(c) => c,
                NameKind::BadCanonical => {
                    let reason = "name has the canonical shape but invalid fields (time, unique \
                                  part, type or target)";
                    scan.reject(entry.name, source, reason.into());
                    continue;
                }
                NameKind::Foreign { instant, format } if entry.kind == EntryKind::File => {
                    scan.foreign = true;
                    self.scan_foreign(&at, entry.name, instant, format, &mut cache, &mut scan)?;
                    continue;
                }
                _ => {
                    self.scan_odd(&at, entry.name, entry.kind, &mut scan)?;
                    continue;
                }
            };
            let item = Item {
                seen: None,
                instant: canon.instant,
                type_name: canon.type_name.to_string(),
                signal_type: canon.signal_type(),
                target: canon.target(),
                source,
                name: OsString::new(),
            };
            scan.items.push(Item {
                name: entry.name,
                ..item
            });
        }
        if scan.foreign && cache.peeks.len() > 4 * scan.items.len() + 1024 {
            let keep: HashSet<&OsString> = scan.items.iter().map(|i| &i.name).collect();
            cache.peeks.retain(|k, _| keep.contains(k));
        }
        drop(cache);
        scan.items
            .sort_by(|a, b| (a.instant, &a.name).cmp(&(b.instant, &b.name)));
        Ok(scan)
    }

    /// [`Mailbox::scan`] for one agent's pass, reusing the previous listing when the directory
    /// provably has not changed since: same `lstat` stamp (device, inode, size, mtime, ctime),
    /// taken before that listing, with the directory's last change older than the listing by
    /// the racy margin, and nothing in it that needed a second look (no dropped files, nothing
    /// settling or rejected). A repeated poll of an idle inbox is then one `lstat`.
    pub(super) fn scan_cached(
        &self,
        dir: &Path,
        source: Source,
        agent: &str,
        relevant: &dyn Fn(&str) -> bool,
        now: SystemTime,
    ) -> Result<Scan> {
        // Most agents never had a buffer: an `lstat` says so at half the cost of a failed open.
        let before = if self.opts.reuse_listings || source == Source::Buffer {
            let st = self.io.stamp(dir)?;
            if st.is_none() && source == Source::Buffer {
                return Ok(Scan::default()); // no buffer for this agent: nothing to list
            }
            st
        } else {
            None
        };
        if !self.opts.reuse_listings {
            return self.scan(dir, source, relevant, now);
        }
        if let Some(st) = before {
            let cache = self.scans.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(l) = cache.listings.get(agent).and_then(|m| m.get(dir))
                && l.stamp == st
            {
                return Ok(l.scan.clone());
            }
        }
        let listed_at = ns_of(self.fs_now());
        let scan = self.scan(dir, source, relevant, now)?;
        if let Some(st) = before {
            let provable = !scan.foreign
                && scan.rejects.is_empty()
                && scan.settling.is_empty()
                && scan.next_check.is_none()
                && clock::settled_before(&st, listed_at);
            let mut cache = self.scans.lock().unwrap_or_else(|e| e.into_inner());
            if provable {
                cache.listings.entry(agent.to_string()).or_default().insert(
                    dir.to_path_buf(),
                    Listing {
                        stamp: st,
                        scan: scan.clone(),
                    },
                );
            } else if let Some(m) = cache.listings.get_mut(agent) {
                m.remove(dir);
            }
        }
        Ok(scan)
    }

    /// Symlinks, directories, special files, strays and non-UTF-8 names: refused, a regular
    /// file once settled (it may be a write in progress under a name of its own), anything
    /// else at once (it is what it is; nothing is half written).
    fn scan_odd(
        &self,
        at: &ScanAt<'_>,
        name: OsString,
        kind: EntryKind,
        scan: &mut Scan,
    ) -> Result<()> {
        let Some(stamp) = self.io.stamp(&at.dir.join(&name))? else {
            return Ok(());
        };
        if stamp.kind == EntryKind::File
            && let Some(until) = clock::settling(&stamp, self.opts.settle, at.now)
        {
            scan.note_settling(name, until);
            return Ok(());
        }
        let reason = match kind {
            EntryKind::Symlink => "a symlink: links in the drop zone are never followed".into(),
            EntryKind::Dir => "a directory, not a signal file".into(),
            EntryKind::Special => {
                "a FIFO, socket or device, not a signal file (never opened)".into()
            }
            EntryKind::File if name.to_str().is_none() => format!(
                "file name is not UTF-8 ({:?})",
                crate::sys::name_bytes(&name)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
            EntryKind::File => {
                "not a signal file: the name must end in .json, .yaml or .yml".into()
            }
        };
        scan.reject(name, at.source, reason);
        Ok(())
    }

    /// A dropped `.json`, `.yaml` or `.yml` file: routable once settled and parsed (the parse
    /// is cached while the file's stamp is unchanged), else refused with the parser's reason.
    fn scan_foreign(
        &self,
        at: &ScanAt<'_>,
        name: OsString,
        name_instant: Option<i128>,
        format: Format,
        cache: &mut ScanCache,
        scan: &mut Scan,
    ) -> Result<()> {
        let path = at.dir.join(&name);
        let Some(stamp) = self.io.stamp(&path)? else {
            return Ok(());
        };
        // A second link that is not sigbox's own (a crash's leftover, a claim by link under
        // way: the read below resolves those, §9.6) may be on its way out, as in a
        // maildir-style delivery: not read, not refused, until it has had the time to go
        // (§3.3).
        if let Some(until) = clock::links_settling(&stamp, self.opts.settle, at.now)
            && self.own_link(at.dir, &name)?.is_none()
        {
            scan.note_settling(name, until);
            if let Some(s) = scan.settling.last_mut() {
                s.links = true;
            }
            return Ok(());
        }
        if !self.came_whole(&path, &stamp)
            && let Some(until) = clock::settling_file(&stamp, self.opts.settle, at.now)
        {
            scan.note_settling(name, until);
            return Ok(());
        }
        let parsed = match cache.peeks.get(&name) {
            Some((s, parsed)) if *s == stamp => parsed.clone(),
            _ => {
                let parsed = self.peek_foreign(&path, &name, format)?;
                let Some(parsed) = parsed else { return Ok(()) };
                cache.peeks.insert(name.clone(), (stamp, parsed.clone()));
                parsed
            }
        };
        match parsed {
            Err(reason) => scan.reject(name, at.source, reason),
            Ok(Peek { body_instant, body }) => match body.target {
                Err(reason) => scan.reject(name, at.source, reason),
                Ok(target) => scan.items.push(Item {
                    seen: Some((stamp.ino, stamp.mtime_ns)),
                    instant: name_instant
                        .or(body_instant)
                        .unwrap_or(stamp.mtime_clamped_ns()),
                    signal_type: SignalType::parse(&body.type_name),
                    type_name: body.type_name,
                    target,
                    source: at.source,
                    name,
                }),
            },
        }
        Ok(())
    }

    /// Tells the handle that the file at `path` (in `inputs/` or a buffer) was just renamed
    /// in, as a watcher saw it (inotify's `IN_MOVED_TO`): it arrived whole, and is read at
    /// once instead of after the settle window (spec §5), as long as it keeps the inode and
    /// the mtime the next pass finds. A file written in place after its rename settles again.
    pub fn arrived_whole(&self, path: &Path) {
        let mut a = self.arrivals.lock().unwrap_or_else(|e| e.into_inner());
        if a.len() >= 4096 {
            a.clear(); // bounded: the rest settle as usual
        }
        a.insert(path.to_path_buf(), None);
    }

    /// True when a watcher saw `path` renamed in and it is the file it was then.
    fn came_whole(&self, path: &Path, stamp: &Stamp) -> bool {
        let mut a = self.arrivals.lock().unwrap_or_else(|e| e.into_inner());
        let Some(seen) = a.get_mut(path) else {
            return false;
        };
        let now = (stamp.ino, stamp.mtime_ns);
        match seen {
            None => {
                *seen = Some(now);
                true
            }
            Some(first) if *first == now => true,
            Some(_) => {
                a.remove(path);
                false
            }
        }
    }

    /// Reads and parses a dropped file. `Ok(None)` when it vanished.
    fn peek_foreign(&self, path: &Path, name: &OsStr, format: Format) -> Result<Option<Peeked>> {
        let s = name.to_str().unwrap_or_default();
        if s.chars().any(char::is_control) {
            return Ok(Some(Err("file name contains control characters".into())));
        }
        let mut read = self.read_signal_file(path)?;
        // The leftover of a claim straight into processed/ (an earlier version's) that a crash
        // interrupted during its append: this very file, one inode, is under the same name in
        // processed/ as well, and may end in a torn handling block. The processed/ link goes
        // (§9.6) and the file here is read as the record it is. A file merely named like one
        // processed earlier is a new drop and gets no leniency: half of it is not a record.
        let mut interrupted = false;
        if let ReadOutcome::HardLinked(_) = read
            && let Some(dir) = path.parent()
        {
            let twin = self.io.stamp(&self.layout.processed.join(name))?;
            match self.read_resolving(dir, name)? {
                None => return Ok(None),
                Some(again) => {
                    if let ReadOutcome::Bytes(_, st) = &again {
                        interrupted = twin.is_some_and(|p| (p.dev, p.ino) == (st.dev, st.ino));
                    }
                    read = again;
                }
            }
        }
        let bytes = match read {
            ReadOutcome::Gone => return Ok(None),
            ReadOutcome::Bytes(bytes, _) => bytes,
            other => return Ok(Some(Err(other.rejection().unwrap_or_default()))),
        };
        let parsed = match body::parse_body(&bytes, format) {
            // Strict for what people drop, with two exceptions sigbox made itself: the
            // interrupted claim above; and a claim taken back because it could not be handed
            // over, which ends in a whole handling block.
            Err(e) => match body::parse_record(&bytes, format) {
                Ok(b) if interrupted || b.fields.contains_key(body::key::HANDLING_METADATA) => {
                    Ok(b)
                }
                Err(r) if interrupted => Err(r),
                _ => Err(e),
            },
            ok => ok,
        };
        Ok(Some(parsed.map(|body| {
            Peek {
                body_instant: body
                    .created_at
                    .and_then(|t| t.timestamp_nanos_opt())
                    .map(i128::from),
                body,
            }
        })))
    }
}
