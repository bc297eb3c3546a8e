//! `sigbox-mcp --as AGENT`: the mailbox as a Model Context Protocol server over stdio, on the
//! official Rust SDK (`rmcp`). Four tools: `check`, `wait`, `send`, `status` (spec/mcp.md).
//!
//! The server holds the agent's presence while it lives (the orchestrator leaves its signals in
//! `inputs/` instead of buffering them), and releases it when it exits. Signals a tool returned
//! are acknowledged by the next tool call, or when the client closes the connection with no
//! call running once stdout shows that it read the answers ([`answers_read`]); otherwise, or
//! when the server dies first, its successor's first call gives them again, marked as
//! redeliveries (spec/mailbox.md §9.2, spec/mcp.md "Delivery").

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sigbox::{NewSignal, PassControl, ProblemKind, Signal, SignalType, Target};
use sigbox_client::Checkpoint;

/// How long a server whose client closed its input waits for stdout to show that the last
/// answers were read (a pipe drained, or its reader gone; a socket closed by its peer).
const CLOSE_GRACE: Duration = Duration::from_millis(500);

/// The longest a `wait` call blocks.
const MAX_WAIT: Duration = Duration::from_secs(600);

/// How often a blocked `wait` looks at its cancellation (it sleeps on filesystem events in
/// between; a signal wakes it at once).
const CANCEL_CHECK: Duration = Duration::from_millis(100);

/// The mailbox as an MCP server for one agent, over stdio.
#[derive(Debug, Parser)]
#[command(name = "sigbox-mcp", version)]
struct Args {
    /// The agent this server checks in for.
    #[arg(long = "as")]
    agent: String,
    /// Mailbox root directory [env: SIGBOX_ROOT] [default: signals]; the option wins over
    /// the variable.
    #[arg(long)]
    root: Option<PathBuf>,
    /// The agent's state (the orchestrator's approval states admit APPROVE and SKIP).
    #[arg(long)]
    state: Option<String>,
    /// How long a dropped file must be unchanged before it is read (spec/mailbox.md §5): a
    /// number and its unit (250ms, 2s), or 0 [env: SIGBOX_SETTLE] [default: 2s]; the option
    /// wins over the variable.
    #[arg(long, value_parser = sigbox_client::parse_settle)]
    settle: Option<Duration>,
    /// Push each signal into the session as it arrives, as a Claude Code channel
    /// (`notifications/claude/channel`, experimental capability `claude/channel`).
    #[arg(long)]
    channel: bool,
}

/// `wait`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct WaitArgs {
    /// Seconds to wait at most (default 60, at most 600).
    timeout_s: Option<f64>,
}

/// `send`'s arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct SendArgs {
    /// STEER, INFO, PAUSE, ABORT, APPROVE, SKIP or RESUME.
    #[serde(rename = "type")]
    signal_type: String,
    /// The text.
    message: Option<String>,
    /// An agent, or ALL (default).
    target: Option<String>,
}

/// What `check` and `wait` return.
#[derive(Debug, Serialize, schemars::JsonSchema)]
struct Signals {
    /// The signals taken for you, oldest first; empty when none came.
    signals: Vec<SignalOut>,
}

/// A signal as a tool returns it: what a model acts on, nothing more.
#[derive(Debug, Serialize, schemars::JsonSchema)]
struct SignalOut {
    /// Its id.
    id: String,
    /// ABORT: stop, end your turn. PAUSE: no tools, nothing new until a RESUME (call wait).
    /// STEER: change course as told. INFO: take note. RESUME: go on. APPROVE, SKIP: answers
    /// to an approval.
    #[serde(rename = "type")]
    signal_type: String,
    /// Its text, if any.
    message: Option<String>,
    /// Its sender.
    #[serde(skip_serializing_if = "Option::is_none")]
    from: Option<String>,
    /// When it was sent (UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    created_at: Option<String>,
    /// ALL for a broadcast.
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<String>,
    /// Given again: an earlier answer with it may not have reached you (a connection or
    /// server died). Act on it unless you already did.
    #[serde(skip_serializing_if = "Option::is_none")]
    redelivery: Option<u32>,
}

