//! How texts from a mailbox are shown: messages cut to a length a page can hold, paths as text.

use std::path::Path;

/// The longest message the state carries, in characters (`/api/signals/<id>` gives it whole).
const MESSAGE_SHOWN: usize = 2000;

/// `m` cut at [`MESSAGE_SHOWN`] characters (`…` where it is cut).
pub(crate) fn shorten(m: &str) -> String {
    match m.char_indices().nth(MESSAGE_SHOWN) {
        Some((at, _)) => format!("{}…", &m[..at]),
        None => m.to_string(),
    }
}

/// A path as text (bytes that are not UTF-8 replaced by U+FFFD), as the CLI's JSON shows it.
pub(crate) fn path_text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}
