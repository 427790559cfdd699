//! Conversations in the run catalog: each run row names its conversation
//! (`runs.conversation`), so a conversation is a query over runs through the
//! same readable predicate as every other run read. Facet filters (files,
//! tools, commands, project, branch, owner) match the facts each run's
//! metadata keeps, read from the runs the viewer may read only.

use std::collections::{BTreeSet, HashMap};

use kith_proto::AgentRuntime;
use kith_shared::ids::RunId;

use super::{Registry, Sql, StoredRun};
use crate::conversation::{self, ConversationId, MIN_PREFIX};
use crate::error::{Code, Error, Result};
use crate::registry::Viewer;
use crate::run::Run;
use crate::store::RunRecord;

/// Longest path, command or other filter value.
pub const MAX_FILTER_BYTES: usize = 4096;

/// Filters on what a conversation's runs did, each matched by at least one
/// run the viewer may read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facets {
    /// A whole path, or a suffix of whole path components; ending in `/`,
    /// a folder the file is under.
    pub file: Option<String>,
    /// A tool or skill name.
    pub tool: Option<String>,
    /// Part of a shell command.
    pub command: Option<String>,
    /// The working directory or a folder above it (whole components), or,
    /// without a `/`, the name of a folder in its path.
    pub project: Option<String>,
    pub branch: Option<String>,
    /// The owner's handle.
    pub owner: Option<String>,
}

impl Facets {
    /// The facet filters of a request, each bounded: `[file, tool, command,
    /// project, branch, owner]`, and `machine` (checked here, matched elsewhere).
    pub fn checked(values: [&Option<String>; 6], machine: &Option<String>) -> Result<Self> {
        for v in values.iter().copied().chain([machine]).flatten() {
            if v.len() > MAX_FILTER_BYTES {
                return Err(Error::invalid(
                    Code::FilterTooLong,
                    format!("a filter value is at most {MAX_FILTER_BYTES} bytes"),
                ));
            }
        }
        let [file, tool, command, project, branch, owner] = values.map(|v| {
            v.as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        });
        Ok(Self {
            file,
            tool,
            command,
            project,
            branch,
            owner,
        })
    }

    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// SQL conditions over `runs`, one per facet, with their values; the
    /// `?` in each is numbered by the caller.
    fn clauses(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(file) = &self.file {
            let folder = file.ends_with('/') && file.len() > 1;
            out.push((
                if folder {
                    // A folder: a file under it, the folder given whole or
                    // as its last components.
                    "EXISTS (SELECT 1 FROM json_each(runs.meta_json, '$.files_touched') j
                       WHERE instr('/' || j.value, '/' || ?1 || '/') > 0)"
                } else {
                    "EXISTS (SELECT 1 FROM json_each(runs.meta_json, '$.files_touched') j
                       WHERE j.value = ?1 OR substr(j.value, -length(?1) - 1) = '/' || ?1)"
                },
                file.trim_end_matches('/').to_owned(),
            ));
        }
        if let Some(tool) = &self.tool {
            out.push((
                "EXISTS (SELECT 1 FROM json_each(runs.meta_json, '$.tools_used') j WHERE j.value = ?1)",
                tool.clone(),
            ));
        }
        if let Some(command) = &self.command {
            out.push((
                "EXISTS (SELECT 1 FROM json_each(runs.meta_json, '$.commands') j
                   WHERE instr(j.value, ?1) > 0)",
                command.clone(),
            ));
        }
        if let Some(name) = self.project.as_ref().filter(|p| !p.contains('/')) {
            // A name: a folder so named in the working folder's path.
            out.push((
                "instr(rtrim(json_extract(runs.meta_json, '$.cwd'), '/') || '/', '/' || ?1 || '/') > 0",
                name.clone(),
            ));
        } else if let Some(project) = &self.project {
            out.push((
                "(rtrim(json_extract(runs.meta_json, '$.cwd'), '/') = ?1
                  OR substr(json_extract(runs.meta_json, '$.cwd'), 1, length(?1) + 1) = ?1 || '/'
                  OR ?1 = '')",
                crate::index::normalize_prefix(project)
                    .trim_end_matches('/')
                    .to_owned(),
            ));
        }
        if let Some(branch) = &self.branch {
            out.push((
                "json_extract(runs.meta_json, '$.git_branch') = ?1",
                branch.clone(),
            ));
        }
        if let Some(owner) = &self.owner {
            out.push((
                "runs.user_id = (SELECT id FROM users WHERE handle = ?1)",
                owner.clone(),
            ));
        }
        out
    }
}

