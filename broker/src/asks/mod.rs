//! Asking a person (spec/asks.md): requests in `asks/`, each with exactly one outcome, created
//! exclusively by the no-clobber rename every claim rests on.
//!
//! | file | owns | spec |
//! |---|---|---|
//! | `id.rs` | ids, keys, choices, names: the rules | §2 |
//! | `format.rs` | the request and outcome files, and what is checked when read | §3, §4, §6 |
//! | `new_ask.rs` | a request before it is written, checked | §3 |
//! | `refusal.rs` | why an answer is not taken, one line each | §4 |
//! | `listing.rs` | where each request stands; the listing | §7 |
//! | `remote.rs` | requests asked on another host: imports, proposals, outcomes carried | §8 |
//! | `mod.rs` | the handle: ask, answer, expire, quarantine | §3-§6 |
//!
//! Waiting for an outcome is the client's (`sigbox_client::wait_outcome`): this module
//! never blocks.
//!
//! ```
//! use sigbox::Mailbox;
//! use sigbox::asks::{Asks, NewAsk, Outcome};
//!
//! let dir = tempfile::tempdir()?;
//! let mailbox = Mailbox::init(dir.path())?;
//! let asks = Asks::new(&mailbox);
//! let asked = asks.ask(&NewAsk::new("Executor", "deploy to prod?").key("deploy-42"))?;
//! assert_eq!(asked.request.id, "Executor.deploy-42");
//!
//! // One answer wins; a second is refused, naming the first.
//! assert!(asks.answer("Executor.deploy-42", "approve", Some("go"), "alice")?.is_ok());
//! let refused = asks.answer("Executor.deploy-42", "deny", None, "bob")?.unwrap_err();
//! assert!(refused.to_string().contains("already answered \"approve\" by alice"));
//! assert!(matches!(asks.outcome("Executor.deploy-42")?, Some(Outcome::Answered(_))));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod format;
mod id;
mod listing;
mod new_ask;
mod refusal;
mod remote;

use std::path::{Path, PathBuf};

use chrono::Utc;
use serde_json::json;

pub use format::{Answer, Outcome, Request, instant};
pub use id::{
    DEFAULT_CHOICES, agent_of, ask_id, choice_problem, choices_problem, digest, id_problem, key_of,
    key_problem, person_problem,
};
pub use listing::{AskState, Listing, Status};
pub use new_ask::{Asked, NewAsk};
pub use refusal::Refusal;
use refusal::refused_by;
pub use remote::{AnswerAnywhere, AskFiles, ImportedAsk, Proposal, ProposalStatus};

use crate::atomic::{self, Claimed, Clobber, Placed};
use crate::error::{Error, ErrorKind, Result};
use crate::io::{Io, ReadOutcome};
use crate::mailbox::Mailbox;
use crate::name::own;

/// The directory of requests and outcomes, under the root.
pub const ASKS_DIR: &str = "asks";
/// The largest request file read, in bytes.
pub const REQUEST_CAP: u64 = 1 << 20;
/// The largest outcome file read, in bytes.
pub const OUTCOME_CAP: u64 = 64 << 10;
/// The longest deadline a request gets: a century (a longer timeout is cut to it).
const LONGEST_TIMEOUT: chrono::Duration = chrono::Duration::days(36_525);
/// How many times an answer retries after quarantining a file that took the outcome's name.
pub(crate) const RETRIES: usize = 8;

pub(crate) const REQUEST_SUFFIX: &str = ".request.json";
pub(crate) const OUTCOME_SUFFIX: &str = ".outcome.json";

/// Requests and their answers in one mailbox root (spec/asks.md). Borrows the mailbox's
/// handle: the same seam, root descriptor, durability and rename lock.
#[derive(Debug)]
pub struct Asks<'a> {
    mb: &'a Mailbox,
    dir: PathBuf,
}

impl<'a> Asks<'a> {
    /// The requests of `mailbox`'s root (nothing is touched until a request is asked).
    pub fn new(mailbox: &'a Mailbox) -> Asks<'a> {
        Asks {
            dir: mailbox.root().join(ASKS_DIR),
            mb: mailbox,
        }
    }

    /// `asks/`, the directory a waiter watches (it may not exist yet).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn io(&self) -> &Io {
        self.mb.io()
    }

