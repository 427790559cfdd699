//! kith-central: the service that keeps every family member's transcripts as
//! the authoritative record, indexes them and answers searches, showing each
//! viewer only what they may read. `main.rs` is a thin wrapper over `cli`.

#![warn(unreachable_pub)]

mod accept;
mod auth;
mod backup;
pub mod cli;
pub mod config;
mod context;
mod conversation;
mod embed;
pub mod error;
mod forget;
mod handlers;
mod http_error;
mod http_limits;
mod index;
pub mod indexer;
pub mod ingest;
mod maintenance;
mod metrics;
pub mod pds;
mod priority;
pub mod privacy;
mod private;
mod refusal_bodies;
pub mod registry;
mod resume;
pub mod routes;
mod run;
mod search;
mod serve;
mod sharing;
pub mod state;
mod store;
mod sync;
mod tagging;
mod tree;
mod turns_cache;
mod usage;
mod usage_turns;
pub mod vectorizer;
mod web;

pub use serve::serve;
