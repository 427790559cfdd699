//! Path globs for `exclude` and tag rules in `config.toml`: `~/` is the home
//! folder, `**` any number of folders (none too), `*` any run of characters
//! within one name, `?` one character. A glob matches the whole path, so
//! `~/secret/**` covers `~/secret` and everything under it.

use std::fmt;
use std::path::{Component, Path};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob {
    /// As written in the configuration, for `kith config` and `kith status`.
    text: String,
    /// The absolute pattern's names, `~` expanded.
    parts: Vec<String>,
}

impl Glob {
    /// Refuses a glob that is not absolute once `~/` is expanded (or does not
    /// start with `**/`, anywhere): a relative one would depend on the
    /// folder kith happens to run in.
    pub(crate) fn new(text: &str, home: &Path) -> Result<Self, String> {
        let expanded = match text.strip_prefix("~/") {
            Some(rest) => format!("{}/{rest}", home.display()),
            None if text == "~" => home.display().to_string(),
            None => text.to_owned(),
        };
        if !(expanded.starts_with('/') || expanded.starts_with("**/")) {
            return Err(format!(
                "{text:?} must start with /, ~/ or **/ (it is matched against whole paths)"
            ));
        }
        let parts = expanded
            .split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .map(str::to_owned)
            .collect();
        Ok(Self {
            text: text.to_owned(),
            parts,
        })
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `path` (absolute; compared by its names, without touching
    /// the disk) matches.
    /// Whether `path` matches, read as the folder it names: `..` takes the
    /// folder before it away (`/w/ok/../secret` is `/w/secret`), `.` is
    /// nothing.
    pub(crate) fn matches(&self, path: &Path) -> bool {
        let mut names: Vec<String> = Vec::new();
        for c in path.components() {
            match c {
                Component::Normal(n) => names.push(n.to_string_lossy().into_owned()),
                Component::ParentDir => {
                    names.pop();
                }
                _ => {}
            }
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        match_parts(&self.parts, &names)
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn match_parts(pattern: &[String], names: &[&str]) -> bool {
    match pattern.split_first() {
        None => names.is_empty(),
        Some((first, rest)) if first == "**" => {
            (0..=names.len()).any(|skip| match_parts(rest, &names[skip..]))
        }
        Some((first, rest)) => names.split_first().is_some_and(|(name, names)| {
            match_name(
                &first.chars().collect::<Vec<_>>(),
                &name.chars().collect::<Vec<_>>(),
            ) && match_parts(rest, names)
        }),
    }
}

/// `*` and `?` within one name.
fn match_name(pattern: &[char], name: &[char]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some(('*', rest)) => (0..=name.len()).any(|skip| match_name(rest, &name[skip..])),
        Some(('?', rest)) => !name.is_empty() && match_name(rest, &name[1..]),
        Some((c, rest)) => name.first() == Some(c) && match_name(rest, &name[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(glob: &str, path: &str, want: bool) {
        let g = Glob::new(glob, Path::new("/home/ann")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(g.matches(Path::new(path)), want, "{glob} on {path}");
    }

    #[test]
    fn globs_match_whole_paths() {
        let cases = [
            ("~/secret/**", "/home/ann/secret", true),
            ("~/secret/**", "/home/ann/secret/api/src", true),
            ("~/secret/**", "/home/ann/secret-project", false),
            ("~/secret/**", "/home/ann/other/secret", false),
            ("~/secret", "/home/ann/secret", true),
            ("~/secret", "/home/ann/secret/x", false),
            ("~/work/*/notes", "/home/ann/work/kith/notes", true),
            ("~/work/*/notes", "/home/ann/work/a/b/notes", false),
            ("~/work/**/notes", "/home/ann/work/a/b/notes", true),
            ("/srv/client-*/**", "/srv/client-acme/app", true),
            ("/srv/client-*/**", "/srv/clients/app", false),
            ("/tmp/?.jsonl", "/tmp/a.jsonl", true),
            ("/tmp/?.jsonl", "/tmp/ab.jsonl", false),
            (
                "**/private-*.jsonl",
                "/home/ann/.claude/projects/-x/private-1.jsonl",
                true,
            ),
            (
                "**/private-*.jsonl",
                "/home/ann/.claude/projects/-x/public.jsonl",
                false,
            ),
            ("/home/ann/./secret//**", "/home/ann/secret/a", true),
            ("/home/ann/sécret/**", "/home/ann/sécret/a", true),
            // A path is the folder it names: `..` and `.` read as such.
            ("/w/secretproj/**", "/w/ok/../secretproj/y", true),
            ("/w/secretproj/**", "/w/./secretproj", true),
            ("/w/ok/**", "/w/ok/../secretproj/y", false),
        ];
        for (glob, path, want) in cases {
            check(glob, path, want);
        }
    }

    #[test]
    fn relative_globs_are_refused() {
        for bad in ["secret/**", "*.jsonl", "", "~user/x"] {
            let e = Glob::new(bad, Path::new("/home/ann")).err();
            assert!(
                e.as_deref()
                    .is_some_and(|e| e.contains("must start with /, ~/ or **/")),
                "{bad:?}: {e:?}"
            );
        }
    }
}
