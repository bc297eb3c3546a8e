//! Platform differences live here and nowhere else.
//!
//! Every function has the same signature on every platform; the Linux variant uses
//! `renameat2(RENAME_NOREPLACE)`, the portable one falls back to `link` + `unlink`, which is
//! also atomic against a concurrent claimer (only one `link` can create the name) but may leave
//! both names after a crash between the two calls; the mailbox handles that state (see
//! `spec/mailbox.md`, "Interrupted claims").

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(not(unix))]
mod portable;
#[cfg(not(unix))]
pub(crate) use portable::*;
