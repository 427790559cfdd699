//! What must never leave the device, and what central could not store: a
//! delta's secrets masked in place, and bytes that are not UTF-8 or lines that
//! are not JSON made storable, all without changing a single length.
//!
//! Lengths never change, so byte offsets in the source file still describe the
//! shipped bytes (central requires `to_offset - from_offset == jsonl.len()`).
//! A secret becomes `[REDACTED:<kind>]` padded with `*` (only `*` when the
//! secret is shorter than that label). In JSON lines, secrets are looked for
//! inside string contents only, and a mask covers whole characters and whole
//! escape sequences, so a JSON line stays valid JSON; in text lines (Aider's
//! markdown) the whole line is looked at.
//!
//! A missed secret leaks; a false positive only hides text. Still, ordinary
//! text (paths, git SHAs, UUIDs, the ids agents write, long identifiers) must
//! come through intact, so the high-entropy rule is deliberately narrow.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, MatchKind};
use memchr::{memchr, memchr2};
use regex::bytes::{Regex, RegexBuilder};

use crate::jsonl::Lines;

/// What was found and changed, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    PrivateKey,
    AwsKey,
    GithubToken,
    GitlabToken,
    SlackToken,
    /// The secret path of a Slack incoming webhook URL.
    SlackWebhook,
    /// A Docker config's `auth`: base64 of `user:password`.
    DockerAuth,
    StripeKey,
    AnthropicKey,
    OpenaiKey,
    GoogleApiKey,
    NpmToken,
    SendgridKey,
    TwilioKey,
    HerokuKey,
    HuggingfaceToken,
    Jwt,
    UrlPassword,
    /// `NAME=value`, `--name value`: an assignment to a secret's name.
    EnvSecret,
    /// `name: value`: a secret's name as a key (YAML, JSON, a header).
    SecretField,
    /// The credentials of an `Authorization` header.
    AuthHeader,
    HighEntropy,
    /// A match of one of the person's own patterns (`Extra`).
    Custom,
    /// Bytes that were not UTF-8, each replaced by `?`.
    InvalidUtf8Bytes,
    /// Lines that were not JSON, shipped as one JSON string of the same length.
    InvalidJsonLines,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PrivateKey => "private_key",
            Self::AwsKey => "aws_key",
            Self::GithubToken => "github_token",
            Self::GitlabToken => "gitlab_token",
            Self::SlackToken => "slack_token",
            Self::SlackWebhook => "slack_webhook",
            Self::DockerAuth => "docker_auth",
            Self::StripeKey => "stripe_key",
            Self::AnthropicKey => "anthropic_key",
            Self::OpenaiKey => "openai_key",
            Self::GoogleApiKey => "google_api_key",
            Self::NpmToken => "npm_token",
            Self::SendgridKey => "sendgrid_key",
            Self::TwilioKey => "twilio_key",
            Self::HerokuKey => "heroku_key",
            Self::HuggingfaceToken => "huggingface_token",
            Self::Jwt => "jwt",
            Self::UrlPassword => "url_password",
            Self::EnvSecret => "env_secret",
            Self::SecretField => "secret_field",
            Self::AuthHeader => "auth_header",
            Self::HighEntropy => "high_entropy",
            Self::Custom => "custom",
            Self::InvalidUtf8Bytes => "invalid_utf8_bytes",
            Self::InvalidJsonLines => "invalid_json_lines",
        }
    }
}

/// A delta ready to ship.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redacted {
    /// Same length as the input, valid UTF-8, every line JSON (for
    /// `Lines::Json`).
    pub text: String,
    /// What was changed, by `Kind::as_str` (the run's `redactions`).
    pub counts: BTreeMap<String, u64>,
}

/// A person's own secrets (`redact = [...]` in the agent's `config.toml`):
/// patterns looked for in JSON string contents after the built-in ones, each
/// match masked as `custom`.
#[derive(Debug, Clone, Default)]
pub struct Extra(Vec<Regex>);

impl Extra {
    /// Refuses a pattern that is not a valid regular expression, naming it.
    pub fn new(patterns: &[String]) -> Result<Self, String> {
        patterns
            .iter()
            .map(|p| match Regex::new(p) {
                Ok(_) if p.is_empty() => Err("an empty pattern would mask nothing".to_owned()),
                Ok(re) => Ok(re),
                Err(e) => Err(format!("{p:?} is not a regular expression: {e}")),
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn patterns(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(Regex::as_str)
    }
}

/// Redacts a delta of JSONL lines (`bytes` may be any bytes; lines are split
/// at `\n`).
pub fn redact_jsonl(bytes: Vec<u8>) -> Redacted {
    redact_with(bytes, Lines::Json, &Extra::default())
}

/// Redacts a delta of `lines`, also masking the matches of `extra`.
pub fn redact_with(mut bytes: Vec<u8>, lines: Lines, extra: &Extra) -> Redacted {
    // Lines are independent: a large delta (a backfill's) is redacted on
    // every core; a hook's delta is far smaller, and threads would only cost
    // it time.
    let n_pieces = if bytes.len() < PARALLEL_MIN {
        1
    } else {
        std::thread::available_parallelism().map_or(1, usize::from)
    };
    let counts = redact_in_pieces(&mut bytes, n_pieces, lines, extra);
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        // Unreachable after `redact_line`; stay total anyway.
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    };
    Redacted {
        text,
        counts: counts
            .into_iter()
            .map(|(k, n)| (k.as_str().to_owned(), n))
            .collect(),
    }
}

/// Deltas at least this long are redacted in parallel.
const PARALLEL_MIN: usize = 1 << 20;

/// Redacts `bytes` in place, cut after a `\n` into up to `n_pieces` pieces
/// of about the same length, each on its own thread. In text a cut never
/// falls inside a private key: its lines are masked by what opened it.
fn redact_in_pieces(
    bytes: &mut [u8],
    n_pieces: usize,
    lines: Lines,
    extra: &Extra,
) -> BTreeMap<Kind, u64> {
    let piece_len = bytes.len() / n_pieces;
    std::thread::scope(|scope| {
        let mut rest = bytes;
        let mut others = Vec::new();
        while others.len() + 1 < n_pieces {
            let Some(cut) = rest.get(piece_len..).and_then(|tail| memchr(b'\n', tail)) else {
                break;
            };
            let mut len = piece_len + cut + 1;
            if lines == Lines::Text {
                match past_open_key(rest, len) {
                    Some(past) if past < rest.len() => len = past,
                    _ => break,
                }
            }
            let (piece, tail) = rest.split_at_mut(len);
            others.push(scope.spawn(move || redact_lines(piece, lines, extra)));
            rest = tail;
        }
        let mut counts = redact_lines(rest, lines, extra);
        for other in others {
            let other = other
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            for (kind, n) in other {
                *counts.entry(kind).or_default() += n;
            }
        }
        counts
    })
}

fn redact_lines(bytes: &mut [u8], lines: Lines, extra: &Extra) -> BTreeMap<Kind, u64> {
    let mut counts = BTreeMap::new();
    let mut start = 0;
    // In text (Aider's markdown) a private key's lines are lines of their
    // own: from a BEGIN line without its END, every line is the key's body
    // up to the END.
    let mut in_key = false;
    loop {
        let end = memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |i| start + i);
        let line = &mut bytes[start..end];
        let mut body = 0;
        if in_key {
            let ends = key_end_in(line);
            body = ends.unwrap_or(line.len());
            in_key = ends.is_none();
            write_mask(&mut line[..body], Kind::PrivateKey);
        }
        let rest = &mut line[body..];
        let opens = lines == Lines::Text && opens_key(rest);
        redact_line(rest, lines, &mut counts);
        in_key |= opens;
        if !extra.is_empty() {
            redact_extra(&mut bytes[start..end], lines, extra, &mut counts);
        }
        if end == bytes.len() {
            return counts;
        }
        start = end + 1;
    }
}

/// Where text may be cut at `at` (just after a `\n`) without cutting a
/// private key: `at` itself, or after the line where the key open there
/// ends (and again, if that line opens another); `None` when one never
/// ends. As `redact_lines` reads keys: the last BEGIN before a cut is open
/// unless an END follows it.
fn past_open_key(text: &[u8], mut at: usize) -> Option<usize> {
    // Only what follows the last END moved past can open another key.
    let mut from = 0;
    while opens_key(&text[from..at]) {
        let (_, end) = private_key_bounds()?;
        from = end.find_at(text, at)?.end();
        at = memchr(b'\n', &text[from..]).map_or(text.len(), |i| from + i + 1);
    }
    Some(at)
}

/// Whether `line` begins a private key it does not end.
fn opens_key(line: &[u8]) -> bool {
    private_key_bounds().is_some_and(|(begin, end)| {
        begin
            .find_iter(line)
            .last()
            .is_some_and(|b| end.find_at(line, b.end()).is_none())
    })
}

/// Where the END marker of a private key in `line` ends, if it has one.
fn key_end_in(line: &[u8]) -> Option<usize> {
    private_key_bounds()
        .and_then(|(_, end)| end.find(line))
        .map(|m| m.end())
}

fn redact_line(line: &mut [u8], lines: Lines, counts: &mut BTreeMap<Kind, u64>) {
    let n_invalid = replace_invalid_utf8(line);
    if n_invalid > 0 {
        *counts.entry(Kind::InvalidUtf8Bytes).or_default() += n_invalid;
    }
    if lines == Lines::Json && !is_json(line) {
        as_json_string(line);
        *counts.entry(Kind::InvalidJsonLines).or_default() += 1;
    }
    let strings = texts(line, lines);
    let present = present(line, &strings);
    let fields = if present.iter().any(|hits| !hits.is_empty()) {
        secret_fields(line, &strings, &present, counts)
    } else {
        Vec::new()
    };
    for (i, range) in strings.into_iter().enumerate() {
        if fields.contains(&i) {
            continue;
        }
        let content = &mut line[range];
        for (span, kind) in snap(content, secrets(content, &present[i])) {
            write_mask(&mut content[span], kind);
            *counts.entry(kind).or_default() += 1;
        }
    }
}

/// Masks `extra`'s matches in the string contents of a line the built-in
/// rules already went over (their masks hold no quotes, so the strings are
/// where they were).
fn redact_extra(line: &mut [u8], lines: Lines, extra: &Extra, counts: &mut BTreeMap<Kind, u64>) {
    for range in texts(line, lines) {
        let content = &mut line[range];
        let spans: Vec<(Range<usize>, Kind)> = extra
            .0
            .iter()
            .flat_map(|re| re.find_iter(content).map(|m| m.range()))
            .filter(|r| !r.is_empty())
            .map(|r| (r, Kind::Custom))
            .collect();
        for (span, kind) in snap(content, spans) {
            write_mask(&mut content[span], kind);
            *counts.entry(kind).or_default() += 1;
        }
    }
}

/// Replaces each byte that is not part of valid UTF-8 with `?`.
fn replace_invalid_utf8(line: &mut [u8]) -> u64 {
    if std::str::from_utf8(line).is_ok() {
        return 0;
    }
    let mut invalid = Vec::new();
    let mut at = 0;
    for chunk in line.utf8_chunks() {
        at += chunk.valid().len();
        invalid.push(at..at + chunk.invalid().len());
        at += chunk.invalid().len();
    }
    let mut n = 0;
    for r in invalid {
        n += r.len() as u64;
        line[r].fill(b'?');
    }
    n
}

/// One or more JSON values (pi concatenates records on a line), or blank.
fn is_json(line: &[u8]) -> bool {
    serde_json::Deserializer::from_slice(line)
        .into_iter::<serde::de::IgnoredAny>()
        .all(|v| v.is_ok())
}

/// Turns a line that is not JSON into a JSON string (or `0`) of the same
/// length, keeping its readable characters.
fn as_json_string(line: &mut [u8]) {
    let n = line.len();
    if n == 1 {
        line[0] = b'0';
        return;
    }
    for b in line.iter_mut() {
        if *b < 0x20 || *b == b'"' || *b == b'\\' {
            *b = b'?';
        }
    }
    line[0] = b'"';
    line[n - 1] = b'"';
    // The quotes may have cut a multi-byte character at either end.
    replace_invalid_utf8(line);
}

/// Where a line's text is: its JSON strings' contents, or all of a text line.
fn texts(line: &[u8], lines: Lines) -> Vec<Range<usize>> {
    match lines {
        Lines::Json => string_contents(line),
        Lines::Text => std::iter::once(0..line.len()).collect(),
    }
}

/// The byte ranges of every JSON string's contents (between the quotes; an
/// unterminated string runs to the end of the line).
fn string_contents(line: &[u8]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(open) = line.get(i..).and_then(|rest| memchr(b'"', rest)) {
        let start = i + open + 1;
        i = start;
        let end = loop {
            match line.get(i..).and_then(|rest| memchr2(b'"', b'\\', rest)) {
                // An escape: the byte after the backslash is never the end.
                Some(j) if line[i + j] == b'\\' => i += j + 2,
                Some(j) => break i + j,
                None => break line.len(),
            }
        };
        out.push(start..end);
        i = end + 1;
    }
    out
}

const N_DETECTORS: usize = 21;

/// One kind of secret: a pattern whose secret is its `s` (or `s2`) group,
/// and the needles every match of it contains. A string meets a pattern only if it
/// holds one of its needles (most hold none), and only around them (see
/// `windows`; a name's needle only where it names something, see
/// `names_something`), and a pattern is compiled the
/// first time that happens: a hook redacts one small delta in a fresh
/// process, and compiling every pattern up front cost it more (~2.5 ms) than
/// redacting the delta.
///
/// `{B}` is a token's left boundary: the start, a non-word byte, or an escape
/// inside a JSON string (`\nAKIA…`, where `\b` would see the escape's letter).
struct Detector {
    kind: Kind,
    /// Case-sensitive literals; a match of `pattern` contains at least one
    /// (a name's, in one of the cases names are written in).
    needles: &'static [&'static str],
    check: Check,
    pattern: &'static str,
    regex: OnceLock<Option<Regex>>,
}

