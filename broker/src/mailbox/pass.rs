//! One checkpoint pass (spec/mailbox.md §6, §9.2): scan `inputs/` and the agent's buffer,
//! quarantine what is invalid, then carry out [`decide`]'s action for each file in FIFO order,
//! committing claims in groups, and stop after a PAUSE or ABORT.
//!
//! The order of commits is the invariant this file keeps: a claim's removal from its source
//! directory must never become durable before its arrival in `processed/`. Every other
//! operation that fsyncs `inputs/` (a buffer move, a quarantine, an archive) therefore commits
//! the pending claims first.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::time::SystemTime;

use super::Mailbox;
use super::claim::Batch;
use super::report::Pass;
use super::route::{Action, Item, Source, Who, decide};
use crate::error::Result;

impl Mailbox {
    /// Runs one checkpoint pass for `agent` in `state` (see the routing table in
    /// `spec/mailbox.md`).
    ///
    /// **Durability:** every delivered signal has been durably claimed (moved to `processed/`
    /// with both directories fsynced) or durably acked before this returns: it is never
    /// delivered to this agent again, also after a crash.
    pub fn pass(&self, agent: &str, state: Option<&str>) -> Result<Pass> {
        self.check_agent(agent)?;
        let span = tracing::debug_span!("pass", agent, state);
        let _enter = span.enter();
        let is_orch = self.is_orchestrator(agent);
        let who = Who {
            agent,
            is_orch,
            approval: is_orch
                && state.is_some_and(|s| self.opts.approval_states.iter().any(|a| a == s)),
        };
        let now = SystemTime::now();
        // A subagent only ever acts on its own, broadcast, and (none) files: skip the rest by
        // name. APPROVE/SKIP are never for a subagent.
        let relevant = |target: &str| -> bool { is_orch || target == agent || target == "ALL" };
        let inputs = &self.layout.inputs;
        let mut scan = self.scan_cached(inputs, Source::Inputs, agent, &relevant, now)?;
        let own = self.layout.buffer_dir(agent);
        let buf = self.scan_cached(&own, Source::Buffer, agent, &|_| true, now)?;
        let mut pass = Pass {
            next_check: match (scan.next_check, buf.next_check) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            ..Pass::default()
        };
        scan.rejects.extend(buf.rejects);
        for r in scan.rejects {
            let dir = match r.source {
                Source::Inputs => inputs,
                Source::Buffer => &own,
            };
            self.quarantine_into(&mut pass, dir, &r.name, &r.reason, agent)?;
        }
        let mut items = scan.items;
        if !buf.items.is_empty() {
            // A crash during the orchestrator's move into this buffer can leave the signal in
            // both places. Resolve that before claiming, durably, or it would be delivered twice.
            let in_buffer: HashSet<OsString> = buf.items.iter().map(|i| i.name.clone()).collect();
            let mut dropped = false;
            let mut keep = Vec::with_capacity(items.len());
            for item in items {
                if in_buffer.contains(&item.name)
                    && self.same_signal(&inputs.join(&item.name), &own.join(&item.name))?
                {
                    self.io.remove(&inputs.join(&item.name))?;
                    dropped = true;
                } else {
                    keep.push(item);
                }
            }
            if dropped {
                self.io.sync_dir(inputs)?;
            }
            items = keep;
            items.extend(buf.items);
            items.sort_by(|a, b| (a.instant, &a.name).cmp(&(b.instant, &b.name)));
        }
        let mut batch = Batch::default();
        let routed = self.route(&items, &who, &mut pass, &mut batch);
        // Hand over what is durable: every delivery when all went well; after an error, the
        // deliveries that were made durable (the claims still pending are committed first,
        // when possible).
        let committed = self.commit(&mut batch);
        pass.delivered.extend(batch.into_durable());
        if let Err(e) = routed.and(committed) {
            if pass.delivered.is_empty() {
                return Err(e);
            }
            tracing::warn!(error = %e, "pass interrupted after deliveries");
            pass.interrupted = Some(e);
        }
        tracing::debug!(
            delivered = pass.delivered.len(),
            buffered = pass.buffered.len(),
            rejected = pass.rejected.len(),
            "pass done"
        );
        Ok(pass)
    }

    /// Carries out the routing table for every item in FIFO order.
    fn route(
        &self,
        items: &[Item],
        who: &Who<'_>,
        pass: &mut Pass,
        batch: &mut Batch,
    ) -> Result<()> {
        let agent = who.agent;
        let own = self.layout.buffer_dir(agent);
        let mut presence: HashMap<String, bool> = HashMap::new();
        let mut broadcasts: Vec<&Item> = Vec::new();
        for item in items {
            let dir = match item.source {
                Source::Buffer => &own,
                Source::Inputs => &self.layout.inputs,
            };
            let present = |x: &str| {
                *presence
                    .entry(x.to_string())
                    .or_insert_with(|| self.is_present(x))
            };
            let delivery = match decide(item, who, present) {
                Action::Leave => None,
                // Claims join the batch: durable when it commits.
                Action::Claim => self.claim(dir, &item.name, agent, pass, batch)?,
                Action::Ack => {
                    if who.is_orch {
                        broadcasts.push(item);
                    }
                    // It may quarantine from inputs/ (an fsync of inputs/): commit first. An
                    // ack is durable as soon as it is written.
                    self.commit(batch)?;
                    self.ack_once(&item.name, agent, pass)?
                        .map(super::claim::Delivery::durable)
                }
                Action::Buffer(x) => {
                    // The move into a buffer fsyncs inputs/: commit first, or the pending
                    // claims' removal from inputs/ could become durable before their arrival
                    // in processed/ (lost in a crash).
                    self.commit(batch)?;
                    self.buffer(&item.name, x, pass)?;
                    None
                }
            };
            if let Some(d) = delivery {
                let stop = d.signal.signal_type.stops_pass();
                batch.push(d);
                if stop {
                    pass.stopped = true;
                    break;
                }
            }
            if batch.is_full() {
                self.commit(batch)?;
            }
        }
        // Archiving fsyncs processed/ and inputs/: commit first, so that a claim is never made
        // durable by another operation's fsyncs and then dropped when the commit fails.
        self.commit(batch)?;
        for item in broadcasts {
            if let Some(id) = self.archive_if_acked(&item.name, agent)? {
                pass.archived.push(id);
            }
        }
        Ok(())
    }
}
