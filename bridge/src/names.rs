//! The names a bridge uses on the server, named once (spec/bridge.md §2).
//!
//! | name | what |
//! |---|---|
//! | stream `sigbox_<mailbox>` | work queue: `sigbox.<mailbox>.to.<agent>`, `sigbox.<mailbox>.orch` |
//! | stream `sigbox_<mailbox>_all` | broadcasts: `sigbox.<mailbox>.all` |
//! | consumer `to-<agent>` | an agent's signals, pulled where it is present |
//! | consumer `orch` | no target, APPROVE, SKIP: pulled where the orchestrator is present |
//! | consumer `host-<host>` | every broadcast, for one host |
//! | consumer `acks-<host>` | every broadcast ack (`sigbox.<mailbox>.ack`), for one host |
//! | key-value bucket `sigbox_<mailbox>_hosts` | each host's presence and counts |

use anyhow::{Result, bail};
use sigbox::{SignalType, Target};

/// The headers a bridge sets on every signal it publishes.
pub(crate) mod header {
    /// The canonical file name the signal is written under on the importing host.
    pub(crate) const NAME: &str = "Sigbox-Name";
    /// The host that published it.
    pub(crate) const HOST: &str = "Sigbox-Host";
    /// The signal's id on the host that published it.
    pub(crate) const ID: &str = "Sigbox-Id";
    /// On a hand-off mark (no signal): the revision of the agent's record (`agent.<agent>`)
    /// that took it from the host that publishes the mark, which holds nothing more for it
    /// (spec/bridge.md §5).
    pub(crate) const HANDOFF: &str = "Sigbox-Handoff";
}

/// One mailbox's names on the server.
#[derive(Clone, Debug)]
pub(crate) struct Names {
    mailbox: String,
}

/// True for a name that is one token in every place a bridge puts it (subjects, stream,
/// consumer and bucket names): letters, digits, `_` and `-`, 1 to 64 of them.
pub(crate) fn valid_token(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Names {
    pub(crate) fn new(mailbox: &str) -> Result<Names> {
        if !valid_token(mailbox) {
            bail!(
                "invalid mailbox name {mailbox:?}: 1 to 64 letters, digits, '_' or '-' (it \
                 names streams and subjects)"
            );
        }
        Ok(Names {
            mailbox: mailbox.to_string(),
        })
    }

    /// The mailbox's name.
    pub(crate) fn mailbox(&self) -> &str {
        &self.mailbox
    }

    /// The work-queue stream: targeted and orchestrator signals, each consumed once.
    pub(crate) fn work_stream(&self) -> String {
        format!("sigbox_{}", self.mailbox)
    }

    /// The broadcast stream: every host consumes every broadcast.
    pub(crate) fn broadcast_stream(&self) -> String {
        format!("sigbox_{}_all", self.mailbox)
    }

    /// The bucket of each host's presence and counts.
    pub(crate) fn hosts_bucket(&self) -> String {
        format!("sigbox_{}_hosts", self.mailbox)
    }

    /// The work stream's subjects.
    pub(crate) fn work_subjects(&self) -> Vec<String> {
        vec![format!("sigbox.{}.to.*", self.mailbox), self.orch_subject()]
    }

    pub(crate) fn agent_subject(&self, agent: &str) -> String {
        format!("sigbox.{}.to.{agent}", self.mailbox)
    }

    pub(crate) fn orch_subject(&self) -> String {
        format!("sigbox.{}.orch", self.mailbox)
    }

    pub(crate) fn broadcast_subject(&self) -> String {
        format!("sigbox.{}.all", self.mailbox)
    }

    /// Where a host's bridge answers while its process lives (spec/bridge.md §5): a request
    /// there that the server says nobody subscribes to means that bridge is not running (its
    /// connection is gone), without waiting for its entry to go silent. In no stream.
    pub(crate) fn alive_subject(&self, host: &str) -> String {
        format!("sigbox.{}.alive.{host}", self.mailbox)
    }

    /// Where broadcast acks are shared between hosts (in the broadcast stream).
    pub(crate) fn ack_subject(&self) -> String {
        format!("sigbox.{}.ack", self.mailbox)
    }

    /// Where a signal of type `ty` for `target` is published: APPROVE and SKIP, whatever
    /// their target, and signals without one go to the orchestrator (spec/mailbox.md §6).
    pub(crate) fn subject_for(&self, ty: SignalType, target: &Target) -> String {
        match target {
            _ if ty.is_approval() => self.orch_subject(),
            Target::All => self.broadcast_subject(),
            Target::Agent(a) => self.agent_subject(a),
            _ => self.orch_subject(),
        }
    }
}

/// An agent's consumer.
pub(crate) fn agent_consumer(agent: &str) -> String {
    format!("to-{agent}")
}

/// The orchestrator's consumer.
pub(crate) const ORCH_CONSUMER: &str = "orch";

/// A host's consumer of the acks other hosts share.
pub(crate) fn acks_consumer(host: &str) -> String {
    format!("acks-{host}")
}

/// A host's broadcast consumer.
pub(crate) fn host_consumer(host: &str) -> String {
    format!("host-{host}")
}

/// This host's name: `--host`, else the system's host name with every character a name
/// cannot hold replaced by `-`.
pub(crate) fn host_name(given: Option<&str>) -> Result<String> {
    if let Some(h) = given {
        if !valid_token(h) {
            bail!("invalid host name {h:?}: 1 to 64 letters, digits, '_' or '-'");
        }
        return Ok(h.to_string());
    }
    let uname = rustix::system::uname();
    let node = uname.nodename().to_string_lossy();
    let mut h: String = node
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if h.is_empty() {
        h = "host".into();
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approvals_and_untargeted_signals_go_to_the_orchestrator() {
        let n = Names::new("p").unwrap();
        let x = Target::Agent("Executor".into());
        assert_eq!(n.subject_for(SignalType::Steer, &x), "sigbox.p.to.Executor");
        assert_eq!(n.subject_for(SignalType::Approve, &x), "sigbox.p.orch");
        assert_eq!(
            n.subject_for(SignalType::Skip, &Target::All),
            "sigbox.p.orch"
        );
        assert_eq!(
            n.subject_for(SignalType::Info, &Target::All),
            "sigbox.p.all"
        );
        assert_eq!(
            n.subject_for(SignalType::Info, &Target::None),
            "sigbox.p.orch"
        );
    }

    #[test]
    fn names_that_would_break_a_subject_are_refused() {
        for bad in ["", "a.b", "a b", "a*", "a>", "é", &"x".repeat(65)] {
            assert!(Names::new(bad).is_err(), "{bad:?}");
            assert!(host_name(Some(bad)).is_err(), "{bad:?}");
        }
        assert!(host_name(None).is_ok_and(|h| valid_token(&h)));
    }
}
