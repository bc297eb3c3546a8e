//! The command-line grammar.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

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
    /// Mailbox root directory.
    #[arg(long, global = true, env = "SIGBOX_ROOT", default_value = "signals")]
    pub(crate) root: PathBuf,
    /// Machine output: one JSON object per line.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// More logging on stderr (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create the mailbox layout (idempotent).
    #[command(after_help = "Example:\n  sigbox --root .ralph-sessions/s1/signals init")]
    Init,
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
        /// Also list buffered signals, broadcast acks, rejected files and files still settling.
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
    /// Remove stale staging files from tmp/.
    #[command(after_help = "Example:\n  sigbox gc --older-than 10m")]
    Gc {
        /// Only files unchanged for this long.
        #[arg(long, default_value = "1h", value_parser = parse_duration)]
        older_than: Duration,
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
    /// Run a short demonstration on a fresh mailbox in a temporary directory.
    #[command(after_help = "Example:\n  sigbox demo")]
    Demo,
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
}

#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    #[command(flatten)]
    pub(crate) agent: AgentArgs,
    /// Give up after this long (500ms, 5s, 2m, 1h); default: wait forever.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) timeout: Option<Duration>,
    /// Poll at this interval instead of waiting for filesystem events.
    #[arg(long = "poll", value_parser = parse_duration)]
    pub(crate) poll_interval: Option<Duration>,
}

/// Parses `500ms`, `5s`, `2m`, `1h`, or a bare number of seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected a number then ms, s, m or h"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => {
            return Err(format!(
                "invalid duration {s:?}: unit must be ms, s, m or h"
            ));
        }
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