/// Filters of the conversation listing.
#[derive(Debug, Clone, Default)]
pub struct ConversationFilter {
    pub facets: Facets,
    pub runtime: Option<AgentRuntime>,
    pub machine: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
    /// (last activity, root) of the last tree of the previous page.
    pub after: Option<(String, String)>,
    pub limit: u32,
}

impl Registry {
    /// The conversation `name` names for the viewer: a whole run id (its
    /// conversation), a conversation id, the agent's own session id (what
    /// search prints beside a hit, and `claude --resume` takes), or a unique
    /// prefix of any of them (git style, at least `MIN_PREFIX` characters).
    /// A session id names the session, not its subagents, which carry the
    /// same id in Claude Code. Unreadable runs are not there: an unknown
    /// name and another's private one answer alike.
    pub fn resolve_conversation(&self, viewer: &Viewer, name: &str) -> Result<ConversationId> {
        let name = name.trim();
        if let Ok(id) = RunId::parse(name) {
            if let Some(run) = self.run(viewer, &id)? {
                return conversation_column(&run);
            }
        }
        let kith_id = name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b == b'c' || b == b'r');
        let session_id = name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
        if name.len() < MIN_PREFIX || name.len() > 128 || !(kith_id || session_id) {
            return Err(Error::invalid(
                Code::InvalidId,
                format!(
                    "name a conversation by its id, a run id, the agent's session id, or at least {MIN_PREFIX} of their first characters"
                ),
            ));
        }
        let mut found = Vec::new();
        if kith_id {
            let column = if conversation::is_prefix(name) {
                "conversation"
            } else {
                "id"
            };
            found = self.conversations_where(
                viewer,
                &format!("substr({column}, 1, length(?1)) = ?1"),
                name,
            )?;
        }
        let sessions =
            self.conversations_where(viewer, "substr(conversation_id, 1, length(?1)) = ?1", name)?;
        let top_level = sessions.iter().any(|(_, top)| *top);
        for (id, top) in sessions {
            if (top || !top_level) && !found.iter().any(|(f, _)| *f == id) {
                found.push((id, top));
            }
        }
        match found.as_slice() {
            [] => Err(Error::conversation_not_found()),
            [(one, _)] => ConversationId::parse(one),
            many => Err(Error::conflict(
                Code::AmbiguousId,
                format!(
                    "{name} names {} conversations: {}; give more characters",
                    if many.len() > 10 {
                        "more than 10".to_owned()
                    } else {
                        many.len().to_string()
                    },
                    many.iter()
                        .take(10)
                        .map(|(id, _)| id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// At most 11 conversations with a readable run matching `condition`
    /// (on `?1` = `name`), each with whether it is a tree's top (not a
    /// subagent's).
    fn conversations_where(
        &self,
        viewer: &Viewer,
        condition: &str,
        name: &str,
    ) -> Result<Vec<(String, bool)>> {
        let mut sql = Sql::readable_runs(
            "SELECT conversation, MAX(id = root_run_id) FROM runs",
            viewer,
        );
        sql.and(condition, name.to_owned())
            .push(" GROUP BY conversation LIMIT 11");
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(sql.text())?;
        let found = stmt
            .query_map(sql.params(), |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(found)
    }

    /// The runs of one conversation the viewer may read, in start order.
    pub fn conversation_runs(
        &self,
        viewer: &Viewer,
        id: &ConversationId,
    ) -> Result<Vec<StoredRun>> {
        let mut sql = Sql::new("WHERE conversation = ");
        sql.bind(id.as_str().to_owned())
            .push(" AND ")
            .readable_by(viewer)
            .push(" ORDER BY started_at, id");
        self.query_runs_lean(&sql)
    }

    /// Trees (by root run) with a readable run matching `filter`, most
    /// recently active first, with their last activity.
    pub fn conversation_roots(
        &self,
        viewer: &Viewer,
        filter: &ConversationFilter,
    ) -> Result<Vec<(String, String)>> {
        let mut sql = Sql::readable_runs(
            "SELECT root_run_id, MAX(COALESCE(json_extract(meta_json, '$.ended_at'), started_at)) AS last FROM runs",
            viewer,
        );
        if let Some(rt) = filter.runtime {
            sql.and("agent_runtime = ?1", rt.as_str().to_owned());
        }
        if let Some(m) = &filter.machine {
            sql.and(
                "machine_id IN (SELECT id FROM machines WHERE name = ?1)",
                m.clone(),
            );
        }
        if let Some(roots) = self.facet_roots(viewer, &filter.facets)? {
            if roots.is_empty() {
                return Ok(Vec::new());
            }
            let list = serde_json::to_string(&roots)?;
            sql.and("root_run_id IN (SELECT value FROM json_each(?1))", list);
        }
        sql.push(" GROUP BY root_run_id HAVING 1");
        if let Some(since) = &filter.since {
            sql.and("last >= ?1", since.clone());
        }
        if let Some(until) = &filter.until {
            sql.and("last < ?1", until.clone());
        }
        if let Some((last, root)) = &filter.after {
            sql.push(" AND (last < ")
                .bind(last.clone())
                .push(" OR (last = ")
                .bind(last.clone())
                .push(" AND root_run_id < ")
                .bind(root.clone())
                .push("))");
        }
        sql.push(&format!(
            " ORDER BY last DESC, root_run_id DESC LIMIT {}",
            filter.limit
        ));
        let conn = self.reader();
        let mut stmt = conn.prepare(sql.text())?;
        let rows = stmt
            .query_map(sql.params(), |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// The trees (by root run) in which a run the viewer may read matches
    /// every facet (each facet by some run), or `None` without facets.
    pub fn facet_roots(&self, viewer: &Viewer, facets: &Facets) -> Result<Option<Vec<String>>> {
        if let Some(owner) = &facets.owner {
            self.member(owner)?;
        }
        let mut result: Option<BTreeSet<String>> = None;
        for (clause, value) in facets.clauses() {
            let mut sql = Sql::readable_runs("SELECT DISTINCT root_run_id FROM runs", viewer);
            sql.and(clause, value);
            let conn = self.reader();
            let mut stmt = conn.prepare_cached(sql.text())?;
            let roots: BTreeSet<String> = stmt
                .query_map(sql.params(), |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            result = Some(match result {
                None => roots,
                Some(before) => before.intersection(&roots).cloned().collect(),
            });
        }
        Ok(result.map(|set| set.into_iter().collect()))
    }

    /// Every user's handle by id (few rows: a family).
    pub fn handles(&self) -> Result<HashMap<String, String>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached("SELECT id, handle FROM users")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Records the conversation of every run stored before central kept it
    /// (in its column and its metadata), from the chains of deltas.
    pub(super) fn backfill_conversations(&self) -> Result<()> {
        let pending: i64 = self.conn().query_row(
            "SELECT COUNT(*) FROM runs WHERE conversation IS NULL",
            [],
            |r| r.get(0),
        )?;
        if pending == 0 {
            return Ok(());
        }
        let metas: Vec<Run> = {
            let conn = self.conn();
            let mut stmt = conn.prepare("SELECT meta_json FROM runs")?;
            let rows = stmt
                .query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            rows.iter()
                .map(|json| Ok(RunRecord::read(json.as_bytes())?.run))
                .collect::<Result<_>>()?
        };
        let refs: Vec<&Run> = metas.iter().collect();
        let found = conversation::conversations_of(&refs);
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for meta in &metas {
            let id = &found[&meta.id];
            let mut meta = meta.clone();
            meta.conversation = Some(id.to_string());
            tx.prepare_cached("UPDATE runs SET conversation = ?2, meta_json = ?3 WHERE id = ?1")?
                .execute(rusqlite::params![
                    meta.id,
                    id.as_str(),
                    RunRecord::catalog_json(&meta)?
                ])?;
        }
        tx.commit()?;
        Ok(())
    }
}

fn conversation_column(run: &StoredRun) -> Result<ConversationId> {
    run.run
        .conversation
        .as_deref()
        .map(ConversationId::parse)
        .unwrap_or_else(|| {
            Err(Error::Internal(format!(
                "run {} has no conversation",
                run.run.id
            )))
        })
}
