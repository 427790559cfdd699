//! The agent's `config.toml` (in the config folder): which central to send
//! to, which transcripts never to capture (`exclude`), which tags a
//! project's runs get (`[[tag]]`), and the person's own secrets to mask
//! besides the built-in ones (`redact`, regular expressions), and where
//! Aider's project histories are (`[aider] roots`, with `KITH_AIDER_ROOTS`),
//! and where another machine's folders are on this one (`[paths]`, for
//! `kith resume`).
//! Precedence: file < env < flag. A file that
//! does not parse is an error, and capture stops on it rather than send what
//! an exclusion it cannot read may have kept back.
//!
//! ```toml
//! central_url = "https://kith.example.com"
//! exclude = ["~/secret-project/**"]
//! redact = ["ACME-[0-9]{6}"]
//!
//! [[tag]]
//! project = "~/work/**"
//! tags = ["work"]
//!
//! [aider]
//! roots = ["~/src", "~/notes"]   # a project, or a folder of projects
//!
//! [paths]                        # another machine's folder = this one's
//! "/Users/me/src" = "~/src"
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::{Auth, Origin, Paths, Secret};
use crate::error::{Error, IoContext, Result};
use crate::glob::Glob;
use kith_shared::redact::Extra;

pub(crate) const FILE_NAME: &str = "config.toml";

/// `config.toml` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    central_url: Option<String>,
    #[serde(default)]
    exclude: Vec<String>,
    #[serde(default)]
    tag: Vec<TagRuleFile>,
    #[serde(default)]
    redact: Vec<String>,
    #[serde(default)]
    aider: AiderFile,
    #[serde(default)]
    paths: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AiderFile {
    #[serde(default)]
    roots: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TagRuleFile {
    project: String,
    tags: Vec<String>,
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Sourced<T> {
    pub(crate) value: T,
    pub(crate) origin: Origin,
}

/// Runs of transcripts whose agent worked in `project` get `tags`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TagRule {
    pub(crate) project: Glob,
    pub(crate) tags: Vec<String>,
}

/// What capture applies to every transcript.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules {
    /// From the file, `KITH_EXCLUDE` and `--exclude` together: a later
    /// source adds exclusions and never lifts one.
    pub(crate) exclude: Vec<Sourced<Glob>>,
    pub(crate) tags: Vec<TagRule>,
    /// Masked in every delta, after the built-in secret rules.
    pub(crate) redact: Extra,
}

impl Rules {
    /// The glob that keeps a transcript back, by its own path or by the
    /// folder its agent worked in.
    pub(crate) fn excluded(&self, path: &Path, cwd: Option<&Path>) -> Option<&Glob> {
        self.exclude
            .iter()
            .map(|g| &g.value)
            .find(|g| g.matches(path) || cwd.is_some_and(|cwd| g.matches(cwd)))
    }

    /// The tags of every rule whose project holds `cwd`, each once, sorted.
    pub(crate) fn tags_for(&self, cwd: Option<&Path>) -> Vec<String> {
        let Some(cwd) = cwd else {
            return Vec::new();
        };
        let tags: BTreeSet<&String> = self
            .tags
            .iter()
            .filter(|r| r.project.matches(cwd))
            .flat_map(|r| &r.tags)
            .collect();
        tags.into_iter().cloned().collect()
    }
}

/// The settings flags can give.
#[derive(Debug, Clone, Default)]
pub(crate) struct Flags {
    pub(crate) central_url: Option<String>,
    pub(crate) exclude: Vec<String>,
}

/// Everything the agent was configured with, resolved before any work.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Where `config.toml` is (or would be).
    pub(crate) file: PathBuf,
    /// `--central-url` > `KITH_CENTRAL_URL` > `config.toml` > `auth.json`
    /// (written by `kith login`).
    pub(crate) central_url: Option<Sourced<String>>,
    pub(crate) rules: Rules,
    /// Folders holding an Aider project's `.aider.chat.history.md`, or
    /// projects one level down (`discover::aider_dirs`): the file's, then
    /// `KITH_AIDER_ROOTS`'s (colon-separated), together.
    pub(crate) aider_roots: Vec<Sourced<PathBuf>>,
    /// `[paths]`: a folder on another machine, and where it is on this one.
    pub(crate) path_map: Vec<(String, PathBuf)>,
}

impl Settings {
    /// The Aider roots, without their origins.
    pub(crate) fn aider_roots(&self) -> Vec<PathBuf> {
        self.aider_roots.iter().map(|r| r.value.clone()).collect()
    }

