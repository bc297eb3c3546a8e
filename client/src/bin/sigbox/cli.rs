//! The command-line grammar.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// A crash-safe, file-based signal broker for agent pipelines.
#[derive(Debug, Parser)]
#[command(name = "sigbox", version, propagate_version = true)]
#[command(after_help = "Examples:
  sigbox init
  sigbox send steer \"use the v2 API\" --target Executor
  sigbox poll --as Executor --json
  sigbox wait --as Executor --timeout 30s
  sigbox ls --all")]
pub(crate) struct Cli {
    /// Mailbox root directory [env: SIGBOX_ROOT] [default: signals]. The option wins over
    /// the variable.
    #[arg(long, global = true, value_name = "ROOT")]
    pub(crate) root: Option<PathBuf>,
    /// Machine output: one JSON object per line.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// How long a dropped file must be unchanged before it is read (spec/mailbox.md §5); 0
    /// reads files written in place at once. A number and its unit (ms, s, m, h), at most 1h
    /// [env: SIGBOX_SETTLE] [default: 2s]. The option wins over the variable.
    #[arg(long, global = true, value_parser = parse_settle)]
    pub(crate) settle: Option<Duration>,
    /// durable (the default: every write fsynced before it counts, crash-safe) or relaxed (no
    /// fsync at all: NO CRASH GUARANTEE, a crash or power loss may lose or undo any recent
    /// send, claim or ack; for a root on tmpfs and for tests) [env: SIGBOX_DURABILITY].
    #[arg(long, global = true, value_name = "MODE", ignore_case = true, value_parser = ["durable", "relaxed"])]
    pub(crate) durability: Option<String>,
    /// More logging on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create the mailbox layout (idempotent).
    #[command(after_help = "Examples:
  sigbox --root .ralph-sessions/s1/signals init
  sigbox --root /srv/team/signals init --shared   # group-writable, whatever the umask")]
    Init {
        /// Create the layout for a team: directories 2770 (group members read, write and
        /// enter; setgid keeps the group; others nothing), files 0660. Existing directories
        /// are never changed.
        #[arg(long)]
        shared: bool,
    },
    /// Send a signal; prints its id.
    #[command(after_help = "Examples:
  sigbox send steer \"prefer the v2 API\" --target Executor
  sigbox send pause --target ALL
  echo 'long message' | sigbox send info - --from ci")]
    Send(SendArgs),
    /// Run one checkpoint pass for an agent and print what it delivered (nothing: exit 0).
    #[command(after_help = "Examples:
  sigbox poll --as Executor
  sigbox poll --as Orchestrator --state KNOWLEDGE_APPROVAL --json")]
    Poll(AgentArgs),
    /// Block until at least one signal is delivered to an agent; exit 1 on timeout.
    #[command(after_help = "Examples:
  sigbox wait --as Executor --timeout 30s
  sigbox wait --as Planner --poll 1s   # on a filesystem without events")]
    Wait(WaitArgs),
    /// List pending signals, oldest first.
    #[command(after_help = "Examples:
  sigbox ls
  sigbox ls --all --json")]
    Ls {
        /// Also list who acked each broadcast, and the files quarantined in rejected/.
        #[arg(long)]
        all: bool,
    },
    /// Show the processed history: who handled what, when, and how.
    #[command(after_help = "Example:\n  sigbox log --json")]
    Log,
    /// Archive every pending broadcast at session end (delivered, or partial with the agents
    /// that did not ack).
    #[command(after_help = "Example:\n  sigbox finish")]
    Finish {
        /// The agent recorded as having archived them.
        #[arg(long = "as", default_value = "Orchestrator")]
        agent: String,
    },
    /// Remove stale staging files left by crashed writers; with --rejected, quarantined files
    /// too.
    #[command(
        after_help = "Examples:\n  sigbox gc --older-than 10m\n  sigbox gc --rejected --older-than 0s    # clear rejected/ once read"
    )]
    Gc {
        /// Only files unchanged for this long (quarantined: quarantined this long ago).
        #[arg(long, default_value = "1h", value_parser = parse_duration)]
        older_than: Duration,
        /// Also remove the files in rejected/ (and their reason files).
        #[arg(long)]
        rejected: bool,
        /// At most this many files per run.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Check a root and explain every problem found; exit 1 when there are problems.
    #[command(after_help = "Example:\n  sigbox doctor")]
    Doctor,
    /// Print a shell completion script.
    #[command(after_help = "Example:\n  sigbox completions bash > /etc/bash_completion.d/sigbox")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Goblin signal files: `.goblin/` in a worktree.
    #[command(
        subcommand,
        after_help = "Examples:\n  sigbox goblin signal build-complete --worktree worktrees/ENG-123\n  sigbox goblin watch --worktree worktrees/ENG-123 --stage BUILD --timeout 30m\n  sigbox goblin status --worktree worktrees/ENG-123\nSee spec/goblin.md."
    )]
    Goblin(GoblinCmd),
    /// mux-ospec signal files: `{session}/.signals/`.
    #[command(
        subcommand,
        after_help = "Examples:\n  sigbox mux signal tmp/mux/s1/.signals/implement --status success --path tmp/mux/s1/impl.md\n  sigbox mux check tmp/mux/s1 --expected 3 --timeout 5m\n  sigbox mux verify tmp/mux/s1\nSee spec/mux.md."
    )]
    Mux(MuxCmd),
    /// Flux stage signals: `flux:signal` stdout lines and result documents.
    #[command(
        subcommand,
        after_help = "Examples:\n  sigbox flux parse stage.log\n  sigbox flux result \"$RESULT_DOC_PATH\"\n  sigbox tap -- ./run-stage.sh    (its Flux signals into the mailbox)\nSee spec/streams.md."
    )]
    Flux(FluxCmd),
    /// Pilot `pilot-signal` blocks.
    #[command(
        subcommand,
        after_help = "Examples:\n  sigbox pilot parse navigator.log\n  sigbox tap -- ./run-navigator.sh    (its Pilot signals into the mailbox)\nSee spec/streams.md."
    )]
    Pilot(PilotCmd),
    /// Run a command, pass its output through unchanged, and turn the Flux and Pilot signals in
    /// it into mailbox signals for the orchestrator; exit with the command's status.
    #[command(after_help = "Examples:
  sigbox tap -- claude -p 'run the stage'
  sigbox --root .ralph-sessions/s1/signals tap --as Executor -- ./run-stage.sh")]
    Tap {
        /// The sender name recorded in the mailbox signals.
        #[arg(long = "as", default_value = "tap")]
        name: String,
        /// Who the mailbox signals are for.
        #[arg(long, default_value = "Orchestrator")]
        to: String,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Answer a coding agent's hook: read its event on stdin, run one checkpoint pass for the
    /// agent, print the answer in the runtime's envelope (nothing when nothing is pending).
    #[command(after_help = "Examples:
  echo '{\"hook_event_name\": \"PreToolUse\"}' | sigbox hook claude --as Executor
  sigbox hook copilot --as Executor --event preToolUse < event.json
See spec/hooks.md for what each signal becomes, per runtime and event.")]
    Hook(HookArgs),
    /// Install or remove sigbox's hooks in a coding agent's settings.
    #[command(
        subcommand,
        after_help = "Examples:\n  sigbox hooks install claude --as Executor --dry-run\n  sigbox hooks install codex --as Executor\n  sigbox hooks uninstall claude --project .\nSee spec/hooks.md."
    )]
    Hooks(HooksCmd),
    /// Serve the mailbox to an agent as a Model Context Protocol server on stdio (runs the
    /// `sigbox-mcp` program installed beside `sigbox`).
    #[command(
        after_help = "Example (Claude Code):\n  claude mcp add sigbox -- sigbox --root /srv/signals mcp --as Executor\nSee spec/mcp.md."
    )]
    Mcp {
        /// The agent the server checks in for.
        #[arg(long = "as")]
        agent: String,
        /// The agent's state (the orchestrator's approval states admit APPROVE and SKIP).
        #[arg(long)]
        state: Option<String>,
        /// Push each signal into a Claude Code session as it arrives (channels).
        #[arg(long)]
        channel: bool,
    },
    /// Join this mailbox to mailboxes on other hosts through a NATS JetStream server (runs
    /// the `sigbox-bridge` program installed beside `sigbox`); `bridge status` shows it.
    #[command(
        after_help = "Examples:\n  sigbox --root /srv/signals bridge --nats nats://10.0.0.5:4222 --mailbox pipeline\n  sigbox --root /srv/signals bridge status\n  sigbox-bridge --help    (every option)\nSee spec/bridge.md."
    )]
    Bridge {
        /// The arguments of `sigbox-bridge` (`--nats URL`, `--mailbox NAME`, `status`, ...).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Serve mailboxes as a live web page and JSON API, the console (runs the `sigbox-ui`
    /// program installed beside `sigbox`); the first line it prints is the address to open,
    /// with its access token.
    #[command(
        after_help = "Examples:\n  sigbox --root /srv/signals ui\n  sigbox ui --root a/signals --root b/signals --listen 127.0.0.1:8700\n  sigbox-ui --help    (every option)\nSee spec/console.md."
    )]
    Ui {
        /// The arguments of `sigbox-ui` (`--root ROOT` for each mailbox, `--listen ADDR`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Ask a person and wait for the one answer; exit 0 answered, 1 deadline passed.
    #[command(after_help = "Examples:
  sigbox ask --as Executor --timeout 10m \"deploy to prod?\"
  sigbox ask --as Executor --key deploy-42 --choices yes,no,later \"migrate now?\"
See spec/asks.md.")]
    Ask(AskArgs),
    /// Answer a request: exit 0 for the one answer, 2 naming why otherwise.
    #[command(
        after_help = "Example:\n  sigbox answer Executor.deploy-42 approve \"go ahead\" --from alice"
    )]
    Answer(AnswerArgs),
    /// List the open requests, oldest first.
    #[command(after_help = "Examples:\n  sigbox asks\n  sigbox asks --all --json")]
    Asks {
        /// Also answered, expired and invalid requests.
        #[arg(long)]
        all: bool,
    },
    /// Run a short demonstration on a fresh mailbox in a temporary directory.
    #[command(after_help = "Example:\n  sigbox demo")]
    Demo {
        /// Keep the demo mailbox afterwards (its path is printed) instead of removing it.
        #[arg(long)]
        keep: bool,
    },
}

