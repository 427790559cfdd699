//! kith's device side: capture (hook, watch, backfill) through cursors and an
//! outbox, configured by `settings` (config.toml), login, install, status,
//! the commands that ask central (`commands`: search, tree, show, share, tag,
//! audit, web, context, forget) and `kith mcp`, both printing through
//! `render`.
//!
//! A delta travels `discover` -> `plan` (pure: what to send) -> `capture`
//! (read, redact, spool) -> `outbox` -> `client` (central). Only `capture`
//! and `outbox::replay` move cursors, and only under the state lock.
//!
//! Every module is the crate's own: the library's face is `main`, which
//! the `kith` binary runs.

#![warn(unreachable_pub)]

mod capture;
mod cli;
mod client;
mod commands;
mod config;
mod cursor;
mod cursor_agent;
mod discover;
mod effective;
mod error;
mod glob;
mod hook;
mod install;
mod mcp;
mod mirror;
mod outbox;
mod plan;
mod render;
mod resume;
mod settings;
mod setup;
mod status;
mod untrusted;
mod watch;
mod when;

use error::{Error, Result};

pub use cli::main;
