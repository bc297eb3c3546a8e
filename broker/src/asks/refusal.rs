//! Why an answer is not taken (spec/asks.md §4), one line each.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

use super::format::{Answer, Outcome, Request, instant};

/// Why an answer was not taken (spec/asks.md §4): one line each, by [`std::fmt::Display`].
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// The id breaks the rule of spec/asks.md §2.
    InvalidId {
        /// The id given.
        id: String,
        /// What breaks the rule.
        why: String,
    },
    /// The answerer's name is empty, too long or holds a control character.
    InvalidName {
        /// What is wrong.
        why: String,
    },
    /// There is no request with this id.
    Unknown {
        /// The id.
        id: String,
    },
    /// The request file is not a valid request.
    InvalidRequest {
        /// The request file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The request has its answer already.
    Answered {
        /// The id.
        id: String,
        /// When it was asked.
        asked_at: DateTime<Utc>,
        /// The one answer.
        answer: Answer,
    },
    /// The deadline passed with no answer.
    Expired {
        /// The id.
        id: String,
        /// The deadline.
        deadline: Option<DateTime<Utc>>,
    },
    /// The request was asked on another host, which decides its answer (spec/asks.md §8):
    /// [`Asks::answer_anywhere`](super::Asks::answer_anywhere) proposes one there.
    Elsewhere {
        /// The id.
        id: String,
        /// The host it was asked on.
        host: String,
    },
    /// The choice is not one the request offers.
    NotOffered {
        /// The id.
        id: String,
        /// The choice given.
        choice: String,
        /// The choices offered.
        choices: Vec<String>,
    },
}

impl Refusal {
    /// The refusal an answer gets when `request` has `outcome` already: who answered first,
    /// with what, when; or that it expired.
    pub fn of(request: &Request, outcome: Outcome) -> Refusal {
        refused_by(request, outcome)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::InvalidId { id, why } => write!(f, "invalid request id {id:?}: {why}"),
            Refusal::InvalidName { why } => write!(f, "invalid answerer name: {why}"),
            Refusal::Unknown { id } => write!(f, "{id}: no such request"),
            Refusal::InvalidRequest { path, why } => {
                write!(f, "{}: not a valid request: {why}", path.display())
            }
            Refusal::Answered {
                id,
                asked_at,
                answer,
            } => {
                let took = (answer.at - *asked_at).num_milliseconds().max(0) as f64 / 1000.0;
                write!(
                    f,
                    "{id}: already answered {:?} by {} at {} (took {took:.1} s)",
                    answer.choice,
                    answer.by,
                    instant(answer.at)
                )
            }
            Refusal::Expired { id, deadline } => match deadline {
                Some(d) => write!(f, "{id}: expired at {} with no answer", instant(*d)),
                None => write!(f, "{id}: expired with no answer"),
            },
            Refusal::Elsewhere { id, host } => write!(
                f,
                "{id}: asked on host {host}, which decides its answer: propose it with `sigbox \
                 answer` (it is carried there)"
            ),
            Refusal::NotOffered {
                id,
                choice,
                choices,
            } => write!(
                f,
                "{id}: {choice:?} is not offered ({})",
                choices.join(", ")
            ),
        }
    }
}

/// The refusal an answer gets when `request` has `outcome` already.
pub(super) fn refused_by(request: &Request, outcome: Outcome) -> Refusal {
    match outcome {
        Outcome::Answered(answer) => Refusal::Answered {
            id: request.id.clone(),
            asked_at: request.asked_at,
            answer,
        },
        Outcome::Expired { .. } => Refusal::Expired {
            id: request.id.clone(),
            deadline: request.deadline,
        },
    }
}
