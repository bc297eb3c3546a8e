//! Bytes to signals and back (spec/mailbox.md §3.2-3.4). Pure: no filesystem access. From
//! the bottom up, each file imports only from the rows above it:
//!
//! | file | owns | spec |
//! |---|---|---|
//! | `codec.rs` | the body formats (JSON canonical, JSON and YAML accepted), a body into a signal | §3.2, §3.3 |
//! | `handling.rs` | the handling block's schema ([`Handling`], [`Archived`], [`BRIDGED`]) | §3.4 |
//! | `record.rs` | the processed record: the block spliced in, read back, torn splices repaired | §3.4 |

mod codec;
mod handling;
mod record;
#[cfg(test)]
mod tests;

pub(crate) use codec::{
    Body, Strict, canonical_bytes, created_at_text, parse_body, parse_json, parse_yaml, strip_bom,
};
pub use handling::{Archived, BRIDGED, Handling};
pub(crate) use handling::{Handled, key, strip_handling};
pub(crate) use record::{
    annotation, parse_record, read_signal, read_signal_end, records_whole, redeliveries, signal_len,
};
