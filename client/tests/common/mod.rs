//! Helpers shared by the CLI test files.

use std::collections::HashSet;
use std::path::Path;

use sigbox::{Durability, MailboxOptions, NewSignal, SignalType, Target};

/// A new mailbox at `root` holding `n` STEER signals for the Executor; their ids.
pub(crate) fn mailbox_with(root: &Path, n: usize) -> HashSet<String> {
    let mb = MailboxOptions::new()
        .durability(Durability::RelaxedNoFsync)
        .init(root)
        .unwrap();
    (0..n)
        .map(|i| {
            mb.send(
                NewSignal::new(SignalType::Steer)
                    .target(Target::Agent("Executor".into()))
                    .message(format!("m{i}")),
            )
            .unwrap()
        })
        .collect()
}