/// A coding agent runtime whose hooks sigbox answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Runtime {
    /// Claude Code.
    Claude,
    /// OpenAI Codex CLI.
    Codex,
    /// GitHub Copilot (CLI and cloud agent).
    Copilot,
}

impl Runtime {
    /// Its name on the command line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Runtime::Claude => "claude",
            Runtime::Codex => "codex",
            Runtime::Copilot => "copilot",
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct HookArgs {
    /// The runtime calling: its envelope is read and answered.
    #[arg(value_enum)]
    pub(crate) runtime: Runtime,
    /// The agent this hook checks in for.
    #[arg(long = "as")]
    pub(crate) agent: String,
    /// The agent's state (the orchestrator's approval states admit APPROVE and SKIP).
    #[arg(long)]
    pub(crate) state: Option<String>,
    /// The hook event, when the event JSON does not name it (Copilot's does not).
    #[arg(long)]
    pub(crate) event: Option<String>,
    /// How long a tool call is held while a PAUSE is in force before it is denied; keep it
    /// under the runtime's hook time limit.
    #[arg(long, default_value = "25s", value_parser = parse_duration)]
    pub(crate) pause_wait: Duration,
    /// How long after a PAUSE was taken a Stop hook keeps the paused turn alive (a RESUME
    /// then goes on without anyone typing); past it the turn ends. 0: never.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub(crate) pause_keep: Duration,
    /// Fail (exit 2) on a malformed or unknown event instead of answering nothing.
    #[arg(long)]
    pub(crate) strict: bool,
    /// How a PermissionRequest is asked of a person (spec/hooks.md).
    #[command(flatten)]
    pub(crate) permission: PermissionArgs,
}

#[derive(Debug, Subcommand)]
pub(crate) enum HooksCmd {
    /// Merge sigbox's hook entries into the runtime's settings (every other hook and setting
    /// kept; idempotent; written atomically, the old file kept as `<file>.sigbox-backup`).
    #[command(after_help = "Examples:
  sigbox hooks install claude --as Executor --dry-run
  sigbox --root /srv/signals hooks install codex --as Executor --project .
  sigbox hooks install copilot --as Executor --user")]
    Install {
        #[arg(value_enum)]
        runtime: Runtime,
        /// The agent the hooks check in for.
        #[arg(long = "as")]
        agent: String,
        #[command(flatten)]
        place: HooksPlace,
        /// The agent's state, passed to every hook call.
        #[arg(long)]
        state: Option<String>,
        /// Also the PermissionRequest hook (Claude Code, Codex): each approval prompt is
        /// first asked of a person through `sigbox asks`/`answer`; with no answer in time
        /// the runtime's own prompt follows (spec/hooks.md, "Permission requests").
        #[arg(long)]
        permissions: bool,
    },
    /// Remove sigbox's hook entries from the runtime's settings, keeping everything else.
    #[command(after_help = "Example:\n  sigbox hooks uninstall claude --project .")]
    Uninstall {
        #[arg(value_enum)]
        runtime: Runtime,
        #[command(flatten)]
        place: HooksPlace,
    },
}

#[derive(Debug, Args)]
pub(crate) struct HooksPlace {
    /// The project whose settings to change (default: the current directory).
    #[arg(long, conflicts_with = "user")]
    pub(crate) project: Option<PathBuf>,
    /// The user's settings instead of a project's.
    #[arg(long)]
    pub(crate) user: bool,
    /// Print the file as it would be written; change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum GoblinCmd {
    /// Write `.goblin/NAME` atomically: empty (as `touch`) or a JSON body checked against the
    /// signal's documented fields, with `completed_at` filled in.
    #[command(after_help = "Examples:
  sigbox goblin signal build-complete --worktree worktrees/ENG-123
  sigbox goblin signal build-complete --worktree . --json '{\"commits\": 5}'
  echo '{\"reason\": \"flaky\"}' | sigbox goblin signal test-failed -")]
    Signal {
        /// scope-complete, build-complete, review-approved, review-changes-requested,
        /// test-passed or test-failed.
        name: String,
        /// The JSON body; `-` reads it from stdin. (`--json BODY` works too.)
        body: Option<String>,
        /// Read the JSON body from this file.
        #[arg(long, conflicts_with = "body")]
        file: Option<PathBuf>,
        /// The worktree holding `.goblin/`.
        #[arg(long, default_value = ".")]
        worktree: PathBuf,
    },
    /// Follow the stage machine: one JSON line per transition, the signal cleaned up as the
    /// stage advances. Exit 0 at DONE (or after one transition with --once), 3 at FAILED, 1 on
    /// timeout.
    #[command(after_help = "Examples:
  sigbox goblin watch --worktree worktrees/ENG-123 --stage BUILD --timeout 30m
  sigbox goblin watch --worktree . --once")]
    Watch {
        /// The worktree holding `.goblin/`.
        #[arg(long, default_value = ".")]
        worktree: PathBuf,
        /// The current stage (SCOPE, BUILD, REVIEW, TEST); default: the saved state, else SCOPE.
        #[arg(long)]
        stage: Option<String>,
        /// Retries already used (default: the saved state, else 0).
        #[arg(long)]
        retries: Option<u32>,
        /// Give up after this long.
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
        /// Exit after the first transition.
        #[arg(long)]
        once: bool,
        /// How long an empty or unparseable file must stay unchanged before it is read; a
        /// number and its unit, at most 1h.
        #[arg(long, default_value = "1s", value_parser = parse_settle)]
        settle: Duration,
    },
    /// Show the current stage and the signal files present.
    #[command(after_help = "Example:\n  sigbox goblin status --worktree worktrees/ENG-123")]
    Status {
        /// The worktree holding `.goblin/`.
        #[arg(long, default_value = ".")]
        worktree: PathBuf,
    },
    /// Remove the signal files, their history and the saved state (pipeline done or cancelled).
    #[command(after_help = "Example:\n  sigbox goblin clean --worktree worktrees/ENG-123")]
    Clean {
        /// The worktree holding `.goblin/`.
        #[arg(long, default_value = ".")]
        worktree: PathBuf,
    },
}

// Parsed once per process: the size of the largest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(crate) enum MuxCmd {
    /// Write `{session}/.signals/<stage>.done` (or `.fail`) atomically.
    #[command(disable_version_flag = true)]
    #[command(after_help = "Examples:
  sigbox mux signal tmp/mux/s1/.signals/implement --status success --path tmp/mux/s1/impl.md
  sigbox mux signal tmp/mux/s1/review --status fail --error 'tests failing' --format kv")]
    Signal(MuxSignalArgs),
    /// Count a session's .done/.fail files and print upstream's JSON; exit 0 only when complete.
    #[command(after_help = "Examples:
  sigbox mux check tmp/mux/s1 --expected 3
  sigbox mux check tmp/mux/s1 --expected 3 --timeout 5m --require-pass")]
    Check {
        /// The session directory, relative to the project root.
        session: PathBuf,
        /// How many signals are expected.
        #[arg(long)]
        expected: usize,
        /// Only look in this directory.
        #[arg(long)]
        signals_dir: Option<PathBuf>,
        /// Wait (event-driven) up to this long for the signals.
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
        /// Count a .done whose grade is not PASS as failed.
        #[arg(long)]
        require_pass: bool,
        /// The project root the paths are relative to.
        #[arg(long, default_value = ".")]
        project_root: PathBuf,
    },
    /// Summarize a session's signals as upstream's verify.py does.
    #[command(after_help = "Examples:
  sigbox mux verify tmp/mux/s1
  sigbox mux verify tmp/mux/s1 --action failures")]
    Verify {
        /// The session directory, relative to the project root.
        session: PathBuf,
        /// What to print.
        #[arg(long, default_value = "summary", value_parser = ["count", "failures", "paths", "sizes", "total-size", "summary"])]
        action: String,
        /// Only look in this directory.
        #[arg(long)]
        signals_dir: Option<PathBuf>,
        /// The project root the paths are relative to.
        #[arg(long, default_value = ".")]
        project_root: PathBuf,
    },
}

