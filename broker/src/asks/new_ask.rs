//! A request before it is written (spec/asks.md §3): what the asker gives, checked before
//! anything is made of it; and what [`Asks::ask`](super::Asks::ask) did.

use std::time::Duration;

use serde_json::Value;

use super::format::{Outcome, Request};
use super::id::{DEFAULT_CHOICES, choices_problem, key_problem, person_problem};

/// A request to ask, before it is written (spec/asks.md §3).
#[derive(Clone, Debug)]
pub struct NewAsk {
    pub(super) from: String,
    pub(super) to: Option<String>,
    pub(super) message: String,
    pub(super) choices: Vec<String>,
    pub(super) timeout: Option<Duration>,
    pub(super) key: Option<String>,
    pub(super) context: Option<Value>,
}

impl NewAsk {
    /// A request from the agent `from` with `message`, the default choices, no deadline, no
    /// key.
    pub fn new(from: &str, message: &str) -> NewAsk {
        NewAsk {
            from: from.to_string(),
            to: None,
            message: message.to_string(),
            choices: DEFAULT_CHOICES.iter().map(|c| c.to_string()).collect(),
            timeout: None,
            key: None,
            context: None,
        }
    }

    /// Whom it is for (a person's name, `Orchestrator`); default: anyone.
    pub fn to(mut self, whom: &str) -> NewAsk {
        self.to = Some(whom.to_string());
        self
    }

    /// The choices offered; default `approve`, `deny`.
    pub fn choices<I: IntoIterator<Item = S>, S: Into<String>>(mut self, c: I) -> NewAsk {
        self.choices = c.into_iter().map(Into::into).collect();
        self
    }

    /// The deadline, this long after asking; default: none.
    pub fn timeout(mut self, t: Duration) -> NewAsk {
        self.timeout = Some(t);
        self
    }

    /// The key: the id is then `<from>.<key>`, the same at every ask (re-attach).
    pub fn key(mut self, key: &str) -> NewAsk {
        self.key = Some(key.to_string());
        self
    }

    /// What it is about (an object: `tool_name`, `tool_input`, ...).
    pub fn context(mut self, context: Value) -> NewAsk {
        self.context = Some(context);
        self
    }

    pub(super) fn problem(&self) -> Option<String> {
        if let Some(why) = crate::signal::agent_name_problem(&self.from) {
            return Some(format!(
                "invalid agent name {}: {why}",
                crate::signal::quoted_name(&self.from)
            ));
        }
        if let Some(why) = self.to.as_deref().and_then(person_problem) {
            return Some(format!(
                "invalid --to {}: {why}",
                crate::signal::quoted_name(self.to.as_deref().unwrap_or(""))
            ));
        }
        if let Some(why) = self.key.as_deref().and_then(key_problem) {
            return Some(format!("invalid key: {why}"));
        }
        if let Some(why) = choices_problem(&self.choices) {
            return Some(format!("invalid choices: {why}"));
        }
        if self.context.as_ref().is_some_and(|c| !c.is_object()) {
            return Some("the context is not an object".into());
        }
        None
    }
}

/// What [`Asks::ask`] did.
#[derive(Clone, Debug)]
pub struct Asked {
    /// The request, as on disk.
    pub request: Request,
    /// True when the id was asked before (a key used again): no second request was written,
    /// this is the first one (re-attach, spec/asks.md §3).
    pub attached: bool,
    /// Its outcome when it already has one (a re-attach after an answer or an expiry).
    pub outcome: Option<Outcome>,
}