/// What `send` returns.
#[derive(Debug, Serialize, schemars::JsonSchema)]
struct Sent {
    /// The id of the signal sent.
    id: String,
}

/// What `status` returns: counts, nothing taken.
#[derive(Debug, Serialize, schemars::JsonSchema)]
struct Status {
    /// You, the agent this server is for.
    agent: String,
    /// Signals waiting for you (check or wait takes them).
    pending_for_agent: u64,
    /// Pending signals per target (an agent, ALL) or agent buffer.
    pending: std::collections::BTreeMap<String, u64>,
    /// Files dropped in and not yet settled.
    settling: u64,
    /// Files to be quarantined as invalid.
    invalid: u64,
    /// Signals taken by a consumer and not yet acknowledged.
    in_flight: u64,
    /// Files quarantined.
    quarantined: u64,
}

/// A call's id and the signals it answered with.
type Answered = (rmcp::model::RequestId, Vec<Signal>);

#[derive(Clone)]
struct Server {
    checkpoint: Arc<Mutex<Checkpoint>>,
    agent: String,
    /// Signals were returned and not yet acknowledged.
    unacked: Arc<AtomicBool>,
    /// Claimed and not (known to be) returned: a call cancelled, or dropped, after its pass
    /// claimed. The next call returns them; nothing is acknowledged while any wait here.
    /// Changed only under the checkpoint's lock.
    unreturned: Arc<Mutex<Vec<Signal>>>,
    /// What each call answered and the client has not confirmed by calling again: a cancel
    /// naming one of them (the client drops an answer that arrives after its cancel) puts its
    /// signals back among the unreturned. Changed only under the checkpoint's lock.
    answered: Arc<Mutex<Vec<Answered>>>,
    /// Tool calls running now.
    busy: Arc<AtomicUsize>,
    /// The client closed its end of the connection.
    closed: Arc<AtomicBool>,
    /// Reading stdin failed with a reset: a socket's peer closed it with answers unread.
    reset: Arc<AtomicBool>,
    /// `--channel`: the capability is declared.
    channel: bool,
    tool_router: ToolRouter<Self>,
}

/// The output schemas, written by hand rather than derived: every byte of the tool list is
/// paid in tokens at every model call, so they say what a model needs and nothing more (no
/// `$schema`, no integer formats). Each describes what [`Json`] of its type serializes to.
fn schema(v: Value) -> Arc<rmcp::model::JsonObject> {
    match v {
        Value::Object(o) => Arc::new(o),
        _ => unreachable!("a schema is an object"),
    }
}

/// `check`'s and `wait`'s output: [`Signals`].
fn signals_schema() -> Arc<rmcp::model::JsonObject> {
    schema(
        json!({"type": "object", "required": ["signals"], "properties": {"signals": {
        "type": "array", "description": "Oldest first; empty: none came.",
        "items": {"type": "object", "required": ["id", "type", "message"], "properties": {
            "id": {"type": "string"},
            "type": {"type": "string",
                     "description": "ABORT, PAUSE, STEER, INFO, RESUME, APPROVE or SKIP"},
            "message": {"type": ["string", "null"]},
            "from": {"type": "string", "description": "sender"},
            "created_at": {"type": "string", "description": "sent at, with the sender's offset"},
            "target": {"const": "ALL", "description": "a broadcast"},
            "redelivery": {"type": "integer", "description": "given again: an earlier answer \
                with it may not have reached you (a connection or server died); act on it \
                unless you already did"}}}}}}),
    )
}

/// `send`'s output: [`Sent`].
fn sent_schema() -> Arc<rmcp::model::JsonObject> {
    schema(json!({"type": "object", "required": ["id"],
                  "properties": {"id": {"type": "string", "description": "the signal's id"}}}))
}

