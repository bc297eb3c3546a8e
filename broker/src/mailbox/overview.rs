//! Read-only views for a live overview of a root (the console, spec/console.md): the agents a
//! root knows of, the newest records of `processed/` without reading the others, and a pending
//! signal's message. Nothing here moves or writes a file.

use std::path::Path;

use super::report::Pending;
use super::{Mailbox, identity, lossy};
use crate::error::Result;
use crate::io::ReadOutcome;
use crate::signal::{Signal, valid_agent};
use crate::sys::EntryKind;

impl Mailbox {
    /// Every agent this root knows of, sorted: the quorum, the orchestrator, and every agent
    /// named by a presence lock or a PAUSE record in `agents/`, a buffer in `buffered/` or a
    /// claim slot in `claimed/`. Names that are not valid agent names are left out.
    pub fn agents_known(&self) -> Result<Vec<String>> {
        let mut out: Vec<String> = self.opts.quorum.clone();
        out.push(self.opts.orchestrator.clone());
        for e in self.io.list(&self.layout.agents, true)? {
            let Some(name) = e.name.to_str() else {
                continue;
            };
            if let Some(a) = name
                .strip_suffix(".paused.json")
                .or_else(|| name.strip_suffix(".lock"))
            {
                out.push(a.to_string());
            }
        }
        for dir in [&self.layout.buffered, &self.layout.claimed] {
            for e in self.io.list(dir, true)? {
                if e.kind == EntryKind::Dir
                    && let Some(a) = e.name.to_str()
                {
                    out.push(a.to_string());
                }
            }
        }
        out.retain(|a| valid_agent(a));
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// The newest `limit` records of `processed/` (by when each was moved there: its ctime),
    /// oldest first, with their handling metadata in `fields`; only those are read. Records
    /// that cannot be read are left out (`Mailbox::processed` lists them).
    pub fn recent_processed(&self, limit: usize) -> Result<Vec<Signal>> {
        let dir = &self.layout.processed;
        let mut stamped = Vec::new();
        for e in self.io.list(dir, true)? {
            if e.kind != EntryKind::File || e.name.as_encoded_bytes().starts_with(b".") {
                continue;
            }
            if let Some(st) = self.io.stamp(&dir.join(&e.name))? {
                stamped.push((st.changed_ns(), e.name));
            }
        }
        stamped.sort();
        let from = stamped.len().saturating_sub(limit);
        let mut out = Vec::new();
        for (_, name) in &stamped[from..] {
            let path = dir.join(name);
            if let ReadOutcome::Bytes(b, stamp) = self.read_signal_file(&path)?
                && let Ok(mut s) = Signal::parse_file_bytes(&b, &path)
            {
                s.id = identity::identity(&lossy(name), &s.fields, &stamp);
                out.push(s);
            }
        }
        Ok(out)
    }

    /// The pending signal `p` ([`Mailbox::pending`]) as its file says now: its message and
    /// every field; `None` when it is gone (delivered, moved) or no longer reads as a signal.
    pub fn peek(&self, p: &Pending) -> Result<Option<Signal>> {
        let within = [&self.layout.inputs, &self.layout.buffered]
            .iter()
            .any(|d| p.path.starts_with(d));
        if !within || p.path.components().any(|c| c.as_os_str() == "..") {
            return Ok(None);
        }
        Ok(match self.read_signal_file(Path::new(&p.path))? {
            ReadOutcome::Bytes(b, _) => Signal::parse_file_bytes(&b, &p.path).ok(),
            _ => None,
        })
    }
}
