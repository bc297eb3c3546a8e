//! The routing table (spec/mailbox.md §6) as one pure decision: what a pass does with one
//! routable file, given who runs the pass. No effects: `pass.rs` carries the decisions out.

use std::ffi::OsString;

use crate::signal::{SignalType, Target};

/// Where a pending file lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    /// `inputs/`.
    Inputs,
    /// The agent's own `buffered/<agent>/`.
    Buffer,
}

/// A routable file found by a scan: what routing needs to know of it.
#[derive(Clone, Debug)]
pub(super) struct Item {
    pub(super) name: OsString,
    pub(super) source: Source,
    /// The FIFO instant, in nanoseconds since the Unix epoch (spec §4).
    pub(super) instant: i128,
    /// The type as written.
    pub(super) type_name: String,
    /// The type, when it is one sigbox knows.
    pub(super) signal_type: Option<SignalType>,
    pub(super) target: Target,
    /// For a dropped file: the inode and mtime the scan read it with. A claim takes the file
    /// only if it is still that one (a name used again meanwhile is another file, which the
    /// scan did not settle or route).
    pub(super) seen: Option<(u64, i128)>,
}

/// The agent whose consumer takes a signal of type `ty` for `target` (spec/mailbox.md §6,
/// spec/bridge.md §2): its target's; the orchestrator's for APPROVE, SKIP and no target; none
/// for a broadcast.
pub(super) fn consumer_agent<'a>(
    ty: SignalType,
    target: &'a Target,
    orchestrator: &'a str,
) -> Option<&'a str> {
    match target {
        _ if ty.is_approval() => Some(orchestrator),
        Target::All => None,
        Target::None => Some(orchestrator),
        Target::Agent(a) => Some(a),
    }
}

/// Who runs a pass, and what that allows.
#[derive(Clone, Copy, Debug)]
pub(super) struct Who<'a> {
    pub(super) agent: &'a str,
    pub(super) is_orch: bool,
    /// The orchestrator in one of its approval states: APPROVE and SKIP are for it.
    pub(super) approval: bool,
}

/// What a pass does with one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Action<'a> {
    /// Claim it into `processed/` and deliver it (§9.2).
    Claim,
    /// Move it into this absent agent's buffer (§9.3).
    Buffer(&'a str),
    /// A broadcast: deliver it once with an ack, leave the file (§9.4).
    Ack,
    /// Leave it where it is; it never blocks later files.
    Leave,
}

