//! Pure code that both the device agent and central use: ids, hashing, JSONL
//! line checks, transcript formats -> turns, chunking and redaction. No IO.

pub mod chunk;
pub mod hash;
pub mod ids;
pub mod jsonl;
pub mod redact;
pub mod timestamp;
pub mod transcript;
