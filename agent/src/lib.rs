//! kith's device side: capture (hook, watch, backfill) through cursors and an
//! outbox, configured by `settings` (config.toml), login, install, status,
//! the commands that ask central (`commands`: search, tree, show, share, tag,
//! audit, web, context, forget) and `kith mcp`, both printing through
//! `render`.
//!
//! A delta travels `discover` -> `plan` (pure: what to send) -> `capture`
//! (read, redact, spool) -> `outbox` -> `client` (central). Only `capture`
//! and `outbox::replay` move cursors, and only under the state lock.

pub mod capture;
pub mod cli;
pub mod client;
pub mod commands;
pub mod config;
pub mod cursor;
pub mod discover;
pub mod effective;
pub mod error;
pub mod glob;
pub mod hook;
pub mod install;
pub mod mcp;
pub mod mirror;
pub mod outbox;
pub mod plan;
pub mod render;
pub mod settings;
pub mod setup;
pub mod status;
pub mod untrusted;
pub mod watch;
pub mod when;

pub use error::{Error, Result};