/// The routing table of spec §6 for one file. `present` answers whether an agent holds its
/// presence (asked only by the orchestrator, only for a signal aimed at another agent).
///
/// The rows apply in this order: an unknown type is left wherever it is (in a buffer too: only
/// a hand-placed file gets there, since the orchestrator buffers only known types); whatever
/// is in the agent's own buffer is claimed; APPROVE and SKIP go to the orchestrator in an
/// approval state and to nobody else; then the target decides. Invalid files never get here:
/// the scan sends them to quarantine.
pub(super) fn decide<'i>(
    item: &'i Item,
    who: &Who<'_>,
    present: impl FnOnce(&str) -> bool,
) -> Action<'i> {
    let Some(ty) = item.signal_type else {
        return Action::Leave;
    };
    if item.source == Source::Buffer {
        return Action::Claim;
    }
    if ty.is_approval() {
        return if who.approval {
            Action::Claim
        } else {
            Action::Leave
        };
    }
    match &item.target {
        Target::All => Action::Ack,
        Target::None if who.is_orch => Action::Claim,
        Target::None => Action::Leave,
        Target::Agent(a) if a == who.agent => Action::Claim,
        Target::Agent(x) if who.is_orch && !present(x) => Action::Buffer(x),
        Target::Agent(_) => Action::Leave,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUB: Who<'static> = Who {
        agent: "Executor",
        is_orch: false,
        approval: false,
    };
    const ORCH: Who<'static> = Who {
        agent: "Orchestrator",
        is_orch: true,
        approval: false,
    };
    const ORCH_APPROVING: Who<'static> = Who {
        agent: "Orchestrator",
        is_orch: true,
        approval: true,
    };

    fn item(source: Source, type_name: &str, target: Target) -> Item {
        Item {
            seen: None,
            name: "f.json".into(),
            source,
            instant: 0,
            type_name: type_name.into(),
            signal_type: SignalType::parse(type_name),
            target,
        }
    }

    fn agent(a: &str) -> Target {
        Target::Agent(a.into())
    }

    /// One named test per row of the routing table: `routes!(name: who, source, TYPE, target,
    /// present => action)`, where `present` is whether every other agent holds its presence.
    macro_rules! routes {
        ($($name:ident: $who:expr, $src:ident, $ty:literal, $target:expr, $present:literal => $want:expr;)*) => {
            $(
                #[test]
                fn $name() {
                    let it = item(Source::$src, $ty, $target);
                    assert_eq!(decide(&it, &$who, |_| $present), $want);
                }
            )*
        };
    }

    routes! {
        // in buffered/A/: claim, for either role, whatever the target says.
        sub_claims_from_its_buffer: SUB, Buffer, "STEER", agent("Executor"), true => Action::Claim;
        orch_claims_from_its_buffer: ORCH, Buffer, "INFO", agent("Orchestrator"), true => Action::Claim;
        // unknown type: leave, wherever it is.
        sub_leaves_an_unknown_type: SUB, Inputs, "NUDGE", agent("Executor"), true => Action::Leave;
        orch_leaves_an_unknown_type: ORCH, Inputs, "NUDGE", Target::None, false => Action::Leave;
        unknown_type_in_a_buffer_is_left: SUB, Buffer, "NUDGE", agent("Executor"), true => Action::Leave;
        // APPROVE / SKIP, any target: only the orchestrator, only in an approval state.
        sub_leaves_an_approve_for_it: SUB, Inputs, "APPROVE", agent("Executor"), true => Action::Leave;
        sub_leaves_a_skip: SUB, Inputs, "SKIP", Target::All, true => Action::Leave;
        orch_leaves_an_approve_outside_approval: ORCH, Inputs, "APPROVE", agent("Orchestrator"), true => Action::Leave;
        orch_claims_an_approve_in_approval: ORCH_APPROVING, Inputs, "APPROVE", agent("Orchestrator"), true => Action::Claim;
        orch_claims_a_skip_for_anyone_in_approval: ORCH_APPROVING, Inputs, "SKIP", agent("Planner"), false => Action::Claim;
        // target A: claim.
        sub_claims_its_own: SUB, Inputs, "STEER", agent("Executor"), true => Action::Claim;
        orch_claims_its_own: ORCH, Inputs, "PAUSE", agent("Orchestrator"), true => Action::Claim;
        // target another agent X.
        sub_leaves_another_agents: SUB, Inputs, "STEER", agent("Planner"), false => Action::Leave;
        orch_buffers_for_an_absent_agent: ORCH, Inputs, "STEER", agent("Planner"), false => Action::Buffer("Planner");
        orch_leaves_for_a_present_agent: ORCH, Inputs, "STEER", agent("Planner"), true => Action::Leave;
        // target ALL: deliver once with an ack.
        sub_acks_a_broadcast: SUB, Inputs, "INFO", Target::All, true => Action::Ack;
        orch_acks_a_broadcast: ORCH, Inputs, "ABORT", Target::All, true => Action::Ack;
        // no target: the orchestrator's.
        sub_leaves_no_target: SUB, Inputs, "INFO", Target::None, true => Action::Leave;
        orch_claims_no_target: ORCH, Inputs, "INFO", Target::None, true => Action::Claim;
        // STOP is ABORT.
        stop_is_routed_as_abort: SUB, Inputs, "stop", agent("Executor"), true => Action::Claim;
    }

    #[test]
    fn presence_is_asked_only_for_another_agent_by_the_orchestrator() {
        let ask = |who: &Who<'_>, target: Target| {
            let mut asked = None;
            let it = item(Source::Inputs, "STEER", target);
            decide(&it, who, |a| {
                asked = Some(a.to_string());
                true
            });
            asked
        };
        assert_eq!(ask(&ORCH, agent("Planner")), Some("Planner".into()));
        assert_eq!(ask(&SUB, agent("Planner")), None);
        assert_eq!(ask(&ORCH, agent("Orchestrator")), None);
        assert_eq!(ask(&ORCH, Target::All), None);
    }
}