impl Detector {
    const fn new(
        kind: Kind,
        needles: &'static [&'static str],
        check: Check,
        pattern: &'static str,
    ) -> Self {
        Self {
            kind,
            needles,
            check,
            pattern,
            regex: OnceLock::new(),
        }
    }

    fn regex(&self) -> Option<&Regex> {
        self.regex.get_or_init(|| build(self.pattern)).as_ref()
    }
}

/// The last part of a name whose value is a secret, in any case
/// (`password`, `DB_PASSWORD`, `spring.datasource.password`,
/// `aws_secret_access_key`, `X-Api-Key`) or camelCase (`dbPassword`,
/// `SecretAccessKey`, `SessionToken`, `AccountKey`). The keyword ends the
/// name: `max_tokens`, `token_count`, `password_file` are other things.
/// Leading `_` for npm's `_authToken`.
macro_rules! secret_name {
    ($lower:literal, $camel:literal) => {
        concat!(
            r"_*(?:[A-Za-z0-9]+[_.-])*(?:(?i:password|passwd|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|auth[_-]?key|account[_-]?key|credentials?",
            $lower,
            r")|[A-Za-z0-9]*[a-z0-9](?:Password|Passwd|Secret|Token|ApiKey|AccessKey|SecretKey|PrivateKey|AuthKey|AccountKey|Credentials?",
            $camel,
            r"))"
        )
    };
}

/// A value after `=` or `:`: quoted (`"v"`, `'v'`, and `\"v\"` at any
/// depth of JSON inside JSON strings; it runs to the closing quote and may
/// hold spaces and escapes) in `s`, or bare in `s2`, which must end where a
/// value ends (`token = getToken()` is code, not a value).
macro_rules! secret_value {
    () => {
        r#"(?:\\*["'](?P<s>(?:[^"'\\]|\\+[^"'\\])+)|(?P<s2>[^\s'"\\;,&|`()\[\]{}<>=][^\s'"\\;,&|`()\[\]{}<>]{5,})(?:$|[\s"'\\;,&|)\]}]))"#
    };
}

/// The names of secrets, as needles: their words in the three cases names
/// are written in (`password`, `dbPassword`, `DB_PASSWORD`); `key` stands
/// for `api_key`, `AccessKey`, `PRIVATE_KEY`... A needle found in a word
/// that is no secret's name costs one regex run around it.
const SECRET_NAME_NEEDLES: &[&str] = &[
    "pass",
    "Pass",
    "PASS",
    "secret",
    "Secret",
    "SECRET",
    "token",
    "Token",
    "TOKEN",
    "key",
    "Key",
    "KEY",
    "credential",
    "Credential",
    "CREDENTIAL",
];

/// What a detector's finding must pass besides its pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// The pattern is the whole test (a token's own shape).
    Shape,
    /// Base64 of `user:password`, as HTTP Basic credentials are written.
    Basic,
    /// Not a placeholder, a word or code (`looks_like_a_value`).
    Value,
    /// As `Value` for a name and its value (`n`, `s`/`s2`): after `=` a
    /// bare name after spaces (`password = new_password`) is code; after
    /// `:` (a `SecretField`) the name is not a bare `pass` (`PASS: test.ts`
    /// is a test runner's); after spaces only a flag (`--name`) counts.
    Named,
}

