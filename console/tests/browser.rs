//! The console in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`), driven through WebDriver's HTTP API by the small client of
//! `common`. The page loads with its token, shows a signal sent with the CLI without a
//! reload, sends a PAUSE by a click, answers a request asked with the CLI by a click (the
//! blocked `sigbox ask` wakes with the choice and the message typed), and shows hostile
//! messages as text that never runs.
//! Screenshots (desktop and phone widths) are saved in the test's temporary directory, and in
//! `$SIGBOX_SCREENSHOTS` when set (`docs/` keeps the README's). Without Chromium or its
//! driver the test says what it skipped and passes: it installs nothing (`.ci/run` does).

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use common::{Ui, mailbox, send_cli, sigbox};
use serde_json::{Value, json};

/// Chromium and its driver where Debian installs them (or `$SIGBOX_CHROMIUM`,
/// `$SIGBOX_CHROMEDRIVER`).
fn browser() -> Option<(PathBuf, PathBuf)> {
    let find = |var: &str, names: &[&str]| -> Option<PathBuf> {
        if let Some(p) = std::env::var_os(var) {
            return Some(PathBuf::from(p));
        }
        names
            .iter()
            .flat_map(|n| ["/usr/bin", "/usr/local/bin", "/snap/bin"].map(|d| Path::new(d).join(n)))
            .find(|p| p.exists())
    };
    Some((
        find(
            "SIGBOX_CHROMIUM",
            &["chromium", "chromium-browser", "google-chrome"],
        )?,
        find("SIGBOX_CHROMEDRIVER", &["chromedriver"])?,
    ))
}

/// A chromedriver process and one session, ended when dropped.
struct Driver {
    child: Child,
    port: u16,
    session: String,
}

