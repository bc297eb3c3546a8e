//! The MCP server of one agent: its five tools (`check`, `wait`, `send`, `status`, `ask`) on
//! one checkpoint, and what it tracks so that nothing a tool returned is acknowledged before the
//! client had it (spec/mcp.md "Delivery"): the unreturned, the answered, the calls running.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use sigbox::{NewSignal, PassControl, ProblemKind, Signal, SignalType, Target};
use sigbox_client::Checkpoint;

use crate::wire::{
    AskArgs, AskOut, SendArgs, Sent, Signals, Status, WaitArgs, ask_result, ask_schema,
    sent_schema, signals_result, signals_schema, status_schema,
};

/// The longest a `wait` call blocks.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(600);

/// How often a blocked `wait` looks at its cancellation (it sleeps on filesystem events in
/// between; a signal wakes it at once).
pub(crate) const CANCEL_CHECK: Duration = Duration::from_millis(100);

/// How long an `ask` call waits when `wait_s` is not given.
pub(crate) const DEFAULT_ASK_WAIT: Duration = Duration::from_secs(60);

/// Whether every answer given so far was written whole to stdout and read from it: stdout
/// holds nothing unread (a pipe drained; anything but a pipe or a socket its peer reset,
/// spec/mcp.md "Delivery"). A client that sends its next call before reading the last
/// answer (requests written back to back) has its answers acknowledged by a later call, or
/// at exit, once read; never while they wait in the pipe or to be written.
pub(crate) fn answers_seen(
    answered: &Mutex<Vec<Answered>>,
    written: &Mutex<std::collections::HashSet<String>>,
) -> bool {
    let answered = answered.lock().unwrap_or_else(|e| e.into_inner());
    let written = written.lock().unwrap_or_else(|e| e.into_inner());
    answered
        .iter()
        .all(|(id, _)| written.contains(&crate::stdio::id_key(id)))
        && !matches!(
            crate::stdio::stdout_taken(),
            crate::stdio::Taken::Pending | crate::stdio::Taken::Unread
        )
}

/// Forgets the answers acknowledged (when `acked`), and every id written that no answer
/// still waiting for its acknowledgement needs (a `status`, a `send`, a call whose answer was
/// cancelled): `written` holds no more than the answers in flight, however long the session.
pub(crate) fn forget_answers(
    answered: &Mutex<Vec<Answered>>,
    written: &Mutex<std::collections::HashSet<String>>,
    acked: bool,
) {
    let mut answered = answered.lock().unwrap_or_else(|e| e.into_inner());
    if acked {
        answered.clear();
    }
    let waiting: std::collections::HashSet<String> = answered
        .iter()
        .map(|(id, _)| crate::stdio::id_key(id))
        .collect();
    written
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|id| waiting.contains(id));
}

/// A call's id and the signals it answered with.
pub(crate) type Answered = (rmcp::model::RequestId, Vec<Signal>);

#[derive(Clone)]
pub(crate) struct Server {
    pub(crate) checkpoint: Arc<Mutex<Checkpoint>>,
    /// A handle of its own on the mailbox, for `ask`: a request waits without the
    /// checkpoint's lock, so other calls run meanwhile.
    pub(crate) mailbox: Arc<sigbox::Mailbox>,
    pub(crate) agent: String,
    /// Signals were returned and not yet acknowledged.
    pub(crate) unacked: Arc<AtomicBool>,
    /// Claimed and not (known to be) returned: a call cancelled, or dropped, after its pass
    /// claimed. The next call returns them; nothing is acknowledged while any wait here.
    /// Changed only under the checkpoint's lock.
    pub(crate) unreturned: Arc<Mutex<Vec<Signal>>>,
    /// What each call answered and the client has not confirmed by calling again: a cancel
    /// naming one of them (the client drops an answer that arrives after its cancel) puts its
    /// signals back among the unreturned. Changed only under the checkpoint's lock.
    pub(crate) answered: Arc<Mutex<Vec<Answered>>>,
    /// The ids of the responses written whole to stdout ([`crate::stdio::Output`]).
    pub(crate) written: Arc<Mutex<std::collections::HashSet<String>>>,
    /// Tool calls running now.
    pub(crate) busy: Arc<AtomicUsize>,
    /// The client closed its end of the connection.
    pub(crate) closed: Arc<AtomicBool>,
    /// Reading stdin failed with a reset: a socket's peer closed it with answers unread.
    pub(crate) reset: Arc<AtomicBool>,
    /// `--channel`: the capability is declared.
    pub(crate) channel: bool,
    pub(crate) tool_router: ToolRouter<Self>,
}

