//! Read-only views of a mailbox (spec/mailbox.md §1, §3.4): what `ls`, `log` and `doctor`
//! show. Nothing here moves or writes a file.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::report::{Pending, Problem, ProblemKind};
use super::route::{Item, Source};
use super::{Mailbox, identity, lossy};
use crate::body;
use crate::error::{Error, ErrorKind, Result};
use crate::io::ReadOutcome;
use crate::name;
use crate::signal::Signal;
use crate::sys::EntryKind;

/// A directory of pending signals, its routable items, and whose buffer it is (none for
/// `inputs/`).
type Listed = (PathBuf, Vec<Item>, Option<String>);

/// What [`Mailbox::look`] found of a routable item.
pub(super) enum Look {
    /// Pending: its identity, its sender when it names one, and its body's `created_at` as
    /// shown.
    Pending(String, Option<String>, Option<String>),
    Settling(SystemTime),
    Invalid(String),
    Gone,
}

impl Mailbox {
    /// Pending signals (in `inputs/`, and in every agent's buffer), oldest first. Files still
    /// settling or invalid are not listed; [`Mailbox::problems`] lists those.
    pub fn pending(&self) -> Result<Vec<Pending>> {
        let mut out = Vec::new();
        for (dir, items, agent) in self.pending_items()? {
            for it in items {
                if let Look::Pending(id, from, created_at) = self.look(&dir, &it)? {
                    let path = dir.join(&it.name);
                    out.push(Pending {
                        id,
                        created_at,
                        path,
                        instant: it.instant,
                        type_name: it.type_name,
                        target: it.target,
                        buffered_for: agent.clone(),
                        from,
                    });
                }
            }
        }
        out.sort_by(|a, b| (a.instant, &a.id).cmp(&(b.instant, &b.id)));
        Ok(out)
    }

    /// The routable items of `inputs/` and of every agent's buffer (with the agent's name).
    pub(super) fn pending_items(&self) -> Result<Vec<Listed>> {
        let now = self.fs_now();
        let inputs = &self.layout.inputs;
        let scan = self.scan(inputs, Source::Inputs, &|_| true, now)?;
        let mut dirs = vec![(inputs.clone(), scan.items, None)];
        for (agent, dir) in self.buffers()? {
            let scan = self.scan(&dir, Source::Buffer, &|_| true, now)?;
            dirs.push((dir, scan.items, Some(agent)));
        }
        Ok(dirs)
    }

    /// Files in `inputs/` that are not (yet) deliverable: still settling, or invalid and about
    /// to be quarantined by the next pass. Signals under canonical names, in `inputs/` and in
    /// the buffers, are read too: an empty or torn one (left by a power loss on a filesystem
    /// that lost its data, or written by hand) is reported here instead of looking pending,
    /// and one sigbox did not write settles like a dropped file (spec §2.4).
    pub fn problems(&self) -> Result<Vec<Problem>> {
        let window = self.opts.settle;
        let mut out: Vec<Problem> = Vec::new();
        let mut dirs = vec![(self.layout.inputs.clone(), Source::Inputs)];
        dirs.extend(
            self.buffers()?
                .into_iter()
                .map(|(_, d)| (d, Source::Buffer)),
        );
        for (dir, source) in dirs {
            let scan = self.scan(&dir, source, &|_| true, self.fs_now())?;
            for r in scan.rejects {
                let kind = self.invalid(&dir, &r.name, r.reason)?;
                out.push(Problem {
                    path: dir.join(r.name),
                    kind,
                });
            }
            out.extend(scan.settling.into_iter().map(|s| Problem {
                path: dir.join(s.name),
                kind: ProblemKind::Settling {
                    until: s.until,
                    window,
                    second_link: s.links,
                },
            }));
        }
        for (dir, items, _) in self.pending_items()? {
            for it in items {
                let path = dir.join(&it.name);
                match self.look(&dir, &it)? {
                    Look::Pending(..) | Look::Gone => {}
                    Look::Settling(until) => out.push(Problem {
                        path,
                        kind: ProblemKind::Settling {
                            until,
                            window,
                            second_link: false,
                        },
                    }),
                    Look::Invalid(reason) => out.push(Problem {
                        kind: self.invalid(&dir, &it.name, reason)?,
                        path,
                    }),
                }
            }
        }
        for e in self.io.list(&self.layout.claimed, true)? {
            let Some(agent) = e.name.to_str().filter(|a| crate::signal::valid_agent(a)) else {
                continue;
            };
            for slot in self.slots_in_flight(agent)? {
                for (path, reason) in slot.foreign {
                    out.push(Problem {
                        path,
                        kind: ProblemKind::Invalid { reason },
                    });
                }
                if slot.count == 0 {
                    continue;
                }
                let (agent, count) = (agent.to_string(), slot.count);
                out.push(Problem {
                    path: slot.dir,
                    kind: if slot.live {
                        ProblemKind::Held { agent, count }
                    } else {
                        ProblemKind::InFlight { agent, count }
                    },
                });
            }
        }
        Ok(out)
    }

    /// What a file a pass would refuse is: invalid, or, refused for its two links when the
    /// other is sigbox's own leftover, a [`ProblemKind::Leftover`] the pass resolves.
    fn invalid(&self, dir: &Path, name: &std::ffi::OsStr, reason: String) -> Result<ProblemKind> {
        if crate::io::is_hard_link_reason(&reason)
            && let Some((leftover, _, _)) = self.own_link(dir, name)?
        {
            return Ok(ProblemKind::Leftover { leftover });
        }
        Ok(ProblemKind::Invalid { reason })
    }

