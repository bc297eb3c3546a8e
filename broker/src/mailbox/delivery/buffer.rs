//! The orchestrator's move into an absent agent's buffer (spec/mailbox.md §6, §9.3).

use crate::atomic::{self, Claimed};
use crate::error::Result;
use crate::mailbox::report::{Buffered, Pass};
use crate::mailbox::route::Item;
use crate::mailbox::{Mailbox, lossy};
use crate::name;
use crate::name::own;

impl Mailbox {
    /// Moves a signal for absent agent `agent` into `buffered/<agent>/` (spec §9.3).
    pub(in crate::mailbox) fn buffer(
        &self,
        item: &Item,
        agent: &str,
        pass: &mut Pass,
    ) -> Result<()> {
        let name = item.name.as_os_str();
        // A canonical-looking file sigbox did not write settles first.
        if !self.may_move(&self.layout.inputs, name, pass)? {
            return Ok(());
        }
        let dir = self.layout.buffer_dir(agent);
        self.io.create_dir_durable(&dir)?;
        let src = self.layout.inputs.join(name);
        own::with_fresh_names(&dir, name, |_, dest| {
            match atomic::claim(&self.io, &src, &dest, || Ok(()))? {
                Claimed::Lost => {}
                // Routed on what the scan read: a dropped name used again meanwhile is another
                // file, for whoever it is for; it goes back, and settles.
                Claimed::Won(()) if self.moved_another(&dest, item)? => {}
                Claimed::Won(()) => pass.buffered.push(Buffered {
                    id: self
                        .identify(&dest, name)?
                        .map(|(id, _)| id)
                        .unwrap_or_else(|| name::signal_id(&lossy(name)).to_string()),
                    agent: agent.to_string(),
                }),
                Claimed::DestExists => {
                    if !self.same_signal(&src, &dest)? {
                        return Ok(None);
                    }
                    // A crash interrupted an earlier move of this very signal after the buffer
                    // side became durable: finish it by dropping the source.
                    self.io.remove(&src)?;
                    self.io.sync_dir(&self.layout.inputs)?;
                }
            }
            Ok(Some(()))
        })?;
        Ok(())
    }
}