/// Counts a call as running while it lives.
pub(crate) struct Busy(Arc<AtomicUsize>);

impl Busy {
    pub(crate) fn new(n: &Arc<AtomicUsize>) -> Busy {
        n.fetch_add(1, Ordering::SeqCst);
        Busy(Arc::clone(n))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Server {
    /// Runs `f` on the checkpoint in the blocking pool (passes do file I/O; waits sleep),
    /// under its lock.
    pub(crate) async fn with_checkpoint<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Checkpoint) -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        let cp = Arc::clone(&self.checkpoint);
        tokio::task::spawn_blocking(move || {
            let mut cp = cp.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut cp)
        })
        .await
        .map_err(|e| format!("internal error: {e}"))?
    }

    /// One pass (a wait of `slice`, or a poll when `None`) for a tool call, under the lock:
    /// first, what an earlier call claimed and never returned is taken (no pass then);
    /// else what earlier calls returned is acknowledged, when they were read (the client is
    /// calling again, and [`answers_seen`]), and the pass runs. Every claim goes into
    /// `unreturned` inside the lock, so a call dropped while it waits for this leaves its
    /// claims for the next call, never acknowledged unseen. Returns whether anything is there
    /// to return now.
    pub(crate) async fn pass(&self, slice: Option<Duration>) -> Result<bool, String> {
        let unacked = Arc::clone(&self.unacked);
        let unreturned = Arc::clone(&self.unreturned);
        let answered = Arc::clone(&self.answered);
        let written = Arc::clone(&self.written);
        self.with_checkpoint(move |cp| {
            let mut held = unreturned.lock().unwrap_or_else(|e| e.into_inner());
            if !held.is_empty() {
                return Ok(true);
            }
            let acked = unacked.load(Ordering::SeqCst) && answers_seen(&answered, &written);
            if acked {
                cp.ack().map_err(|e| e.to_string())?;
                unacked.store(false, Ordering::SeqCst);
            }
            forget_answers(&answered, &written, acked);
            let mut control = PassControl::new();
            control.ack_later().keep_handed();
            let got = match slice {
                Some(d) => cp.wait_with(Some(d), &control, &mut |_| Ok(())),
                None => cp.poll_with(&control, &mut |_| Ok(())),
            }
            .map_err(|e| e.to_string())?;
            held.extend(got);
            Ok(!held.is_empty())
        })
        .await
    }

    /// Takes what is claimed and not returned, to return it now (unless `ct` says the call
    /// was cancelled: then it stays for the next call). Once the client has closed its input,
    /// what is claimed stays too, and a call that holds claims says so: an empty list would
    /// tell a client still reading stdout that nothing came.
    pub(crate) fn take_unreturned(
        &self,
        id: &rmcp::model::RequestId,
        ct: &tokio_util::sync::CancellationToken,
        peer: &rmcp::Peer<rmcp::RoleServer>,
    ) -> Result<Vec<Signal>, String> {
        // A cancelled call's answer is not sent; nor is any once the client has closed the
        // connection (the server drains its calls): what they claimed stays for a successor.
        if ct.is_cancelled() || peer.is_transport_closed() {
            return Ok(Vec::new());
        }
        if self.closed.load(Ordering::SeqCst) {
            let held = self
                .unreturned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len();
            if held == 0 {
                return Ok(Vec::new());
            }
            return Err(format!(
                "the client closed its input while this call ran: the {held} signal(s) it \
                 claimed are kept, and come again (marked as redeliveries) at the agent's next \
                 checkpoint"
            ));
        }
        let _cp = self.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        let got = std::mem::take(&mut *self.unreturned.lock().unwrap_or_else(|e| e.into_inner()));
        if !got.is_empty() {
            self.answered
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((id.clone(), got.clone()));
            self.unacked.store(true, Ordering::SeqCst);
        }
        Ok(got)
    }
}

