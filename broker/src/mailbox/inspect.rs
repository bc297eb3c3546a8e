//! Read-only views of a mailbox (spec/mailbox.md §1, §3.4): what `ls`, `log` and `doctor`
//! show. Nothing here moves or writes a file.

use std::path::Path;
use std::time::SystemTime;

use super::report::{Pending, Problem, ProblemKind};
use super::route::{Item, Source};
use super::{Mailbox, lossy};
use crate::body;
use crate::error::{Error, ErrorKind, Result};
use crate::io::ReadOutcome;
use crate::name;
use crate::signal::Signal;
use crate::sys::EntryKind;

impl Mailbox {
    /// Pending signals (in `inputs/`, and in every agent's buffer), oldest first. Files still
    /// settling or invalid are not listed; [`Mailbox::problems`] lists those.
    pub fn pending(&self) -> Result<Vec<Pending>> {
        let mut out = Vec::new();
        let scan = self.scan(
            &self.layout.inputs,
            Source::Inputs,
            &|_| true,
            SystemTime::now(),
        )?;
        for it in scan.items {
            if self.deliverable(&self.layout.inputs, &it)? {
                out.push(self.pending_of(&self.layout.inputs, it, None));
            }
        }
        for (agent, dir) in self.buffers()? {
            let scan = self.scan(&dir, Source::Buffer, &|_| true, SystemTime::now())?;
            for it in scan.items {
                if self.deliverable(&dir, &it)? {
                    out.push(self.pending_of(&dir, it, Some(agent.clone())));
                }
            }
        }
        out.sort_by(|a, b| (a.instant, &a.id).cmp(&(b.instant, &b.id)));
        Ok(out)
    }

    fn pending_of(&self, dir: &Path, it: Item, buffered_for: Option<String>) -> Pending {
        let name = lossy(&it.name);
        Pending {
            id: name::signal_id(&name).to_string(),
            path: dir.join(&it.name),
            instant: it.instant,
            type_name: it.type_name,
            target: it.target,
            buffered_for,
        }
    }

    /// Files in `inputs/` that are not (yet) deliverable: still settling, or invalid and about
    /// to be quarantined by the next pass. Signals under canonical names, in `inputs/` and in
    /// the buffers, are read too: an empty or torn one (left by a power loss on a filesystem
    /// that lost its data, or written by hand) is reported here instead of looking pending.
    pub fn problems(&self) -> Result<Vec<Problem>> {
        let inputs = &self.layout.inputs;
        let scan = self.scan(inputs, Source::Inputs, &|_| true, SystemTime::now())?;
        let invalid = scan.rejects.into_iter().map(|r| Problem {
            path: inputs.join(r.name),
            kind: ProblemKind::Invalid { reason: r.reason },
        });
        let settling = scan.settling.into_iter().map(|s| Problem {
            path: inputs.join(s.name),
            kind: ProblemKind::Settling {
                until: s.until,
                window: self.opts.settle,
            },
        });
        let mut out: Vec<Problem> = invalid.chain(settling).collect();
        let mut dirs = vec![(inputs.clone(), scan.items)];
        for (_, dir) in self.buffers()? {
            let scan = self.scan(&dir, Source::Buffer, &|_| true, SystemTime::now())?;
            dirs.push((dir, scan.items));
        }
        for (dir, items) in dirs {
            // Unknown types stay in inputs/ by design (`doctor` says so on its own).
            for it in items.into_iter().filter(|it| it.signal_type.is_some()) {
                let path = dir.join(&it.name);
                if let Some(reason) = self.unreadable_signal(&path)? {
                    out.push(Problem {
                        path,
                        kind: ProblemKind::Invalid { reason },
                    });
                }
            }
        }
        for e in self.io.list(&self.layout.claimed, true)? {
            let Some(agent) = e.name.to_str().filter(|a| crate::signal::valid_agent(a)) else {
                continue;
            };
            for (slot, count) in self.stranded(agent)? {
                out.push(Problem {
                    path: slot,
                    kind: ProblemKind::InFlight {
                        agent: agent.to_string(),
                        count,
                    },
                });
            }
        }
        Ok(out)
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

    /// False for a signal of a known type that a claim would refuse (empty, torn, not a
    /// signal: [`Mailbox::problems`] reports it). Canonical names are read for this; dropped
    /// files were parsed by the scan already. Unknown types are pending: they wait for an
    /// agent that takes them.
    fn deliverable(&self, dir: &Path, it: &Item) -> Result<bool> {
        if it.signal_type.is_none() || name::parse_canonical(&lossy(&it.name)).is_none() {
            return Ok(true);
        }
        Ok(self.unreadable_signal(&dir.join(&it.name))?.is_none())
    }

    /// Why the signal file at `path` cannot be delivered, read as a claim reads it; `None`
    /// when it can (or is gone).
    fn unreadable_signal(&self, path: &Path) -> Result<Option<String>> {
        let name = path.file_name().map(lossy).unwrap_or_default();
        Ok(
            match self.io.read_untrusted(path, self.opts.max_file_size)? {
                ReadOutcome::Gone => None,
                ReadOutcome::Bytes(bytes, _) => body::read_signal(&bytes, &name, path).err(),
                other => other.rejection(),
            },
        )
    }

    /// Signals in `processed/`, oldest first, with their handling metadata in `fields`.
    /// Unreadable files are returned as errors beside the rest.
    pub fn processed(&self) -> Result<Vec<std::result::Result<Signal, Error>>> {
        let mut out = Vec::new();
        for e in self.io.list(&self.layout.processed, false)? {
            if e.kind != EntryKind::File {
                continue;
            }
            let path = self.layout.processed.join(&e.name);
            out.push(
                match self.io.read_untrusted(&path, self.opts.max_file_size)? {
                    ReadOutcome::Bytes(b, stamp) => {
                        Signal::parse_file_bytes(&b, &path).map(|s| (s, stamp.mtime_ns))
                    }
                    ReadOutcome::Gone => continue,
                    _ => Err(Error::new(
                        ErrorKind::NotRegularFile,
                        Some(&path),
                        "unreadable",
                    )),
                },
            );
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