    /// The login to use: the central these settings name (see
    /// `central_url` for the order), with `KITH_TOKEN` over `auth.json`'s
    /// token.
    pub(crate) fn auth(&self, paths: &Paths) -> Result<Auth> {
        let file = Auth::read(paths)?;
        let ca_cert = file.as_ref().and_then(|a| a.ca_cert.clone());
        let token = match std::env::var("KITH_TOKEN").ok().filter(|v| !v.is_empty()) {
            Some(token) => Some(Secret::new(token)),
            None => file.map(|a| a.token),
        };
        match (&self.central_url, token) {
            (Some(url), Some(token)) => Ok(Auth {
                central_url: url.value.trim_end_matches('/').to_owned(),
                token,
                ca_cert,
            }),
            _ => Err(Error::NotLoggedIn),
        }
    }
}

/// Every layer, read; `merge` decides.
struct Layers<'a> {
    file: &'a Path,
    config: FileConfig,
    auth_url: Option<String>,
    env_url: Option<String>,
    env_exclude: Option<String>,
    env_aider_roots: Option<String>,
    flags: &'a Flags,
    home: &'a Path,
}

impl Settings {
    pub(crate) fn load(paths: &Paths, flags: &Flags) -> Result<Self> {
        let file = paths.config_dir.join(FILE_NAME);
        let config = match std::fs::read_to_string(&file) {
            Ok(text) => toml::from_str(&text).map_err(|e| invalid(&file, located(&text, &e)))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileConfig::default(),
            Err(e) => return Err(e).at("read", &file),
        };
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        let home = var("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
        merge(Layers {
            file: &file,
            config,
            auth_url: Auth::read(paths)?.map(|a| a.central_url),
            env_url: var("KITH_CENTRAL_URL"),
            env_exclude: var("KITH_EXCLUDE"),
            env_aider_roots: var("KITH_AIDER_ROOTS"),
            flags,
            home: &home,
        })
    }
}

/// A TOML error with where it is: its line, and the table and key it is
/// in (`line 4, [aider] roots: invalid type ...`).
fn located(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else {
        return e.message().to_owned();
    };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let table = before
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|l| format!("{l} "));
    let key = text
        .lines()
        .nth(line - 1)
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| format!("{}: ", k.trim()))
        .unwrap_or_default();
    format!(
        "line {line}, {}{key}{}",
        table.unwrap_or_else(|| "top level ".to_owned()),
        e.message()
    )
}

fn invalid(file: &Path, reason: impl Into<String>) -> Error {
    Error::Invalid {
        what: "kith configuration",
        path: file.to_owned(),
        reason: reason.into(),
    }
}

/// The precedence, with no IO.
fn merge(l: Layers<'_>) -> Result<Settings> {
    let from_file = Origin::File(l.file.to_owned());
    let central_url = [
        (l.flags.central_url.clone(), Origin::Flag("--central-url")),
        (l.env_url, Origin::Env("KITH_CENTRAL_URL")),
        (l.config.central_url, from_file.clone()),
        (l.auth_url, Origin::File(l.file.with_file_name("auth.json"))),
    ]
    .into_iter()
    .find_map(|(value, origin)| value.map(|value| Sourced { value, origin }));
    if let Some(url) = &central_url {
        if !(url.value.starts_with("http://") || url.value.starts_with("https://")) {
            return Err(Error::Refused(format!(
                "central_url {:?} ({}) must be an http:// or https:// URL",
                url.value, url.origin
            )));
        }
    }

    let mut exclude = Vec::new();
    let env_exclude = l.env_exclude.unwrap_or_default();
    let layers = [
        (l.config.exclude.clone(), from_file.clone()),
        (
            env_exclude
                .split(':')
                .filter(|g| !g.is_empty())
                .map(str::to_owned)
                .collect(),
            Origin::Env("KITH_EXCLUDE"),
        ),
        (l.flags.exclude.clone(), Origin::Flag("--exclude")),
    ];
    for (globs, origin) in layers {
        for text in globs {
            let value = Glob::new(&text, l.home).map_err(|e| match &origin {
                Origin::File(_) => invalid(l.file, format!("exclude: {e}")),
                other => Error::Refused(format!("{other}: {e}")),
            })?;
            exclude.push(Sourced {
                value,
                origin: origin.clone(),
            });
        }
    }

    let mut tags = Vec::new();
    let mut all_tags = BTreeSet::new();
    for rule in l.config.tag {
        let project = Glob::new(&rule.project, l.home)
            .map_err(|e| invalid(l.file, format!("[[tag]] project: {e}")))?;
        if rule.tags.is_empty() || !kith_shared::tags::valid(&rule.tags) {
            return Err(invalid(
                l.file,
                format!(
                    "[[tag]] for {}: tags must be {}",
                    rule.project,
                    kith_shared::tags::rule()
                ),
            ));
        }
        all_tags.extend(rule.tags.iter().cloned());
        tags.push(TagRule {
            project,
            tags: rule.tags,
        });
    }
    if !kith_shared::tags::valid(&all_tags.into_iter().collect::<Vec<_>>()) {
        return Err(invalid(
            l.file,
            format!("[[tag]] rules together: {}", kith_shared::tags::rule()),
        ));
    }
    let redact =
        Extra::new(&l.config.redact).map_err(|e| invalid(l.file, format!("redact: {e}")))?;
    let env_roots = l.env_aider_roots.unwrap_or_default();
    let mut aider_roots = Vec::new();
    let layers = [
        (l.config.aider.roots.clone(), from_file),
        (
            env_roots
                .split(':')
                .filter(|r| !r.is_empty())
                .map(str::to_owned)
                .collect(),
            Origin::Env("KITH_AIDER_ROOTS"),
        ),
    ];
    for (roots, origin) in layers {
        for text in roots {
            let value = folder(&text, l.home).ok_or_else(|| {
                let why = format!("[aider] roots: {text:?} must start with / or ~/");
                match &origin {
                    Origin::File(_) => invalid(l.file, why),
                    other => Error::Refused(format!("{other}: {why}")),
                }
            })?;
            aider_roots.push(Sourced {
                value,
                origin: origin.clone(),
            });
        }
    }
    let mut path_map = Vec::new();
    for (there, here) in &l.config.paths {
        let local = folder(here, l.home).filter(|_| there.starts_with('/'));
        let Some(local) = local else {
            return Err(invalid(
                l.file,
                format!("[paths] {there:?} = {here:?}: the key must start with /, the value with / or ~/"),
            ));
        };
        path_map.push((there.trim_end_matches('/').to_owned(), local));
    }
    Ok(Settings {
        file: l.file.to_owned(),
        central_url,
        path_map,
        rules: Rules {
            exclude,
            tags,
            redact,
        },
        aider_roots,
    })
}

