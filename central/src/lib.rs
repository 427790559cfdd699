//! kith-central: the service that keeps every family member's transcripts as
//! the authoritative record, indexes them and answers searches, showing each
//! viewer only what they may read. `main.rs` is a thin wrapper over `cli`.

pub mod accept;
pub mod auth;
pub mod cli;
pub mod config;
pub mod context;
pub mod conversation;
pub mod embed;
pub mod error;
pub mod forget;
pub mod handlers;
pub mod http_error;
pub mod http_limits;
pub mod index;
pub mod indexer;
pub mod ingest;
pub mod maintenance;
pub mod metrics;
pub mod pds;
pub mod priority;
pub mod privacy;
pub mod private;
pub mod registry;
pub mod routes;
pub mod run;
pub mod search;
pub mod serve;
pub mod sharing;
pub mod state;
pub mod store;
pub mod sync;
pub mod tagging;
pub mod tree;
pub mod turns_cache;
pub mod vectorizer;
pub mod web;

pub use serve::serve;
