//! `kith web`: the web page, signed in: a one-time link from central
//! (`POST /api/web/link`) opened in the browser without the token ever
//! showing in a process list, or printed.

use std::io::Write as _;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::client::Client;

/// `kith web`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct WebArgs {
    /// Print the link instead of opening it.
    #[arg(long)]
    print: bool,
}

pub(crate) fn run(args: WebArgs, client: &Client) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let link: kith_proto::SignInLink = client.json(client.post("/api/web/link"))?;
    let url = client.link(&link.path);
    if args.print || open_in_browser(&url).is_err() {
        writeln!(stdout, "{url}")?;
        writeln!(stdout, "works once, until {}", link.expires_at)?;
    }
    Ok(())
}

/// Opens `url` in the desktop's browser (`xdg-open`, or `open` on macOS).
/// The link holds a token, which must not show in a process list: the
/// opener gets a private file (0600, removed when kith exits, once the
/// browser had time to read it) that redirects to it.
fn open_in_browser(url: &str) -> Result<()> {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let page = tempfile::Builder::new()
        .prefix("kith-web-")
        .suffix(".html")
        .tempfile()?;
    let html = format!(
        "<!doctype html><meta http-equiv=\"refresh\" content=\"0;url={}\">",
        url.replace('&', "&amp;").replace('"', "&quot;")
    );
    std::fs::write(page.path(), html)?;
    let status = std::process::Command::new(opener)
        .arg(page.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .with_context(|| format!("cannot run {opener}"))?;
    if !status.success() {
        bail!("{opener} failed");
    }
    // The browser reads the file after the opener returns.
    std::thread::sleep(Duration::from_secs(3));
    Ok(())
}
