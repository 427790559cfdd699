//! Pure code that both the device agent and central use: ids, hashing, JSONL
//! line checks, transcript formats -> turns, chunking, redaction,
//! token counts and usage (what the agents' models were paid for). No IO
//! (but for `fixtures`, the tests' transcripts, built only for tests).

pub mod chunk;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod hash;
pub mod ids;
pub mod jsonl;
pub mod redact;
pub mod tags;
pub mod timestamp;
pub mod tokens;
pub mod transcript;
pub mod usage;
