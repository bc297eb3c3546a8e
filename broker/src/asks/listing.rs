//! Listing the requests (spec/asks.md §7): where each stands, read without changing anything.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

use super::format::{Outcome, Request};
use super::refusal::Refusal;
use super::remote::{Proposal, ProposalStatus};
use super::{Asks, REQUEST_SUFFIX};
use crate::error::Result;

/// Where a request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Waiting for its answer.
    Open,
    /// Answered.
    Answered,
    /// Its deadline passed with no answer (recorded, or not yet recorded).
    Expired,
}

impl Status {
    /// `open`, `answered` or `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Open => "open",
            Status::Answered => "answered",
            Status::Expired => "expired",
        }
    }
}

/// One request and its outcome, as [`Asks::list`] finds them.
#[derive(Clone, Debug)]
pub struct AskState {
    /// The request.
    pub request: Request,
    /// Its outcome, when it has a valid one.
    pub outcome: Option<Outcome>,
    /// The request file.
    pub path: PathBuf,
    /// The host it was asked on, when another (spec/asks.md §8); `None`: this one.
    pub home: Option<String>,
    /// The answers proposed here for it (asked on another host), each with where it stands.
    pub proposals: Vec<(Proposal, ProposalStatus)>,
}

impl AskState {
    /// Where it stands at `now`: a request past its deadline with no outcome is expired.
    pub fn status(&self, now: DateTime<Utc>) -> Status {
        match &self.outcome {
            Some(Outcome::Answered(_)) => Status::Answered,
            Some(Outcome::Expired { .. }) => Status::Expired,
            None if self.request.deadline.is_some_and(|d| now >= d) => Status::Expired,
            None => Status::Open,
        }
    }
}

/// What [`Asks::list`] finds in `asks/`.
#[derive(Clone, Debug, Default)]
pub struct Listing {
    /// Every valid request, oldest first (by `asked_at`, then id).
    pub requests: Vec<AskState>,
    /// Request files that are not valid requests: the file and why.
    pub invalid: Vec<(PathBuf, String)>,
}

impl Asks<'_> {
    /// Every request in `asks/`, oldest first, with its outcome; request files that are not
    /// valid apart. Reads only: an invalid outcome file counts as none here.
    pub fn list(&self) -> Result<Listing> {
        let mut out = Listing::default();
        for e in self.io().list(&self.dir, true)? {
            let Some(name) = e.name.to_str() else {
                continue;
            };
            let Some(id) = name.strip_suffix(REQUEST_SUFFIX) else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            let path = self.dir.join(name);
            match self.read_request(id)? {
                Ok((request, bytes)) => {
                    let outcome = match self.peek_outcome(&request, &bytes)? {
                        Some(Ok(o)) => Some(o),
                        _ => None,
                    };
                    // A marker that is not one is shown as none here; `answer` names it.
                    let home = self.home(id).unwrap_or_default();
                    let mut proposals = Vec::new();
                    if home.is_some() {
                        for p in self.proposals(id)? {
                            let status = self.proposal_status(&p)?;
                            proposals.push((p, status));
                        }
                    }
                    out.requests.push(AskState {
                        request,
                        outcome,
                        path,
                        home,
                        proposals,
                    });
                }
                Err(Refusal::Unknown { .. }) => {}
                Err(r) => {
                    let why = match r {
                        Refusal::InvalidRequest { why, .. } | Refusal::InvalidId { why, .. } => why,
                        other => other.to_string(),
                    };
                    out.invalid.push((path, why));
                }
            }
        }
        out.requests.sort_by(|a, b| {
            (a.request.asked_at, &a.request.id).cmp(&(b.request.asked_at, &b.request.id))
        });
        Ok(out)
    }
}
