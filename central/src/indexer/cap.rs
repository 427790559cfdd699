//! How much of one run the index holds: its first `MAX_CHUNKS_PER_RUN`
//! chunks, and a record of what was left out. Pure; the worker applies it
//! to every run it indexes and `doctor` to what it expects.

use kith_shared::chunk::Chunk;

/// Most chunks the index holds of one run (one delta). A chunk adds about
/// 1,000 characters of a turn (a 1,200-character window less the 200 it
/// shares with the one before), so 8,000 chunks hold about 8 MB of text:
/// as much as the agent sends in one delta (it cuts deltas at 8 MiB of
/// transcript, most of which is the JSON around the text, and tool output
/// is cut at 8,000 characters a turn). What passes it is a line longer
/// than that, which the agent sends whole: two 50 MiB lines make some
/// 105,000 chunks. 8,000 chunks take the embedded model four to five
/// minutes on two cores (some 30 chunks a second, BENCHMARKS.md), shared
/// with other members' runs a slice at a time (`vectorizer`).
///
/// The chunks past it are neither embedded nor keyword-indexed: a search
/// then finds the same text either way, and the indexer's batch and each
/// of the vectorizer's reads of a run's chunks stay bounded as well.
/// Nothing is lost: the blob keeps every byte, `kith show` prints it all,
/// and the run records how many chunks were cut (`runs.chunks_cut`,
/// counted in `/api/status` and `kith status`).
pub const MAX_CHUNKS_PER_RUN: usize = 8_000;

/// A run's chunks as the index holds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capped {
    /// The first `MAX_CHUNKS_PER_RUN` chunks, in order.
    pub chunks: Vec<Chunk>,
    /// Chunks left out past the cap.
    pub n_cut: u64,
    /// The text of the chunks left out, in bytes (windows' overlaps
    /// counted in each): for the log, which never holds the text itself.
    pub bytes_cut: u64,
}

/// The chunks `chunk_turns` gave a run, cut to `MAX_CHUNKS_PER_RUN`.
pub fn cap(chunks: Vec<Chunk>) -> Capped {
    cap_at(chunks, MAX_CHUNKS_PER_RUN)
}

fn cap_at(mut chunks: Vec<Chunk>, max: usize) -> Capped {
    let cut = chunks.split_off(chunks.len().min(max));
    Capped {
        chunks,
        n_cut: cut.len() as u64,
        bytes_cut: cut.iter().map(|c| c.text.len() as u64).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kith_shared::transcript::Role;

    fn chunks(n: u32) -> Vec<Chunk> {
        (0..n)
            .map(|i| Chunk {
                chunk_idx: i,
                role: Role::User,
                text: format!("chunk {i:04}"),
                line_start: 1,
                line_end: 1,
                timestamp: None,
            })
            .collect()
    }

    #[test]
    fn a_run_keeps_its_first_chunks_up_to_the_cap_and_counts_the_rest() {
        // (chunks made, cap) -> (kept, cut)
        let cases: [(u32, usize, u32, u64); 5] = [
            (0, 3, 0, 0),
            (2, 3, 2, 0),
            (3, 3, 3, 0),
            (4, 3, 3, 1),
            (10, 3, 3, 7),
        ];
        for (made, max, kept, cut) in cases {
            let capped = cap_at(chunks(made), max);
            assert_eq!(capped.chunks, chunks(kept), "{made} made, cap {max}");
            assert_eq!(capped.n_cut, cut, "{made} made, cap {max}");
            // "chunk 0000" is 10 bytes.
            assert_eq!(capped.bytes_cut, 10 * cut);
        }
    }

    #[test]
    fn runs_are_capped_at_max_chunks_per_run() {
        let capped = cap(chunks(MAX_CHUNKS_PER_RUN as u32 + 5));
        assert_eq!(capped.chunks.len(), MAX_CHUNKS_PER_RUN);
        assert_eq!(capped.n_cut, 5);
        assert_eq!(cap(chunks(MAX_CHUNKS_PER_RUN as u32)).n_cut, 0);
    }
}