    /// The request file of `id`.
    pub fn request_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}{REQUEST_SUFFIX}"))
    }

    /// The outcome file of `id`.
    pub fn outcome_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}{OUTCOME_SUFFIX}"))
    }

    /// Asks: writes the request, durably, before it returns (spec/asks.md §3). With a key
    /// already asked, re-attaches instead: the same question returns the first request (and
    /// its outcome when it has one); another question under the key is refused.
    ///
    /// **Durability:** in durable mode, once this returns the request survives a crash or
    /// power loss: created in `asks/` by an atomic write (stage, fsync, no-clobber rename,
    /// fsync of `asks/`), `asks/` itself made durably when missing.
    pub fn ask(&self, new: &NewAsk) -> Result<Asked> {
        if let Some(why) = new.problem() {
            return Err(Error::new(ErrorKind::InvalidName, Some(&self.dir), why));
        }
        let key = new
            .key
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().simple().to_string());
        let id = ask_id(&new.from, &key);
        let now = Utc::now();
        // A timeout longer than a century is a century: the deadline stays an instant every
        // reader takes (RFC 3339, a four-digit year).
        let deadline = new.timeout.map(|t| {
            let t = chrono::Duration::from_std(t)
                .unwrap_or(LONGEST_TIMEOUT)
                .min(LONGEST_TIMEOUT);
            now + t
        });
        let request = Request::new(
            id.clone(),
            &new.from,
            new.to.as_deref(),
            &new.message,
            new.choices.clone(),
            now,
            deadline,
            new.key.as_deref(),
            new.context.clone(),
        );
        let bytes = request.bytes();
        if bytes.len() as u64 > REQUEST_CAP {
            return Err(Error::new(
                ErrorKind::TooLarge,
                Some(&self.request_path(&id)),
                format!(
                    "the request would be {} bytes, over the {REQUEST_CAP} byte cap",
                    bytes.len()
                ),
            ));
        }
        self.io().create_dir_durable(&self.dir)?;
        let dest = self.request_path(&id);
        let stage = own::stage_name(&self.dir, "send");
        match atomic::write_atomic(self.io(), &stage, &dest, &bytes, Clobber::No)? {
            Placed::Done => Ok(Asked {
                request,
                attached: false,
                outcome: None,
            }),
            Placed::Exists => {
                let (first, _) = self.read_request(&id)?.map_err(|r| {
                    Error::new(ErrorKind::InvalidSignal, Some(&dest), r.to_string())
                })?;
                if !first.same_question(&request) {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        Some(&dest),
                        format!(
                            "the key {key:?} already names another question of {} ({:?}): a key \
                             names one request for ever; ask with another key",
                            first.from, first.message
                        ),
                    ));
                }
                let outcome = self.outcome_durable(&id)?;
                Ok(Asked {
                    request: first,
                    attached: true,
                    outcome,
                })
            }
        }
    }

    /// The request `id`, with its file's bytes; `Err(refusal)` when there is none or it is
    /// not valid.
    fn read_request(&self, id: &str) -> Result<std::result::Result<(Request, Vec<u8>), Refusal>> {
        if let Some(why) = id_problem(id) {
            return Ok(Err(Refusal::InvalidId {
                id: id.to_string(),
                why,
            }));
        }
        let path = self.request_path(id);
        let bytes = match self.io().read_untrusted(&path, REQUEST_CAP) {
            Ok(ReadOutcome::Bytes(b, _)) => b,
            Ok(ReadOutcome::Gone) => return Ok(Err(Refusal::Unknown { id: id.to_string() })),
            Ok(other) => {
                return Ok(Err(Refusal::InvalidRequest {
                    path,
                    why: other.rejection().unwrap_or_default(),
                }));
            }
            // `asks/` missing (or a file in its way): no such request.
            Err(e)
                if e.io_error().is_some_and(|e| {
                    matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    )
                }) =>
            {
                return Ok(Err(Refusal::Unknown { id: id.to_string() }));
            }
            Err(e) => return Err(e),
        };
        Ok(match Request::parse(&bytes, id) {
            Ok(r) => Ok((r, bytes)),
            Err(why) => Err(Refusal::InvalidRequest { path, why }),
        })
    }

    /// The request `id` as on disk, or why there is none.
    pub fn request(&self, id: &str) -> Result<std::result::Result<Request, Refusal>> {
        Ok(self.read_request(id)?.map(|(r, _)| r))
    }

    /// The request `id`; an error naming its file and why when there is none or it is not
    /// valid.
    pub fn request_checked(&self, id: &str) -> Result<Request> {
        self.request(id)?.map_err(|r| {
            let kind = match r {
                Refusal::InvalidId { .. } => ErrorKind::InvalidName,
                _ => ErrorKind::InvalidSignal,
            };
            let path = match &r {
                Refusal::InvalidId { .. } => self.dir.clone(),
                _ => self.request_path(id),
            };
            Error::new(kind, Some(&path), r.to_string())
        })
    }

    /// Reads the outcome of `request` without changing anything: `Ok(None)` when there is
    /// none, `Err(why)` when the file there is not a valid outcome of it.
    fn peek_outcome(
        &self,
        request: &Request,
        request_bytes: &[u8],
    ) -> Result<Option<std::result::Result<Outcome, String>>> {
        let path = self.outcome_path(&request.id);
        Ok(match self.io().read_untrusted(&path, OUTCOME_CAP)? {
            ReadOutcome::Gone => None,
            ReadOutcome::Bytes(b, _) => Some(Outcome::parse(&b, request, request_bytes)),
            other => Some(Err(other.rejection().unwrap_or_default())),
        })
    }

    /// The outcome of `request`, quarantining a file that is not a valid one (spec/asks.md
    /// §6): `None` when it has none (or had only an invalid one).
    fn read_outcome(&self, request: &Request, request_bytes: &[u8]) -> Result<Option<Outcome>> {
        match self.peek_outcome(request, request_bytes)? {
            None => Ok(None),
            Some(Ok(o)) => Ok(Some(o)),
            Some(Err(why)) => {
                self.quarantine(&request.id, &why)?;
                Ok(None)
            }
        }
    }

    /// The outcome of `id`, once it has one: an invalid file in its place is quarantined and
    /// does not count. `None` for an open request, and for an id with no valid request.
    pub fn outcome(&self, id: &str) -> Result<Option<Outcome>> {
        match self.read_request(id)? {
            Ok((r, b)) => self.read_outcome(&r, &b),
            Err(_) => Ok(None),
        }
    }

    /// [`Asks::outcome`] made durable before it is returned: `asks/` is fsynced, so an
    /// outcome whose writer crashed before its own fsync can no longer vanish once its asker
    /// acts on it (spec/asks.md §4, "Crash states").
    pub fn outcome_durable(&self, id: &str) -> Result<Option<Outcome>> {
        let o = self.outcome(id)?;
        if o.is_some() {
            self.io().sync_dir(&self.dir)?;
        }
        Ok(o)
    }

    /// Answers `id` with `choice` (spec/asks.md §4): `Ok(Ok(outcome))` for the one answer,
    /// durable before this returns; `Ok(Err(refusal))` for an answer not taken (a second or
    /// late one, an unknown id, a choice not offered), naming why.
    ///
    /// **Durability:** in durable mode, once this returns `Ok(Ok(_))` the answer survives a
    /// crash or power loss, and no other answer or expiry can ever be recorded for the
    /// request: the outcome file is created by an atomic write whose rename does not replace.
    pub fn answer(
        &self,
        id: &str,
        choice: &str,
        message: Option<&str>,
        by: &str,
    ) -> Result<std::result::Result<Outcome, Refusal>> {
        if id_problem(id).is_none()
            && let Some(host) = self.home(id)?
        {
            return Ok(Err(Refusal::Elsewhere {
                id: id.to_string(),
                host,
            }));
        }
        self.answer_here(id, choice, message, by, &serde_json::Map::new())
    }

    /// [`Asks::answer`] on this host, whatever the request's home: the outcome, when it is
    /// this answer, carries `extra` (a proposal applied, spec/asks.md §8).
    fn answer_here(
        &self,
        id: &str,
        choice: &str,
        message: Option<&str>,
        by: &str,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<std::result::Result<Outcome, Refusal>> {
        if let Some(why) = person_problem(by) {
            return Ok(Err(Refusal::InvalidName { why }));
        }
        let (request, bytes) = match self.read_request(id)? {
            Ok(r) => r,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if let Some(o) = self.read_outcome(&request, &bytes)? {
            return Ok(Err(refused_by(&request, o)));
        }
        if !request.choices.iter().any(|c| c == choice) {
            return Ok(Err(Refusal::NotOffered {
                id: id.to_string(),
                choice: choice.to_string(),
                choices: request.choices.clone(),
            }));
        }
        // Never before the asking (a clock stepped back): readers refuse such an answer.
        let now = Utc::now().max(request.asked_at);
        if request.deadline.is_some_and(|d| now >= d) {
            let (o, _) = self.record(&request, &bytes, &expiry(&request, by))?;
            return Ok(Err(refused_by(&request, o)));
        }
        let mine = Outcome::Answered(Answer {
            choice: choice.to_string(),
            message: message.map(str::to_string),
            by: by.to_string(),
            at: now,
        });
        Ok(match self.record_with(&request, &bytes, &mine, extra)? {
            (o, true) => Ok(o),
            (o, false) => Err(refused_by(&request, o)),
        })
    }

    /// Records the expiry of `id` when its deadline has passed and it has no outcome yet
    /// (spec/asks.md §4); returns the outcome it has then (the expiry, or the answer that won),
    /// made durable. `Ok(None)` before the deadline (or with none) and for an id with no valid
    /// request.
    pub fn expire(&self, id: &str, by: &str) -> Result<Option<Outcome>> {
        let (request, bytes) = match self.read_request(id)? {
            Ok(r) => r,
            Err(_) => return Ok(None),
        };
        if let Some(o) = self.read_outcome(&request, &bytes)? {
            self.io().sync_dir(&self.dir)?;
            return Ok(Some(o));
        }
        if request.deadline.is_none_or(|d| Utc::now() < d) {
            return Ok(None);
        }
        // Asked on another host: its expiry is recorded there, and comes back.
        if self.home(id)?.is_some() {
            return Ok(None);
        }
        let by = if person_problem(by).is_none() {
            by
        } else {
            request.from.as_str()
        };
        let (o, _) = self.record(&request, &bytes, &expiry(&request, by))?;
        self.io().sync_dir(&self.dir)?;
        Ok(Some(o))
    }

    /// Creates the outcome file of `request` with `outcome`, or finds the one there: the
    /// exclusive step (spec/asks.md §4, step 6). Returns the outcome the request has now, and
    /// true when it is this one (this write created the file). A file in the way that is not
    /// a valid outcome is quarantined and the write tried again.
    fn record(
        &self,
        request: &Request,
        request_bytes: &[u8],
        outcome: &Outcome,
    ) -> Result<(Outcome, bool)> {
        self.record_with(request, request_bytes, outcome, &serde_json::Map::new())
    }

    /// [`Asks::record`], the outcome's file carrying `extra` fields.
    fn record_with(
        &self,
        request: &Request,
        request_bytes: &[u8],
        outcome: &Outcome,
        extra: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<(Outcome, bool)> {
        let dest = self.outcome_path(&request.id);
        let data = outcome.bytes_with(request, request_bytes, extra);
        // An outcome its readers would refuse is never written: it would win the name and then
        // be quarantined, reopening the request for a second answer.
        if data.len() as u64 > OUTCOME_CAP {
            return Err(Error::new(
                ErrorKind::TooLarge,
                Some(&dest),
                format!(
                    "the answer would be {} bytes as written, over the {OUTCOME_CAP} byte cap of \
                     an outcome: shorten its message; nothing was recorded",
                    data.len()
                ),
            ));
        }
        for _ in 0..RETRIES {
            let stage = own::stage_name(&self.dir, "send");
            match atomic::write_atomic(self.io(), &stage, &dest, &data, Clobber::No)? {
                Placed::Done => return Ok((outcome.clone(), true)),
                Placed::Exists => {
                    if let Some(o) = self.read_outcome(request, request_bytes)? {
                        return Ok((o, false));
                    }
                }
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            Some(&dest),
            "files that are not valid outcomes keep taking this name; nothing was recorded",
        ))
    }

    /// Moves the file at `id`'s outcome name aside into `rejected/`, with its reason (a claim:
    /// no clobber, a `.dup-` name when taken).
    fn quarantine(&self, id: &str, why: &str) -> Result<()> {
        let src = self.outcome_path(id);
        let rejected = self.mb.root().join("rejected");
        self.io().create_dir_durable(&rejected)?;
        let name = src.file_name().unwrap_or_default().to_os_string();
        tracing::warn!(file = %src.display(), reason = why, "not a valid outcome: quarantined");
        let moved = own::with_fresh_names(&rejected, &name, |_, dest| {
            let reason_path = reason_path(&dest);
            let reason = json!({
                "file": dest.file_name().map(|n| n.to_string_lossy().into_owned()),
                "from": src.to_string_lossy(),
                "reason": format!("not a valid outcome of request {id}: {why}"),
                "rejected_at": instant(Utc::now()),
                "rejected_by": "sigbox asks",
            });
            let mut data = serde_json::to_vec(&reason).unwrap_or_default();
            data.push(b'\n');
            let r = atomic::claim_refused(self.io(), &src, &dest, || {
                let stage = own::stage_name(&rejected, "reason");
                atomic::write_atomic(self.io(), &stage, &reason_path, &data, Clobber::Yes)
                    .map(|_| ())
            })?;
            Ok(match r {
                Claimed::Won(()) | Claimed::Lost => Some(()),
                Claimed::DestExists => None,
            })
        })?;
        if moved.is_none() {
            return Err(Error::new(
                ErrorKind::Conflict,
                Some(&src),
                "cannot move an invalid outcome aside: every name in rejected/ is taken",
            ));
        }
        Ok(())
    }
}

/// The expiry of `request`, recorded by `by`: never before its deadline (a clock stepped back
/// between the check and the write), which readers would refuse.
fn expiry(request: &Request, by: &str) -> Outcome {
    let now = Utc::now();
    Outcome::Expired {
        at: request.deadline.map_or(now, |d| now.max(d)),
        by: by.to_string(),
    }
}

/// `rejected/<name>.reason.json` (every name here is short enough to take the suffix).
fn reason_path(quarantined: &Path) -> PathBuf {
    let mut p = quarantined.as_os_str().to_os_string();
    p.push(".reason.json");
    PathBuf::from(p)
}

#[cfg(test)]
mod tests;
