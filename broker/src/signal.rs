//! What a signal is: its types, its targets and the agent-name rule, the delivered [`Signal`]
//! and the [`NewSignal`] a producer sends (spec/mailbox.md §3.1). Pure: no parsing, no I/O.

use std::fmt;
use std::path::PathBuf;

use chrono::{DateTime, FixedOffset};
use serde_json::{Map, Value};

/// The kinds of signal a mailbox routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SignalType {
    /// Change direction.
    Steer,
    /// Information; never restarts, halts or escalates.
    Info,
    /// Finish the atomic step, then wait for RESUME, ABORT or a new signal.
    Pause,
    /// Stop the session. `STOP` is an old alias.
    Abort,
    /// Orchestrator only, in an approval state.
    Approve,
    /// Orchestrator only, in an approval state.
    Skip,
    /// Ends a PAUSE. A sigbox extension: upstream Ralph has no RESUME.
    Resume,
}

impl SignalType {
    /// All types, in a stable order.
    pub const ALL: [SignalType; 7] = [
        SignalType::Steer,
        SignalType::Info,
        SignalType::Pause,
        SignalType::Abort,
        SignalType::Approve,
        SignalType::Skip,
        SignalType::Resume,
    ];

    /// Parses a type name, case-insensitively; `STOP` is `ABORT`. `None` for unknown types.
    pub fn parse(s: &str) -> Option<SignalType> {
        let s = s.trim();
        Some(match () {
            _ if s.eq_ignore_ascii_case("STEER") => SignalType::Steer,
            _ if s.eq_ignore_ascii_case("INFO") => SignalType::Info,
            _ if s.eq_ignore_ascii_case("PAUSE") => SignalType::Pause,
            _ if s.eq_ignore_ascii_case("ABORT") || s.eq_ignore_ascii_case("STOP") => {
                SignalType::Abort
            }
            _ if s.eq_ignore_ascii_case("APPROVE") => SignalType::Approve,
            _ if s.eq_ignore_ascii_case("SKIP") => SignalType::Skip,
            _ if s.eq_ignore_ascii_case("RESUME") => SignalType::Resume,
            _ => return None,
        })
    }

    /// The canonical upper-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            SignalType::Steer => "STEER",
            SignalType::Info => "INFO",
            SignalType::Pause => "PAUSE",
            SignalType::Abort => "ABORT",
            SignalType::Approve => "APPROVE",
            SignalType::Skip => "SKIP",
            SignalType::Resume => "RESUME",
        }
    }

    /// True for APPROVE and SKIP, which only the orchestrator takes, in an approval state.
    pub fn is_approval(self) -> bool {
        matches!(self, SignalType::Approve | SignalType::Skip)
    }

    /// True for PAUSE and ABORT, after which a checkpoint pass stops.
    pub fn stops_pass(self) -> bool {
        matches!(self, SignalType::Pause | SignalType::Abort)
    }

    /// True for RESUME, ABORT, STEER and INFO: the signals that end a PAUSE handler's wait
    /// (`wait_resume` in the client library and in Python). Another PAUSE, an APPROVE or a
    /// SKIP keeps it waiting.
    pub fn ends_pause_wait(self) -> bool {
        matches!(
            self,
            SignalType::Resume | SignalType::Abort | SignalType::Steer | SignalType::Info
        )
    }
}

impl fmt::Display for SignalType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a signal is for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Every agent, once each (a broadcast).
    All,
    /// No target: the orchestrator consumes it.
    None,
    /// One agent, by name.
    Agent(String),
}

/// The upstream Ralph roles; a target naming one of them in another case is read as the role.
pub const ROLES: [&str; 6] = [
    "Orchestrator",
    "Executor",
    "Planner",
    "Questioner",
    "Reviewer",
    "Librarian",
];

/// True when `name` may be used as an agent name: an ASCII letter, then up to 63 letters,
/// digits, `_` or `-`; `ALL` is reserved. The rule for [`Target::Agent`], and what keeps an agent
/// name from escaping the root when it names a buffer or a lock file.
pub fn valid_agent(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_alphabetic()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
        && !name.eq_ignore_ascii_case("ALL")
}