static DETECTORS: [Detector; N_DETECTORS] = [
    Detector::new(
        Kind::AwsKey,
        &["AKIA", "ASIA", "ABIA", "ACCA"],
        Check::Shape,
        r"{B}(?P<s>(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16})\b",
    ),
    Detector::new(
        Kind::GithubToken,
        &["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
        Check::Shape,
        r"{B}(?P<s>(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255}))\b",
    ),
    Detector::new(
        Kind::GitlabToken,
        &[
            "glpat-", "gldt-", "glrt-", "glptt-", "glft-", "glsoat-", "glcbt-",
        ],
        Check::Shape,
        r"{B}(?P<s>gl(?:pat|dt|rt|ptt|ft|soat|cbt)-[A-Za-z0-9_-]{20,})",
    ),
    Detector::new(
        Kind::SlackToken,
        &["xox", "xapp-"],
        Check::Shape,
        r"{B}(?P<s>(?:xox[bpaseor]|xapp)-[A-Za-z0-9-]{10,})",
    ),
    Detector::new(
        Kind::SlackWebhook,
        &["hooks.slack.com/"],
        Check::Shape,
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9_-]+/[A-Za-z0-9_/-]{16,})",
    ),
    // `"auth": "<base64>"` in a Docker config, at any depth of escaping;
    // only a value that decodes to `user:password` (`Check::Basic`).
    Detector::new(
        Kind::DockerAuth,
        &[r#"auth""#, r#"auth\""#],
        Check::Basic,
        r#"(?:\\*")auth(?:\\*")\s*:\s*(?:\\*")(?P<s>[A-Za-z0-9+/]{8,}={0,2})"#,
    ),
    Detector::new(
        Kind::StripeKey,
        &["k_live_", "k_test_"],
        Check::Shape,
        r"{B}(?P<s>[sr]k_(?:live|test)_[A-Za-z0-9]{16,})\b",
    ),
    Detector::new(
        Kind::AnthropicKey,
        &["sk-ant-"],
        Check::Shape,
        r"{B}(?P<s>sk-ant-[a-z]{2,8}[0-9]{2}-[A-Za-z0-9_-]{32,})",
    ),
    Detector::new(
        Kind::OpenaiKey,
        &["sk-"],
        Check::Shape,
        r"{B}(?P<s>sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{32,})",
    ),
    Detector::new(
        Kind::GoogleApiKey,
        &["AIza"],
        Check::Shape,
        r"{B}(?P<s>AIza[0-9A-Za-z_-]{35})",
    ),
    Detector::new(
        Kind::NpmToken,
        &["npm_"],
        Check::Shape,
        r"{B}(?P<s>npm_[A-Za-z0-9]{36})\b",
    ),
    Detector::new(
        Kind::SendgridKey,
        &["SG."],
        Check::Shape,
        r"{B}(?P<s>SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43})",
    ),
    // An API key's SID; its secret half is found by name (`TWILIO_API_SECRET`).
    Detector::new(
        Kind::TwilioKey,
        &["SK"],
        Check::Shape,
        r"{B}(?P<s>SK[0-9a-f]{32})\b",
    ),
    Detector::new(
        Kind::HerokuKey,
        &["HRKU-"],
        Check::Shape,
        r"{B}(?P<s>HRKU-[A-Za-z0-9_-]{60})",
    ),
    Detector::new(
        Kind::HuggingfaceToken,
        &["hf_"],
        Check::Shape,
        r"{B}(?P<s>hf_[A-Za-z]{34})\b",
    ),
    Detector::new(
        Kind::Jwt,
        &["eyJ"],
        Check::Shape,
        r"{B}(?P<s>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})",
    ),
    // The user may be empty (`redis://:pw@host`).
    Detector::new(
        Kind::UrlPassword,
        &["://"],
        Check::Value,
        r#"{B}[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@"\\]*:(?P<s>[^\s@/"\\]+)@"#,
    ),
    // Shell / dotenv assignments to UPPER_CASE names that hold a secret
    // anywhere in them (`SECRET_KEY_BASE=v`, `DB_PASS="v"`); code such as
    // `env.API_KEY = 'proxy-handled'` (a property) is not matched.
    Detector::new(
        Kind::EnvSecret,
        SECRET_NAME_NEEDLES,
        Check::Value,
        r#"(?:^|\\[nrtbf]|[^A-Za-z0-9_.])[A-Z0-9_]*(?:PASSWORD|PASSWD|_PASS|PGPASS|SECRET|TOKEN|API_KEY|APIKEY|ACCESS_KEY|PRIVATE_KEY|AUTH_KEY|ACCOUNT_KEY|CREDENTIALS?)[A-Z0-9_]*=(?:\\*"|')?(?P<s>[^\s'"\\;,&|`()\[\]{}<>]{6,})"#,
    ),
    // A secret's name (`n`) and its value, in one pattern for three forms
    // (one compile, one scan), told apart by what is between them (see
    // `Check::Named`):
    // - `=`: dotenv, `~/.aws/credentials` (`aws_secret_access_key = v`),
    //   CLI flags (`--password=v`), query strings (`?token=v&`), Azure
    //   connection strings (`AccountKey=v;`), code with a literal
    //   (`password = "v"`);
    // - `:`: YAML, HTTP headers (`X-Api-Key: v`), JSON or Python dicts
    //   inside a string (`\"password\": \"v\"`, at any depth);
    // - spaces, after a flag only: `--password hunter2`.
    Detector::new(
        Kind::EnvSecret,
        SECRET_NAME_NEEDLES,
        Check::Named,
        concat!(
            r#"{B}(?:\\*["'])?(?P<n>"#,
            secret_name!("|pass", "|Pass"),
            r#")(?:\\*["'])?(?:\s*[=:]\s*|\s+)"#,
            secret_value!()
        ),
    ),
    // `Authorization: Basic|Bearer|token v`, as a header line, a curl flag
    // or a JSON field in a string; and a bare `Bearer <long token>`.
    Detector::new(
        Kind::AuthHeader,
        &["uthorization", "UTHORIZATION", "earer", "EARER"],
        Check::Value,
        r#"(?:(?i:authorization)(?:\\*["'])?\s*[:=]\s*(?:\\*["'])?(?i:basic|bearer|token|digest)\s+(?P<s>[A-Za-z0-9+/=._~-]{6,})|(?:^|[^A-Za-z0-9_])Bearer\s+(?P<s2>[A-Za-z0-9+/=._~-]{16,}))"#,
    ),
    // A private key's body without its BEGIN line, known by how its DER
    // starts (PKCS#1 and PKCS#8 RSA, SEC1 and PKCS#8 EC, Ed25519,
    // OpenSSH), with its following lines (`\n`-separated at any depth).
    // Certificates (`MIID…CCA`) and other base64 do not start this way.
    Detector::new(
        Kind::PrivateKey,
        &[
            "MII",
            "MHcCAQEE",
            "MIGkAgEBBD",
            "MC4CAQAwBQYDK2Vw",
            "b3BlbnNzaC1rZXktdjE",
        ],
        Check::Shape,
        r"{B}(?P<s>(?:MII[A-Za-z0-9+/]{3}IBA(?:AK|DAN)|MHcCAQEE|MIGkAgEBBD|MIGHAgEAMBMG|MC4CAQAwBQYDK2Vw|b3BlbnNzaC1rZXktdjE)[A-Za-z0-9+/=]*(?:\\+[rn][A-Za-z0-9+/=]+)*)",
    ),
];

/// Masks the values of the line's own `"name": "value"` pairs whose name
/// is a secret's (`"password"`, `"SecretAccessKey"`, `"Authorization"`),
/// where key and value are two strings of the line; returns the index in
/// `strings` of each value masked.
fn secret_fields(
    line: &mut [u8],
    strings: &[Range<usize>],
    present: &[Vec<Hit>],
    counts: &mut BTreeMap<Kind, u64>,
) -> Vec<usize> {
    let mut masked = Vec::new();
    for (i, pair) in strings.windows(2).enumerate() {
        let (key, value) = (pair[0].clone(), pair[1].clone());
        let between = &line[key.end..value.start];
        let is_pair = between.len() >= 3
            && between[0] == b'"'
            && between[between.len() - 1] == b'"'
            && between[1..between.len() - 1].trim_ascii() == b":";
        if !is_pair || value.is_empty() {
            continue;
        }
        let name = &line[key];
        let auth = name.eq_ignore_ascii_case(b"authorization")
            || name.eq_ignore_ascii_case(b"proxy-authorization");
        let secret = auth || (!present[i].is_empty() && is_secret_name(name));
        if !secret {
            continue;
        }
        let content = &line[value.clone()];
        // `Bearer <token>`: the scheme stays readable.
        let from = match content.iter().position(|&b| b == b' ') {
            Some(space) if auth => space + 1,
            _ => 0,
        };
        let secret = &content[from..];
        let chosen = !auth && names_a_password(name);
        if secret.is_empty()
            || !looks_like_a_value(secret, false)
            || !(chosen || machine_made(secret, false))
        {
            continue;
        }
        let kind = if auth {
            Kind::AuthHeader
        } else {
            Kind::SecretField
        };
        write_mask(&mut line[value.start + from..value.end], kind);
        *counts.entry(kind).or_default() += 1;
        masked.push(i + 1);
    }
    masked
}

/// Whether a whole key names a secret, as `secret_name!` says (without a
/// regex: a key with a needle is common, `input_tokens`, and compiling one
/// costs a hook more than its delta).
fn is_secret_name(name: &[u8]) -> bool {
    const KEYWORDS: [&[u8]; 12] = [
        b"password",
        b"passwd",
        b"secret",
        b"token",
        b"apikey",
        b"accesskey",
        b"secretkey",
        b"privatekey",
        b"authkey",
        b"accountkey",
        b"credential",
        b"credentials",
    ];
    let separator = |b: u8| matches!(b, b'_' | b'.' | b'-');
    if name.is_empty()
        || !name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || separator(b))
    {
        return false;
    }
    KEYWORDS.iter().any(|keyword| {
        // Match the keyword from the end, separators inside it allowed
        // only between its words (`api_key`, `Api-Key`).
        let mut at = name.len();
        for &k in keyword.iter().rev() {
            while at > 0 && separator(name[at - 1]) && at < name.len() {
                at -= 1;
            }
            if at == 0 || !name[at - 1].eq_ignore_ascii_case(&k) {
                return false;
            }
            at -= 1;
        }
        // It starts the name, follows a separator, or starts a camelCase word.
        at == 0
            || separator(name[at - 1])
            || (name[at].is_ascii_uppercase()
                && (name[at - 1].is_ascii_lowercase() || name[at - 1].is_ascii_digit()))
    })
}

/// A private key runs from its BEGIN line to its END line, which regexes
/// find separately; these needles stand for both (a key pasted without its
/// BEGIN line still has its END line).
const PRIVATE_KEY_NEEDLES: [&str; 2] = ["-----BEGIN", "-----END"];
const PRIVATE_KEY_BEGIN: &str = r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----";
const PRIVATE_KEY_END: &str = r"-----END[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----";

/// Which detectors' needles a string contains: bit `i` for `DETECTORS[i]`,
/// bit `N_DETECTORS` for a private key.
type Present = u32;

const PRIVATE_KEY_BIT: Present = 1 << N_DETECTORS;

/// Every detector's needles, in two automata over the same needles.
struct Needles {
    /// Leftmost-first: answers "any needle?" with a vectorised scan.
    any: AhoCorasick,
    /// Standard semantics, for overlapping search: says which needles.
    each: AhoCorasick,
    /// The bit of the detector each needle (by pattern id) belongs to.
    bit: Vec<Present>,
    /// The longest needle's length.
    longest: usize,
}

