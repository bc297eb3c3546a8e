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
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use super::Mailbox;
use super::delivery::{Deliveries, Delivery, HandOver, Orphan};
use super::report::Pass;
use super::route::{Action, Item, Source, Who, consumer_agent, decide};
use super::scan::Scan;
use crate::error::{Error, ErrorKind, Result};

/// When a pass held back by a bridge (spec/bridge.md §5) says to look again.
const HELD_RECHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// How a pass hands its deliveries over and when it stops early.
///
/// A pass claims in groups and makes each group durable together (spec §9.2); with
/// [`Mailbox::pass_with`], each group is handed to the caller as soon as it is durable, so
/// a consumer that stops (a signal, a closed output) holds at most one group it has not
/// passed on.
#[derive(Clone, Copy, Debug, Default)]
pub struct PassControl<'a> {
    max: Option<usize>,
    stop: Option<&'a AtomicBool>,
    idle: Option<&'a AtomicBool>,
    ack_later: bool,
    keep_handed: bool,
}

impl<'a> PassControl<'a> {
    /// No limit, no stop flag: the whole pass, as [`Mailbox::pass`] runs it.
    pub fn new() -> PassControl<'a> {
        PassControl::default()
    }

    /// Delivers at most `n` signals; the rest wait for the next pass. Default: no limit.
    pub fn max(&mut self, n: usize) -> &mut Self {
        self.max = Some(n);
        self
    }

    /// Stops claiming once `flag` is set (say, by a signal handler): the claims already made
    /// are committed and handed over, nothing more is claimed. Default: none.
    pub fn stop_when(&mut self, flag: &'a AtomicBool) -> &mut Self {
        self.stop = Some(flag);
        self
    }

    /// Cleared when the pass starts and set again when it returns, after its last hand-over:
    /// while it is set, the caller holds no claim it has not been handed. A signal handler
    /// that ends the process only while this flag is set never drops a claim. Default: none.
    pub fn idle_flag(&mut self, flag: &'a AtomicBool) -> &mut Self {
        self.idle = Some(flag);
        self
    }

    /// Leaves what the hand-over accepts in flight, unacknowledged, until [`Mailbox::ack`]
    /// or the next pass of the handle for the agent, instead of acknowledging each group as
    /// soon as the hand-over accepts it: for a caller that acts on the signals after the pass
    /// returns. Default: acknowledged at once.
    pub fn ack_later(&mut self) -> &mut Self {
        self.ack_later = true;
        self
    }

    /// Leaves what earlier passes of the handle delivered in flight instead of acknowledging
    /// it when this pass starts: for a caller that has not passed those signals on yet (a
    /// wait gathering several passes before it returns, a consumer whose caller was
    /// interrupted). They stay in flight until [`Mailbox::ack`] or a pass without this.
    /// Default: acknowledged when the next pass starts.
    pub fn keep_handed(&mut self) -> &mut Self {
        self.keep_handed = true;
        self
    }

    /// True once the stop flag is set.
    pub fn stopped(&self) -> bool {
        self.stop.is_some_and(|f| f.load(Ordering::Acquire))
    }

    fn should_stop(&self, delivered: usize) -> bool {
        self.stopped() || self.max.is_some_and(|m| delivered >= m)
    }
}

/// Holds a pass's idle flag cleared, and sets it again however the pass returns.
struct Busy<'a>(Option<&'a AtomicBool>);

impl<'a> Busy<'a> {
    fn start(flag: Option<&'a AtomicBool>) -> Busy<'a> {
        if let Some(f) = flag {
            f.store(false, Ordering::SeqCst);
        }
        Busy(flag)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.0 {
            f.store(true, Ordering::SeqCst);
        }
    }
}

impl Mailbox {
    /// Runs one checkpoint pass for `agent` in `state` (see the routing table in
    /// `spec/mailbox.md`).
    ///
    /// First it acknowledges what this handle's previous pass for `agent` delivered (as
    /// [`Mailbox::ack`] does), and delivers again, marked ([`Signal::redelivery`](crate::Signal::redelivery)), what
    /// consumers of `agent` that died left claimed and never handed over.
    ///
    /// **Durability:** every delivered signal has been durably claimed (moved into this
    /// handle's slot in `claimed/` with both directories fsynced) or durably acked before this
    /// returns: it is never delivered again unmarked, also after a crash. It stays in flight
    /// until acknowledged ([`Mailbox::ack`] or the next pass of this handle): if the process
    /// dies first, the agent's next pass delivers it again, marked.
    pub fn pass(&self, agent: &str, state: Option<&str>) -> Result<Pass> {
        self.pass_with(
            agent,
            state,
            PassControl::new().ack_later(),
            &mut |_| Ok(()),
        )
    }

