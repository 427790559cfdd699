//! Central's configuration: the commented example file is also the default,
//! and a value comes from that file < `KITH_*` env < command-line flags.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use kith_shared::usage::{PriceError, PriceTable, Rates};
use serde::Deserialize;

/// The commented example configuration; every value in it is the default.
pub const DEFAULT_CONFIG: &str = include_str!("../default-config.toml");

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Root of the blob store, the registry and the index.
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// Limit on a decompressed request body; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Serve HTTPS when set.
    pub tls: Option<TlsConfig>,
    /// Serve plain HTTP on an address other than loopback (tokens would
    /// cross the network in the clear); refused unless set.
    pub insecure_http: bool,
    /// Which embedder gives semantic search its vectors.
    pub embed: crate::embed::EmbedConfig,
    /// Which backend holds the search index.
    pub search: SearchConfig,
    /// Scheduled backups taken by `serve`, when set.
    pub backup: Option<BackupConfig>,
    /// Who sees whose usage.
    pub usage: UsageConfig,
    /// Prices of models (per million tokens) in place of the built-in
    /// table's, by the model's name.
    pub prices: BTreeMap<String, PriceOverride>,
}

/// The `[backup]` section: `serve` takes a snapshot into `dest` every
/// `every` and keeps the newest `keep`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupConfig {
    /// The backup folder (not inside the data directory).
    pub dest: PathBuf,
    /// How often: `90s`, `30m`, `6h`, `1d`.
    #[serde(default = "BackupConfig::default_every")]
    pub every: Every,
    /// How many snapshots are kept; older ones, and the blobs only they
    /// hold, are removed after each backup.
    #[serde(default = "BackupConfig::default_keep")]
    pub keep: std::num::NonZeroUsize,
}

impl BackupConfig {
    fn default_every() -> Every {
        Every(std::time::Duration::from_secs(6 * 3600))
    }

    fn default_keep() -> std::num::NonZeroUsize {
        std::num::NonZeroUsize::new(28).unwrap_or(std::num::NonZeroUsize::MIN)
    }
}

/// A period written as a whole number and a unit: `s`, `m`, `h` or `d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Every(pub std::time::Duration);

impl TryFrom<String> for Every {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        let bad = || format!("{text:?}: want a whole number and a unit, like 90s, 30m, 6h or 1d");
        let t = text.trim();
        let unit = match t.chars().last().ok_or_else(bad)? {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = t[..t.len() - 1].parse().map_err(|_| bad())?;
        if n == 0 {
            return Err(format!("{text:?}: a period of zero"));
        }
        Ok(Self(std::time::Duration::from_secs(n.saturating_mul(unit))))
    }
}

/// A model's price in central's config, USD per million tokens: flat at
/// any prompt length; a kind of token left out has no price.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceOverride {
    pub input: f64,
    pub output: f64,
    pub cache_write_5m: Option<f64>,
    pub cache_write_1h: Option<f64>,
    pub cache_read: Option<f64>,
}