/// `None` only if the constant needles stopped building; then every string
/// is treated as holding every needle (each regex runs: slow, but safe).
fn needles() -> Option<&'static Needles> {
    static NEEDLES: OnceLock<Option<Needles>> = OnceLock::new();
    NEEDLES
        .get_or_init(|| {
            // One pattern per literal, with the bits of every detector
            // that has it.
            let mut by_literal: BTreeMap<&str, Present> = BTreeMap::new();
            let all = DETECTORS
                .iter()
                .enumerate()
                .flat_map(|(i, d)| d.needles.iter().map(move |n| (*n, 1 << i)))
                .chain(PRIVATE_KEY_NEEDLES.map(|n| (n, PRIVATE_KEY_BIT)));
            for (literal, bit) in all {
                *by_literal.entry(literal).or_default() |= bit;
            }
            let literals: Vec<&str> = by_literal.keys().copied().collect();
            let bit = by_literal.values().copied().collect();
            let any = AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostFirst)
                .build(&literals)
                .ok()?;
            let each = AhoCorasick::new(&literals).ok()?;
            Some(Needles {
                longest: literals.iter().map(|l| l.len()).max().unwrap_or(0),
                any,
                each,
                bit,
            })
        })
        .as_ref()
}

/// The detectors whose needles each of the line's `strings` contains.
///
/// Most lines hold no needle, and most strings of those that do hold none:
/// one vectorised scan of the whole line finds where needles start, and
/// only the bytes just after each such start are searched for every
/// needle there (overlapping: one needle must not hide another that shares
/// its bytes, as `sk-` does `sk-ant-`).
fn present(line: &[u8], strings: &[Range<usize>]) -> Vec<Vec<Hit>> {
    let Some(needles) = needles() else {
        // Every string holds every needle everywhere.
        return strings
            .iter()
            .map(|s| {
                vec![Hit {
                    at: 0..s.len(),
                    bits: Present::MAX,
                }]
            })
            .collect();
    };
    let mut hits: Vec<(Range<usize>, Present)> = Vec::new();
    for m in needles.any.find_iter(line) {
        // Needles that start inside `m` end within the longest needle's
        // length after it; those that start later are later matches'.
        let window = m.start()..(m.end() + needles.longest).min(line.len());
        for o in needles.each.find_overlapping_iter(&line[window.clone()]) {
            let at = window.start + o.start()..window.start + o.end();
            hits.push((at, needles.bit[o.pattern().as_usize()]));
        }
    }
    if hits.is_empty() {
        return vec![Vec::new(); strings.len()];
    }
    // Strings are in order and apart; so are the hits, once sorted.
    hits.sort_unstable_by_key(|(at, _)| at.start);
    let mut next = 0;
    strings
        .iter()
        .map(|s| {
            while next < hits.len() && hits[next].0.start < s.start {
                next += 1;
            }
            let mut inside = Vec::new();
            while next < hits.len() && hits[next].0.start < s.end {
                let (at, bits) = &hits[next];
                if at.end <= s.end {
                    inside.push(Hit {
                        at: at.start - s.start..at.end - s.start,
                        bits: *bits,
                    });
                }
                next += 1;
            }
            inside
        })
        .collect()
}

/// ASCII-only (`unicode(false)`): linear-time on any bytes, even a 50 MB line.
fn build(pattern: &str) -> Option<Regex> {
    RegexBuilder::new(&pattern.replace("{B}", r"(?:^|\\[nrtbf]|[^A-Za-z0-9_])"))
        .unicode(false)
        .build()
        .ok()
}

fn private_key_bounds() -> Option<&'static (Regex, Regex)> {
    static BOUNDS: OnceLock<Option<(Regex, Regex)>> = OnceLock::new();
    BOUNDS
        .get_or_init(|| Some((build(PRIVATE_KEY_BEGIN)?, build(PRIVATE_KEY_END)?)))
        .as_ref()
}

/// Secret spans in one string's contents, in no particular order; only the
/// detectors in `present` can find any.
fn secrets(content: &[u8], hits: &[Hit]) -> Vec<(Range<usize>, Kind)> {
    let mut out = Vec::new();
    let present = hits.iter().fold(0, |present, hit| present | hit.bits);
    for (i, d) in DETECTORS.iter().enumerate() {
        if present & (1 << i) == 0 {
            continue;
        }
        let named = matches!(d.check, Check::Named) || d.kind == Kind::EnvSecret;
        let hits = hits
            .iter()
            .filter(|hit| hit.bits & (1 << i) != 0)
            .filter(|hit| !named || names_something(content, &hit.at));
        let windows = windows(content, hits);
        if windows.is_empty() {
            continue;
        }
        // The patterns are constants and compile (a test checks each).
        let Some(re) = d.regex() else { continue };
        for caps in windows
            .into_iter()
            .flat_map(|w| captures_in(re, content, w))
        {
            let (m, bare) = match (caps.name("s"), caps.name("s2")) {
                (Some(m), _) => (m, false),
                (None, Some(m)) => (m, true),
                (None, None) => continue,
            };
            let value = m.as_bytes();
            let before = &content[caps.get(0).map_or(0, |all| all.start())..m.start()];
            let mut kind = d.kind;
            let accepted = match d.check {
                Check::Shape => true,
                Check::Basic => is_basic_credentials(value),
                Check::Value => {
                    let chosen = d.kind == Kind::UrlPassword || names_a_password(before);
                    looks_like_a_value(value, bare) && (chosen || machine_made(value, bare))
                }
                Check::Named => {
                    let Some(name) = caps.name("n") else { continue };
                    let op = &content[name.end()..m.start()];
                    let spaced = content[..m.start()]
                        .last()
                        .is_some_and(u8::is_ascii_whitespace);
                    let form_ok = if op.contains(&b'=') {
                        !(bare && spaced && is_identifier(value))
                    } else if op.contains(&b':') {
                        kind = Kind::SecretField;
                        !name.as_bytes().eq_ignore_ascii_case(b"pass")
                            && !name.as_bytes().ends_with(b"Pass")
                            && !name.as_bytes().to_ascii_lowercase().ends_with(b"_pass")
                    } else {
                        content[..name.start()].ends_with(b"-")
                    };
                    let chosen = names_a_password(name.as_bytes());
                    form_ok
                        && looks_like_a_value(value, bare)
                        && (chosen || machine_made(value, bare))
                }
            };
            if accepted {
                out.push((m.range(), kind));
            }
        }
    }
    if present & PRIVATE_KEY_BIT != 0 {
        private_keys(content, &mut out);
    }
    high_entropy(content, &mut out);
    out
}

/// Whether `value` is base64 of printable `user:password` (both parts
/// there), as Docker keeps registry logins.
fn is_basic_credentials(value: &[u8]) -> bool {
    fn sextet(b: u8) -> Option<u32> {
        Some(u32::from(match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    }
    let digits = value
        .strip_suffix(b"==")
        .or_else(|| value.strip_suffix(b"="))
        .unwrap_or(value);
    if !value.len().is_multiple_of(4) {
        return false;
    }
    let mut decoded = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let Some(n) = chunk
            .iter()
            .try_fold(0u32, |n, &b| Some(n << 6 | sextet(b)?))
        else {
            return false;
        };
        let n = n << (6 * (4 - chunk.len()));
        decoded.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    let printable = decoded.iter().all(|b| b.is_ascii_graphic() || *b == b' ');
    let colon = decoded.iter().position(|&b| b == b':');
    printable && colon.is_some_and(|at| at > 0 && at + 1 < decoded.len())
}

/// A needle found in a string: where, and the bits of its detectors.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hit {
    at: Range<usize>,
    bits: Present,
}

/// How far before its needle a match may start (a long name before
/// `password`: `spring.datasource.password`) and after it end; a match
/// that reaches the window's end is taken again from the whole string (a
/// JWT, a private key's body can be kilobytes).
const BEFORE_NEEDLE: usize = 256;
const AFTER_NEEDLE: usize = 512;

/// Whether the word around a secret's name needle at `at` is a name given
/// a value: followed (after the rest of the name, a closing quote, spaces)
/// by `=` or `:`, or a flag (`--name value`). Most needles of names are
/// words (`input_tokens` as a key, "the token limit"), and this spares
/// them the regex, and its compiling. A name runs at most `BEFORE_NEEDLE`
/// bytes either side of its needle: a longer run of letters (a page of
/// `keykeykey…`) names nothing, and is not read again for each needle in
/// it.
fn names_something(content: &[u8], at: &Range<usize>) -> bool {
    let name_byte = |b: &u8| b.is_ascii_alphanumeric() || b"_.-".contains(b);
    let run = |bytes: &mut dyn Iterator<Item = &u8>| {
        bytes
            .take(BEFORE_NEEDLE + 1)
            .take_while(|b| name_byte(b))
            .count()
    };
    let (before, after) = (
        run(&mut content[..at.start].iter().rev()),
        run(&mut content[at.end..].iter()),
    );
    if before > BEFORE_NEEDLE || after > BEFORE_NEEDLE {
        return false;
    }
    let start = at.start - before;
    let mut i = at.end + after;
    while i < content.len() && b"\\\"'".contains(&content[i]) {
        i += 1;
    }
    let spaces = content[i..]
        .iter()
        .take_while(|b| b.is_ascii_whitespace())
        .count();
    match content.get(i + spaces) {
        Some(b'=' | b':') => true,
        _ => spaces > 0 && content[start..].starts_with(b"-"),
    }
}

/// The parts of `content` around `hits`, merged where they overlap: a
/// regex searches only there, not the whole string (a tool's output can be
/// megabytes, and `token` is a common word).
fn windows<'h>(content: &[u8], hits: impl Iterator<Item = &'h Hit>) -> Vec<Range<usize>> {
    let mut merged: Vec<Range<usize>> = Vec::new();
    for hit in hits {
        let w = hit.at.start.saturating_sub(BEFORE_NEEDLE)
            ..(hit.at.end.saturating_add(AFTER_NEEDLE)).min(content.len());
        match merged.last_mut() {
            Some(last) if w.start <= last.end => last.end = last.end.max(w.end),
            _ => merged.push(w),
        }
    }
    merged
}