/// True when `name` may be a signal's sender (`from`): text on one line, not only blanks,
/// without control characters. A sender is not an agent: any such text names one.
/// [`Mailbox::send`](crate::Mailbox::send) refuses a signal whose sender breaks the rule.
pub fn valid_sender(name: &str) -> bool {
    !name.trim().is_empty() && !name.chars().any(char::is_control)
}

/// `name` quoted as a message that refuses it shows it: whole when it is short, else its first
/// 64 characters and an ellipsis (the reason says how long it is), so that a name of any size
/// makes a message of one line.
pub fn quoted_name(name: &str) -> String {
    const SHOWN: usize = 64;
    match name.char_indices().nth(SHOWN) {
        None => format!("{name:?}"),
        Some((cut, _)) => format!("{:?}…", &name[..cut]),
    }
}

/// Why `name` is not an agent name, as a reason that says what to write instead (the caller
/// quotes the name before it); `None` when [`valid_agent`] accepts it. Every place that takes
/// an agent name (a target, `--as`, the MCP server, the Python package) refuses with this
/// reason.
pub fn agent_name_problem(name: &str) -> Option<String> {
    if valid_agent(name) {
        return None;
    }
    const RULE: &str = "an agent name is an ASCII letter then up to 63 ASCII letters, digits, \
                        '_' or '-'";
    Some(if name.is_empty() {
        format!("the name is empty: {RULE}")
    } else if name.eq_ignore_ascii_case("ALL") {
        "ALL is reserved for broadcasts (a signal sent to ALL reaches every agent at its own \
         checkpoint), so no agent may be named so: use the agent's own name, such as Executor"
            .to_string()
    } else if name.len() > 64 {
        format!("it is {} bytes long: {RULE} (64 in all)", name.len())
    } else if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        format!("it holds {c:?}, which no agent name may: {RULE}")
    } else {
        let first = name.chars().next().unwrap_or(' ');
        format!("it starts with {first:?}: {RULE}")
    })
}

impl Target {
    /// Parses a target as written in a body: `ALL` (any case), an agent name, or empty/absent
    /// for none. Names that could escape the root or break canonical names are refused.
    pub fn parse(s: Option<&str>) -> std::result::Result<Target, String> {
        let Some(s) = s.map(str::trim).filter(|s| !s.is_empty()) else {
            return Ok(Target::None);
        };
        if s.eq_ignore_ascii_case("ALL") {
            return Ok(Target::All);
        }
        if let Some(role) = ROLES.iter().find(|r| r.eq_ignore_ascii_case(s)) {
            return Ok(Target::Agent((*role).to_string()));
        }
        match agent_name_problem(s) {
            None => Ok(Target::Agent(s.to_string())),
            Some(why) => Err(format!("invalid target {}: {why}", quoted_name(s))),
        }
    }

    /// Parses the target a sender names (the CLI's `--target`, the MCP `send` tool, the
    /// Python `send`): `ALL` or an agent, as [`Target::parse`] reads them; an empty name, or
    /// `none`, `null` or `-` (which read as an agent named so, or as nothing) are refused, so
    /// that a signal never waits for an agent nobody meant.
    pub fn parse_sent(s: &str) -> std::result::Result<Target, String> {
        let t = s.trim();
        if t.is_empty() {
            return Err("the target is empty: name an agent or ALL".into());
        }
        if ["none", "null", "-"]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(t))
        {
            return Err(format!(
                "target {s:?} names no agent: send without a target instead"
            ));
        }
        Target::parse(Some(t))
    }

    /// The agent name, for an agent target.
    pub fn agent(&self) -> Option<&str> {
        match self {
            Target::Agent(a) => Some(a),
            _ => None,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::All => f.write_str("ALL"),
            Target::None => f.write_str("-"),
            Target::Agent(a) => f.write_str(a),
        }
    }
}