impl Config {
    /// The built-in price table with `prices` in place of its own.
    pub fn price_table(&self) -> Result<PriceTable, PriceError> {
        PriceTable::builtin().with_overrides(self.prices.iter().map(|(model, p)| {
            (
                model.as_str(),
                Rates {
                    input: p.input,
                    output: p.output,
                    cache_write_5m: p.cache_write_5m,
                    cache_write_1h: p.cache_write_1h,
                    cache_read: p.cache_read,
                },
            )
        }))
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageConfig {
    /// Admins see every member's usage figures (never what a run they may
    /// not read was about); `false` keeps each member's usage their own.
    pub admin_sees_members: bool,
}

impl Default for UsageConfig {
    fn default() -> Self {
        Self {
            admin_sees_members: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("~/.local/share/kith-central"),
            listen: SocketAddr::from(([127, 0, 0, 1], 7878)),
            max_body_bytes: 64 * 1024 * 1024,
            tls: None,
            insecure_http: false,
            embed: crate::embed::EmbedConfig::default(),
            search: SearchConfig::default(),
            backup: None,
            usage: UsageConfig::default(),
            prices: BTreeMap::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("environment variable {name}: {reason}")]
    Env { name: &'static str, reason: String },
    #[error("[prices]: {0}")]
    Prices(#[from] PriceError),
}

/// Values given on the command line; `None` leaves the lower layers' value.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub data_dir: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub search_backend: Option<SearchBackend>,
    pub meili_url: Option<String>,
    /// `--insecure-http`: only ever turns the file's setting on.
    pub insecure_http: bool,
}

impl Config {
    /// Builds the configuration: default, then `file` (if any), then the
    /// `KITH_*` variables from `env`, then `flags`.
    pub fn load(
        file: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
        flags: &Overrides,
    ) -> Result<Self, ConfigError> {
        let mut config = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.into(),
                    source,
                })?;
                toml::from_str(&text).map_err(|source| ConfigError::Parse {
                    path: path.into(),
                    source,
                })?
            }
            None => Config::default(),
        };
        if let Some(v) = env("KITH_DATA_DIR") {
            config.data_dir = v.into();
        }
        if let Some(v) = env("KITH_LISTEN") {
            config.listen = v.parse().map_err(|e| ConfigError::Env {
                name: "KITH_LISTEN",
                reason: format!("{e} (want an address like 127.0.0.1:7878)"),
            })?;
        }
        if let Some(v) = env("KITH_MAX_BODY_BYTES") {
            config.max_body_bytes = v.parse().map_err(|e| ConfigError::Env {
                name: "KITH_MAX_BODY_BYTES",
                reason: format!("{e}"),
            })?;
        }
        match (env("KITH_TLS_CERT"), env("KITH_TLS_KEY")) {
            (Some(cert), Some(key)) => {
                config.tls = Some(TlsConfig {
                    cert: cert.into(),
                    key: key.into(),
                })
            }
            (None, None) => {}
            _ => {
                return Err(ConfigError::Env {
                    name: "KITH_TLS_CERT",
                    reason: "KITH_TLS_CERT and KITH_TLS_KEY must be set together".into(),
                })
            }
        }
        if let Some(v) = env("KITH_EMBED_PROVIDER") {
            config.embed.provider =
                toml::Value::String(v.clone())
                    .try_into()
                    .map_err(|_| ConfigError::Env {
                        name: "KITH_EMBED_PROVIDER",
                        reason: format!("{v:?}: use embedded, ollama, openai or none"),
                    })?;
        }
        if let Some(v) = env("KITH_EMBED_URL") {
            config.embed.url = Some(v);
        }
        if let Some(v) = env("KITH_EMBED_TRUNCATE_DIM") {
            config.embed.truncate_dim = Some(v.parse().map_err(|e| ConfigError::Env {
                name: "KITH_EMBED_TRUNCATE_DIM",
                reason: format!("{v:?}: {e}"),
            })?);
        }
        load_search_env(&mut config.search, &env)?;
        config.price_table()?;
        if let Some(v) = &flags.data_dir {
            config.data_dir = v.clone();
        }
        if let Some(v) = flags.listen {
            config.listen = v;
        }
        if let Some(v) = flags.search_backend {
            config.search.backend = v;
        }
        if let Some(v) = &flags.meili_url {
            config.search.url = v.clone();
        }
        config.insecure_http |= flags.insecure_http;
        config.data_dir = expand_home(&config.data_dir, &env);
        if let Some(backup) = &mut config.backup {
            backup.dest = expand_home(&backup.dest, &env);
        }
        Ok(config)
    }
}

impl Config {
    /// The embedded search index's folder (derived: `reindex` rebuilds it).
    pub fn index_dir(&self) -> PathBuf {
        self.data_dir.join("index")
    }

