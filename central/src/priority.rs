//! CPU priority of central's background threads. On Linux nice is per
//! thread, and threads a thread starts inherit it. Work that can keep every
//! core busy for minutes (embedding a backfill or a re-embed, training the
//! ANN index, indexing a backfill) runs below request handling, so a hook's
//! ingest or a search takes the cores first instead of sharing them evenly.

/// The embedding model's worker and ONNX Runtime's threads, and ANN
/// training. Queries also preempt the model in the embed queue.
pub(crate) const MODEL: i32 = 10;

/// The indexing thread (and the index writer's threads it starts): above
/// the model, so text stays searchable first.
pub(crate) const INDEX: i32 = 5;

/// Lowers the calling thread's CPU priority to `nice`.
pub(crate) fn lower(nice: i32) {
    if let Err(e) = rustix::process::setpriority_process(None, nice) {
        tracing::debug!("cannot lower a background thread's CPU priority: {e}");
    }
}
