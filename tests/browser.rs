//! The pages in a real browser: Debian's `chromium`, headless, loads `report.html` and
//! `history.html` from disk with the network off; the page's script must run without a
//! console error and mark its charts drawn, and a screenshot is taken. A missing chromium
//! fails the test with the command that installs it: nothing is skipped.

use std::path::Path;
use std::process::Command;

const CHROMIUM: &str = "/usr/bin/chromium";

pub struct Page {
    /// The DOM after the script ran.
    pub dom: String,
    /// Chromium's log (console messages included).
    pub log: String,
}

fn chromium(profile: &Path) -> Command {
    assert!(
        Path::new(CHROMIUM).is_file(),
        "Debian's chromium is not installed ({CHROMIUM}): `apt-get install -y chromium` (as root)"
    );
    let mut c = Command::new(CHROMIUM);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// Loads `page` and returns its DOM and log; writes a screenshot to `screenshot`.
pub fn open(page: &Path, screenshot: &Path) -> Page {
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}", page.display());
    let out = chromium(profile.path())
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shot = chromium(profile.path())
        .arg("--window-size=1200,1600")
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        shot.status.success(),
        "chromium: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    Page {
        dom: String::from_utf8_lossy(&out.stdout).into_owned(),
        log: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every console message in a chromium log (uncaught exceptions, `console.error`, any
/// other): servebench's pages write none.
pub fn console_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(":CONSOLE") || l.contains("Uncaught"))
        .collect()
}

/// The number the page's `#sb-ready` marker says were drawn (None: the script did not run).
pub fn charts_drawn(dom: &str) -> Option<usize> {
    let at = dom.find("data-charts-drawn=\"")? + "data-charts-drawn=\"".len();
    dom[at..].split('"').next()?.parse().ok()
}
