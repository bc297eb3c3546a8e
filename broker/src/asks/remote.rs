//! Requests asked on another host (spec/asks.md §8). The host a request was asked on decides
//! its one outcome, by the exclusive create of §4; every other host holds a copy of the
//! request (written by the bridge, with a marker naming its home), turns an answer given
//! there into a proposal the bridge carries home, and takes the outcome the home recorded,
//! byte for byte. Nothing here talks to the network: the bridge moves these files.

use std::collections::HashMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::format::{Outcome, Request, instant, object};
use super::id::{digest, id_problem, person_problem};
use super::refusal::{Refusal, refused_by};
use super::{Asks, OUTCOME_CAP, OUTCOME_SUFFIX, REQUEST_SUFFIX, RETRIES};

/// Bytes of an outcome kept for the fields a home adds to a proposal's (its id, the host).
const PROPOSAL_ROOM: u64 = 1024;
use crate::atomic::{self, Clobber, Placed};
use crate::error::{Error, ErrorKind, Result};
use crate::io::ReadOutcome;
use crate::name::own;

/// The marker beside a request asked on another host: `<id>.home.json`.
const HOME_SUFFIX: &str = ".home.json";
/// A proposal's name: `<id>.answer.<uuid>.json`.
const PROPOSAL_INFIX: &str = ".answer.";
const HOME_KIND: &str = "sigbox.ask-home";
const PROPOSAL_KIND: &str = "sigbox.proposal";
/// The largest marker read, in bytes.
const HOME_CAP: u64 = 4 << 10;

/// What an import of a request or an outcome from another host did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImportedAsk {
    /// Written here, durably.
    Written,
    /// The same bytes were here already (a second delivery).
    AlreadyHere,
    /// Not taken, and why (another request under the id here, an outcome that is not the
    /// request's, an outcome of a request asked here).
    Refused(String),
}

/// An answer proposed on this host for a request asked on another (spec/asks.md §8).
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    /// The request's id.
    pub id: String,
    /// The proposal's own id (32 hex digits), which the outcome names when it won.
    pub proposal: String,
    /// The host the request was asked on, which decides.
    pub home: String,
    /// The choice proposed.
    pub choice: String,
    /// What the person said with it.
    pub message: Option<String>,
    /// Who proposed it.
    pub by: String,
    /// When.
    pub at: DateTime<Utc>,
}

/// Where a proposal stands, from the outcome this host holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProposalStatus {
    /// No outcome has come back yet.
    Pending,
    /// The outcome is this proposal: the one answer.
    Won,
    /// The outcome is another answer, or the expiry.
    Lost,
}

impl ProposalStatus {
    /// `pending`, `won` or `lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProposalStatus::Pending => "pending",
            ProposalStatus::Won => "won",
            ProposalStatus::Lost => "lost",
        }
    }
}

/// What [`Asks::answer_anywhere`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum AnswerAnywhere {
    /// Asked here: the one answer, recorded.
    Recorded(Outcome),
    /// Asked on another host: proposed, durably, for the bridge to carry there.
    Proposed(Proposal),
    /// Not taken, naming why.
    Refused(Refusal),
}

/// One request's files, as the bridge carries them.
#[derive(Clone, Debug)]
pub struct AskFiles {
    /// The request's id.
    pub id: String,
    /// The host it was asked on; `None`: this one.
    pub home: Option<String>,
    /// The request file's bytes.
    pub request: Vec<u8>,
    /// Its outcome file's bytes, when it has a valid one.
    pub outcome: Option<Vec<u8>>,
    /// Valid proposals made here: each one's id and bytes.
    pub proposals: Vec<(String, Vec<u8>)>,
}