/// Every match of `re` that starts in `window`, seen in its context (the
/// byte before the window decides a boundary).
fn captures_in<'c>(
    re: &'c Regex,
    content: &'c [u8],
    window: Range<usize>,
) -> impl Iterator<Item = regex::bytes::Captures<'c>> + 'c {
    let haystack = &content[..window.end];
    let mut at = window.start;
    std::iter::from_fn(move || {
        if at > haystack.len() {
            return None;
        }
        let mut caps = re.captures_at(haystack, at)?;
        let mut whole = caps.get(0)?;
        if whole.end() == haystack.len() && haystack.len() < content.len() {
            // Cut by the window: the match as the whole string has it.
            caps = re.captures_at(content, whole.start())?;
            whole = caps.get(0)?;
        }
        at = if whole.end() > at {
            whole.end()
        } else {
            at + 1
        };
        Some(caps)
    })
}

/// A private key from its BEGIN line to its END line; from the start of
/// its body when only the END line is there (the BEGIN line was not
/// copied, or came in an earlier string).
fn private_keys(content: &[u8], out: &mut Vec<(Range<usize>, Kind)>) {
    let Some((key_begin, key_end)) = private_key_bounds() else {
        return;
    };
    let mut keys = Vec::new();
    let mut from = 0;
    while let Some(begin) = key_begin.find_at(content, from) {
        // A key cut off before its END line is masked to the string's end.
        let end = key_end
            .find_at(content, begin.end())
            .map_or(content.len(), |m| m.end());
        keys.push(begin.start()..end);
        from = end;
    }
    for end in key_end.find_iter(content) {
        if keys.iter().any(|k| k.contains(&end.start())) {
            continue;
        }
        // Back over the body: base64 and the escapes (`\n`) between lines.
        let body = content[..end.start()]
            .iter()
            .rposition(|&b| !(b.is_ascii_alphanumeric() || b"+/=\\".contains(&b)))
            .map_or(0, |i| i + 1);
        keys.push(body..end.end());
    }
    out.extend(keys.into_iter().map(|k| (k, Kind::PrivateKey)));
}

/// Placeholders (`sk-...`, `<token>`, `${X}`, `$X`, `***`), words that
/// stand for a value (`password`, `string`, `null`) and code
/// (`os.environ[...]`, `getKey()`; when `bare`, not quoted: `options.apiKey`)
/// are not secrets.
fn looks_like_a_value(v: &[u8], bare: bool) -> bool {
    let placeholder = v.windows(3).any(|w| w == b"...")
        || v.windows(8).any(|w| w.eq_ignore_ascii_case(b"redacted"))
        || v.first().is_some_and(|b| b"$<{%*".contains(b))
        || v.iter().all(|b| *b == b'x' || *b == b'X' || *b == b'*');
    let named = [
        &b"password"[..],
        b"passwd",
        b"changeme",
        b"secret",
        b"token",
        b"yourpassword",
        b"string",
        b"str",
        b"number",
        b"boolean",
        b"bool",
        b"object",
        b"unknown",
        b"bytes",
        b"none",
        b"null",
        b"nil",
        b"true",
        b"false",
        b"undefined",
        b"optional",
        b"required",
        b"redacted",
        b"hidden",
        b"option",
        b"value",
    ]
    .iter()
    .any(|w| v.eq_ignore_ascii_case(w));
    let code = v.starts_with(b"process.")
        || v.starts_with(b"os.")
        || v.ends_with(b".env")
        || v.windows(3).any(|w| w == b"://")
        || (bare && is_member_path(v));
    !placeholder && !named && !code
}

/// A password is chosen by a person (`correct horse battery staple`); the
/// value of any other secret's name (a key, a token) is made by a machine.
fn names_a_password(name: &[u8]) -> bool {
    name.windows(4).any(|w| w.eq_ignore_ascii_case(b"pass"))
}

/// Random enough to be a key or a token: digits, or both cases in a long
/// value that is not a name in code (`credentials: OAuthCredentials`, when
/// `bare`: not quoted). Words (`proxy-handled`, `csrfToken`) and
/// placeholders (`REDACTED_API_KEY`) are not.
fn machine_made(v: &[u8], bare: bool) -> bool {
    v.iter().any(u8::is_ascii_digit)
        || (v.len() >= 16
            && v.iter().any(u8::is_ascii_uppercase)
            && v.iter().any(u8::is_ascii_lowercase)
            && !(bare && is_identifier(v)))
}

/// `options?.apiKey`, `self.password`, `config.auth.token!`: names in code.
fn is_member_path(v: &[u8]) -> bool {
    v.contains(&b'.')
        && v.split(|&b| b == b'.').all(|part| {
            let part = part.strip_suffix(b"?").unwrap_or(part);
            is_identifier(part.strip_suffix(b"!").unwrap_or(part))
        })
}

/// `[A-Za-z_$][A-Za-z0-9_$]*`: a name in code.
fn is_identifier(v: &[u8]) -> bool {
    v.first()
        .is_some_and(|b| b.is_ascii_alphabetic() || b"_$".contains(b))
        && v.iter()
            .all(|b| b.is_ascii_alphanumeric() || b"_$".contains(b))
}

/// Characters of a high-entropy token.
fn is_token_byte(b: u8) -> bool {
    // A table: this test runs on every byte of every string.
    const TOKEN_BYTES: [bool; 256] = {
        let mut table = [false; 256];
        let mut b = 0;
        while b < table.len() {
            let c = b as u8;
            table[b] = c.is_ascii_alphanumeric() || c == b'_' || c == b'-';
            b += 1;
        }
        table
    };
    TOKEN_BYTES[usize::from(b)]
}

/// Tokens of 32-128 characters that look random: upper and lower case and
/// digits, mixed (many class changes), high Shannon entropy, not hex (git
/// SHAs, sha256), not part of a path, URL, dotted name or base64 blob.
fn high_entropy(content: &[u8], out: &mut Vec<(Range<usize>, Kind)>) {
    let mut i = 0;
    // The byte before the current token; `None` after an escape sequence.
    let mut before: Option<u8> = None;
    while i < content.len() {
        let b = content[i];
        if b == b'\\' {
            i += escape_width(content, i);
            before = None;
            continue;
        }
        if !is_token_byte(b) {
            before = Some(b);
            i += 1;
            continue;
        }
        // A token long enough to report is 32 token bytes in a row, so no
        // such token starts at or before the last other byte of the 32 from
        // here: go on from that byte, found from the far end (most strings
        // are words and punctuation, and this loop ran on every byte). From
        // its backslash if it is the character of an escape sequence (`\"`,
        // `\/`, `\\`).
        let last_other = content
            .get(i..i + 32)
            .and_then(|window| window.iter().rposition(|&b| !is_token_byte(b)));
        if let Some(at) = last_other {
            i += at;
            let backslashes = content[..i]
                .iter()
                .rev()
                .take_while(|&&b| b == b'\\')
                .count();
            i -= backslashes % 2;
            continue;
        }
        let start = i;
        while i < content.len() && is_token_byte(content[i]) {
            i += 1;
        }
        if reportable(content, start..i, before) {
            out.push((start..i, Kind::HighEntropy));
        }
        before = None;
    }
}

/// Whether the token at `at` in `content` (after `before`, `None` after an
/// escape sequence) is one to mask: 32-128 bytes, not glued to a path, URL,
/// dotted name or base64 padding, and random-looking.
fn reportable(content: &[u8], at: Range<usize>, before: Option<u8>) -> bool {
    let (start, end) = (at.start, at.end);
    let after = content.get(end).copied();
    let glued = |b: Option<u8>, next: Option<u8>| match b {
        Some(b'/' | b'+') => true,
        Some(b'.') => next.is_some_and(is_token_byte),
        _ => false,
    };
    let dotted_before = before == Some(b'.') && start >= 2 && is_token_byte(content[start - 2]);
    let token = &content[start..end];
    (32..=128).contains(&at.len())
        && !glued(before, None)
        && !dotted_before
        && !glued(after, content.get(end + 1).copied())
        && after != Some(b'=')
        && looks_random(token)
        && !is_ipfs_cid(token)
        // An SSH public key (`ssh-ed25519 AAAAC3Nza…`): its wire format
        // starts with a length, and public.
        && !token.starts_with(b"AAAA")
}

/// An IPFS content id: public addresses of public data, random-looking by
/// construction. CIDv0 (`Qm` and 44 base58 characters), CIDv1 in base58btc
/// (`zdj7…`, `zb2r…`) and in base32 (`bafy…`, `bafk…`; lower case, so not
/// random-looking anyway).
fn is_ipfs_cid(token: &[u8]) -> bool {
    let base58 = |t: &[u8]| {
        t.iter()
            .all(|b| b.is_ascii_alphanumeric() && !b"0OIl".contains(b))
    };
    let base32 = |t: &[u8]| {
        t.iter()
            .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(b))
    };
    (token.len() == 46 && token.starts_with(b"Qm") && base58(token))
        || ((token.starts_with(b"zdj7") || token.starts_with(b"zb2r")) && base58(token))
        || (token.starts_with(b"baf") && base32(token))
}