/// `status`'s output: [`Status`].
fn status_schema() -> Arc<rmcp::model::JsonObject> {
    let n = json!({"type": "integer"});
    schema(json!({"type": "object",
        "required": ["agent", "pending_for_agent", "pending", "settling", "invalid", "in_flight",
                     "quarantined"],
        "properties": {
            "agent": {"type": "string", "description": "you"},
            "pending_for_agent": {"type": "integer", "description": "waiting for you"},
            "pending": {"type": "object", "additionalProperties": n,
                        "description": "per target (an agent, ALL) or agent buffer"},
            "settling": {"type": "integer", "description": "dropped files not yet settled"},
            "invalid": {"type": "integer", "description": "to be quarantined"},
            "in_flight": {"type": "integer", "description": "taken, not yet acknowledged"},
            "quarantined": n}}))
}

/// A signal as a tool returns it.
fn signal_out(s: &Signal) -> SignalOut {
    SignalOut {
        id: s.id.clone(),
        signal_type: s.signal_type.as_str().to_string(),
        message: s.message.clone(),
        from: s.from.clone(),
        // As the sender wrote it (its offset kept, spec/cli.md), to the second: fewer tokens.
        created_at: s.created_at_rfc3339_secs(),
        target: (s.target == Target::All).then(|| "ALL".to_string()),
        redelivery: (s.redelivery() > 0).then(|| s.redelivery()),
    }
}

/// `check`'s and `wait`'s result: structured (its schema is the tool's output schema), and
/// the same JSON as text.
fn signals_result(signals: &[Signal]) -> Json<Signals> {
    Json(Signals {
        signals: signals.iter().map(signal_out).collect(),
    })
}

/// The client's half of stdio, noting when it ends: a client that closed its end reads no
/// more answers, so nothing claimed from then on is returned (or acknowledged at exit). A
/// read that fails with a reset (stdin and stdout one socket, closed by a client that left
/// answers unread) is noted apart.
struct Input<R> {
    inner: R,
    closed: Arc<AtomicBool>,
    reset: Arc<AtomicBool>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Input<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(res) = &r
            && (res.is_err() || buf.filled().len() == before)
        {
            if res
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
            {
                self.reset.store(true, Ordering::SeqCst);
            }
            self.closed.store(true, Ordering::SeqCst);
        }
        r
    }
}

