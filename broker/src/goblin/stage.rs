//! The Goblin stage machine (spec/goblin.md, "The stage machine"): the stages, the
//! transitions the signals drive, the retry limit, and the persisted pipeline state. Pure.

use super::signal::GoblinSignal;

/// Pipeline stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Scoping.
    Scope,
    /// Building.
    Build,
    /// Reviewing.
    Review,
    /// Testing.
    Test,
    /// Finished successfully.
    Done,
    /// Gave up after too many retries.
    Failed,
}

impl Stage {
    /// The upper-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Scope => "SCOPE",
            Stage::Build => "BUILD",
            Stage::Review => "REVIEW",
            Stage::Test => "TEST",
            Stage::Done => "DONE",
            Stage::Failed => "FAILED",
        }
    }

    /// Parses a stage name, case-insensitively.
    pub fn parse(s: &str) -> Option<Stage> {
        [
            Stage::Scope,
            Stage::Build,
            Stage::Review,
            Stage::Test,
            Stage::Done,
            Stage::Failed,
        ]
        .into_iter()
        .find(|st| st.as_str().eq_ignore_ascii_case(s.trim()))
    }

    /// True for DONE and FAILED.
    pub fn is_terminal(self) -> bool {
        matches!(self, Stage::Done | Stage::Failed)
    }
}

/// Retries allowed before a pipeline fails (upstream's MAX_RETRIES).
pub const MAX_RETRIES: u32 = 3;

/// The stage machine: where `signal` takes a pipeline in `stage` that has retried `retries`
/// times. `None` when `signal` is not a transition of `stage`. A backward transition (changes
/// requested, tests failed) is a retry; the fourth one goes to FAILED instead.
pub fn next_stage(stage: Stage, signal: GoblinSignal, retries: u32) -> Option<(Stage, u32)> {
    use GoblinSignal::*;
    let (to, retry) = match (stage, signal) {
        (Stage::Scope, ScopeComplete) => (Stage::Build, false),
        (Stage::Build, BuildComplete) => (Stage::Review, false),
        (Stage::Review, ReviewApproved) => (Stage::Test, false),
        (Stage::Review, ReviewChangesRequested) => (Stage::Build, true),
        (Stage::Test, TestPassed) => (Stage::Done, false),
        (Stage::Test, TestFailed) => (Stage::Review, true),
        _ => return None,
    };
    if retry {
        let r = retries + 1;
        Some(if r > MAX_RETRIES {
            (Stage::Failed, r)
        } else {
            (to, r)
        })
    } else {
        Some((to, retries))
    }
}

/// The persisted pipeline state (`.goblin/.sigbox-state.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelineState {
    /// Current stage.
    pub stage: Stage,
    /// Retries so far.
    pub retries: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine() {
        use GoblinSignal::*;
        assert_eq!(
            next_stage(Stage::Scope, ScopeComplete, 0),
            Some((Stage::Build, 0))
        );
        assert_eq!(
            next_stage(Stage::Build, BuildComplete, 0),
            Some((Stage::Review, 0))
        );
        assert_eq!(
            next_stage(Stage::Review, ReviewApproved, 1),
            Some((Stage::Test, 1))
        );
        assert_eq!(
            next_stage(Stage::Review, ReviewChangesRequested, 0),
            Some((Stage::Build, 1))
        );
        assert_eq!(
            next_stage(Stage::Test, TestPassed, 2),
            Some((Stage::Done, 2))
        );
        assert_eq!(
            next_stage(Stage::Test, TestFailed, 2),
            Some((Stage::Review, 3))
        );
        assert_eq!(
            next_stage(Stage::Test, TestFailed, 3),
            Some((Stage::Failed, 4))
        );
        assert_eq!(next_stage(Stage::Build, ReviewApproved, 0), None);
        assert_eq!(next_stage(Stage::Done, TestPassed, 0), None);
    }
}