fn looks_random(token: &[u8]) -> bool {
    // Ids the agents write (`toolu_01…`, `agent_msg_01…`, `call_…`) are a
    // lower-case word prefix before ~24 random characters; only the random
    // part counts.
    let mut token = token;
    while let Some(sep) = token.iter().position(|b| *b == b'_' || *b == b'-') {
        if sep == 0 || !token[..sep].iter().all(u8::is_ascii_lowercase) {
            break;
        }
        token = &token[sep + 1..];
    }
    if token.len() < 32 {
        return false;
    }
    let count = |f: fn(&u8) -> bool| token.iter().filter(|b| f(b)).count();
    let (upper, lower, digit) = (
        count(u8::is_ascii_uppercase),
        count(u8::is_ascii_lowercase),
        count(u8::is_ascii_digit),
    );
    if upper < 2 || lower < 2 || digit < 2 || token.iter().all(u8::is_ascii_hexdigit) {
        return false;
    }
    let class = |b: &u8| match b {
        b'A'..=b'Z' => 0,
        b'a'..=b'z' => 1,
        b'0'..=b'9' => 2,
        _ => 3,
    };
    let changes = token
        .windows(2)
        .filter(|w| class(&w[0]) != class(&w[1]))
        .count();
    // Random base62 changes class at ~60% of positions; camelCase words and
    // snake_case identifiers at far fewer.
    changes * 100 >= (token.len() - 1) * 40 && shannon_bits(token) >= 4.0
}

fn shannon_bits(token: &[u8]) -> f64 {
    let mut freq = [0u32; 256];
    for b in token {
        freq[*b as usize] += 1;
    }
    let n = token.len() as f64;
    freq.iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = f64::from(*c) / n;
            -p * p.log2()
        })
        .sum()
}

/// Bytes of the escape sequence at `i` (`\uXXXX` or `\x`). An escaped
/// backslash before an escape's letter (`\\n`) is an escape of JSON inside
/// this string (a Codex `arguments` string): one unit, so a mask never
/// leaves the inner JSON a lone backslash.
fn escape_width(content: &[u8], i: usize) -> usize {
    let w = match (content.get(i + 1), content.get(i + 2)) {
        (Some(b'u'), _) => 6,
        (Some(b'\\'), Some(b'n' | b'r' | b't' | b'b' | b'f')) => 3,
        (Some(b'\\'), Some(b'u')) => 7,
        _ => 2,
    };
    w.min(content.len() - i)
}

/// Bytes of the unit (escape sequence or UTF-8 character) starting at `i`.
fn unit_width(content: &[u8], i: usize) -> usize {
    let w = match content[i] {
        b'\\' => return escape_width(content, i),
        0xF0..=0xFF => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    };
    w.min(content.len() - i)
}

/// Sorts and merges overlapping spans (the earlier one names the kind) and
/// widens each to whole units, so a mask never splits an escape sequence or
/// a character.
fn snap(content: &[u8], mut spans: Vec<(Range<usize>, Kind)>) -> Vec<(Range<usize>, Kind)> {
    spans.sort_by_key(|(r, kind)| (r.start, *kind));
    let mut out: Vec<(Range<usize>, Kind)> = Vec::new();
    let mut unit = 0;
    for (r, kind) in spans {
        if let Some((last, _)) = out.last_mut() {
            if r.start < last.end {
                if r.end > last.end {
                    let mut end = last.end;
                    while end < r.end.min(content.len()) {
                        end += unit_width(content, end);
                    }
                    last.end = end;
                    unit = end;
                }
                continue;
            }
        }
        while unit < content.len() && unit + unit_width(content, unit) <= r.start {
            unit += unit_width(content, unit);
        }
        let start = unit;
        let mut end = start;
        while end < r.end.min(content.len()) {
            end += unit_width(content, end);
        }
        if end > start {
            out.push((start..end, kind));
        }
        unit = end;
    }
    out
}

/// `[REDACTED:kind]***` over the whole span (all printable ASCII, so any
/// characters and escape sequences it covers become plain string content).
fn write_mask(span: &mut [u8], kind: Kind) {
    let label = format!("[REDACTED:{}]", kind.as_str());
    span.fill(b'*');
    if span.len() >= label.len() {
        span[..label.len()].copy_from_slice(label.as_bytes());
    }
}

#[cfg(test)]
mod shapes;

#[cfg(test)]
mod tests {
    use super::*;