/// Counts a call as running while it lives.
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn new(n: &Arc<AtomicUsize>) -> Busy {
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
    async fn with_checkpoint<T: Send + 'static>(
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
    /// else what earlier calls returned is acknowledged (the client is calling again, so it
    /// had those answers) and the pass runs. Every claim goes into `unreturned` inside the
    /// lock, so a call dropped while it waits for this leaves its claims for the next call,
    /// never acknowledged unseen. Returns whether anything is there to return now.
    async fn pass(&self, slice: Option<Duration>) -> Result<bool, String> {
        let unacked = Arc::clone(&self.unacked);
        let unreturned = Arc::clone(&self.unreturned);
        let answered = Arc::clone(&self.answered);
        self.with_checkpoint(move |cp| {
            let mut held = unreturned.lock().unwrap_or_else(|e| e.into_inner());
            if !held.is_empty() {
                return Ok(true);
            }
            if unacked.swap(false, Ordering::SeqCst) {
                cp.ack().map_err(|e| e.to_string())?;
                answered.lock().unwrap_or_else(|e| e.into_inner()).clear();
            }
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
    /// was cancelled: then it stays for the next call).
    fn take_unreturned(
        &self,
        id: &rmcp::model::RequestId,
        ct: &tokio_util::sync::CancellationToken,
        peer: &rmcp::Peer<rmcp::RoleServer>,
    ) -> Vec<Signal> {
        // A cancelled call's answer is not sent; nor is any once the client has closed the
        // connection (the server drains its calls): what they claimed stays for a successor.
        if ct.is_cancelled() || peer.is_transport_closed() || self.closed.load(Ordering::SeqCst) {
            return Vec::new();
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
        got
    }
}

#[tool_router]
impl Server {
    fn new(checkpoint: Checkpoint, agent: String, channel: bool) -> Server {
        Server {
            checkpoint: Arc::new(Mutex::new(checkpoint)),
            agent,
            unacked: Arc::new(AtomicBool::new(false)),
            unreturned: Arc::new(Mutex::new(Vec::new())),
            answered: Arc::new(Mutex::new(Vec::new())),
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
            &self.take_unreturned(&ctx.id, &ctx.ct, &ctx.peer),
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
                return Ok(signals_result(&self.take_unreturned(id, ct, peer)));
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

/// `--channel`: waits for signals on its own handle and pushes each as a channel
/// notification; acknowledges them once stdout shows the client read them ([`Taken`]: a pipe
/// drained; a socket still open [`CLOSE_GRACE`] later, or closed with nothing unread), and
/// stops when the connection is gone or the pushes were never read (what it claimed and
/// could not hand over is given again, marked).
async fn push_channel(peer: rmcp::Peer<rmcp::RoleServer>, cp: Checkpoint) {
    use rmcp::model::{CustomNotification, ServerNotification};
    let cp = Arc::new(Mutex::new(cp));
    loop {
        let handle = Arc::clone(&cp);
        let got = tokio::task::spawn_blocking(move || {
            handle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .wait(Some(Duration::from_secs(1)))
        })
        .await;
        let signals = match got {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "channel: a wait failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(_) => return,
        };
        if signals.is_empty() {
            if peer.is_transport_closed() {
                return;
            }
            continue;
        }
        for s in &signals {
            let mut meta = serde_json::Map::new();
            meta.insert("id".into(), json!(s.id));
            meta.insert("type".into(), json!(s.signal_type.as_str()));
            if let Some(f) = &s.from {
                meta.insert("from".into(), json!(f));
            }
            if s.redelivery() > 0 {
                meta.insert("redelivery".into(), json!(s.redelivery().to_string()));
            }
            let content = format!(
                "{}: {}",
                s.signal_type.as_str(),
                s.message.as_deref().unwrap_or("(no message)")
            );
            let n = CustomNotification::new(
                "notifications/claude/channel",
                Some(json!({"content": content, "meta": meta})),
            );
            if peer
                .send_notification(ServerNotification::CustomNotification(n))
                .await
                .is_err()
            {
                return;
            }
        }
        // Written is not read: wait for stdout to show the client took them.
        let since = Instant::now();
        loop {
            match stdout_taken() {
                Taken::Read => break,
                Taken::Unknown if since.elapsed() >= CLOSE_GRACE => break,
                Taken::Unread => {
                    tracing::warn!(
                        "channel: the client left without reading a push: it comes again, \
                         marked, at the agent's next checkpoint"
                    );
                    return;
                }
                Taken::Pending | Taken::Unknown => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        let handle = Arc::clone(&cp);
        let _ = tokio::task::spawn_blocking(move || {
            if let Err(e) = handle.lock().unwrap_or_else(|e| e.into_inner()).ack() {
                tracing::warn!(error = %e, "channel: cannot acknowledge what was pushed");
            }
        })
        .await;
    }
}

/// What stdout says, at one look, of the bytes written to it so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Taken {
    /// All read: a pipe with nothing left in it; a socket its peer closed with nothing unread;
    /// or something that is not a pipe or a socket (a file, a terminal: written is handed
    /// over, as `sigbox poll` counts it).
    Read,
    /// Never read: a pipe whose reader has gone with bytes left in it; a socket its peer
    /// closed with bytes unread (the kernel reports `ECONNRESET` then).
    Unread,
    /// A pipe with bytes left in it, its reader still there.
    Pending,
    /// A socket its peer keeps open: no socket tells how much its peer has taken.
    Unknown,
}

/// One look at stdout ([`Taken`]).
fn stdout_taken() -> Taken {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    use rustix::fs::FileType;
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let fd = stdout.as_fd();
    let Ok(stat) = rustix::fs::fstat(fd) else {
        return Taken::Unread;
    };
    let events = |flags: PollFlags| {
        let mut fds = [PollFd::new(&fd, flags)];
        match poll(&mut fds, Some(&Timespec::default())) {
            Ok(_) => fds[0].revents(),
            Err(_) => PollFlags::ERR,
        }
    };
    match FileType::from_raw_mode(stat.st_mode) {
        FileType::Fifo => match rustix::io::ioctl_fionread(fd) {
            Ok(0) => Taken::Read,
            // A pipe's writer sees POLLERR once no reader is left.
            Ok(_) if !events(PollFlags::OUT).contains(PollFlags::ERR) => Taken::Pending,
            _ => Taken::Unread,
        },
        FileType::Socket => {
            if !events(PollFlags::empty()).intersects(PollFlags::HUP | PollFlags::ERR) {
                return Taken::Unknown;
            }
            match rustix::net::sockopt::socket_error(fd) {
                Ok(Ok(())) => Taken::Read,
                _ => Taken::Unread,
            }
        }
        _ => Taken::Read,
    }
}

/// Whether the client read everything written to stdout, once it closed its input, waiting
/// up to `grace` for stdout to tell ([`Taken`]): a pipe still holding bytes after `grace`
/// was not read; a socket whose peer keeps it open past `grace` is a client shutting down
/// cleanly (it closed its input and waits for the server to exit, reading meanwhile), taken
/// as read, since a client that dies closes its socket at once.
fn answers_read(grace: Duration) -> bool {
    let deadline = Instant::now() + grace;
    loop {
        match stdout_taken() {
            Taken::Read => return true,
            Taken::Unread => return false,
            Taken::Pending if Instant::now() >= deadline => return false,
            Taken::Unknown if Instant::now() >= deadline => return true,
            Taken::Pending | Taken::Unknown => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line naming the file and the reason, as the `sigbox` CLI says it; exit 2.
            let line = format!("{e:#}").replace('\n', " ");
            eprintln!("sigbox-mcp: {line}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    // stdout is the protocol: logs go to stderr, warnings only unless RUST_LOG says more.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .fmt_fields(sigbox_client::logfmt::text_fields())
        .init();
    let agent = args.agent.trim().to_string();
    if let Some(why) = sigbox::agent_name_problem(&agent) {
        anyhow::bail!("invalid agent name {agent:?} (--as): {why}");
    }
    let root = sigbox_client::root_from(args.root.clone()).map_err(anyhow::Error::msg)?;
    let settle = sigbox_client::settle_from(args.settle).map_err(anyhow::Error::msg)?;
    let durability = sigbox_client::durability_from(None).map_err(anyhow::Error::msg)?;
    let mut opts = sigbox::MailboxOptions::new();
    opts.settle(settle).durability(durability);
    let mut cp =
        Checkpoint::with_options(&opts, &root, &agent).map_err(|e| anyhow::anyhow!("{e}"))?;
    cp.state(args.state.as_deref());
    // The channel's own handle: its claims are exclusive with the tools' (one rename each).
    let pusher = if args.channel {
        let mut p =
            Checkpoint::with_options(&opts, &root, &agent).map_err(|e| anyhow::anyhow!("{e}"))?;
        p.state(args.state.as_deref());
        Some(p)
    } else {
        None
    };
    let server = Server::new(cp, agent, args.channel);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let service = server
            .clone()
            .serve({
                let (read, write) = rmcp::transport::stdio_pipes();
                (
                    Input {
                        inner: read,
                        closed: Arc::clone(&server.closed),
                        reset: Arc::clone(&server.reset),
                    },
                    write,
                )
            })
            .await
            .map_err(|e| anyhow::anyhow!("MCP initialization failed: {e}"))?;
        if let Some(p) = pusher {
            tokio::spawn(push_channel(service.peer().clone(), p));
        }
        let _ = service.waiting().await;
        anyhow::Ok(())
    })?;
    // The client closed its input. The answers it had not confirmed by calling again are
    // handed over only if no call was running and stdout shows they were read; otherwise the
    // next server gives them again, marked.
    let unreturned = server
        .unreturned
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_empty();
    if server.busy.load(Ordering::SeqCst) == 0
        && unreturned
        && server.unacked.load(Ordering::SeqCst)
    {
        if !server.reset.load(Ordering::SeqCst) && answers_read(CLOSE_GRACE) {
            let cp = server.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = cp.ack() {
                tracing::warn!(error = %e, "cannot acknowledge the last answers");
            }
        } else {
            tracing::warn!(
                "the client closed the connection without reading the last answers: their \
                 signals come again, marked, at the agent's next checkpoint"
            );
        }
    }
    // Exit without waiting for the blocking pool (a stdin read may still be parked there).
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(())
}
