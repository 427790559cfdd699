//! The turns of the conversations read last, so that paging through a long
//! conversation parses it once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use kith_proto::ConversationTurn;

use crate::sync::lock;

/// The turns of the conversations read last, each by the runs they were
/// made of (what a viewer may read of it, in order; a run's bytes never
/// change), so that paging through a long conversation parses it once.
/// Holds at most `TURNS_CACHE_BYTES` of text.
#[derive(Default)]
pub struct TurnsCache(Mutex<VecDeque<Cached>>);

struct Cached {
    runs: Vec<String>,
    turns: Arc<Vec<ConversationTurn>>,
    bytes: usize,
}

pub(crate) const TURNS_CACHE_BYTES: usize = 128 << 20;

impl TurnsCache {
    pub(crate) fn get(&self, runs: &[String]) -> Option<Arc<Vec<ConversationTurn>>> {
        let mut cached = lock(&self.0);
        let at = cached.iter().position(|c| c.runs == runs)?;
        let hit = cached.remove(at)?;
        let turns = hit.turns.clone();
        cached.push_front(hit);
        Some(turns)
    }

    /// Drops what holds any of `runs` (forgotten: their text leaves memory
    /// too).
    pub fn forget(&self, runs: &[String]) {
        lock(&self.0).retain(|c| !c.runs.iter().any(|r| runs.contains(r)));
    }

    pub(crate) fn put(&self, runs: Vec<String>, turns: Arc<Vec<ConversationTurn>>) {
        let bytes: usize = turns
            .iter()
            .map(|t| {
                t.text.len()
                    + t.tool
                        .as_ref()
                        .map_or(0, |c| c.input.len() + c.output.len())
            })
            .sum();
        if bytes > TURNS_CACHE_BYTES {
            return;
        }
        let mut cached = lock(&self.0);
        cached.push_front(Cached { runs, turns, bytes });
        let mut total = 0;
        cached.retain(|c| {
            total += c.bytes;
            total <= TURNS_CACHE_BYTES
        });
    }
}