impl Asks<'_> {
    fn home_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}{HOME_SUFFIX}"))
    }

    fn proposal_path(&self, id: &str, proposal: &str) -> PathBuf {
        self.dir
            .join(format!("{id}{PROPOSAL_INFIX}{proposal}.json"))
    }

    /// The host request `id` was asked on, when it is another host (its marker, written by
    /// the bridge before the request); `None` when it was asked here. A marker that is not
    /// one is an error naming it.
    pub fn home(&self, id: &str) -> Result<Option<String>> {
        let path = self.home_path(id);
        let bytes = match self.io().read_untrusted(&path, HOME_CAP) {
            Ok(ReadOutcome::Gone) => return Ok(None),
            Ok(ReadOutcome::Bytes(b, _)) => b,
            Ok(other) => return Err(bad_marker(&path, &other.rejection().unwrap_or_default())),
            Err(e)
                if e.io_error().is_some_and(|e| {
                    matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    )
                }) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let m = object(&bytes).map_err(|why| bad_marker(&path, &why))?;
        let host = m.get("host").and_then(Value::as_str).unwrap_or_default();
        if m.get("kind").and_then(Value::as_str) != Some(HOME_KIND)
            || m.get("id").and_then(Value::as_str) != Some(id)
            || person_problem(host).is_some()
        {
            return Err(bad_marker(
                &path,
                "not a marker of this request's home (kind, id, host)",
            ));
        }
        Ok(Some(host.to_string()))
    }

    /// Answers `id` wherever it was asked: here, as [`Asks::answer`] (the one answer,
    /// recorded); on another host, by a proposal written here durably, after the same checks
    /// (an answer already here, a choice not offered, a deadline passed are refused here as
    /// there), which the bridge carries to that host to be applied there.
    pub fn answer_anywhere(
        &self,
        id: &str,
        choice: &str,
        message: Option<&str>,
        by: &str,
    ) -> Result<AnswerAnywhere> {
        let home = match id_problem(id) {
            None => self.home(id)?,
            Some(_) => None,
        };
        let Some(home) = home else {
            return Ok(match self.answer(id, choice, message, by)? {
                Ok(o) => AnswerAnywhere::Recorded(o),
                Err(r) => AnswerAnywhere::Refused(r),
            });
        };
        if let Some(why) = person_problem(by) {
            return Ok(AnswerAnywhere::Refused(Refusal::InvalidName { why }));
        }
        let (request, rb) = match self.read_request(id)? {
            Ok(r) => r,
            Err(r) => return Ok(AnswerAnywhere::Refused(r)),
        };
        if let Some(o) = self.read_outcome(&request, &rb)? {
            return Ok(AnswerAnywhere::Refused(refused_by(&request, o)));
        }
        if !request.choices.iter().any(|c| c == choice) {
            return Ok(AnswerAnywhere::Refused(Refusal::NotOffered {
                id: id.to_string(),
                choice: choice.to_string(),
                choices: request.choices.clone(),
            }));
        }
        let now = Utc::now();
        if request.deadline.is_some_and(|d| now >= d) {
            return Ok(AnswerAnywhere::Refused(Refusal::Expired {
                id: id.to_string(),
                deadline: request.deadline,
            }));
        }
        let p = Proposal {
            id: id.to_string(),
            proposal: uuid::Uuid::now_v7().simple().to_string(),
            home,
            choice: choice.to_string(),
            message: message.map(str::to_string),
            by: by.to_string(),
            at: now,
        };
        let mut data = serde_json::to_vec(&json!({
            "kind": PROPOSAL_KIND, "id": id, "request": digest(&rb), "proposal": p.proposal,
            "home": p.home, "choice": p.choice, "message": p.message, "answered_by": p.by,
            "proposed_at": instant(now),
        }))
        .unwrap_or_default();
        data.push(b'\n');
        let dest = self.proposal_path(id, &p.proposal);
        // The outcome made of it at home holds a few more fields: room for them under the cap.
        if data.len() as u64 + PROPOSAL_ROOM > OUTCOME_CAP {
            return Err(Error::new(
                ErrorKind::TooLarge,
                Some(&dest),
                format!(
                    "the answer would be {} bytes as written, over what an outcome holds \
                     ({OUTCOME_CAP} bytes, {PROPOSAL_ROOM} of them kept for the fields its home \
                     adds): shorten its message; nothing was proposed",
                    data.len()
                ),
            ));
        }
        let stage = own::stage_name(&self.dir, "send");
        match atomic::write_atomic(self.io(), &stage, &dest, &data, Clobber::No)? {
            Placed::Done => Ok(AnswerAnywhere::Proposed(p)),
            Placed::Exists => Err(Error::new(
                ErrorKind::Conflict,
                Some(&dest),
                "a proposal under this fresh id is there already; nothing was proposed",
            )),
        }
    }

    /// The proposals made here for `id`, oldest first.
    pub fn proposals(&self, id: &str) -> Result<Vec<Proposal>> {
        let mut out = Vec::new();
        for (pid, bytes) in self
            .proposal_files(&[id.to_string()])?
            .remove(id)
            .unwrap_or_default()
        {
            if let Ok(p) = parse_proposal(&bytes, id, &pid) {
                out.push(p);
            }
        }
        out.sort_by(|a, b| (a.at, &a.proposal).cmp(&(b.at, &b.proposal)));
        Ok(out)
    }

    /// Where proposal `p` stands: pending until an outcome is here, then won when the outcome
    /// names it.
    pub fn proposal_status(&self, p: &Proposal) -> Result<ProposalStatus> {
        Ok(match self.outcome_fields(&p.id)? {
            None => ProposalStatus::Pending,
            Some(m) if m.get("proposal").and_then(Value::as_str) == Some(&p.proposal) => {
                ProposalStatus::Won
            }
            Some(_) => ProposalStatus::Lost,
        })
    }

    /// The fields of `id`'s outcome file, when it has a valid one.
    fn outcome_fields(&self, id: &str) -> Result<Option<Map<String, Value>>> {
        let (request, rb) = match self.read_request(id)? {
            Ok(r) => r,
            Err(_) => return Ok(None),
        };
        match self
            .io()
            .read_untrusted(&self.outcome_path(id), OUTCOME_CAP)?
        {
            ReadOutcome::Bytes(b, _) if Outcome::parse(&b, &request, &rb).is_ok() => {
                Ok(object(&b).ok())
            }
            _ => Ok(None),
        }
    }

    /// Writes a request asked on `home` here (the bridge's import): the marker naming its
    /// home, then the request's very bytes under its name, each created exclusively and
    /// durably. A request under the id that is not these bytes is refused (never replaced).
    pub fn import_request(&self, home: &str, bytes: &[u8]) -> Result<ImportedAsk> {
        if let Some(why) = person_problem(home) {
            return Ok(ImportedAsk::Refused(format!("invalid host name: {why}")));
        }
        let Some(id) = object(bytes)
            .ok()
            .and_then(|m| m.get("id").and_then(Value::as_str).map(str::to_string))
        else {
            return Ok(ImportedAsk::Refused("not a request: no `id`".into()));
        };
        if let Some(why) = id_problem(&id) {
            return Ok(ImportedAsk::Refused(format!(
                "invalid request id {id:?}: {why}"
            )));
        }
        if let Err(why) = Request::parse(bytes, &id) {
            return Ok(ImportedAsk::Refused(format!(
                "{id}: not a valid request: {why}"
            )));
        }
        let dest = self.request_path(&id);
        let here = |asks: &Self| -> Result<Option<Vec<u8>>> {
            Ok(match asks.io().read_untrusted(&dest, super::REQUEST_CAP) {
                Ok(ReadOutcome::Bytes(b, _)) => Some(b),
                Ok(ReadOutcome::Gone) => None,
                Ok(_) => Some(Vec::new()),
                Err(e)
                    if e.io_error()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound) =>
                {
                    None
                }
                Err(e) => return Err(e),
            })
        };
        if let Some(b) = here(self)? {
            return Ok(same_or_refused(&b, bytes, &id));
        }
        self.io().create_dir_durable(&self.dir)?;
        let mut marker = serde_json::to_vec(&json!({"kind": HOME_KIND, "id": id, "host": home}))
            .unwrap_or_default();
        marker.push(b'\n');
        let mpath = self.home_path(&id);
        let stage = own::stage_name(&self.dir, "send");
        let made_marker =
            match atomic::write_atomic(self.io(), &stage, &mpath, &marker, Clobber::No)? {
                Placed::Done => true,
                Placed::Exists => match self.home(&id)? {
                    Some(h) if h == home => false,
                    other => {
                        return Ok(ImportedAsk::Refused(format!(
                            "{id}: its marker names another home ({})",
                            other.unwrap_or_else(|| "none".into())
                        )));
                    }
                },
            };
        let stage = own::stage_name(&self.dir, "send");
        match atomic::write_atomic(self.io(), &stage, &dest, bytes, Clobber::No)? {
            Placed::Done => Ok(ImportedAsk::Written),
            Placed::Exists => {
                let b = here(self)?.unwrap_or_default();
                let r = same_or_refused(&b, bytes, &id);
                // Asked here meanwhile under the same id: the marker this import made is not
                // that request's.
                if made_marker && r != ImportedAsk::AlreadyHere {
                    self.io().remove(&mpath)?;
                    self.io().sync_dir(&self.dir)?;
                }
                Ok(r)
            }
        }
    }

    /// Writes here the outcome the request's home recorded (the bridge's import), byte for
    /// byte, created exclusively: it must be a valid outcome of the request here (§6), and the
    /// request must have been asked on another host (one asked here gets its outcome here).
    /// Another outcome in its place (written by hand: nothing here records one for such a
    /// request) is quarantined, and the home's taken.
    pub fn import_outcome(&self, bytes: &[u8]) -> Result<ImportedAsk> {
        let Some(id) = object(bytes)
            .ok()
            .and_then(|m| m.get("id").and_then(Value::as_str).map(str::to_string))
        else {
            return Ok(ImportedAsk::Refused("not an outcome: no `id`".into()));
        };
        if let Some(why) = id_problem(&id) {
            return Ok(ImportedAsk::Refused(format!(
                "invalid request id {id:?}: {why}"
            )));
        }
        if self.home(&id)?.is_none() {
            return Ok(ImportedAsk::Refused(format!(
                "{id}: asked on this host, whose outcome is recorded here"
            )));
        }
        let (request, rb) = match self.read_request(&id)? {
            Ok(r) => r,
            Err(r) => return Ok(ImportedAsk::Refused(r.to_string())),
        };
        if let Err(why) = Outcome::parse(bytes, &request, &rb) {
            return Ok(ImportedAsk::Refused(format!(
                "{id}: not its outcome: {why}"
            )));
        }
        let dest = self.outcome_path(&id);
        for _ in 0..RETRIES {
            let stage = own::stage_name(&self.dir, "send");
            match atomic::write_atomic(self.io(), &stage, &dest, bytes, Clobber::No)? {
                Placed::Done => return Ok(ImportedAsk::Written),
                Placed::Exists => match self.io().read_untrusted(&dest, OUTCOME_CAP)? {
                    ReadOutcome::Bytes(b, _) if b == bytes => return Ok(ImportedAsk::AlreadyHere),
                    // No sigbox process records an outcome here for a request asked
                    // elsewhere: one that is not the home's was written by hand, and the
                    // home's decision replaces it (moved aside, with its reason).
                    ReadOutcome::Bytes(b, _) if Outcome::parse(&b, &request, &rb).is_ok() => {
                        self.quarantine(
                            &id,
                            "an outcome written on this host for a request asked on another, \
                             whose home recorded another one",
                        )?;
                    }
                    ReadOutcome::Gone => {}
                    // Not a valid outcome: moved aside, and the write tried again.
                    _ => {
                        self.read_outcome(&request, &rb)?;
                    }
                },
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            Some(&dest),
            "files that are not valid outcomes keep taking this name; nothing was imported",
        ))
    }

    /// Applies, on the request's home, an answer proposed on `from_host` (the bridge's
    /// import): [`Asks::answer`]'s steps 2 to 6, so that a late or second answer is refused
    /// here as anywhere; the outcome, when it is this answer, names the proposal. `Err(why)`
    /// for a proposal not applied.
    pub fn apply_proposal(
        &self,
        bytes: &[u8],
        from_host: &str,
    ) -> Result<std::result::Result<Outcome, String>> {
        let m = match object(bytes) {
            Ok(m) => m,
            Err(why) => return Ok(Err(format!("not a proposal: {why}"))),
        };
        let text = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or_default();
        let id = text("id");
        if m.get("kind").and_then(Value::as_str) != Some(PROPOSAL_KIND) {
            return Ok(Err(format!(
                "not a proposal: `kind` is not {PROPOSAL_KIND:?}"
            )));
        }
        if let Some(why) = id_problem(id) {
            return Ok(Err(format!("invalid request id {id:?}: {why}")));
        }
        let p = match parse_proposal(bytes, id, text("proposal")) {
            Ok(p) => p,
            Err(why) => return Ok(Err(format!("{id}: not a proposal: {why}"))),
        };
        if let Some(h) = self.home(id)? {
            return Ok(Err(format!("{id}: asked on host {h}, not here")));
        }
        let rb = match self.read_request(id)? {
            Ok((_, rb)) => rb,
            Err(r) => return Ok(Err(r.to_string())),
        };
        if text("request") != digest(&rb) {
            return Ok(Err(format!(
                "{id}: the proposal is for another request under this id (its digest)"
            )));
        }
        let mut extra = Map::new();
        extra.insert("proposal".into(), p.proposal.clone().into());
        extra.insert("answered_on".into(), from_host.into());
        Ok(self
            .answer_here(id, &p.choice, p.message.as_deref(), &p.by, &extra)?
            .map_err(|r| r.to_string()))
    }

    /// Every valid request here with its files: what the bridge carries (spec/asks.md §8).
    pub fn files(&self) -> Result<Vec<AskFiles>> {
        let mut ids = Vec::new();
        for e in self.io().list(&self.dir, true)? {
            if let Some(id) = e
                .name
                .to_str()
                .filter(|n| !n.starts_with('.'))
                .and_then(|n| n.strip_suffix(REQUEST_SUFFIX))
            {
                ids.push(id.to_string());
            }
        }
        let mut proposals = self.proposal_files(&ids)?;
        let mut out = Vec::new();
        for id in ids {
            let Ok((request, rb)) = self.read_request(&id)? else {
                continue;
            };
            let outcome = match self
                .io()
                .read_untrusted(&self.outcome_path(&id), OUTCOME_CAP)?
            {
                ReadOutcome::Bytes(b, _) if Outcome::parse(&b, &request, &rb).is_ok() => Some(b),
                _ => None,
            };
            let home = match self.home(&id) {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!("{e}");
                    continue;
                }
            };
            let mine = proposals.remove(&id).unwrap_or_default();
            out.push(AskFiles {
                proposals: mine
                    .into_iter()
                    .filter(|(pid, b)| parse_proposal(b, &id, pid).is_ok())
                    .collect(),
                id,
                home,
                request: rb,
                outcome,
            });
        }
        Ok(out)
    }

    /// The proposal files here of each of `ids`: (proposal id, bytes).
    fn proposal_files(&self, ids: &[String]) -> Result<HashMap<String, Vec<ProposalFile>>> {
        let mut out: HashMap<String, Vec<ProposalFile>> = HashMap::new();
        for e in self.io().list(&self.dir, true)? {
            let Some(name) = e.name.to_str().filter(|n| !n.starts_with('.')) else {
                continue;
            };
            let Some((id, pid)) = name
                .strip_suffix(".json")
                .and_then(|n| n.rsplit_once(PROPOSAL_INFIX))
            else {
                continue;
            };
            if name.ends_with(OUTCOME_SUFFIX) || !ids.iter().any(|i| i == id) {
                continue;
            }
            if let ReadOutcome::Bytes(b, _) = self
                .io()
                .read_untrusted(&self.dir.join(name), OUTCOME_CAP)?
            {
                out.entry(id.to_string())
                    .or_default()
                    .push((pid.to_string(), b));
            }
        }
        Ok(out)
    }
}

