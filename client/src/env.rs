//! The options every sigbox program also takes from the environment (`SIGBOX_ROOT`,
//! `SIGBOX_SETTLE`), read here rather than by the argument parser, so that the option on the
//! command line always wins, even over a variable whose value is refused, and a refused value
//! names the variable and says what to do. Shared by the `sigbox`, `sigbox-mcp` and
//! `sigbox-bridge` programs.

use std::path::PathBuf;
use std::time::Duration;

/// The mailbox root when neither `--root` nor `SIGBOX_ROOT` gives one.
pub const DEFAULT_ROOT: &str = "signals";

/// The settle window when neither `--settle` nor `SIGBOX_SETTLE` gives one.
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(2);

/// The mailbox root: `--root` (`flag`) when given; else `SIGBOX_ROOT` when set, refused when
/// empty; else `signals`.
///
/// ```
/// // SAFETY: a single-threaded doctest.
/// unsafe { std::env::set_var("SIGBOX_ROOT", "") };
/// let why = sigbox_client::root_from(None).unwrap_err();
/// assert!(why.starts_with("SIGBOX_ROOT is set but empty"), "{why}");
/// assert_eq!(sigbox_client::root_from(Some("here".into())), Ok("here".into()));
/// ```
pub fn root_from(flag: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(root) = flag {
        return Ok(root);
    }
    match std::env::var_os("SIGBOX_ROOT") {
        None => Ok(PathBuf::from(DEFAULT_ROOT)),
        Some(v) if v.is_empty() => Err(
            "SIGBOX_ROOT is set but empty, so there is no mailbox root to use: set it to the \
             root's path (such as /srv/signals), unset it to use ./signals, or pass --root DIR"
                .to_string(),
        ),
        Some(v) => Ok(PathBuf::from(v)),
    }
}

/// The settle window: `--settle` (`flag`) when given; else `SIGBOX_SETTLE` when set, read as
/// [`parse_settle`](crate::parse_settle) reads `--settle` (a refusal names the variable);
/// else 2 s.
pub fn settle_from(flag: Option<Duration>) -> Result<Duration, String> {
    if let Some(d) = flag {
        return Ok(d);
    }
    match std::env::var_os("SIGBOX_SETTLE") {
        None => Ok(DEFAULT_SETTLE),
        Some(v) => {
            let text = v.to_string_lossy();
            crate::parse_settle(&text).map_err(|why| {
                format!(
                    "SIGBOX_SETTLE={text:?} is refused: {why}; fix or unset SIGBOX_SETTLE, or \
                     pass --settle"
                )
            })
        }
    }
}

/// What `--durability` and `SIGBOX_DURABILITY` take, as refusals list them.
const DURABILITIES: &str = "durable (the default: every write fsynced, crash-safe) or relaxed \
                            (no fsync at all: no crash guarantee, for tmpfs and tests)";

/// Whether writes wait for the disk: `--durability` (`flag`) when given; else
/// `SIGBOX_DURABILITY` when set; else durable. `relaxed` is [`Durability::RelaxedNoFsync`]:
/// no fsync at all, so a crash or power loss may lose or undo any recent send, claim or
/// acknowledgement: for a root on tmpfs (which a reboot empties anyway) and for tests.
///
/// [`Durability::RelaxedNoFsync`]: sigbox::Durability::RelaxedNoFsync
pub fn durability_from(flag: Option<&str>) -> Result<sigbox::Durability, String> {
    let (text, from) = match flag {
        Some(f) => (f.to_string(), "--durability"),
        None => match std::env::var_os("SIGBOX_DURABILITY") {
            None => return Ok(sigbox::Durability::Durable),
            Some(v) => (v.to_string_lossy().into_owned(), "SIGBOX_DURABILITY"),
        },
    };
    match text.trim().to_ascii_lowercase().as_str() {
        "durable" => Ok(sigbox::Durability::Durable),
        "relaxed" => Ok(sigbox::Durability::RelaxedNoFsync),
        _ => Err(format!("{from} {text:?} is refused: write {DURABILITIES}")),
    }
}
