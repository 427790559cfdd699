//! `kith config`: the configuration kith runs with, every value beside
//! where it came from (flag, env, file or default), as text or JSON. The
//! token is never shown, only where it comes from.

use std::fmt;

use serde_json::{json, Value};

use crate::config::{Origin, PathOrigins, Paths};
use crate::settings::Settings;

pub(crate) struct Effective<'a> {
    pub(crate) paths: &'a Paths,
    pub(crate) origins: &'a PathOrigins,
    pub(crate) settings: &'a Settings,
    /// Where the token comes from; `None` when there is none.
    pub(crate) token: Option<Origin>,
}

impl Effective<'_> {
    /// (setting, value, origin) rows, in the order shown.
    fn rows(&self) -> Vec<(String, String, String)> {
        let mut rows = Vec::new();
        let mut row = |name: &str, value: String, origin: String| {
            rows.push((name.to_owned(), value, origin));
        };
        match &self.settings.central_url {
            Some(url) => row("central_url", url.value.clone(), url.origin.to_string()),
            None => row("central_url", "(none)".into(), "-".into()),
        }
        match &self.token {
            Some(origin) => row("token", "(set)".into(), origin.to_string()),
            None => row("token", "(none)".into(), "-".into()),
        }
        let exists = if self.settings.file.exists() {
            "read"
        } else {
            "absent"
        };
        row(
            "config_file",
            self.settings.file.display().to_string(),
            exists.into(),
        );
        for ((name, origin), dir) in self.origins.iter().zip(self.paths.dirs()) {
            row(name, dir.display().to_string(), origin.to_string());
        }
        for glob in &self.settings.rules.exclude {
            row("exclude", glob.value.to_string(), glob.origin.to_string());
        }
        for pattern in self.settings.rules.redact.patterns() {
            row(
                "redact",
                pattern.to_owned(),
                Origin::File(self.settings.file.clone()).to_string(),
            );
        }
        for rule in &self.settings.rules.tags {
            row(
                "tag",
                format!("{} -> {}", rule.project, rule.tags.join(", ")),
                Origin::File(self.settings.file.clone()).to_string(),
            );
        }
        for root in &self.settings.aider_roots {
            row(
                "aider_root",
                root.value.display().to_string(),
                root.origin.to_string(),
            );
        }
        rows
    }

    pub(crate) fn to_json(&self) -> Value {
        let origin = |o: &Origin| o.to_string();
        let dirs: serde_json::Map<String, Value> = self
            .origins
            .iter()
            .zip(self.paths.dirs())
            .map(|((name, o), dir)| {
                (
                    (*name).to_owned(),
                    json!({"value": dir, "origin": origin(o)}),
                )
            })
            .collect();
        json!({
            "central_url": self.settings.central_url.as_ref().map(|u| json!({
                "value": u.value, "origin": origin(&u.origin),
            })),
            "token": self.token.as_ref().map(|o| json!({"origin": origin(o)})),
            "config_file": {"path": self.settings.file, "exists": self.settings.file.exists()},
            "dirs": dirs,
            "exclude": self.settings.rules.exclude.iter().map(|g| json!({
                "glob": g.value.as_str(), "origin": origin(&g.origin),
            })).collect::<Vec<_>>(),
            "redact": self.settings.rules.redact.patterns().collect::<Vec<_>>(),
            "tag": self.settings.rules.tags.iter().map(|r| json!({
                "project": r.project.as_str(), "tags": r.tags,
            })).collect::<Vec<_>>(),
            "aider_roots": self.settings.aider_roots.iter().map(|r| json!({
                "path": r.value, "origin": origin(&r.origin),
            })).collect::<Vec<_>>(),
        })
    }
}

/// Aligned columns: setting, value, origin.
impl fmt::Display for Effective<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rows = self.rows();
        let name_w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        let value_w = rows.iter().map(|r| r.1.chars().count()).max().unwrap_or(0);
        for (name, value, origin) in rows {
            writeln!(f, "{name:<name_w$}  {value:<value_w$}  ({origin})")?;
        }
        Ok(())
    }
}