    /// Every agent's buffer directory, with the agent's name.
    fn buffers(&self) -> Result<Vec<(String, std::path::PathBuf)>> {
        Ok(self
            .io
            .list(&self.layout.buffered, true)?
            .into_iter()
            .filter(|e| e.kind == EntryKind::Dir)
            .filter_map(|e| e.name.into_string().ok())
            .map(|agent| {
                let dir = self.layout.buffer_dir(&agent);
                (agent, dir)
            })
            .collect())
    }

    /// A routable item read as a claim reads it: pending (with its identity), settling (a
    /// canonical name sigbox did not write, changed within the window), or invalid (a signal
    /// of a known type that a claim would refuse: empty, torn, not a signal). Unknown types
    /// are pending: they wait for an agent that takes them.
    pub(super) fn look(&self, dir: &Path, it: &Item) -> Result<Look> {
        let path = dir.join(&it.name);
        let fname = lossy(&it.name);
        let (bytes, stamp) = match self.read_signal_file(&path)? {
            ReadOutcome::Gone => return Ok(Look::Gone),
            ReadOutcome::Bytes(bytes, stamp) => (bytes, stamp),
            _ if it.signal_type.is_none() => {
                return Ok(Look::Pending(
                    name::signal_id(&fname).to_string(),
                    None,
                    None,
                ));
            }
            other => return Ok(Look::Invalid(other.rejection().unwrap_or_default())),
        };
        let read = body::read_signal(&bytes, &fname, &path);
        let fields = match &read {
            Ok(sig) => Some(sig.fields.clone()),
            Err(_) => body::parse_record(&bytes, name::format_of(&fname))
                .ok()
                .map(|b| b.fields),
        };
        let now = self.fs_now();
        let checked = read.as_ref().ok().map(|s| &s.fields);
        if let Some(until) =
            identity::untrusted_settling(&fname, checked, &stamp, self.opts.settle, now)
        {
            return Ok(Look::Settling(until));
        }
        let from = read.as_ref().ok().and_then(|s| s.from.clone());
        match (read, fields) {
            (Err(reason), _) if it.signal_type.is_some() => Ok(Look::Invalid(reason)),
            (_, Some(f)) => Ok(Look::Pending(
                identity::identity(&fname, &f, &stamp),
                from,
                body::created_at_text(&f),
            )),
            (_, None) => Ok(Look::Pending(
                name::signal_id(&fname).to_string(),
                None,
                None,
            )),
        }
    }

    /// Signals in `processed/`, oldest first, with their handling metadata in `fields`.
    /// Unreadable files are returned as errors beside the rest.
    pub fn processed(&self) -> Result<Vec<std::result::Result<Signal, Error>>> {
        let mut out = Vec::new();
        for e in self.io.list(&self.layout.processed, false)? {
            let path = self.layout.processed.join(&e.name);
            // sigbox puts only regular files here: anything else was planted, and is named
            // (never followed nor read), whatever its name.
            if e.kind != EntryKind::File {
                out.push(Err(Error::new(
                    ErrorKind::NotRegularFile,
                    Some(&path),
                    format!(
                        "not a record: {}, which sigbox never puts in processed/ (not followed, \
                         not read); remove it",
                        e.kind.describe()
                    ),
                )));
                continue;
            }
            // A staging name (an archive by link's moved-aside source, §9.10) is no record.
            if crate::name::own::is_stage_name(&e.name) {
                continue;
            }
            out.push(match self.read_signal_file(&path)? {
                ReadOutcome::Bytes(b, stamp) => Signal::parse_file_bytes(&b, &path).map(|mut s| {
                    s.id = identity::identity(&lossy(&e.name), &s.fields, &stamp);
                    (s, stamp.mtime_ns)
                }),
                ReadOutcome::Gone => continue,
                ReadOutcome::HardLinked(n) => Err(Error::new(
                    ErrorKind::NotRegularFile,
                    Some(&path),
                    match self.own_link(&self.layout.processed, &e.name)? {
                        Some((leftover, _, _)) => format!(
                            "not read: a second link, {}, left by an interrupted claim; \
                             `sigbox gc` removes it",
                            leftover.display()
                        ),
                        None => {
                            format!("not read: {n} hard links (one could lead outside the root)")
                        }
                    },
                )),
                other => Err(Error::new(
                    ErrorKind::NotRegularFile,
                    Some(&path),
                    other.rejection().unwrap_or_else(|| "unreadable".into()),
                )),
            });
        }
        let key = |s: &Signal, mtime: i128| -> i128 {
            name::parse_canonical(&format!("{}.json", s.id))
                .map(|c| c.instant)
                .or_else(|| {
                    s.created_at
                        .and_then(|t| t.timestamp_nanos_opt())
                        .map(i128::from)
                })
                .unwrap_or(mtime)
        };
        let mut ok: Vec<(i128, Signal)> = Vec::new();
        let mut errs = Vec::new();
        for r in out {
            match r {
                Ok((s, m)) => ok.push((key(&s, m), s)),
                Err(e) => errs.push(Err(e)),
            }
        }
        ok.sort_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));
        Ok(ok.into_iter().map(|(_, s)| Ok(s)).chain(errs).collect())
    }
}