#[tool_router]
impl Server {
    pub(crate) fn new(
        checkpoint: Checkpoint,
        mailbox: sigbox::Mailbox,
        agent: String,
        channel: bool,
    ) -> Server {
        Server {
            checkpoint: Arc::new(Mutex::new(checkpoint)),
            mailbox: Arc::new(mailbox),
            agent,
            unacked: Arc::new(AtomicBool::new(false)),
            unreturned: Arc::new(Mutex::new(Vec::new())),
            answered: Arc::new(Mutex::new(Vec::new())),
            written: Arc::new(Mutex::new(std::collections::HashSet::new())),
            busy: Arc::new(AtomicUsize::new(0)),
            closed: Arc::new(AtomicBool::new(false)),
            reset: Arc::new(AtomicBool::new(false)),
            channel,
            tool_router: Self::tool_router(),
        }
    }

    /// Checkpoint: the signals waiting for this agent, oldest first; each is given once.
    #[tool(output_schema = signals_schema(), description = "Take the signals waiting for you, oldest first; each is returned once \
        (empty list: none). Call it at every step and obey: ABORT: stop and end your turn; \
        PAUSE: call no tools and start nothing until a RESUME (call wait); STEER: change course \
        as told; INFO: take note; RESUME: go on. redelivery set: it may have reached you \
        before.")]
    async fn check(
        &self,
        ctx: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<Json<Signals>, String> {
        let _busy = Busy::new(&self.busy);
        self.pass(None).await?;
        Ok(signals_result(
            &self.take_unreturned(&ctx.id, &ctx.ct, &ctx.peer)?,
        ))
    }

    /// Block until a signal arrives for this agent (or timeout_s passes); returns them.
    #[tool(output_schema = signals_schema(), description = "Wait for signals: returns as check does as soon as at least one \
        arrives for you, or an empty list once timeout_s passes (default 60, at most 600) or \
        the call is cancelled. Use it while paused (until a RESUME comes) or when idle.")]
    async fn wait(
        &self,
        Parameters(args): Parameters<WaitArgs>,
        ctx: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<Json<Signals>, String> {
        let (id, ct, peer) = (&ctx.id, &ctx.ct, &ctx.peer);
        let _busy = Busy::new(&self.busy);
        let secs = args.timeout_s.unwrap_or(60.0);
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!("timeout_s {secs}: a number of seconds, 0 to 600"));
        }
        let total = Duration::try_from_secs_f64(secs)
            .unwrap_or(MAX_WAIT)
            .min(MAX_WAIT);
        // Slices, each its own pass under the lock: other calls (send, status) run between
        // them, and a cancellation ends the wait within one slice.
        let deadline = Instant::now() + total;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let any = self.pass(Some(left.min(CANCEL_CHECK))).await?;
            let gone = peer.is_transport_closed() || self.closed.load(Ordering::SeqCst);
            if any || left <= CANCEL_CHECK || ct.is_cancelled() || gone {
                return Ok(signals_result(&self.take_unreturned(id, ct, peer)?));
            }
        }
    }

    /// Send a signal (type, message, target: an agent or ALL); returns its id.
    #[tool(output_schema = sent_schema(), description = "Send a signal, with you as its sender (from): to an agent, or to ALL \
        (the default), which every agent but you receives. Returns its id.")]
    async fn send(&self, Parameters(args): Parameters<SendArgs>) -> Result<Json<Sent>, String> {
        let _busy = Busy::new(&self.busy);
        let ty = SignalType::parse(&args.signal_type).ok_or_else(|| {
            format!(
                "unknown signal type {:?}: STEER, INFO, PAUSE, ABORT, APPROVE, SKIP or RESUME",
                args.signal_type
            )
        })?;
        let target = match args.target.as_deref() {
            None => Target::All,
            Some(t) => Target::parse_sent(t)?,
        };
        let mut s = NewSignal::new(ty);
        s.target(target).from(self.agent.clone());
        if let Some(m) = args.message {
            s.message(m);
        }
        let id = self
            .with_checkpoint(move |cp| cp.mailbox().send(&s).map_err(|e| e.to_string()))
            .await?;
        Ok(Json(Sent { id }))
    }

    /// Ask a person and wait for the one answer (spec/asks.md).
    #[tool(output_schema = ask_schema(), description = "Ask a person and wait for the answer \
        (their choice, and what they said). The request is kept until answered or past \
        timeout_s: when this call ends first (wait_s passed, or cancelled), status is open; ask \
        again with the returned key and the same message to go on waiting, never asking twice.")]
    async fn ask(
        &self,
        Parameters(args): Parameters<AskArgs>,
        ctx: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<Json<AskOut>, String> {
        let _busy = Busy::new(&self.busy);
        let seconds = |v: Option<f64>, name: &str, max: Option<Duration>| match v {
            None => Ok(None),
            Some(s) if s.is_finite() && s >= 0.0 => {
                let d = Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX);
                Ok(Some(max.map_or(d, |m| d.min(m))))
            }
            Some(s) => Err(format!("{name} {s}: a number of seconds, 0 or more")),
        };
        let wait = seconds(args.wait_s, "wait_s", Some(MAX_WAIT))?.unwrap_or(DEFAULT_ASK_WAIT);
        let mut new = sigbox::asks::NewAsk::new(&self.agent, &args.message);
        if let Some(c) = args.choices {
            new = new.choices(c);
        }
        if let Some(t) = &args.to {
            new = new.to(t);
        }
        if let Some(k) = &args.key {
            new = new.key(k);
        }
        if let Some(t) = seconds(args.timeout_s, "timeout_s", None)? {
            new = new.timeout(t);
        }
        let mb = Arc::clone(&self.mailbox);
        let agent = self.agent.clone();
        let (ct, peer, closed) = (ctx.ct.clone(), ctx.peer.clone(), Arc::clone(&self.closed));
        tokio::task::spawn_blocking(move || {
            let asks = sigbox::asks::Asks::new(&mb);
            // Durable before it waits: a cancelled or ended call leaves the request open.
            let asked = asks.ask(&new).map_err(|e| e.to_string())?;
            let r = asked.request;
            if let Some(o) = &asked.outcome {
                return Ok(ask_result(&r, Some(o)));
            }
            let until = Instant::now() + wait;
            let mut stop = || {
                ct.is_cancelled()
                    || peer.is_transport_closed()
                    || closed.load(Ordering::SeqCst)
                    || Instant::now() >= until
            };
            match sigbox_client::wait_outcome(&mb, &r.id, &agent, Some(CANCEL_CHECK), &mut stop)
                .map_err(|e| e.to_string())?
            {
                sigbox_client::Waited::Outcome(o) => Ok(ask_result(&r, Some(&o))),
                sigbox_client::Waited::Stopped => Ok(ask_result(&r, None)),
            }
        })
        .await
        .map_err(|e| format!("internal error: {e}"))?
    }

    /// Mailbox status: pending per target, settling, invalid, in flight, quarantined.
    #[tool(output_schema = status_schema(), description = "Look without taking anything: how many signals wait for you, \
        pending signals per target, and files not deliverable (settling, invalid, in flight, \
        quarantined).")]
    async fn status(&self) -> Result<Json<Status>, String> {
        let _busy = Busy::new(&self.busy);
        let agent = self.agent.clone();
        self.with_checkpoint(move |cp| {
            let mb = cp.mailbox();
            let mut pending = std::collections::BTreeMap::new();
            let mut mine = 0;
            for p in mb.pending().map_err(|e| e.to_string())? {
                let key = p
                    .buffered_for
                    .clone()
                    .unwrap_or_else(|| p.target.to_string());
                // A broadcast counts until this agent has acked it; its own never reaches it.
                let acked =
                    p.target == Target::All && mb.acked_by(&p.id).is_ok_and(|a| a.contains(&agent));
                let own = p.from.as_deref() == Some(agent.as_str());
                if key == agent || (p.target == Target::All && !acked && !own) {
                    mine += 1;
                }
                *pending.entry(key).or_insert(0) += 1;
            }
            let (mut settling, mut invalid, mut in_flight) = (0, 0, 0);
            for p in mb.problems().map_err(|e| e.to_string())? {
                match p.kind {
                    ProblemKind::Settling { .. } => settling += 1,
                    ProblemKind::Invalid { .. } => invalid += 1,
                    ProblemKind::InFlight { count, .. } | ProblemKind::Held { count, .. } => {
                        in_flight += count;
                    }
                    _ => {}
                }
            }
            let quarantined = mb.rejected().map_err(|e| e.to_string())?.len() as u64;
            Ok(Json(Status {
                agent,
                pending_for_agent: mine,
                pending,
                settling,
                invalid,
                in_flight: in_flight as u64,
                quarantined,
            }))
        })
        .await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    /// A cancelled call's answer is dropped by the client even when it was already sent:
    /// its signals go back among the unreturned, for the next call.
    async fn on_cancelled(
        &self,
        notification: rmcp::model::CancelledNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleServer>,
    ) {
        let Some(id) = notification.request_id else {
            return;
        };
        let _cp = self.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        let mut answered = self.answered.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = answered.iter().position(|(a, _)| *a == id) {
            let (_, signals) = answered.remove(i);
            let mut back = self.unreturned.lock().unwrap_or_else(|e| e.into_inner());
            let later = std::mem::take(&mut *back);
            back.extend(signals);
            back.extend(later);
        }
    }

    /// A request the SDK could not read as the method it names lands here: a known method
    /// whose params are missing or malformed (`tools/call` without `params`) is an invalid
    /// params error (JSON-RPC -32602) naming it and its form; only an unknown method is
    /// "method not found".
    async fn on_custom_request(
        &self,
        request: rmcp::model::CustomRequest,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CustomResult, rmcp::ErrorData> {
        let method = request.method.as_str();
        let form = match method {
            "tools/call" => Some("{\"name\": TOOL, \"arguments\": {...}}"),
            "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" => {
                Some("{\"cursor\"?: STRING}")
            }
            "initialize" => Some(
                "{\"protocolVersion\": STRING, \"capabilities\": {...}, \"clientInfo\": \
                 {\"name\": STRING, \"version\": STRING}}",
            ),
            "ping"
            | "completion/complete"
            | "logging/setLevel"
            | "prompts/get"
            | "resources/read"
            | "resources/subscribe"
            | "resources/unsubscribe" => Some("the method's params"),
            _ => None,
        };
        Err(match form {
            Some(form) => rmcp::ErrorData::invalid_params(
                format!("{method}: params missing or malformed; expected {form}"),
                None,
            ),
            None => rmcp::ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
                None,
            ),
        })
    }

    fn get_info(&self) -> ServerConfig {
        let mut caps = ServerCapabilities::builder().enable_tools().build();
        if self.channel {
            caps.experimental = Some(
                [("claude/channel".to_string(), serde_json::Map::new())]
                    .into_iter()
                    .collect(),
            );
        }
        ServerConfig::new(caps)
            .with_server_info(Implementation::new("sigbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "The sigbox mailbox of agent {}: call check at each step; obey ABORT (stop), \
                 PAUSE (stop acting; wait until RESUME), STEER (change course).",
                self.agent
            ))
    }
}