// The arguments of `mux signal`: a struct rather than variant fields, so that the command can
// hand them on whole.
#[derive(Debug, Args)]
pub(crate) struct MuxSignalArgs {
    /// The signal path, relative to the project root (`.signals/` is inserted when its
    /// parent is not `.signals`; the suffix follows --status).
    #[arg(value_name = "PATH")]
    pub(crate) signal: PathBuf,
    /// success (.done) or fail (.fail).
    #[arg(long, value_parser = ["success", "fail"])]
    pub(crate) status: String,
    /// The output artifact's path.
    #[arg(long)]
    pub(crate) path: Option<String>,
    /// The artifact's size in bytes (default: measured from --path).
    #[arg(long)]
    pub(crate) size: Option<u64>,
    /// The error, for a failure.
    #[arg(long)]
    pub(crate) error: Option<String>,
    /// Trace id (default: the session's .trace file).
    #[arg(long)]
    pub(crate) trace_id: Option<String>,
    /// Version.
    #[arg(long)]
    pub(crate) version: Option<String>,
    /// The previous signal.
    #[arg(long)]
    pub(crate) previous: Option<String>,
    /// Grade for review stages: PASS, WARN or FAIL (only PASS proceeds).
    #[arg(long, value_parser = ["PASS", "WARN", "FAIL"])]
    pub(crate) grade: Option<String>,
    /// Phase number.
    #[arg(long)]
    pub(crate) phase_num: Option<u64>,
    /// Duration in seconds.
    #[arg(long)]
    pub(crate) duration_seconds: Option<u64>,
    /// An artifact path (repeatable).
    #[arg(long)]
    pub(crate) artifact: Vec<String>,
    /// kv (the default: the `key: value` lines upstream `signal.py` writes and its readers
    /// read) or json (the seed's signal-v1 document).
    #[arg(long, default_value = "kv", value_parser = ["json", "kv"])]
    pub(crate) format: String,
    /// The project root the paths are relative to.
    #[arg(long, default_value = ".")]
    pub(crate) project_root: PathBuf,
}