    /// [`Mailbox::pass`], handing each group of deliveries to `hand_over` as soon as it is
    /// durable, in FIFO order, and stopping early as `control` says. A group `hand_over`
    /// accepts (returns `Ok`) is acknowledged at once, unless `control` says
    /// [`PassControl::ack_later`]: returning `Ok` means the caller has it (say, printed and
    /// flushed). `Pass::delivered` holds what `hand_over` accepted. When
    /// `hand_over` fails (a closed output), the pass claims nothing more and reports the
    /// failure (as its error, or in `Pass::interrupted` after earlier groups were handed
    /// over); the group it failed to take is put back, pending again.
    ///
    /// **Durability:** as [`Mailbox::pass`]: every signal handed over is durably claimed or
    /// acked first, and `processed/` is fsynced after each group is accepted.
    pub fn pass_with(
        &self,
        agent: &str,
        state: Option<&str>,
        control: &PassControl<'_>,
        hand_over: HandOver<'_>,
    ) -> Result<Pass> {
        let mut pass = self
            .pass_by_fs_clock(agent, state, control, hand_over)
            .map_err(|e| self.missing_layout(e))?;
        // The pass decides by the filesystem's clock ([`Mailbox::fs_now`]); its caller waits
        // by its own: when a settling file becomes eligible, in this process's time.
        let skew = self.fs_skew_ns();
        if skew != 0 {
            let local = |t: SystemTime| crate::clock::time_of(crate::clock::ns_of(t) - skew);
            pass.next_check = pass.next_check.map(local);
            for s in &mut pass.settling {
                s.until = local(s.until);
            }
        }
        Ok(pass)
    }

    /// A pass's error caused by a layout directory that is missing (removed by hand, or a root
    /// made by another tool with only `inputs/`, `processed/` and `tmp/`), named as that, with
    /// what to do, instead of as a path inside it. Looked at only once a pass failed on a
    /// missing path: a pass that succeeds pays nothing for it.
    pub(super) fn missing_layout(&self, e: Error) -> Error {
        if e.io_error()
            .is_none_or(|e| e.kind() != std::io::ErrorKind::NotFound)
        {
            return e;
        }
        for dir in super::LAYOUT {
            let p = self.layout.root.join(dir);
            if matches!(self.io.stamp(&p), Ok(None)) {
                return Error::new(
                    ErrorKind::NotInitialized,
                    Some(&p),
                    "missing: the root is not a whole mailbox (run `sigbox init` on it: it adds \
                     what is missing and changes nothing else)",
                );
            }
        }
        e
    }

