//! The commands, one file per concept. Each is a leaf: it imports `cli`, `output` and the
//! libraries, never another command; `main.rs` routes to them.

pub(crate) mod demo;
pub(crate) mod goblin;
pub(crate) mod mailbox;
pub(crate) mod mux;
pub(crate) mod streams;
pub(crate) mod tap;