/// A signal read from a file.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq)]
pub struct Signal {
    /// The file name without its extension.
    pub id: String,
    /// The type.
    pub signal_type: SignalType,
    /// The type as written (`STOP` stays `STOP` here).
    pub type_name: String,
    /// The target.
    pub target: Target,
    /// The message, when there is one (non-string messages are rendered as JSON).
    pub message: Option<String>,
    /// The sender, when recorded.
    pub from: Option<String>,
    /// The iteration the sender meant, when recorded.
    pub iteration: Option<u64>,
    /// When it was created, from the body.
    pub created_at: Option<DateTime<FixedOffset>>,
    /// The whole body, unknown fields included, in their original order.
    pub fields: Map<String, Value>,
    /// Where the file is now: for a delivery in flight, its claim slot
    /// (`claimed/<Agent>/<n>/`), or for a broadcast, `inputs/` (or `processed/` once
    /// archived).
    pub path: PathBuf,
    /// For a claimed signal handed over: its record in `processed/`, where its
    /// acknowledgement moves it (spec/mailbox.md §9.2). `None` for a broadcast (its file stays
    /// where it is) and before the hand-over. [`Signal::acked_path`] gives either.
    pub record: Option<PathBuf>,
}

impl Signal {
    /// Where the file is once this delivery is acknowledged: a claimed signal's record in
    /// `processed/` ([`Signal::record`]), or a broadcast's file ([`Signal::path`], in
    /// `inputs/` until the orchestrator archives it). What every runtime shows as the
    /// signal's `path`.
    pub fn acked_path(&self) -> &std::path::Path {
        self.record.as_deref().unwrap_or(&self.path)
    }

    /// The body's `created_at` as RFC 3339, with the offset it was written with (`Z` where it
    /// was written `Z`, or for a body that named no offset and local time's is zero; a body
    /// that named none is read in local time) and as many fractional digits as were written,
    /// rounded up to 0, 3, 6 or 9: `2026-05-01T10:00:00+07:00` stays so, and what `send`
    /// wrote (UTC, microseconds) is shown as written. `None` when the body has none.
    pub fn created_at_rfc3339(&self) -> Option<String> {
        let t = self.created_at?;
        let written = self
            .fields
            .get("created_at")
            .and_then(serde_json::Value::as_str)
            .map(str::trim);
        Some(rfc3339_as_written(t, written))
    }

    /// [`Signal::created_at_rfc3339`] to the second (its fraction cut): what a model or a
    /// person reads in one line, the sender's offset kept.
    pub fn created_at_rfc3339_secs(&self) -> Option<String> {
        let mut t = self.created_at_rfc3339()?;
        if t.as_bytes().get(19) == Some(&b'.') {
            let digits = t[20..].bytes().take_while(u8::is_ascii_digit).count();
            t.replace_range(19..20 + digits, "");
        }
        Some(t)
    }
}

/// `t` as RFC 3339 in its own offset, with the precision and the zero offset's spelling of
/// `written`, the text it was parsed from (see [`Signal::created_at_rfc3339`]).
pub(crate) fn rfc3339_as_written(t: DateTime<FixedOffset>, written: Option<&str>) -> String {
    use chrono::SecondsFormat;
    let digits = written.map(|w| {
        let b = w.as_bytes();
        // `YYYY-MM-DDTHH:MM:SS` is 19 bytes; a fraction follows as `.` and digits.
        match b.get(19) {
            Some(b'.') => b[20..].iter().take_while(|c| c.is_ascii_digit()).count(),
            _ => 0,
        }
    });
    let digits = digits.unwrap_or_else(|| match t.timestamp_subsec_nanos() {
        0 => 0,
        n if n % 1_000_000 == 0 => 3,
        n if n % 1_000 == 0 => 6,
        _ => 9,
    });
    let format = match digits {
        0 => SecondsFormat::Secs,
        1..=3 => SecondsFormat::Millis,
        4..=6 => SecondsFormat::Micros,
        _ => SecondsFormat::Nanos,
    };
    // A zero offset written `+00:00` (or `-00:00`) stays `+00:00`; `Z` otherwise.
    let numeric_zero = written.is_some_and(|w| w.ends_with("+00:00") || w.ends_with("-00:00"));
    t.to_rfc3339_opts(format, !numeric_zero)
}

