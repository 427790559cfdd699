//! kith's device side: capture (hook, watch, backfill) with cursors and an
//! outbox, login, install, status, and the family CLI (search, tree, show).

pub mod capture;
pub mod cli;
pub mod config;
pub mod cursor;
pub mod discover;
pub mod family;
pub mod hook;
pub mod install;
pub mod redact;
pub mod status;