impl Driver {
    fn start(chromium: &Path, driver: &Path, profile: &Path) -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let mut d = Driver {
            child,
            port,
            session: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver does not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1700",
                         "--hide-scrollbars", "--force-device-scale-factor=1",
                         format!("--user-data-dir={}", profile.display())],
            },
        }}});
        let v = d.call("POST", "/session", Some(caps));
        d.session = v["sessionId"].as_str().expect("a session").to_string();
        d
    }

    /// A WebDriver command; its `value`.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, v, text) = self.try_call(method, path, body);
        assert_eq!(status, 200, "{method} {path}: {text}");
        v["value"].clone()
    }

    /// A WebDriver command: its status, its body as JSON, and as sent.
    fn try_call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value, String) {
        let body = body.map(|b| b.to_string());
        let r = common::http(
            self.port,
            method,
            path,
            &[("Content-Type".into(), "application/json".into())],
            Some(
                body.as_deref()
                    .unwrap_or(if method == "POST" { "{}" } else { "" }),
            ),
            Some(&format!("127.0.0.1:{}", self.port)),
        );
        let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        (r.status, v, r.body)
    }

    fn session(&self, method: &str, rest: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}{rest}", self.session), body)
    }

    fn go(&self, url: &str) {
        self.session("POST", "/url", Some(json!({"url": url})));
    }

    /// Runs `script` in the page; what it returns.
    fn run(&self, script: &str) -> Value {
        self.session(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    /// Waits until `script` returns true.
    fn until(&self, what: &str, script: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.run(script) != Value::Bool(true) {
            assert!(Instant::now() < deadline, "timed out waiting: {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The WebDriver id of the element `css` selects.
    fn element(&self, css: &str) -> String {
        let e = self.session(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        e.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .expect("the element")
            .to_string()
    }

    /// Clicks the element `css` selects. The page draws its cards again on every change it
    /// is sent: an element found just before one is gone by the click ("stale element
    /// reference"), and is found again, as a person's second look would.
    fn click(&self, css: &str) {
        for _ in 0..20 {
            let id = self.element(css);
            let path = format!("/session/{}/element/{id}/click", self.session);
            let (status, v, text) = self.try_call("POST", &path, None);
            if status == 200 {
                return;
            }
            assert_eq!(
                v["value"]["error"], "stale element reference",
                "POST {path}: {text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{css}: drawn again on every look");
    }

    /// Types `text` into the element `css` selects, key by key.
    fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css);
        self.session(
            "POST",
            &format!("/element/{id}/value"),
            Some(json!({"text": text})),
        );
    }

    fn screenshot(&self, to: &Path) {
        let b64 = self.session("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        std::fs::write(to, png).unwrap();
    }

    fn resize(&self, w: u32, h: u32) {
        self.session(
            "POST",
            "/window/rect",
            Some(json!({"width": w, "height": h})),
        );
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = common::http(
                self.port,
                "DELETE",
                &format!("/session/{}", self.session),
                &[],
                None,
                Some(&format!("127.0.0.1:{}", self.port)),
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A mailbox with some history: deliveries with their latency, a broadcast half acked, a
/// PAUSE, a quarantined file.
fn history(root: &Path) {
    send_cli(
        root,
        &[
            "steer",
            "prefer the v2 API",
            "--target",
            "Executor",
            "--from",
            "alice",
        ],
    );
    send_cli(
        root,
        &["info", "tests are green on main", "--target", "Reviewer"],
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(sigbox(root, &["poll", "--as", "Executor"]).status.success());
    send_cli(root, &["info", "release freeze at 17:00", "--from", "ops"]);
    std::thread::sleep(Duration::from_millis(200));
    assert!(sigbox(root, &["poll", "--as", "Reviewer"]).status.success());
    assert!(sigbox(root, &["poll", "--as", "Planner"]).status.success());
    send_cli(
        root,
        &[
            "pause",
            "waiting for the schema review",
            "--target",
            "Planner",
        ],
    );
    send_cli(
        root,
        &["steer", "split the migration in two", "--target", "Planner"],
    );
    std::fs::write(root.join("inputs").join("notes.yaml"), "type: [unclosed\n").unwrap();
    assert!(
        sigbox(root, &["poll", "--as", "Orchestrator"])
            .status
            .success()
    );
}

#[test]
fn the_page_in_a_real_browser() {
    let Some((chromium, driver)) = browser() else {
        eprintln!(
            "SKIPPED the_page_in_a_real_browser: chromium and chromedriver are not installed \
             (apt-get install chromium chromium-driver; .ci/run does it as root)"
        );
        return;
    };
    let (dir, root) = mailbox();
    history(&root);
    // A Reviewer waiting at its checkpoint holds its presence.
    let mut waiter = Command::new(common::sigbox_bin())
        .arg("--root")
        .arg(&root)
        .args(["wait", "--as", "Reviewer", "--timeout", "120s"])
        .env("SIGBOX_DURABILITY", "relaxed")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ui = Ui::start(&[&root], &[]);
    let profile = dir.path().join("profile");
    let d = Driver::start(&chromium, &driver, &profile);

    // The page, with its token: traded for the cookie, and gone from the address.
    d.go(&ui.url);
    let here = d.session("GET", "/url", None);
    assert_eq!(
        here,
        json!(format!("{}/", ui.origin())),
        "the token left the address"
    );
    d.until(
        "the events stream",
        "return document.getElementById('live').textContent === 'live'",
    );
    d.until(
        "the agents",
        "return !!document.querySelector('.agent[data-agent=\"Executor\"]')",
    );
    d.run("window.__sameLoad = 42; return true");
    d.until(
        "the Reviewer present",
        "return !!document.querySelector('.agent.present[data-agent=\"Reviewer\"]')",
    );

    // A signal sent with the CLI appears without a reload; hostile text stays text.
    let hostile = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>";
    let id = send_cli(
        &root,
        &[
            "steer",
            hostile,
            "--target",
            "Executor",
            "--from",
            "<b>mallory</b>",
        ],
    );
    d.until(
        "the CLI's signal on the page",
        &format!("return !!document.querySelector('#pending li[data-id=\"{id}\"]')"),
    );
    let shown = d.run(&format!(
        "const li = document.querySelector('#pending li[data-id=\"{id}\"]'); \
         return [li.querySelector('.message').textContent, li.querySelectorAll('img,script,b').length, \
                 window.__sameLoad, window.__pwned === undefined]"
    ));
    assert_eq!(
        shown,
        json!([hostile, 0, 42, true]),
        "shown as text, no reload, nothing ran"
    );
    // Its type on the timeline, drawn.
    d.until(
        "the timeline row",
        &format!("return !!document.querySelector('#timeline g[data-id=\"{id}\"] circle')"),
    );

    // A PAUSE by a click.
    d.click(".agent[data-agent=\"Executor\"] button[data-action=\"PAUSE\"]");
    d.until(
        "the PAUSE sent",
        "return document.getElementById('send-result').textContent.startsWith('sent PAUSE')",
    );
    let ls = sigbox(&root, &["ls", "--json"]);
    let paused = String::from_utf8(ls.stdout).unwrap();
    assert!(
        paused.lines().any(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["type"] == "PAUSE" && v["target"] == "Executor"
        }),
        "{paused}"
    );
    d.until(
        "the PAUSE on the page",
        "return [...document.querySelectorAll('#pending li .type')].some(e => e.textContent === 'PAUSE' && e.parentNode.textContent.includes('Executor'))",
    );
    assert_eq!(d.run("return window.__pwned === undefined"), json!(true));

    // A request asked with the CLI appears without a reload, its hostile text as text.
    let question = "deploy <img src=x onerror=\"window.__pwned=3\"> to prod?";
    let mut asker = Command::new(common::sigbox_bin())
        .arg("--root")
        .arg(&root)
        .args([
            "ask",
            "--as",
            "Executor",
            "--key",
            "deploy-42",
            "--to",
            "alice",
            "--timeout",
            "600s",
            question,
        ])
        .env("SIGBOX_DURABILITY", "relaxed")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ask = "#asks li[data-ask=\"Executor.deploy-42\"]";
    d.until(
        "the CLI's request on the page",
        &format!("return !!document.querySelector('{ask}')"),
    );
    let shown = d.run(&format!(
        "const li = document.querySelector('{ask}'); \
         return [li.querySelector('.message').textContent, li.querySelectorAll('img,script').length, \
                 [...li.querySelectorAll('button[data-choice]')].map(b => b.textContent), \
                 li.querySelector('.deadline').textContent.startsWith('deadline in'), \
                 window.__sameLoad, window.__pwned === undefined]"
    ));
    assert_eq!(
        shown,
        json!([question, 0, ["approve", "deny"], true, 42, true]),
        "the request shown as text, with its choices and its deadline, no reload"
    );
    // One answered from the CLI leaves the open list, shown answered.
    let other = String::from_utf8(
        sigbox(
            &root,
            &[
                "ask",
                "--as",
                "Planner",
                "--no-wait",
                "split the migration?",
            ],
        )
        .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    d.until(
        "the second request",
        &format!("return !!document.querySelector('#asks li[data-ask=\"{other}\"]')"),
    );
    let out = sigbox(&root, &["answer", &other, "deny", "--from", "bob"]);
    assert!(out.status.success(), "{out:?}");
    d.until(
        "the CLI's answer on the page",
        &format!(
            "return !document.querySelector('#asks li[data-ask=\"{other}\"]') && \
             !!document.querySelector('#asks-closed li[data-ask=\"{other}\"]')"
        ),
    );
    // Answered by a click, with a message typed (hostile too): the blocked ask wakes with them.
    let said = "ship it <script>window.__pwned=4</script>";
    d.type_into("#answer-as", "alice");
    d.type_into(&format!("{ask} textarea"), said);
    // What is typed survives the page's refreshes (a change meanwhile redraws the state).
    let meanwhile = send_cli(&root, &["info", "meanwhile", "--target", "Planner"]);
    d.until(
        "a change while typing",
        &format!("return !!document.querySelector('#pending li[data-id=\"{meanwhile}\"]')"),
    );
    assert_eq!(
        d.run(&format!(
            "return document.querySelector('{ask} textarea').value"
        )),
        json!(said),
        "the typed message was kept"
    );
    d.click(&format!("{ask} button[data-choice=\"approve\"]"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while asker.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the ask was not answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = asker.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "approve");
    let told = String::from_utf8(out.stderr).unwrap();
    assert!(
        told.contains("by alice") && told.contains(said),
        "the asker got the message: {told}"
    );
    let closed = "#asks-closed li[data-ask=\"Executor.deploy-42\"]";
    d.until(
        "the answer on the page",
        &format!("return !!document.querySelector('{closed}') && !document.querySelector('{ask}')"),
    );
    let shown = d.run(&format!(
        "const li = document.querySelector('{closed}'); \
         return [li.querySelector('.said').textContent, li.querySelectorAll('img,script').length, \
                 li.textContent.includes('by alice'), window.__pwned === undefined]"
    ));
    assert_eq!(shown, json!([said, 0, true, true]));
    // A deadline passing with no one to record the expiry (no event): the countdown reaches
    // it and the page reads the state again, which shows it expired.
    let soon = String::from_utf8(
        sigbox(
            &root,
            &[
                "ask",
                "--as",
                "Planner",
                "--no-wait",
                "--timeout",
                "3s",
                "quick?",
            ],
        )
        .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    d.until(
        "the short request",
        &format!("return !!document.querySelector('#asks li[data-ask=\"{soon}\"]')"),
    );
    d.until(
        "the short request expired",
        &format!(
            "return !document.querySelector('#asks li[data-ask=\"{soon}\"]') && \
             !!document.querySelector('#asks-closed li[data-ask=\"{soon}\"] .st-expired')"
        ),
    );
    // One left open for the screenshots.
    let mut ask_left = vec!["ask", "--as", "Reviewer", "--no-wait", "--timeout", "45m"];
    ask_left.extend(["--choices", "approve,deny,later"]);
    ask_left.push("merge PR 1432 with two failing flaky tests?");
    assert!(sigbox(&root, &ask_left).status.success());
    d.until(
        "the request left open",
        "return document.querySelectorAll('#asks li[data-ask]').length === 1",
    );

    // Screenshots: desktop, then a phone's width.
    let shots = std::env::var_os("SIGBOX_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.path().to_path_buf());
    std::fs::create_dir_all(&shots).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    d.screenshot(&shots.join("console.png"));
    d.resize(390, 1700);
    std::thread::sleep(Duration::from_millis(500));
    let narrow = d.run("return document.documentElement.scrollWidth <= window.innerWidth + 1");
    d.screenshot(&shots.join("console-phone.png"));
    assert_eq!(narrow, json!(true), "nothing wider than a phone's screen");
    eprintln!("screenshots in {}", shots.display());
    let _ = waiter.kill();
    let _ = waiter.wait();
}