/// An absolute folder, `~/` for the home: a relative one would depend on
/// where kith happens to run.
fn folder(text: &str, home: &Path) -> Option<PathBuf> {
    if let Some(rest) = text.strip_prefix("~/") {
        return Some(home.join(rest));
    }
    Path::new(text).is_absolute().then(|| PathBuf::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "/c/config.toml";

    fn layers<'a>(config: &str, flags: &'a Flags) -> Layers<'a> {
        Layers {
            file: Path::new(FILE),
            config: toml::from_str(config).unwrap_or_else(|e| panic!("{e}")),
            auth_url: None,
            env_url: None,
            env_exclude: None,
            env_aider_roots: None,
            flags,
            home: Path::new("/home/ann"),
        }
    }

    fn url_of(l: Layers<'_>) -> Option<(String, String)> {
        let s = merge(l).unwrap_or_else(|e| panic!("{e}"));
        s.central_url.map(|u| (u.value, u.origin.to_string()))
    }

    #[test]
    fn central_url_precedence_is_file_then_env_then_flag() {
        let file = r#"central_url = "http://file""#;
        let none = Flags::default();
        let flag = Flags {
            central_url: Some("http://flag".into()),
            ..Flags::default()
        };
        let want = |url: &str, origin: &str| Some((url.to_owned(), origin.to_owned()));

        assert_eq!(url_of(layers("", &none)), None);
        let mut l = layers("", &none);
        l.auth_url = Some("http://login".into());
        assert_eq!(url_of(l), want("http://login", "file /c/auth.json"));
        let mut l = layers(file, &none);
        l.auth_url = Some("http://login".into());
        assert_eq!(url_of(l), want("http://file", "file /c/config.toml"));
        let mut l = layers(file, &none);
        l.env_url = Some("http://env".into());
        assert_eq!(url_of(l), want("http://env", "env KITH_CENTRAL_URL"));
        let mut l = layers(file, &flag);
        l.env_url = Some("http://env".into());
        assert_eq!(url_of(l), want("http://flag", "flag --central-url"));
    }

    #[test]
    fn exclusions_add_up_across_sources() {
        let flags = Flags {
            exclude: vec!["/flag/**".into()],
            ..Flags::default()
        };
        let mut l = layers(r#"exclude = ["~/secret/**"]"#, &flags);
        l.env_exclude = Some("/env/a/**:/env/b".into());
        let rules = merge(l).unwrap_or_else(|e| panic!("{e}")).rules;
        let shown: Vec<(String, String)> = rules
            .exclude
            .iter()
            .map(|g| (g.value.to_string(), g.origin.to_string()))
            .collect();
        let want = [
            ("~/secret/**", "file /c/config.toml"),
            ("/env/a/**", "env KITH_EXCLUDE"),
            ("/env/b", "env KITH_EXCLUDE"),
            ("/flag/**", "flag --exclude"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(g, o)| (g.to_string(), o.to_string()))
            .collect();
        assert_eq!(shown, want);

        let path = Path::new("/home/ann/.claude/projects/-x/s.jsonl");
        let secret = Path::new("/home/ann/secret/app");
        assert_eq!(
            rules.excluded(path, Some(secret)).map(Glob::as_str),
            Some("~/secret/**"),
            "by the agent's folder"
        );
        assert_eq!(
            rules
                .excluded(Path::new("/env/a/t.jsonl"), None)
                .map(Glob::as_str),
            Some("/env/a/**"),
            "by the transcript's path"
        );
        assert_eq!(
            rules.excluded(path, Some(Path::new("/home/ann/open"))),
            None
        );
        assert_eq!(rules.excluded(path, None), None);
    }

    #[test]
    fn aider_roots_from_the_file_and_the_environment() {
        let none = Flags::default();
        let mut l = layers("[aider]\nroots = [\"~/src\", \"/srv/app\"]", &none);
        l.env_aider_roots = Some("/env/a::~/env-b".into());
        let roots: Vec<(PathBuf, String)> = merge(l)
            .unwrap_or_else(|e| panic!("{e}"))
            .aider_roots
            .into_iter()
            .map(|r| (r.value, r.origin.to_string()))
            .collect();
        let want = [
            ("/home/ann/src", "file /c/config.toml"),
            ("/srv/app", "file /c/config.toml"),
            ("/env/a", "env KITH_AIDER_ROOTS"),
            ("/home/ann/env-b", "env KITH_AIDER_ROOTS"),
        ];
        let want: Vec<(PathBuf, String)> = want
            .iter()
            .map(|(p, o)| (PathBuf::from(p), o.to_string()))
            .collect();
        assert_eq!(roots, want);
        let mut l = layers("", &none);
        l.env_aider_roots = Some("src".into());
        let e = merge(l).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|e| e.contains("env KITH_AIDER_ROOTS")
                    && e.contains("\"src\" must start with / or ~/")),
            "{e:?}"
        );
    }

    #[test]
    fn tag_rules_give_each_matching_tag_once() {
        let none = Flags::default();
        let l = layers(
            r#"
            [[tag]]
            project = "~/work/**"
            tags = ["work"]
            [[tag]]
            project = "~/work/acme/**"
            tags = ["work", "acme"]
            "#,
            &none,
        );
        let rules = merge(l).unwrap_or_else(|e| panic!("{e}")).rules;
        let tags = |cwd: &str| rules.tags_for(Some(Path::new(cwd)));
        assert_eq!(tags("/home/ann/work/acme/api"), ["acme", "work"]);
        assert_eq!(tags("/home/ann/work/kith"), ["work"]);
        assert!(tags("/home/ann/play").is_empty());
        assert!(rules.tags_for(None).is_empty());
    }

    #[test]
    fn bad_settings_are_refused_with_their_place() {
        let none = Flags::default();
        let cases = [
            (
                r#"exclude = ["secret/**"]"#,
                "exclude: \"secret/**\" must start",
            ),
            (
                "[[tag]]\nproject = \"~/w/**\"\ntags = [\"a:b\"]",
                "[[tag]] for ~/w/**: tags must be",
            ),
            ("[[tag]]\nproject = \"~/w/**\"\ntags = []", "tags must be"),
            (r#"central_url = "kith.example.com""#, "must be an http"),
            (
                r#"redact = ["ACME-("]"#,
                "redact: \"ACME-(\" is not a regular expression",
            ),
            (
                "[aider]\nroots = [\"src\"]",
                "[aider] roots: \"src\" must start with / or ~/",
            ),
        ];
        for (config, want) in cases {
            let e = merge(layers(config, &none)).err().map(|e| e.to_string());
            assert!(
                e.as_deref().is_some_and(|e| e.contains(want)),
                "{config}: {e:?}"
            );
        }
        let bad: std::result::Result<FileConfig, _> = toml::from_str("exclud = []");
        assert!(bad.is_err(), "a misspelt key is an error, not ignored");
    }

    #[test]
    fn a_config_error_names_its_line_table_and_key() {
        let said = |text: &str| {
            let e = toml::from_str::<FileConfig>(text).expect_err(text);
            located(text, &e)
        };
        let e = said("exclude = []\n\n[aider]\nroots = 3\n");
        assert!(e.starts_with("line 4, [aider] roots: invalid type"), "{e}");
        let e = said("exclude = 3\n");
        assert!(
            e.starts_with("line 1, top level exclude: invalid type"),
            "{e}"
        );
        let e = said("[[tag]]\nproject = 4\n");
        assert!(
            e.starts_with("line 2, [[tag]] project: invalid type"),
            "{e}"
        );
    }
}