/// A proposal file's id and bytes.
type ProposalFile = (String, Vec<u8>);

/// A proposal file of `id` named `pid`, or why it is not one.
fn parse_proposal(bytes: &[u8], id: &str, pid: &str) -> std::result::Result<Proposal, String> {
    let m = object(bytes)?;
    let text = |k: &str| m.get(k).and_then(Value::as_str);
    if text("kind") != Some(PROPOSAL_KIND) || text("id") != Some(id) {
        return Err("not a proposal of this request (kind, id)".into());
    }
    if text("proposal") != Some(pid)
        || pid.len() != 32
        || !pid.bytes().all(|c| c.is_ascii_hexdigit())
    {
        return Err("its `proposal` is not its name's 32 hex digits".into());
    }
    let by = text("answered_by").ok_or("`answered_by` is not text")?;
    if let Some(why) = person_problem(by) {
        return Err(format!("`answered_by`: {why}"));
    }
    let home = text("home").ok_or("`home` is not text")?;
    let at = text("proposed_at")
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .ok_or("`proposed_at` is not an instant")?
        .with_timezone(&Utc);
    let message = match m.get("message") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err("`message` is not text".into()),
    };
    Ok(Proposal {
        id: id.to_string(),
        proposal: pid.to_string(),
        home: home.to_string(),
        choice: text("choice").ok_or("`choice` is not text")?.to_string(),
        message,
        by: by.to_string(),
        at,
    })
}

fn same_or_refused(here: &[u8], imported: &[u8], id: &str) -> ImportedAsk {
    if here == imported {
        ImportedAsk::AlreadyHere
    } else {
        ImportedAsk::Refused(format!(
            "{id}: another request under this id is here (asked here, or imported from \
             another host): left as it is"
        ))
    }
}

fn bad_marker(path: &std::path::Path, why: &str) -> Error {
    Error::new(
        ErrorKind::InvalidSignal,
        Some(path),
        format!("not a valid marker of the host a request was asked on: {why}"),
    )
}