#[derive(Debug, Subcommand)]
pub(crate) enum FluxCmd {
    /// Print one JSON line per flux:signal event in a stream (signals and invalid signals).
    #[command(after_help = "Examples:
  sigbox flux parse stage.log
  ./stage.sh | sigbox flux parse")]
    Parse {
        /// The stream; `-` or nothing reads stdin.
        file: Option<PathBuf>,
    },
    /// Validate a result document and print the routing it implies; exit 0 valid, 1 invalid,
    /// 2 unreadable.
    #[command(after_help = "Example:\n  sigbox flux result \"$RESULT_DOC_PATH\"")]
    Result {
        /// The result document.
        path: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum PilotCmd {
    /// Summarize the pilot-signal blocks in a stream: count, latest progress and phase, exit.
    #[command(after_help = "Examples:
  sigbox pilot parse navigator.log
  claude -p '...' | sigbox --json pilot parse")]
    Parse {
        /// The stream; `-` or nothing reads stdin.
        file: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// STEER, INFO, PAUSE, ABORT (STOP), APPROVE, SKIP or RESUME; any case.
    pub(crate) signal_type: String,
    /// The message; `-` reads it from stdin.
    pub(crate) message: Option<String>,
    /// An agent name, or ALL.
    #[arg(long, default_value = "ALL")]
    pub(crate) target: String,
    /// Send with no target (the orchestrator consumes it).
    #[arg(long, conflicts_with = "target")]
    pub(crate) no_target: bool,
    /// The sender's name.
    #[arg(long)]
    pub(crate) from: Option<String>,
    /// The iteration the signal is meant for.
    #[arg(long)]
    pub(crate) iteration: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The agent whose checkpoint this is.
    #[arg(long = "as")]
    pub(crate) agent: String,
    /// The agent's current state (APPROVE and SKIP need an approval state).
    #[arg(long)]
    pub(crate) state: Option<String>,
    /// Deliver at most N signals in this call; the rest wait for the next one.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max: Option<u64>,
    /// Take the signals even when stdout reaches nobody (closed, or /dev/null): they are
    /// acknowledged unread. Without it such a call is refused (exit 2) and takes nothing.
    #[arg(long)]
    pub(crate) discard: bool,
}

#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    #[command(flatten)]
    pub(crate) agent: AgentArgs,
    /// Give up after this long (500ms, 5s, 2m, 1h); default: wait forever.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
    /// Poll at this interval (at least 10ms) instead of waiting for filesystem events.
    #[arg(long = "poll", value_parser = parse_duration)]
    pub(crate) poll_interval: Option<Duration>,
}

/// `sigbox ask`.
#[derive(Debug, Args)]
pub(crate) struct AskArgs {
    /// The asking agent.
    #[arg(long = "as")]
    pub(crate) agent: String,
    /// Whom it is for (a person's name, Orchestrator); default: anyone.
    #[arg(long)]
    pub(crate) to: Option<String>,
    /// The answers offered, comma-separated.
    #[arg(long, default_value = "approve,deny", value_delimiter = ',')]
    pub(crate) choices: Vec<String>,
    /// The deadline, this long from now (a number and its unit: ms, s, m, h); past it the
    /// request expires and `ask` exits 1. Default: none.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
    /// A stable key: the request's id is <agent>.<key>, so an asker started again re-attaches
    /// to its request (and gets the answer given meanwhile) instead of asking twice.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Print the request's id once it is durable, and return without waiting.
    #[arg(long)]
    pub(crate) no_wait: bool,
    /// The question (`-`: read it from stdin).
    pub(crate) message: String,
}

/// `sigbox answer`.
#[derive(Debug, Args)]
pub(crate) struct AnswerArgs {
    /// The request's id (`sigbox asks` lists them).
    pub(crate) id: String,
    /// One of the choices the request offers.
    pub(crate) choice: String,
    /// What to say with it.
    pub(crate) message: Option<String>,
    /// Who answers [default: $USER, else "person"].
    #[arg(long)]
    pub(crate) from: Option<String>,
    /// For a request asked on another host (through the bridge): how long to wait for that
    /// host to take or refuse the answer.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub(crate) wait: Duration,
}

/// What a permission request decides when no person answers in time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum NoAnswer {
    /// No decision: the runtime shows its own prompt.
    Prompt,
    /// Allow the tool call.
    Allow,
    /// Deny it.
    Deny,
}

/// The options of `sigbox hook` for permission requests.
#[derive(Clone, Debug, Args)]
pub(crate) struct PermissionArgs {
    /// How long a PermissionRequest waits for a person's answer (`sigbox answer`) before the
    /// runtime's own prompt follows; keep it under the hook's time limit [default: 50s for
    /// claude and codex, 25s for copilot].
    #[arg(long, value_parser = parse_duration)]
    pub(crate) permission_wait: Option<Duration>,
    /// What a PermissionRequest decides when nobody answers in time: `prompt` (no decision,
    /// the runtime asks at its terminal), `allow` or `deny`.
    #[arg(
        long,
        value_enum,
        env = "SIGBOX_PERMISSION_DEFAULT",
        default_value = "prompt"
    )]
    pub(crate) permission_default: NoAnswer,
}

pub(crate) use sigbox_client::{parse_duration, parse_settle};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