    /// Whether central may serve on `addr` as configured: HTTPS anywhere,
    /// plain HTTP on loopback, or plain HTTP elsewhere only when
    /// `insecure_http` says so (the caller then warns). `Err` says why not.
    pub fn check_plain_http(&self, addr: SocketAddr) -> Result<PlainHttp, String> {
        if self.tls.is_some() || addr.ip().is_loopback() {
            return Ok(PlainHttp::Safe);
        }
        if self.insecure_http {
            return Ok(PlainHttp::Exposed);
        }
        Err(format!(
            "refusing to serve plain HTTP on {addr}: machine tokens and transcripts would cross the network \
             unencrypted. Configure TLS ([tls] cert and key, or KITH_TLS_CERT and KITH_TLS_KEY), listen on \
             127.0.0.1 behind a reverse proxy that terminates TLS, or pass --insecure-http \
             (insecure_http = true) to serve plain HTTP anyway"
        ))
    }
}

/// What `Config::check_plain_http` allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainHttp {
    /// HTTPS, or plain HTTP on loopback only.
    Safe,
    /// Plain HTTP reachable from the network, as asked for.
    Exposed,
}

/// `KITH_SEARCH_BACKEND`, `KITH_MEILI_URL`, `KITH_MEILI_INDEX` and
/// `KITH_MEILI_KEY` (the key itself, for service managers that inject
/// secrets as variables; it is never logged).
fn load_search_env(
    search: &mut SearchConfig,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    if let Some(v) = env("KITH_SEARCH_BACKEND") {
        search.backend = parse_backend(&v).map_err(|reason| ConfigError::Env {
            name: "KITH_SEARCH_BACKEND",
            reason,
        })?;
    }
    if let Some(v) = env("KITH_MEILI_URL") {
        search.url = v;
    }
    if let Some(v) = env("KITH_MEILI_INDEX") {
        search.index = v;
    }
    if let Some(v) = env("KITH_MEILI_KEY").filter(|k| !k.is_empty()) {
        search.api_key = Some(MeiliKey::new(&v).map_err(|e| ConfigError::Env {
            name: "KITH_MEILI_KEY",
            reason: e.to_string(),
        })?);
    }
    Ok(())
}

/// `embedded` or `meilisearch` (for the env variable and the flag).
pub fn parse_backend(v: &str) -> Result<SearchBackend, String> {
    toml::Value::String(v.to_owned())
        .try_into()
        .map_err(|_| format!("{v:?}: use embedded or meilisearch"))
}

/// Expands a leading `~/` with `$HOME`, as a shell would.
fn expand_home(path: &Path, env: &impl Fn(&str) -> Option<String>) -> PathBuf {
    match (path.strip_prefix("~"), env("HOME")) {
        (Ok(rest), Some(home)) => Path::new(&home).join(rest),
        _ => path.to_owned(),
    }
}

/// Which backend holds the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SearchBackend {
    /// tantivy under `<data>/index/`, in process.
    #[default]
    Embedded,
    /// A Meilisearch server (`url`).
    Meilisearch,
}

/// The `[search]` section of central's configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    pub backend: SearchBackend,
    /// Meilisearch's base URL.
    pub url: String,
    /// File holding the Meilisearch API key (a file, so the key stays out
    /// of the config and the process list).
    pub api_key_file: Option<PathBuf>,
    /// Meilisearch index uid; one per kith-central (tests use unique ones).
    pub index: String,
    /// The key itself, from `KITH_MEILI_KEY`; never read from the file.
    #[serde(skip)]
    pub api_key: Option<MeiliKey>,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            backend: SearchBackend::default(),
            url: "http://127.0.0.1:7700".to_owned(),
            api_key_file: None,
            index: "kith-chunks".to_owned(),
            api_key: None,
        }
    }
}

/// The Meilisearch API key. `Debug` never shows it and it has no `Display`,
/// so it cannot reach a log line or an error message.
#[derive(Clone, PartialEq, Eq)]
pub struct MeiliKey(String);

impl MeiliKey {
    /// A key, trimmed; it becomes an HTTP header, so it must be visible ASCII.
    pub fn new(key: &str) -> crate::error::Result<Self> {
        let key = key.trim();
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(crate::error::Error::Internal(
                "the Meilisearch API key must be non-empty printable ASCII".into(),
            ));
        }
        Ok(Self(key.to_owned()))
    }

    /// Reads a key file (a file, so the key stays out of config files and
    /// the process list).
    pub fn read(path: &std::path::Path) -> crate::error::Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            crate::error::Error::Internal(format!(
                "cannot read the Meilisearch key file {}: {e}",
                path.display()
            ))
        })?;
        Self::new(&text)
    }
}

