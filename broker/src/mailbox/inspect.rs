//! Read-only views of a mailbox (spec/mailbox.md §1, §3.4): what `ls`, `log` and `doctor`
//! show. Nothing here moves or writes a file.

use std::path::Path;
use std::time::SystemTime;

use super::report::{Pending, Problem, ProblemKind};
use super::route::{Item, Source};
use super::{Mailbox, lossy};
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
            out.push(self.pending_of(&self.layout.inputs, it, None));
        }
        for entry in self.io.list(&self.layout.buffered, true)? {
            let (Some(agent), EntryKind::Dir) = (entry.name.to_str(), entry.kind) else {
                continue;
            };
            let dir = self.layout.buffered.join(agent);
            let scan = self.scan(&dir, Source::Buffer, &|_| true, SystemTime::now())?;
            for it in scan.items {
                out.push(self.pending_of(&dir, it, Some(agent.to_string())));
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
    /// to be quarantined by the next pass.
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
        Ok(invalid.chain(settling).collect())
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
