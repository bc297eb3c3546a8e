//! Typed errors: every error names the file it concerns and the reason.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong, in a form a caller can match on.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// An operating-system call failed.
    Io,
    /// An earlier fsync failed, so this handle refuses further writes: the state on disk is
    /// unknown and writing on would hide that.
    Poisoned,
    /// An agent name, signal type or file name is not acceptable.
    InvalidName,
    /// A signal's body does not parse or lacks what a signal needs.
    InvalidSignal,
    /// A file is larger than the configured cap.
    TooLarge,
    /// A path is a symlink, directory, FIFO, socket or device where a regular file was needed.
    NotRegularFile,
    /// A path would leave the root it must stay under.
    PathEscape,
    /// The mailbox root is missing its layout; run `init` first.
    NotInitialized,
    /// What was asked conflicts with another process or with state saved on disk: a worktree
    /// another `goblin watch` is watching, or a stage given while a transition saved there is
    /// unfinished. Nothing was changed.
    Conflict,
}

/// An error with the file it concerns and the reason.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    path: Option<PathBuf>,
    reason: String,
    source: Option<io::Error>,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, path: Option<&Path>, reason: impl Into<String>) -> Self {
        Error {
            kind,
            path: path.map(Path::to_path_buf),
            reason: reason.into(),
            source: None,
        }
    }

    pub(crate) fn io(path: &Path, what: &str, source: io::Error) -> Self {
        Error {
            kind: ErrorKind::Io,
            path: Some(path.to_path_buf()),
            reason: what.to_string(),
            source: Some(source),
        }
    }

    /// The kind of error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The file the error concerns, when there is one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The reason, without the path.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The underlying operating-system error, when there is one.
    pub fn io_error(&self) -> Option<&io::Error> {
        self.source.as_ref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(path) = &self.path {
            write!(f, "{}: ", path.display())?;
        }
        write!(f, "{}", self.reason)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

/// The operating-system error is part of the message (one line naming the file, the reason
/// and the OS error), so it is not also reported as a `source`, which error reporters would
/// print a second time; [`Error::io_error`] gives it to code.
impl std::error::Error for Error {}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match (&e.source, e.kind) {
            (Some(source), _) => source.kind(),
            (None, ErrorKind::TooLarge) => io::ErrorKind::FileTooLarge,
            (None, ErrorKind::NotInitialized) => io::ErrorKind::NotFound,
            (None, ErrorKind::Conflict) => io::ErrorKind::ResourceBusy,
            (None, _) => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, e)
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