    /// [`Mailbox::pass_with`], its times by the filesystem's clock.
    fn pass_by_fs_clock(
        &self,
        agent: &str,
        state: Option<&str>,
        control: &PassControl<'_>,
        hand_over: HandOver<'_>,
    ) -> Result<Pass> {
        self.check_agent(agent)?;
        self.follow_root()?;
        let _busy = Busy::start(control.idle);
        let span = tracing::debug_span!("pass", agent, state);
        let _enter = span.enter();
        let is_orch = self.is_orchestrator(agent);
        let who = Who {
            agent,
            is_orch,
            approval: is_orch
                && state.is_some_and(|s| {
                    self.opts
                        .approval_states
                        .iter()
                        .any(|a| a.eq_ignore_ascii_case(s.trim()))
                }),
        };
        let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
        if !flights.contains_key(agent) {
            flights.insert(agent.to_string(), Default::default());
        }
        let flight = flights.get_mut(agent).expect("inserted above");
        // The previous pass's deliveries were handed over: acknowledge them. Then take over
        // what dead consumers of this agent left in flight; this also resolves claims a
        // crash interrupted halfway, before the scan could count their two links.
        if !control.keep_handed {
            self.ack_handed(flight)?;
        }
        // A running bridge holds this agent's signals back here: it belongs to another host,
        // or what it had not taken elsewhere is still on its way (spec/bridge.md §5). Its
        // signals wait (what dead consumers left, its buffer, its own in inputs/);
        // broadcasts, which travel apart, are delivered. Looked at only when the pass has
        // something of the agent's: an idle pass pays nothing for it.
        let hold = std::cell::OnceCell::new();
        let held = || *hold.get_or_init(|| self.bridge().holds(agent));
        let adopted = flight.adoption_mark();
        let mut orphans = self.orphans(agent, flight)?;
        if !orphans.is_empty() && held() {
            // Left for the bridge: the slots taken over just now are let go again.
            orphans.clear();
            flight.let_go_since(adopted);
        }
        let now = self.fs_now();
        // A subagent only ever acts on its own, broadcast, and (none) files: skip the rest by
        // name. APPROVE/SKIP are never for a subagent.
        let relevant = |target: &str| -> bool { is_orch || target == agent || target == "ALL" };
        let inputs = &self.layout.inputs;
        let mut scan = self.scan_cached(inputs, Source::Inputs, agent, &relevant, now)?;
        let own = self.layout.buffer_dir(agent);
        // A buffer planted as a link (or anything but a directory) is refused alone: the
        // signals in inputs/ are still delivered (spec/mailbox.md §8).
        let mut buf = match self.scan_cached(&own, Source::Buffer, agent, &|_| true, now) {
            Err(e) if self.refused_alone(&e).is_some() => {
                tracing::warn!("{e}; skipped until then, everything else is delivered");
                Scan::default()
            }
            other => other?,
        };
        let mine = |it: &Item| {
            it.signal_type.is_some_and(|ty| {
                consumer_agent(ty, &it.target, &self.opts.orchestrator) == Some(agent)
            })
        };
        let buffered = !buf.items.is_empty() || !buf.rejects.is_empty() || !buf.settling.is_empty();
        if (buffered || scan.items.iter().any(mine)) && held() {
            buf = Scan::default();
            scan.items.retain(|it| !mine(it));
            scan.note_check(now + HELD_RECHECK);
        }
        let mut pass = Pass::default();
        for s in &scan.settling {
            pass.note_settling(inputs.join(&s.name), s.until);
        }
        for s in &buf.settling {
            pass.note_settling(own.join(&s.name), s.until);
        }
        // A check no file names (a pass held back by a bridge).
        for at in [scan.next_check, buf.next_check].into_iter().flatten() {
            pass.next_check = Some(pass.next_check.map_or(at, |t| t.min(at)));
        }
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
        let mut deliveries = Deliveries::new(self, agent, flight, hand_over, !control.ack_later);
        let mut run = Run {
            who: &who,
            control,
            pass: &mut pass,
            deliveries: &mut deliveries,
        };
        let routed = self.route(&orphans, &items, &mut run);
        // Hand over what is durable: every delivery when all went well; after an error, the
        // deliveries that were made durable (the claims still pending are committed first,
        // when possible).
        let committed = deliveries.commit();
        let handed = deliveries.hand_out(&mut pass);
        if let Err(e) = routed.and(committed).and(handed) {
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

    /// Delivers again what dead consumers left (oldest first), then carries out the routing
    /// table for every item in FIFO order.
    fn route(&self, orphans: &[Orphan], items: &[Item], run: &mut Run<'_, '_, '_>) -> Result<()> {
        let agent = run.who.agent;
        for o in orphans {
            if run
                .control
                .should_stop(run.pass.delivered.len() + run.deliveries.len())
            {
                return run.deliveries.commit_and_hand_out(run.pass);
            }
            if let Some(d) = self.redeliver(o, agent, run.pass)? {
                let stop = d.signal.signal_type.stops_pass();
                run.deliveries.push(d);
                if stop {
                    run.pass.stopped = true;
                    return run.deliveries.commit_and_hand_out(run.pass);
                }
            }
        }
        let own = self.layout.buffer_dir(agent);
        let mut presence: HashMap<String, bool> = HashMap::new();
        let mut broadcasts: Vec<&Item> = Vec::new();
        let mut refused = Refused::default();
        for item in items {
            if run
                .control
                .should_stop(run.pass.delivered.len() + run.deliveries.len())
            {
                break;
            }
            let dir = match item.source {
                Source::Buffer => &own,
                Source::Inputs => &self.layout.inputs,
            };
            let present = |x: &str| {
                *presence
                    .entry(x.to_string())
                    .or_insert_with(|| self.is_present(x))
            };
            let delivery = match decide(item, run.who, present) {
                Action::Leave => None,
                // Claims join the batch: durable when it commits.
                Action::Claim => {
                    let slot = run.deliveries.slot()?;
                    let before = run.deliveries.len();
                    let mut d = run.deliveries.claim(&slot, dir, item, run.pass)?;
                    // Lost to the orchestrator, which moved it into this agent's buffer since
                    // the scan (the agent was absent a moment): taken from there in its turn,
                    // so that no later signal overtakes it (spec/mailbox.md §4).
                    if d.is_none()
                        && run.deliveries.len() == before
                        && item.source == Source::Inputs
                        && self.io.stamp(&own.join(&item.name))?.is_some()
                    {
                        let moved = Item {
                            source: Source::Buffer,
                            ..item.clone()
                        };
                        d = run.deliveries.claim(&slot, &own, &moved, run.pass)?;
                    }
                    // A claim by link is decided at the commit (§9.10): one that would stop
                    // the pass commits at once.
                    if d.is_none()
                        && run.deliveries.ends_linked()
                        && item.signal_type.is_some_and(|t| t.stops_pass())
                    {
                        run.deliveries.commit_and_hand_out(run.pass)?;
                        if run
                            .pass
                            .delivered
                            .last()
                            .is_some_and(|s| s.signal_type.stops_pass())
                        {
                            run.pass.stopped = true;
                            break;
                        }
                    }
                    d
                }
                Action::Ack => {
                    // It may quarantine from inputs/ (an fsync of inputs/): commit first. An
                    // ack is durable as soon as it is written.
                    run.deliveries.commit_and_hand_out(run.pass)?;
                    let slot = run.deliveries.slot()?;
                    match self.ack_once(&slot, item, agent, run.pass) {
                        Err(e) if refused.note(self.refused_alone(&e), &e) => None,
                        acked => {
                            if run.who.is_orch {
                                broadcasts.push(item);
                            }
                            acked?.map(|(signal, ack, marker)| Delivery::acked(signal, ack, marker))
                        }
                    }
                }
                Action::Buffer(x) => {
                    // The move into a buffer fsyncs inputs/: commit first, or the pending
                    // claims' removal from inputs/ could become durable before their arrival
                    // in their slot (lost in a crash).
                    run.deliveries.commit_and_hand_out(run.pass)?;
                    match self.buffer(item, x, run.pass) {
                        Err(e) if refused.note(self.refused_alone(&e), &e) => {}
                        moved => moved?,
                    }
                    None
                }
            };
            if let Some(d) = delivery {
                let stop = d.signal.signal_type.stops_pass();
                run.deliveries.push(d);
                if stop {
                    run.pass.stopped = true;
                    break;
                }
            }
            if run.deliveries.is_full() {
                run.deliveries.commit_and_hand_out(run.pass)?;
            }
        }
        // Archiving fsyncs processed/ and inputs/: commit first, so that a claim is never made
        // durable by another operation's fsyncs and then dropped when the commit fails.
        run.deliveries.commit_and_hand_out(run.pass)?;
        for item in broadcasts {
            match self.archive_if_acked(&item.name, agent) {
                Err(e) if refused.note(self.refused_alone(&e), &e) => {}
                archived => {
                    if let Some(a) = archived? {
                        run.pass.archived.push(a);
                    }
                }
            }
        }
        Ok(())
    }

    /// The one directory a refusal of a planted path concerns, when it concerns one broadcast
    /// or one buffer only: `acks/<id>` or `buffered/<Agent>` (or a path below them) that is a
    /// link, a FIFO, a socket or a file where a directory belongs. That broadcast or that
    /// buffer is refused; every other signal is delivered (spec/mailbox.md §8). A layout
    /// directory itself (`acks/`, `buffered/`, ...) stays an error of the whole pass.
    fn refused_alone(&self, e: &Error) -> Option<PathBuf> {
        if e.kind() != ErrorKind::PathEscape {
            return None;
        }
        let path = e.path()?;
        [&self.layout.acks, &self.layout.buffered]
            .into_iter()
            .find_map(|dir| {
                let rel = path.strip_prefix(dir).ok()?;
                let first = rel.components().next()?;
                Some(dir.join(first))
            })
    }
}

/// The broadcasts and buffers a pass refused (see [`Mailbox::refused_alone`]), each named
/// once on stderr.
#[derive(Default)]
struct Refused(HashSet<PathBuf>);

impl Refused {
    /// True when `e` is the refusal of `alone` (one broadcast or one buffer): it is noted, and
    /// warned about the first time.
    fn note(&mut self, alone: Option<PathBuf>, e: &Error) -> bool {
        let Some(dir) = alone else {
            return false;
        };
        if self.0.insert(dir) {
            tracing::warn!("{e}; skipped until then, everything else is delivered");
        }
        true
    }
}

/// The state of one pass that its steps share.
struct Run<'r, 'd, 'h> {
    who: &'r Who<'r>,
    control: &'r PassControl<'r>,
    pass: &'r mut Pass,
    /// The pass's deliveries: its one owner of claims, group commits and hand-overs.
    deliveries: &'r mut Deliveries<'d, 'h>,
}
