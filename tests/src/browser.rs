//! A real headless Chromium driven over WebDriver: Debian's `chromium` and
//! `chromium-driver` (tests/run.sh installs them), spoken to as plain HTTP
//! JSON with the blocking client the tests already use. No browser is
//! downloaded; a missing one fails the test with how to install it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The W3C key of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A running chromedriver; each [`Browser`] is one session of it.
pub struct Driver {
    url: String,
    child: Child,
    http: reqwest::blocking::Client,
}

impl Driver {
    /// Starts chromedriver on a free loopback port and waits until it is
    /// ready.
    pub fn start() -> Result<Self> {
        for path in [CHROMIUM, CHROMEDRIVER] {
            if !Path::new(path).exists() {
                bail!(
                    "{path} is missing: the web test drives a real Chromium. Install it with \
                     `sudo apt-get install -y chromium chromium-driver` (tests/run.sh does)"
                );
            }
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start chromedriver")?;
        let driver = Self {
            url: format!("http://127.0.0.1:{port}"),
            child,
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()?,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = driver
                .http
                .get(format!("{}/status", driver.url))
                .send()
                .ok()
                .and_then(|r| r.json::<Value>().ok())
                .is_some_and(|v| v["value"]["ready"] == true);
            if ready {
                return Ok(driver);
            }
            if Instant::now() > deadline {
                bail!("chromedriver did not become ready within 20 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A new headless browser with its own fresh profile in `profile`.
    pub fn browser(&self, profile: &Path) -> Result<Browser<'_>> {
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1024,900",
        ]
        .map(str::to_owned)
        .into_iter()
        .chain([format!("--user-data-dir={}", profile.display())])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "unhandledPromptBehavior": "accept",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
        }}});
        let res = self.call("POST", "/session", Some(caps))?;
        let id = res["sessionId"]
            .as_str()
            .context("no session id from chromedriver")?
            .to_owned();
        Ok(Browser { driver: self, id })
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let url = format!("{}{path}", self.url);
        let req = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body.unwrap_or_else(|| json!({}))),
        };
        let res = req
            .send()
            .with_context(|| format!("webdriver {method} {path}"))?;
        let status = res.status();
        let value: Value = res.json()?;
        if !status.is_success() {
            bail!("webdriver {method} {path}: {status} {}", value["value"]);
        }
        Ok(value["value"].clone())
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One browser window (a WebDriver session).
pub struct Browser<'d> {
    driver: &'d Driver,
    id: String,
}

/// A cookie as the browser holds it.
#[derive(Debug)]
pub struct Cookie {
    pub name: String,
    pub value: String,
    pub http_only: bool,
    pub secure: bool,
    pub same_site: String,
}

impl Browser<'_> {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        self.driver
            .call(method, &format!("/session/{}{path}", self.id), body)
    }

    pub fn goto(&self, url: &str) -> Result<()> {
        self.call("POST", "/url", Some(json!({ "url": url })))?;
        Ok(())
    }

    pub fn url(&self) -> Result<String> {
        Ok(self
            .call("GET", "/url", None)?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// The page's visible text.
    pub fn text(&self) -> Result<String> {
        self.text_of("body")
    }

    /// The visible text of the first element matching `css`.
    pub fn text_of(&self, css: &str) -> Result<String> {
        let el = self.find(css)?;
        Ok(self
            .call("GET", &format!("/element/{el}/text"), None)?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// Whether an element matches `css` on this page.
    pub fn has(&self, css: &str) -> Result<bool> {
        Ok(self.count(css)? > 0)
    }

    /// How many elements match `css` on this page.
    pub fn count(&self, css: &str) -> Result<usize> {
        let found = self.call(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        )?;
        Ok(found.as_array().map_or(0, Vec::len))
    }

    fn find(&self, css: &str) -> Result<String> {
        let found = self
            .call(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .with_context(|| format!("no element {css:?} on {}", self.url().unwrap_or_default()))?;
        found[ELEMENT]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("element {css:?} without a reference: {found}"))
    }

    /// Waits (up to 10 s) until an element matches `css`: the page a click
    /// navigated to has loaded.
    pub fn wait(&self, css: &str) -> Result<()> {
        self.wait_text(css, "")
    }

    /// Waits (up to 10 s) until the first element matching `css` shows
    /// `needle`.
    pub fn wait_text(&self, css: &str, needle: &str) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.has(css)? && self.text_of(css).is_ok_and(|t| t.contains(needle)) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "no {css:?} showing {needle:?} within 10 s on {}: {}",
                    self.url()?,
                    self.text().unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types into the field matching `css` (after clearing it).
    pub fn fill(&self, css: &str, text: &str) -> Result<()> {
        let el = self.find(css)?;
        self.call("POST", &format!("/element/{el}/clear"), None)?;
        self.call(
            "POST",
            &format!("/element/{el}/value"),
            Some(json!({ "text": text })),
        )?;
        Ok(())
    }

    pub fn click(&self, css: &str) -> Result<()> {
        let el = self.find(css)?;
        self.call("POST", &format!("/element/{el}/click"), None)?;
        Ok(())
    }

    /// Presses a key on the page (e.g. "/") with nothing focused.
    pub fn key(&self, key: &str) -> Result<()> {
        let actions = json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
            {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]});
        self.call("POST", "/actions", Some(actions))?;
        Ok(())
    }

    /// The id of the focused element.
    pub fn focused_id(&self) -> Result<String> {
        let el = self.call("GET", "/element/active", None)?;
        let el = el[ELEMENT].as_str().context("nothing focused")?.to_owned();
        Ok(self
            .call("GET", &format!("/element/{el}/attribute/id"), None)?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    pub fn cookies(&self) -> Result<Vec<Cookie>> {
        let all = self.call("GET", "/cookie", None)?;
        Ok(all
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| Cookie {
                name: c["name"].as_str().unwrap_or_default().to_owned(),
                value: c["value"].as_str().unwrap_or_default().to_owned(),
                http_only: c["httpOnly"] == true,
                secure: c["secure"] == true,
                same_site: c["sameSite"].as_str().unwrap_or_default().to_owned(),
            })
            .collect())
    }

    /// Writes a PNG of the page to `path`.
    pub fn screenshot(&self, path: &PathBuf) -> Result<()> {
        let b64 = self.call("GET", "/screenshot", None)?;
        let bytes = decode_base64(b64.as_str().unwrap_or_default())?;
        std::fs::write(path, bytes)?;
        Ok(())
    }
}

impl Drop for Browser<'_> {
    fn drop(&mut self) {
        let _ = self
            .driver
            .call("DELETE", &format!("/session/{}", self.id), None);
    }
}

/// Standard base64 (what WebDriver screenshots are), without a crate.
fn decode_base64(s: &str) -> Result<Vec<u8>> {
    let value = |c: u8| -> Result<u32> {
        Ok(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => bail!("not base64: {c}"),
        } as u32)
    };
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let clean: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    for chunk in clean.chunks(4) {
        let data: Vec<u8> = chunk.iter().copied().filter(|&b| b != b'=').collect();
        let mut n = 0u32;
        for (i, &b) in data.iter().enumerate() {
            n |= value(b)? << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..data.len().max(1)]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_decodes() {
        let cases: [(&str, &[u8]); 4] =
            [("", b""), ("TQ==", b"M"), ("TWE=", b"Ma"), ("TWFu", b"Man")];
        for (input, want) in cases {
            assert_eq!(
                super::decode_base64(input).unwrap_or_default(),
                want,
                "{input}"
            );
        }
    }
}
