//! The values each search filter can take among the runs a viewer may read:
//! the search form offers them, so nobody types a machine's or a
//! project's name from memory.

use std::collections::BTreeSet;

use super::{Registry, Viewer};
use crate::error::Result;

/// Values offered per filter, at most this many each.
const MAX_VALUES: usize = 200;

/// Each filter's values, sorted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FilterValues {
    pub owners: Vec<String>,
    pub machines: Vec<String>,
    /// Working directories.
    pub projects: Vec<String>,
    pub branches: Vec<String>,
    pub tools: Vec<String>,
    pub tags: Vec<String>,
}

impl Registry {
    /// The values the viewer's readable runs hold for each filter.
    pub fn filter_values(&self, viewer: &Viewer) -> Result<FilterValues> {
        // Before taking a connection: `tags` takes one of its own.
        let tags = self.tags(viewer)?.into_iter().map(|(t, _)| t).collect();
        let conn = self.reader();
        let mut sql = super::Sql::readable_runs(
            "SELECT users.handle, json_extract(runs.meta_json, '$.machine'),
                    json_extract(runs.meta_json, '$.cwd'),
                    json_extract(runs.meta_json, '$.git_branch')
             FROM runs JOIN users ON users.id = runs.user_id",
            viewer,
        );
        sql.push(" AND runs.superseded = 0");
        let mut sets: [BTreeSet<String>; 4] = Default::default();
        {
            let mut stmt = conn.prepare(sql.text())?;
            let mut rows = stmt.query(sql.params())?;
            while let Some(row) = rows.next()? {
                for (i, set) in sets.iter_mut().enumerate() {
                    if let Some(v) = row.get::<_, Option<String>>(i)? {
                        if set.len() < MAX_VALUES && !v.trim().is_empty() {
                            set.insert(v);
                        }
                    }
                }
            }
        }
        let mut tools = super::Sql::readable_runs(
            "SELECT DISTINCT j.value FROM runs, json_each(runs.meta_json, '$.tools_used') j",
            viewer,
        );
        tools.push(&format!(" ORDER BY 1 LIMIT {MAX_VALUES}"));
        let tools = conn
            .prepare(tools.text())?
            .query_map(tools.params(), |r| r.get(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        let [owners, machines, projects, branches] = sets.map(|s| s.into_iter().collect());
        Ok(FilterValues {
            owners,
            machines,
            projects,
            branches,
            tools,
            tags,
        })
    }
}
