//! A run's tags after ingest: only the owner's edits, which change what a
//! `tag:` grant covers (`GRANT_COVERS_RUN` reads `tags_key`) at once, and
//! queue the run for indexing (and its vectors for checking) again, so the
//! index's copy of the tags follows; `indexed_at` is unset until it has.

use crate::run::Run;
use crate::store::RunRecord;
use rusqlite::params;

use super::{Lane, Registry, Viewer};
use crate::error::{Error, Result};

impl Registry {
    /// Every tag on a run the viewer may read, by name, with how many
    /// conversations carry it.
    pub fn tags(&self, viewer: &Viewer) -> Result<Vec<(String, u64)>> {
        let mut sql = super::Sql::readable_runs(
            "SELECT j.value, COUNT(DISTINCT runs.conversation)
             FROM runs, json_each(runs.meta_json, '$.tags') j",
            viewer,
        );
        sql.push(" GROUP BY j.value ORDER BY j.value");
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(sql.text())?;
        let tags = stmt
            .query_map(sql.params(), |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(tags)
    }

    /// Writes the tags of `runs` (each the viewer's own, with its new tags)
    /// and queues each for indexing, in one transaction. A run that is not
    /// the viewer's changes nothing and fails the whole edit.
    pub fn retag(&self, viewer: &Viewer, runs: &[Run]) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for meta in runs {
            let changed = tx
                .prepare_cached(
                    "UPDATE runs SET meta_json = ?3, tags_key = ?4, indexed_at = NULL,
                        embedded_model = NULL, embedded_at = NULL
                     WHERE id = ?1 AND user_id = ?2",
                )?
                .execute(params![
                    meta.id,
                    viewer.user_id().as_str(),
                    RunRecord::catalog_json(meta)?,
                    format!("|{}|", meta.tags.join("|")),
                ])?;
            if changed != 1 {
                return Err(Error::run_not_found());
            }
            super::jobs::enqueue(
                &tx,
                &meta.id,
                Lane::Realtime,
                &kith_shared::timestamp::now(),
            )?;
        }
        tx.commit()?;
        Ok(())
    }
}