impl MeiliKey {
    /// The key itself, for the one header that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for MeiliKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MeiliKey(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_example_file_is_the_default() {
        let parsed: Config = toml::from_str(DEFAULT_CONFIG).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed, Config::default());
    }

    #[test]
    fn file_then_env_then_flags() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:1\"\ndata_dir = \"/from/file\"\nmax_body_bytes = 5\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let env = env_of(&[("KITH_LISTEN", "127.0.0.1:2"), ("HOME", "/home/x")]);
        let c = Config::load(Some(&file), &env, &Overrides::default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.listen.port(), 2);
        assert_eq!(c.data_dir, PathBuf::from("/from/file"));
        assert_eq!(c.max_body_bytes, 5);
        let flags = Overrides {
            data_dir: Some("~/d".into()),
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 3))),
            ..Overrides::default()
        };
        let c = Config::load(Some(&file), &env, &flags).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.listen.port(), 3);
        assert_eq!(c.data_dir, PathBuf::from("/home/x/d"));
    }

    #[test]
    fn search_backend_from_file_env_and_flags_and_the_key_stays_hidden() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "[search]\nbackend = \"meilisearch\"\nurl = \"http://meili:7700\"\napi_key_file = \"/etc/kith/meili.key\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let c = Config::load(Some(&file), env_of(&[]), &Overrides::default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.search.backend, SearchBackend::Meilisearch);
        assert_eq!(c.search.url, "http://meili:7700");
        assert_eq!(c.search.index, "kith-chunks");
        let env = env_of(&[
            ("KITH_SEARCH_BACKEND", "embedded"),
            ("KITH_MEILI_URL", "http://env:7700"),
            ("KITH_MEILI_INDEX", "kith-test-1"),
            ("KITH_MEILI_KEY", "sekrit-meili-key"),
        ]);
        let c = Config::load(Some(&file), &env, &Overrides::default())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.search.backend, SearchBackend::Embedded);
        assert_eq!(
            (c.search.url.as_str(), c.search.index.as_str()),
            ("http://env:7700", "kith-test-1")
        );
        assert!(c.search.api_key.is_some());
        assert!(!format!("{c:?}").contains("sekrit"), "{c:?}");
        let flags = Overrides {
            search_backend: Some(SearchBackend::Meilisearch),
            meili_url: Some("http://flag:7700".into()),
            ..Overrides::default()
        };
        let c = Config::load(Some(&file), &env, &flags).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.search.backend, SearchBackend::Meilisearch);
        assert_eq!(c.search.url, "http://flag:7700");
        let err = Config::load(
            None,
            env_of(&[("KITH_SEARCH_BACKEND", "elastic")]),
            &Overrides::default(),
        );
        assert!(err.is_err_and(|e| e.to_string().contains("KITH_SEARCH_BACKEND")));
    }

    #[test]
    fn prices_in_the_config_take_the_tables_place_and_bad_ones_stop_the_start() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let load = |text: &str| {
            let file = dir.path().join("central.toml");
            std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
            Config::load(Some(&file), |_| None, &Overrides::default())
        };
        let c = load(
            "[usage]\nadmin_sees_members = false\n\n\
             [prices.\"claude-opus-4-6\"]\ninput = 1.0\noutput = 2.0\ncache_read = 0.1\n\n\
             [prices.\"my-local-model\"]\ninput = 0\noutput = 0\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!c.usage.admin_sees_members);
        let table = c.price_table().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(table.overridden(), ["claude-opus-4-6", "my-local-model"]);
        assert_eq!(
            table
                .price_of("claude-opus-4-6")
                .map(|p| p.rates.cache_read),
            Some(Some(0.1))
        );
        for (text, why) in [
            (
                "[prices.\"m\"]\ninput = -1.0\noutput = 1.0\n",
                "[prices]: price of m: input must be",
            ),
            (
                "[prices.\"m\"]\ninput = 1.0\noutput = 1e9\n",
                "past any model's",
            ),
            ("[prices.\"m\"]\ninput = 1.0\n", "missing field `output`"),
            (
                "[prices.\"m\"]\ninput = 1.0\noutput = 1.0\ncache = 1.0\n",
                "unknown field `cache`",
            ),
            (
                "[prices.\"m\"]\ninput = \"cheap\"\noutput = 1.0\n",
                "invalid type",
            ),
            ("[usage]\nadmin_sees_members = \"no\"\n", "invalid type"),
        ] {
            let err = load(text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn plain_http_only_on_loopback_unless_asked_for() {
        let lan = SocketAddr::from(([0, 0, 0, 0], 7878));
        let c = Config::default();
        assert_eq!(
            c.check_plain_http(SocketAddr::from(([127, 0, 0, 1], 7878))),
            Ok(PlainHttp::Safe)
        );
        assert_eq!(
            c.check_plain_http("[::1]:7878".parse().unwrap_or(lan)),
            Ok(PlainHttp::Safe)
        );
        let refused = c.check_plain_http(lan);
        assert!(
            refused
                .as_ref()
                .is_err_and(|why| why.contains("--insecure-http") && why.contains("0.0.0.0:7878")),
            "{refused:?}"
        );
        let insecure = Config {
            insecure_http: true,
            ..Config::default()
        };
        assert_eq!(insecure.check_plain_http(lan), Ok(PlainHttp::Exposed));
        let tls = Config {
            tls: Some(TlsConfig {
                cert: "/c.pem".into(),
                key: "/k.pem".into(),
            }),
            ..Config::default()
        };
        assert_eq!(tls.check_plain_http(lan), Ok(PlainHttp::Safe));
    }

    #[test]
    fn a_backup_section_is_read_and_a_bad_period_is_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("c.toml");
        let load = |text: &str| {
            std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
            Config::load(
                Some(&file),
                env_of(&[("HOME", "/home/x")]),
                &Overrides::default(),
            )
        };
        let c = load("[backup]\ndest = \"~/backup\"\nevery = \"2s\"\nkeep = 3\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let backup = c.backup.unwrap_or_else(|| panic!("no [backup]"));
        assert_eq!(backup.dest, PathBuf::from("/home/x/backup"));
        assert_eq!(backup.every, Every(std::time::Duration::from_secs(2)));
        assert_eq!(backup.keep.get(), 3);
        let c = load("[backup]\ndest = \"/b\"\n").unwrap_or_else(|e| panic!("{e}"));
        let backup = c.backup.unwrap_or_else(|| panic!("no [backup]"));
        assert_eq!(
            (backup.every.0.as_secs(), backup.keep.get()),
            (6 * 3600, 28),
            "every 6 h, 28 kept, unless said"
        );
        for (every, names) in [
            ("6", "6"),
            ("h", "h"),
            ("6w", "6w"),
            ("-1h", "-1h"),
            ("0m", "zero"),
        ] {
            let err = load(&format!("[backup]\ndest = \"/b\"\nevery = \"{every}\"\n"));
            assert!(
                err.as_ref().is_err_and(|e| e.to_string().contains(names)),
                "{every}: {err:?}"
            );
        }
        let err = load("[backup]\ndest = \"/b\"\nkeep = 0\n");
        assert!(err.is_err_and(|e| e.to_string().contains("keep")));
        assert!(load("[backup]\nevery = \"1h\"\n").is_err_and(|e| e.to_string().contains("dest")));
    }

    #[test]
    fn bad_values_are_named() {
        let err = Config::load(
            None,
            env_of(&[("KITH_LISTEN", "nowhere")]),
            &Overrides::default(),
        );
        assert!(err.is_err_and(|e| e.to_string().contains("KITH_LISTEN")));
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "listne = \"x\"\n").unwrap_or_else(|e| panic!("{e}"));
        let err = Config::load(Some(&file), env_of(&[]), &Overrides::default());
        assert!(err.is_err_and(|e| e.to_string().contains("listne")));
    }
}
