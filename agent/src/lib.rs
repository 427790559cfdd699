//! kith's device side: capture (hook, watch, backfill) through cursors and an
//! outbox, configured by `settings` (config.toml), login, install, status,
//! and the family CLI (search, tree, show, share, tag, audit).
//!
//! A delta travels `discover` -> `plan` (pure: what to send) -> `capture`
//! (read, redact, spool) -> `outbox` -> `client` (central). Only `capture`
//! and `outbox::replay` move cursors, and only under the state lock.

pub mod capture;
pub mod cli;
pub mod client;
pub mod config;
pub mod cursor;
pub mod discover;
pub mod effective;
pub mod error;
pub mod family;
pub mod forget;
pub mod glob;
pub mod hook;
pub mod install;
pub mod mcp;
pub mod mirror;
pub mod outbox;
pub mod plan;
pub mod recall;
pub mod render;
pub mod settings;
pub mod setup;
pub mod status;
pub mod untrusted;
pub mod watch;
pub mod when;

pub use error::{Error, Result};
