//! The cross-crate tests that start processes (race workers, the CLI), one binary: see
//! `suite.rs`, which checks that each file of this folder is a module of one of the two.

#[path = "../../tests/shared/suite.rs"]
mod shared_suite;

// The harness starts the tests in the order of their names, two at a time (one per core). The
// longest test, the soak of `races.rs` (20,000 durable signals: a minute on a quiet disk,
// three on a busy one), is named to start first, so that the other tests run beside it
// instead of leaving it to run alone at the end.
#[path = "races.rs"]
mod a_races;
#[path = "fd_exhaustion.rs"]
mod fd_exhaustion;
#[path = "hostile_input.rs"]
mod hostile_input;
#[path = "kills.rs"]
mod kills;
#[path = "racy_listing.rs"]
mod racy_listing;
