//! Which folder on this machine a conversation continues in: the working
//! folder it had on the machine it came from, mapped here.

use std::path::{Path, PathBuf};

/// A conversation's folder there and here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    /// The folder on the machine the conversation came from (a prefix of
    /// the working folders its lines name).
    pub(crate) there: String,
    /// Where that folder is on this machine.
    pub(crate) here: PathBuf,
    /// The working folder here.
    pub(crate) cwd: PathBuf,
    /// How it was chosen, for the person.
    pub(crate) how: &'static str,
}

/// The local folder for a conversation whose working folder was `there`:
/// `--cwd`, else the git checkout the current folder is in when it is a
/// checkout of the same project (a folder of the same name on the path
/// there), else `[paths]`, else the same path when it exists here.
pub(crate) fn choose(
    there: &str,
    flag: Option<&Path>,
    current: &Path,
    path_map: &[(String, PathBuf)],
) -> Result<Mapping, String> {
    let there = there.trim_end_matches('/');
    if let Some(dir) = flag {
        let here =
            existing(dir).ok_or_else(|| format!("--cwd {}: no such folder here", dir.display()))?;
        return Ok(Mapping {
            there: there.to_owned(),
            cwd: here.clone(),
            here,
            how: "--cwd",
        });
    }
    if let Some(m) = same_checkout(there, current) {
        return Ok(m);
    }
    let mapped = path_map
        .iter()
        .filter(|(from, _)| {
            there == from
                || there
                    .strip_prefix(from.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
        .max_by_key(|(from, _)| from.len());
    if let Some((from, to)) = mapped {
        let cwd = to.join(there[from.len()..].trim_start_matches('/'));
        let cwd = existing(&cwd).ok_or_else(|| {
            format!(
                "{there} is {} here by [paths] in config.toml, and that folder does not exist",
                cwd.display()
            )
        })?;
        return Ok(Mapping {
            there: from.clone(),
            here: to.clone(),
            cwd,
            how: "[paths] in config.toml",
        });
    }
    if let Some(here) = existing(Path::new(there)) {
        return Ok(Mapping {
            there: there.to_owned(),
            cwd: here.clone(),
            here,
            how: "the same folder exists here",
        });
    }
    let name = Path::new(there)
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    Err(format!(
        "the conversation worked in {there}, which is not on this machine. Say where it is: \
         `--cwd DIR`, run `kith resume` inside your checkout of {name}, or map the folder in \
         config.toml:\n  [paths]\n  \"{parent}\" = \"~/src\"",
        parent = Path::new(there)
            .parent()
            .map_or_else(|| there.to_owned(), |p| p.display().to_string()),
    ))
}

/// The checkout `current` is in, when the path there has a folder of the
/// same name: that folder there is the checkout here, and the working
/// folder keeps its place inside it when that exists here.
fn same_checkout(there: &str, current: &Path) -> Option<Mapping> {
    let root = current
        .ancestors()
        .find(|dir| dir.join(".git").exists())?
        .to_owned();
    let name = root.file_name()?.to_str()?;
    let components: Vec<&str> = there.split('/').collect();
    let at = components.iter().rposition(|c| *c == name)?;
    let from = components[..=at].join("/");
    let inside = components[at + 1..].join("/");
    let cwd = existing(&root.join(&inside)).unwrap_or_else(|| root.clone());
    Some(Mapping {
        there: from,
        here: root,
        cwd,
        how: "the git checkout of the same project you are in",
    })
}

fn existing(dir: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(dir).ok().filter(|d| d.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_is_chosen_in_order() -> std::io::Result<()> {
        let t = tempfile::tempdir()?;
        let root = std::fs::canonicalize(t.path())?;
        let checkout = root.join("work/tally");
        std::fs::create_dir_all(checkout.join(".git"))?;
        std::fs::create_dir_all(checkout.join("crates/x"))?;
        std::fs::create_dir_all(root.join("src/other"))?;
        let elsewhere = root.join("src");
        let map = vec![("/Users/me/src".to_owned(), root.join("src"))];

        let flag = choose("/Users/me/src/tally", Some(&elsewhere), &checkout, &map)
            .map_err(std::io::Error::other)?;
        assert_eq!(
            (flag.cwd.as_path(), flag.how),
            (elsewhere.as_path(), "--cwd")
        );
        assert!(choose("/x", Some(&root.join("nope")), &checkout, &map).is_err());

        // Inside the checkout: the same project, its subfolder kept.
        let inside = choose(
            "/Users/me/src/tally/crates/x",
            None,
            &checkout.join("crates"),
            &map,
        )
        .map_err(std::io::Error::other)?;
        assert_eq!(inside.there, "/Users/me/src/tally");
        assert_eq!(inside.here, checkout);
        assert_eq!(inside.cwd, checkout.join("crates/x"));

        // Elsewhere: [paths], then the same path, then an error naming the ways.
        let mapped =
            choose("/Users/me/src/other", None, &root, &map).map_err(std::io::Error::other)?;
        assert_eq!(
            (mapped.cwd, mapped.how),
            (root.join("src/other"), "[paths] in config.toml")
        );
        let missing = choose("/Users/me/src/gone", None, &root, &map);
        assert!(missing.is_err_and(|e| e.contains("does not exist")));
        let same = root.join("src/other").display().to_string();
        let kept = choose(&same, None, &root, &[]).map_err(std::io::Error::other)?;
        assert_eq!(kept.how, "the same folder exists here");
        let lost = choose("/Users/me/proj", None, &root, &[]);
        assert!(
            lost.as_ref().is_err_and(|e| e.contains("--cwd DIR")
                && e.contains("[paths]")
                && e.contains("proj")),
            "{lost:?}"
        );
        Ok(())
    }
}
