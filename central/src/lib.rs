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
pub mod index;
pub mod indexer;
pub mod ingest;
pub mod maintenance;
pub mod metrics;
pub mod pds;
pub mod priority;
pub mod private;
pub mod registry;
pub mod routes;
pub mod search;
pub mod serve;
pub mod sharing;
pub mod state;
pub mod store;
pub mod tagging;
pub mod tree;
pub mod vectorizer;
pub mod web;

pub use serve::serve;