/// A signal to send.
#[derive(Clone, Debug)]
pub struct NewSignal {
    pub(crate) signal_type: SignalType,
    pub(crate) target: Target,
    pub(crate) message: Option<String>,
    pub(crate) from: Option<String>,
    pub(crate) iteration: Option<u64>,
    pub(crate) extra: Map<String, Value>,
}

impl NewSignal {
    /// A new signal of `signal_type` for everyone (`ALL`) with no message.
    pub fn new(signal_type: SignalType) -> NewSignal {
        NewSignal {
            signal_type,
            target: Target::All,
            message: None,
            from: None,
            iteration: None,
            extra: Map::new(),
        }
    }

    /// The signal's type.
    pub fn signal_type(&self) -> SignalType {
        self.signal_type
    }

    /// Sets the target. Default: [`Target::All`].
    pub fn target(&mut self, target: Target) -> &mut Self {
        self.target = target;
        self
    }

    /// Sets the message. Default: none.
    pub fn message(&mut self, message: impl Into<String>) -> &mut Self {
        self.message = Some(message.into());
        self
    }

    /// Sets the sender's name. Default: none.
    pub fn from(&mut self, from: impl Into<String>) -> &mut Self {
        self.from = Some(from.into());
        self
    }

    /// Sets the iteration the signal is meant for. Default: none.
    pub fn iteration(&mut self, iteration: u64) -> &mut Self {
        self.iteration = Some(iteration);
        self
    }

    /// Adds a field of the sender's own; kept end to end. Default: none. Reserved names
    /// (`id`, `type`, `target`, `message`, `from`, `iteration`, `created_at`) are ignored here.
    pub fn field(&mut self, key: impl Into<String>, value: Value) -> &mut Self {
        self.extra.insert(key.into(), value);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One named test per case: `senders!(name: "text" => accepted;)`.
    macro_rules! senders {
        ($($name:ident: $text:expr => $ok:literal;)*) => {
            $(
                #[test]
                fn $name() {
                    assert_eq!(valid_sender($text), $ok, "{:?}", $text);
                }
            )*
        };
    }

    senders! {
        sender_an_agent_name: "Executor" => true;
        sender_a_person_with_spaces: "Ada Lovelace" => true;
        sender_unicode: "d\u{e9}veloppeur \u{1f600}" => true;
        sender_inner_tab_is_control: "a\tb" => false;
        sender_empty: "" => false;
        sender_only_blanks: "  \u{a0} " => false;
        sender_newline: "a\nb" => false;
        sender_trailing_newline: "ci\n" => false;
        sender_carriage_return: "a\rb" => false;
        sender_escape: "a\u{1b}[31mb" => false;
        sender_nul: "a\0b" => false;
        sender_c1_control: "a\u{85}b" => false;
        sender_delete: "a\u{7f}" => false;
    }

    /// One named test per type: `pause_waits!(name: TYPE => ends the wait;)`.
    macro_rules! pause_waits {
        ($($name:ident: $ty:ident => $ends:literal;)*) => {
            $(
                #[test]
                fn $name() {
                    assert_eq!(SignalType::$ty.ends_pause_wait(), $ends);
                }
            )*
        };
    }

    pause_waits! {
        resume_ends_a_pause_wait: Resume => true;
        abort_ends_a_pause_wait: Abort => true;
        steer_ends_a_pause_wait: Steer => true;
        info_ends_a_pause_wait: Info => true;
        pause_keeps_waiting: Pause => false;
        approve_keeps_waiting: Approve => false;
        skip_keeps_waiting: Skip => false;
    }

    #[test]
    fn every_type_has_a_pause_wait_row() {
        // The table above covers every type: a new type gets a row.
        assert_eq!(SignalType::ALL.len(), 7);
    }
}