    /// Puts `text` in a transcript-like JSON line, redacts it, and checks what
    /// every redaction must keep: the length, valid UTF-8 and valid JSON.
    fn redacted(text: &str) -> (String, String, BTreeMap<String, u64>) {
        let line = serde_json::json!({"type": "user", "message": {"content": text}}).to_string();
        let out = redact_jsonl(format!("{line}\n").into_bytes());
        assert_eq!(out.text.len(), line.len() + 1, "length kept: {}", out.text);
        let value: serde_json::Value = serde_json::from_str(&out.text)
            .unwrap_or_else(|e| panic!("not JSON after redaction ({e}): {}", out.text));
        let content = value["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (line, content, out.counts)
    }

    /// Aider's markdown holds a pasted key as lines of their own: every
    /// line of its body is masked, not only the BEGIN line.
    #[test]
    fn a_private_key_across_text_lines_is_masked_to_its_end() {
        let body = [
            "MIIEpAIBAAKCAQEA1x2y3zQWERTYasdfgh",
            "k9+/Zx0yWq8bV3nP1mQ7",
            "Tr5sLd==",
        ];
        let input = format!(
            "#### deploy with this key\n\n-----BEGIN RSA PRIVATE KEY-----\n{}\n-----END RSA PRIVATE KEY----- done\nthanks, deployed\n",
            body.join("\n")
        );
        let out = redact_with(input.clone().into_bytes(), Lines::Text, &Extra::default());
        assert_eq!(out.text.len(), input.len());
        for line in body {
            assert!(!out.text.contains(line), "{}", out.text);
        }
        for kept in ["#### deploy with this key", " done\nthanks, deployed\n"] {
            assert!(out.text.contains(kept), "{}", out.text);
        }
        // In JSON lines a key is inside one string: the next line is not it.
        let json = "{\"a\":\"-----BEGIN RSA PRIVATE KEY-----\"}\n{\"b\":\"next line\"}\n";
        let out = redact_with(json.as_bytes().to_vec(), Lines::Json, &Extra::default());
        assert!(
            out.text.ends_with("{\"b\":\"next line\"}\n"),
            "{}",
            out.text
        );
    }

    #[test]
    fn a_page_of_secret_name_words_names_nothing_and_a_real_name_still_does() {
        // A fetched page of `keykeykey…`: thousands of `key` needles, each
        // once read as a name (every needle re-read the whole run).
        let run = "key".repeat(10_000);
        let (_, content, counts) =
            redacted(&format!("{run} then api_key=sk_live_abcdefghijklmnop1234"));
        assert!(content.starts_with(&run[..300]), "the run is kept");
        assert!(
            !content.contains("sk_live_abcdefghijklmnop1234"),
            "{counts:?}"
        );
        // A name up to 256 bytes before its needle still names its value.
        let long = format!("{}_password=hunter2hunter2", "a".repeat(200));
        let (_, content, _) = redacted(&long);
        assert!(!content.contains("hunter2hunter2"), "{content}");
        let at = long.find("password").unwrap_or_default();
        assert!(names_something(long.as_bytes(), &(at..at + 8)));
        let longer = format!("{}_password=hunter2", "a".repeat(300));
        let at = longer.find("password").unwrap_or_default();
        assert!(!names_something(longer.as_bytes(), &(at..at + 8)));
    }

    #[test]
    fn a_slack_webhook_and_a_docker_login_are_masked_in_codex_and_claude_lines() {
        let output = "cat ~/.docker/config.json\n{\"auths\": {\"ghcr.io\": {\"auth\": \"bW9uYTpodW50ZXIyLXNlY3JldA==\"}}}\nSLACK=https://hooks.slack.com/services/T0123ABCD/B0456EFGH/AbCdEfGhIjKlMnOpQrStUvWx";
        let codex = serde_json::json!({"timestamp": "2026-05-01T10:00:00.000Z", "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "c1", "output": output}});
        let claude = serde_json::json!({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": output}]}});
        for line in [codex, claude] {
            let out = redact_jsonl(format!("{line}\n").into_bytes());
            for secret in ["bW9uYTpodW50ZXIyLXNlY3JldA", "AbCdEfGhIjKlMnOpQrStUvWx"] {
                assert!(!out.text.contains(secret), "{secret} in {}", out.text);
            }
            assert_eq!(out.counts.get("docker_auth"), Some(&1), "{:?}", out.counts);
            assert_eq!(
                out.counts.get("slack_webhook"),
                Some(&1),
                "{:?}",
                out.counts
            );
            assert!(out.text.contains("ghcr.io") && out.text.contains("hooks.slack.com/services/"));
        }
    }

    #[test]
    fn an_auth_field_is_masked_only_when_it_holds_a_login() {
        for kept in [
            r#"{"auth": "required"}"#,
            r#"{"auth": "dXNlcm5hbWU="}"#,
            r#"{"auth": "OnBhc3N3b3Jk"}"#,
            "see https://hooks.slack.com/services/ for how",
        ] {
            let (_, out, counts) = redacted(kept);
            assert_eq!(out, kept, "{counts:?}");
        }
    }

    #[test]
    fn secrets_are_masked_by_kind() {
        let key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA1x2y3z\nQWERTYasdfgh\n-----END RSA PRIVATE KEY-----";
        let cases: &[(&str, &str, &str)] = &[
            ("private_key", key, "MIIEpAIBAAKCAQEA1x2y3z"),
            (
                "private_key",
                "cat id_ed25519\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA",
                "b3BlbnNzaC1rZXktdjEAAAAA",
            ),
            ("aws_key", "aws AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
            (
                "aws_key",
                "[default]\naws_access_key_id=ASIAY34FZKBOKMUTVV7A",
                "ASIAY34FZKBOKMUTVV7A",
            ),
            (
                "github_token",
                "token ghp_abcdefghijklmnopqrstuvwxyz0123456789",
                "ghp_abcdefghij",
            ),
            (
                "github_token",
                "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV",
                "github_pat_11ABCDEFG",
            ),
            ("slack_token", "SLACK xoxb-1234567890-abcdefghij", "xoxb-1234567890"),
            ("slack_token", "xoxp-2222-3333-abcdef1234", "xoxp-2222"),
            (
                "slack_webhook",
                "curl -X POST https://hooks.slack.com/services/T0123ABCD/B0456EFGH/AbCdEfGhIjKlMnOpQrStUvWx",
                "AbCdEfGhIjKlMnOpQrStUvWx",
            ),
            (
                "docker_auth",
                "{\n  \"auths\": {\n    \"ghcr.io\": {\n      \"auth\": \"bW9uYTpodW50ZXIyLXNlY3JldA==\"\n    }\n  }\n}",
                "bW9uYTpodW50ZXIyLXNlY3JldA",
            ),
            (
                "stripe_key",
                "stripe.api_key = 'sk_live_abcdefghijklmnop1234'",
                "sk_live_abcdefghijklmnop1234",
            ),
            (
                "anthropic_key",
                "key: sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789ABCD",
                "abcdefghijklmnopqrstuvwxyz0123456789",
            ),
            (
                "openai_key",
                "OPENAI: sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",
                "abcdefghijklmnopqrstuvwxyz0123456789",
            ),
            (
                "jwt",
                "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
                "dozjgNryP4J3jVmNHl0w5N",
            ),
            (
                "url_password",
                "git clone https://bob:hunter2secret@example.com/repo.git",
                "hunter2secret",
            ),
            (
                "url_password",
                "DATABASE_URL=postgres://app:S3cr3tPass@db:5432/app",
                "S3cr3tPass",
            ),
            (
                "env_secret",
                "export DATABASE_PASSWORD=correct-horse-battery",
                "correct-horse-battery",
            ),
            ("env_secret", "API_KEY=abcd1234efgh", "abcd1234efgh"),
            ("env_secret", "PASSWORD=\"hunter22\"", "hunter22"),
            (
                "env_secret",
                "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "wJalrXUtnFEMI",
            ),
            (
                "high_entropy",
                "the key is Xk9pQ2mLz8RvT4wYb7NcJ1sHd6FgUa3E, keep it",
                "Xk9pQ2mLz8RvT4wYb7NcJ1sHd6FgUa3E",
            ),
            (
                "high_entropy",
                "curl 'https://api.example.com/v1?key=q7W2e9R4t6Y1u3I8o5P0aSdF2gH7jK4l'",
                "q7W2e9R4t6Y1u3I8o5P0aSdF2gH7jK4l",
            ),
        ];
        for (kind, text, secret) in cases {
            let (_, out, counts) = redacted(text);
            assert!(!out.contains(secret), "{kind}: {secret} survived in {out}");
            assert_eq!(counts.get(*kind), Some(&1), "{text}: {counts:?}");
            assert_eq!(counts.len(), 1, "{text}: one finding, {counts:?}");
        }
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        let cases = [
            "/home/alice/src/kith/central/src/registry/mod.rs",
            "/Users/Alice/Projects/App2024/src/Components/UserProfile9Card.tsx",
            "commit 8cc42b0bd39d04e71e509d7d58e6782ab435329f fixed it",
            "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "session 4d5611e5-241a-462a-8d15-5122611a9569",
            "https://example.com/docs/page?id=42",
            "PASSWORD_MIN_LENGTH = 8",
            "fn token_sha256(&self) -> String",
            "const apiKey = options?.apiKey || getKey()",
            "export ANTHROPIC_API_KEY=sk-ant-...",
            "env.CODEMIE_API_KEY = apiKeyValue;",
            "GITHUB_TOKEN=$GITHUB_TOKEN",
            "API_KEY=${{ secrets.API_KEY }}",
            "TOKEN_URL=https://auth.example.com/oauth/token",
            "postgres://user:password@localhost:5432/db",
            "toolu_01VFxLsW8qYpJQ6QTdcqXw9c agent_msg_01LkKqpUD829m724o5oSeN7M",
            "getUserAccountSettingsForTenant2024AndRegion5",
            "test_parse_claude_code_transcript_with_subagents_v2_fixture",
            "integrity sha512-Q8mJ3xLp9Rt2Vw5Yz1Bc4Df7Gh0Jk3Lm6Np9Qr2St5Uv8Wx1Yz4Ab7Cd0Ef3Gh6Ij9Kl2Mn5Op8Qr1St4Uv7Wx0==",
            "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
            "https://docs.google.com/document/d/1aBcD3eFgH5iJkL7mNoP9qRsT1uVwX3yZ5aBcD7eF/edit",
            "kith_f3a9c2e1d4b5a6978877665544332211aabbccddeeff00112233445566778899",
            "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKlMnOpQrStUvWxYz",
        ];
        for text in cases {
            let (line, out, counts) = redacted(text);
            assert!(counts.is_empty(), "false positive on {text}: {counts:?}");
            assert_eq!(out, text);
            assert!(line.len() > text.len());
        }
    }

    #[test]
    fn a_delta_redacted_in_pieces_is_redacted_as_a_whole() {
        let lines = [
            r#"{"t":"aws AKIAIOSFODNN7EXAMPLE here"}"#,
            r#"{"t":"plain text, nothing to hide"}"#,
            "not json",
            r#"{"t":"export DATABASE_PASSWORD=correct-horse-battery"}"#,
        ];
        let mut delta = Vec::new();
        for i in 0..1000 {
            delta.extend_from_slice(lines[i % lines.len()].as_bytes());
            delta.push(b'\n');
        }
        delta.extend_from_slice(b"{\"partial\": \"AKIAIOSFODNN7EXAMPLE");
        let mut whole = delta.clone();
        let want = redact_in_pieces(&mut whole, 1, Lines::Json, &Extra::default());
        assert_eq!(want.get(&Kind::AwsKey), Some(&250));
        for n_pieces in [2, 3, 7, 5000] {
            let mut pieces = delta.clone();
            assert_eq!(
                redact_in_pieces(&mut pieces, n_pieces, Lines::Json, &Extra::default()),
                want,
                "{n_pieces}"
            );
            assert_eq!(pieces, whole, "{n_pieces}");
        }
    }

    /// A backfill of Aider's markdown is redacted in pieces: a key pasted
    /// across a cut is still masked to its end.
    #[test]
    fn a_private_key_across_a_cut_between_pieces_is_masked_whole() {
        let mut delta = Vec::new();
        for i in 0..200 {
            delta.extend_from_slice(format!("#### note {i}, nothing secret\n").as_bytes());
            if i % 40 == 7 {
                // The second key begins on the line the first one ends.
                delta.extend_from_slice(b"-----BEGIN OPENSSH PRIVATE KEY-----\n");
                for j in 0..30 {
                    delta.extend_from_slice(
                        format!("MIIEpAIBAAKCAQEA1x2y3zQWERTY{j:04}\n").as_bytes(),
                    );
                }
                delta.extend_from_slice(
                    b"-----END OPENSSH PRIVATE KEY----- -----BEGIN OPENSSH PRIVATE KEY-----\n",
                );
                for j in 0..30 {
                    delta.extend_from_slice(
                        format!("b3BlbnNzaC1rZXktdjEAAAAABG5vbmU{j:04}\n").as_bytes(),
                    );
                }
                delta.extend_from_slice(b"-----END OPENSSH PRIVATE KEY-----\n");
            }
        }
        let mut whole = delta.clone();
        let want = redact_in_pieces(&mut whole, 1, Lines::Text, &Extra::default());
        for body in [
            "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
            "MIIEpAIBAAKCAQEA1x2y3zQWERTY",
        ] {
            assert!(!String::from_utf8_lossy(&whole).contains(body), "{body}");
        }
        assert!(String::from_utf8_lossy(&whole).contains("#### note 199, nothing secret\n"));
        // Every cut a piece length can make, including inside each key.
        for n_pieces in [2, 3, 7, 50, 400] {
            let mut pieces = delta.clone();
            assert_eq!(
                redact_in_pieces(&mut pieces, n_pieces, Lines::Text, &Extra::default()),
                want,
                "{n_pieces}"
            );
            assert_eq!(pieces, whole, "{n_pieces}");
        }
        // A key that never ends is one piece to the end of the delta.
        let mut open = delta.clone();
        open.extend_from_slice(b"-----BEGIN RSA PRIVATE KEY-----\n");
        open.extend(
            std::iter::repeat_n(b"MIIEpAIBAAKCAQEA1x2y3zQWERTY\n".as_slice(), 500).flatten(),
        );
        let mut whole = open.clone();
        redact_in_pieces(&mut whole, 1, Lines::Text, &Extra::default());
        let mut pieces = open.clone();
        redact_in_pieces(&mut pieces, 7, Lines::Text, &Extra::default());
        assert_eq!(pieces, whole);
        assert!(!String::from_utf8_lossy(&pieces).contains("MIIEpAIBAAKCAQEA1x2y3zQWERTY"));
    }

    #[test]
    fn every_pattern_compiles() {
        for d in &DETECTORS {
            assert!(d.regex().is_some(), "{:?}", d.kind);
        }
        assert!(private_key_bounds().is_some());
        assert!(needles().is_some());
    }

    #[test]
    fn masks_are_labelled_and_keep_the_json_around_them() {
        let line = b"{\"t\":\"key AKIAIOSFODNN7EXAMPLE ok\",\"n\":1}\n".to_vec();
        let out = redact_jsonl(line);
        assert_eq!(
            out.text,
            "{\"t\":\"key [REDACTED:aws_key]** ok\",\"n\":1}\n"
        );
        // Shorter than its label: only stars.
        let out = redact_jsonl(b"{\"t\":\"u https://a:pw123456@h\"}\n".to_vec());
        assert_eq!(out.text, "{\"t\":\"u https://a:********@h\"}\n");
    }

    #[test]
    fn secrets_after_escapes_and_inside_nested_json_are_found() {
        // A .env file read by a tool: one JSON string with `\n` escapes.
        let (_, out, counts) = redacted(
            "NODE_ENV=production\nAPI_KEY=abcd1234efgh\nAWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE\n",
        );
        assert!(!out.contains("abcd1234efgh") && !out.contains("AKIAIOSFODNN7EXAMPLE"));
        assert!(out.contains("NODE_ENV=production"));
        assert_eq!(counts.get("env_secret"), Some(&1));
        assert_eq!(counts.get("aws_key"), Some(&1));
        // Codex tool arguments: JSON inside a JSON string.
        let args = serde_json::json!({"cmd": "export GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789"})
            .to_string();
        let (_, out, counts) = redacted(&args);
        assert!(!out.contains("ghp_abcdefghij"), "{out}");
        assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
        assert_eq!(counts.values().sum::<u64>(), 1, "{counts:?}");
    }

    #[test]
    fn counts_every_secret_by_kind() {
        let (_, _, counts) = redacted(
            "AKIAIOSFODNN7EXAMPLE and AKIAI44QH8DHBEXAMPLE and xoxb-1234567890-abcdefghij",
        );
        assert_eq!(counts.get("aws_key"), Some(&2));
        assert_eq!(counts.get("slack_token"), Some(&1));
    }

    #[test]
    fn masks_cover_whole_escapes_and_characters() {
        let content = br"ab\u00e9c\nd";
        // A span starting inside `\u00e9` and ending inside `\n`.
        let spans = snap(content, vec![(4..10, Kind::HighEntropy)]);
        assert_eq!(spans, vec![(2..11, Kind::HighEntropy)]);
        let content = "xé—y".as_bytes();
        let spans = snap(content, vec![(2..4, Kind::HighEntropy)]);
        assert_eq!(spans, vec![(1..6, Kind::HighEntropy)]);
        // Overlapping findings merge; the earlier names the kind.
        let spans = snap(
            b"0123456789",
            vec![(5..9, Kind::HighEntropy), (2..6, Kind::AwsKey)],
        );
        assert_eq!(spans, vec![(2..9, Kind::AwsKey)]);
    }

    #[test]
    fn bytes_central_could_not_store_are_made_storable() {
        let cases: &[(&[u8], &str, &str)] = &[
            (
                b"{\"a\":\"\xff\xfe\"}\n",
                "{\"a\":\"??\"}\n",
                "invalid_utf8_bytes",
            ),
            (b"not json\n", "\"ot jso\"\n", "invalid_json_lines"),
            (b"{\"a\":1}}\n", "\"?a?:1}\"\n", "invalid_json_lines"),
            (b"x\n", "0\n", "invalid_json_lines"),
            (b"\"torn \xc3\n", "\"torn \"\n", "invalid_utf8_bytes"),
        ];
        for (input, want, kind) in cases {
            let out = redact_jsonl(input.to_vec());
            assert_eq!(out.text, *want, "{input:?}");
            assert!(
                out.counts.contains_key(*kind),
                "{input:?}: {:?}",
                out.counts
            );
            assert_eq!(
                crate::jsonl::check(out.text.as_bytes(), Lines::Json).map(|_| ()),
                Ok(())
            );
        }
        // pi's concatenated records and blank lines are JSON already.
        for ok in [&b"{\"a\":1}{\"b\":2}\n"[..], b"\n", b"{}\n\n{}\n"] {
            let out = redact_jsonl(ok.to_vec());
            assert_eq!(out.text.as_bytes(), ok);
            assert!(out.counts.is_empty());
        }
    }

    #[test]
    fn a_secret_in_a_line_that_is_not_json_is_still_masked() {
        let out = redact_jsonl(b"{\"torn\": API_KEY=abcd1234efgh\n".to_vec());
        assert!(!out.text.contains("abcd1234efgh"), "{}", out.text);
        assert_eq!(out.counts.get("invalid_json_lines"), Some(&1));
        assert_eq!(out.counts.get("env_secret"), Some(&1));
    }

    /// `high_entropy`'s scan as it was before it skipped ahead: one byte at
    /// a time.
    fn high_entropy_byte_by_byte(content: &[u8]) -> Vec<(Range<usize>, Kind)> {
        let mut out = Vec::new();
        let mut i = 0;
        let mut before: Option<u8> = None;
        while i < content.len() {
            let b = content[i];
            if b == b'\\' {
                i += escape_width(content, i);
                before = None;
                continue;
            }
            if !is_token_byte(b) {
                before = Some(b);
                i += 1;
                continue;
            }
            let start = i;
            while i < content.len() && is_token_byte(content[i]) {
                i += 1;
            }
            if reportable(content, start..i, before) {
                out.push((start..i, Kind::HighEntropy));
            }
            before = None;
        }
        out
    }

    /// Skipping ahead finds exactly what a byte-by-byte scan finds: on
    /// strings of words, escapes (`\"`, `\\`, `\/`, `\n`, `\u00e9`),
    /// glue characters and random tokens of every length around 32, in
    /// every arrangement a fixed-seed generator makes.
    #[test]
    fn skipping_ahead_finds_what_a_byte_by_byte_scan_finds() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        const BASE62: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
        let pieces: [&[u8]; 12] = [
            b" ",
            b"the build ",
            b"\\\"",
            b"\\\\",
            b"\\/",
            b"\\n",
            b"\\u00e9",
            b"/",
            b".",
            b"+",
            b"=",
            b"-",
        ];
        let mut found = 0;
        for _ in 0..20_000 {
            let mut content = Vec::new();
            for _ in 0..next(12) {
                if next(3) == 0 {
                    let len = 24 + next(24) + if next(8) == 0 { 100 } else { 0 };
                    content.extend((0..len).map(|_| BASE62[next(BASE62.len())]));
                } else {
                    content.extend_from_slice(pieces[next(pieces.len())]);
                }
            }
            let mut skipping = Vec::new();
            high_entropy(&content, &mut skipping);
            assert_eq!(
                skipping,
                high_entropy_byte_by_byte(&content),
                "{}",
                String::from_utf8_lossy(&content)
            );
            found += skipping.len();
        }
        assert!(found > 1000, "the generator makes secrets too: {found}");
    }

    /// Every transcript in the fixtures: complete lines come out unchanged
    /// (no false positive on paths, ids, signatures, base64, code), and
    /// `jsonl::check` accepts them.
    #[test]
    fn real_transcripts_pass_through_unchanged() {
        let all = crate::fixtures::all();
        for f in &all {
            let bytes = std::fs::read(&f.path).unwrap_or_else(|e| panic!("{}: {e}", f.name));
            let complete = bytes.len() - bytes.iter().rev().take_while(|&&b| b != b'\n').count();
            let out = redact_jsonl(bytes[..complete].to_vec());
            assert!(out.counts.is_empty(), "{}: {:?}", f.name, out.counts);
            assert_eq!(out.text.as_bytes(), &bytes[..complete], "{}", f.name);
            let checked = crate::jsonl::check(&bytes[..complete], Lines::Json).map(|_| ());
            assert_eq!(checked, Ok(()), "{}", f.name);
        }
        let third_party = all.iter().filter(|f| !f.own).count();
        assert!(
            all.len() - third_party >= 9,
            "repository fixtures: {}",
            all.len()
        );
        assert!(
            crate::fixtures::third_party_dir().is_none() || third_party >= 20,
            "third-party fixtures found: {third_party}"
        );
    }

    #[test]
    fn a_persons_own_patterns_are_masked_too_and_lengths_hold() {
        let extra = Extra::new(&["ACME-[0-9]{6}".to_owned(), "project bluebird".to_owned()])
            .unwrap_or_else(|e| panic!("{e}"));
        let line =
            r#"{"message":{"content":"ticket ACME-123456 for project bluebird, see ACME-12"}}"#;
        let input = format!("{line}\n");
        let out = redact_with(input.clone().into_bytes(), Lines::Json, &extra);
        assert_eq!(out.text.len(), input.len());
        assert!(!out.text.contains("ACME-123456"), "{}", out.text);
        assert!(!out.text.contains("bluebird"), "{}", out.text);
        assert!(
            out.text.contains("ACME-12\""),
            "a near miss stays: {}",
            out.text
        );
        assert!(serde_json::from_str::<serde_json::Value>(out.text.trim()).is_ok());
        assert_eq!(out.counts.get("custom"), Some(&2));
        assert_eq!(redact_jsonl(input.into_bytes()).counts.get("custom"), None);
        for bad in ["(", ""] {
            assert!(Extra::new(&[bad.to_owned()]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn text_lines_are_masked_whole_and_stay_text() {
        let extra = Extra::new(&["ACME-[0-9]{6}".to_owned()]).unwrap_or_else(|e| panic!("{e}"));
        let input = concat!(
            "#### deploy with OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD  \n",
            "> Applied edit to src/main.rs  \n",
            "\n",
            "Ticket ACME-123456 is \"done\".\n",
        );
        let out = redact_with(input.as_bytes().to_vec(), Lines::Text, &extra);
        assert_eq!(out.text.len(), input.len());
        assert!(!out.text.contains("sk-proj-abc"), "{}", out.text);
        assert!(!out.text.contains("ACME-123456"), "{}", out.text);
        assert!(
            out.text.starts_with("#### deploy with OPENAI_API_KEY="),
            "{}",
            out.text
        );
        assert!(
            out.text
                .contains("> Applied edit to src/main.rs  \n\nTicket "),
            "text without secrets is kept as written: {}",
            out.text
        );
        assert!(out.text.contains("is \"done\".\n"), "{}", out.text);
        assert_eq!(out.counts.get("invalid_json_lines"), None);
        assert_eq!(out.counts.get("custom"), Some(&1));
    }
}
