//! The console's API from outside: every refusal of spec/console.md "Security", `/api/send`
//! against `sigbox send` (the same signal, the same refusals word for word), `/api/state`, and
//! `/api/events` pushing what the CLI sends.

mod common;

use std::time::Duration;

use common::{Events, Ui, mailbox, names, send_cli, sigbox};

fn h(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

#[test]
fn the_token_is_long_random_and_printed_first() {
    let (_d, root) = mailbox();
    let a = Ui::start(&[&root], &[]);
    let b = Ui::start(&[&root], &[]);
    for ui in [&a, &b] {
        assert_eq!(ui.token.len(), 64, "{}", ui.url);
        assert!(ui.token.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(ui.url.starts_with("http://127.0.0.1:"));
    }
    assert_ne!(a.token, b.token);
}

#[test]
fn requests_without_the_token_are_refused() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    for path in [
        "/",
        "/app.js",
        "/api/state",
        "/api/events",
        "/api/signals/x",
    ] {
        let r = ui.request("GET", path, &[], None);
        assert_eq!(r.status, 401, "{path}: {r:?}");
        assert!(r.header("www-authenticate").is_some());
    }
    let wrong = "0".repeat(64);
    for headers in [
        vec![h("Authorization", &format!("Bearer {wrong}"))],
        vec![h("Authorization", "Bearer ")],
        vec![h("Cookie", &format!("sigbox_console_{}={wrong}", ui.port))],
        // Another console's cookie (another port) is not this one's.
        vec![h("Cookie", &format!("sigbox_console_1={}", ui.token))],
    ] {
        let r = ui.request("GET", "/api/state", &headers, None);
        assert!(matches!(r.status, 401 | 403), "{headers:?}: {r:?}");
    }
    let r = ui.request("GET", &format!("/?token={wrong}"), &[], None);
    assert_eq!(r.status, 403);
    // A token one character short, or with one more, is wrong too.
    let short = &ui.token[..63];
    let r = ui.request(
        "GET",
        "/api/state",
        &[h("Authorization", &format!("Bearer {short}"))],
        None,
    );
    assert_eq!(r.status, 403);
    // A refused send wrote nothing.
    let r = ui.request(
        "POST",
        "/api/send",
        &[h("Content-Type", "application/json")],
        Some(r#"{"type":"ABORT"}"#),
    );
    assert_eq!(r.status, 401);
    assert!(names(&root.join("inputs")).is_empty());
}

#[test]
fn the_page_trades_the_token_for_a_strict_http_only_cookie() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let r = ui.request("GET", &format!("/?token={}", ui.token), &[], None);
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(r.header("location"), Some("/"));
    let cookie = r.header("set-cookie").unwrap();
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    let pair = cookie.split(';').next().unwrap().to_string();
    let page = ui.request("GET", "/", &[h("Cookie", &pair)], None);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<script src=\"/app.js\""));
    assert!(!page.body.contains("<script>"), "no inline script");
    let js = ui.request("GET", "/app.js", &[h("Cookie", &pair)], None);
    assert_eq!(js.status, 200);
    assert!(
        js.header("content-type")
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(
        !js.body.contains("innerHTML"),
        "the page never writes HTML from data"
    );
    let state = ui.request("GET", "/api/state", &[h("Cookie", &pair)], None);
    assert_eq!(state.status, 200);
}

#[test]
fn every_answer_carries_the_security_headers() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    for r in [
        ui.request("GET", "/api/state", &[], None),
        ui.get("/api/state"),
        ui.get("/"),
        ui.get("/nowhere"),
        ui.request("GET", "/", &[h("Host", "evil.example")], None),
    ] {
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(csp.contains("default-src 'self'"), "{r:?}");
        assert!(csp.contains("frame-ancestors 'none'"), "{r:?}");
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("x-frame-options"), Some("DENY"));
    }
}

#[test]
fn another_host_is_refused_even_with_the_token() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let port = ui.port;
    for host in [
        format!("evil.example:{port}"),
        "evil.example".to_string(),
        format!("127.0.0.1:{}", port.wrapping_add(1)),
        format!("localhost.evil.example:{port}"),
        String::new(),
    ] {
        let r = ui.request("GET", "/api/state", &[ui.bearer(), h("Host", &host)], None);
        assert_eq!(r.status, 403, "{host}: {r:?}");
        let r = ui.request(
            "GET",
            &format!("/?token={}", ui.token),
            &[h("Host", &host)],
            None,
        );
        assert_eq!(r.status, 403, "{host}: {r:?}");
        assert!(r.header("set-cookie").is_none());
    }
    // Two Host headers, or a request line in absolute form naming another host.
    let r = ui.request(
        "GET",
        "/api/state",
        &[
            ui.bearer(),
            h("Host", &ui.host()),
            h("Host", &format!("evil.example:{port}")),
        ],
        None,
    );
    assert!(matches!(r.status, 400 | 403), "{r:?}");
    let r = ui.request("GET", "http://evil.example/api/state", &[ui.bearer()], None);
    assert_eq!(r.status, 403, "{r:?}");
    let r = ui.request(
        "GET",
        &format!("http://{}/api/state", ui.host()),
        &[ui.bearer()],
        None,
    );
    assert_eq!(r.status, 200, "{r:?}");
    for host in [format!("localhost:{port}"), format!("LOCALHOST:{port}")] {
        let r = ui.request("GET", "/api/state", &[ui.bearer(), h("Host", &host)], None);
        assert_eq!(r.status, 200, "{host}: {r:?}");
    }
}

#[test]
fn cross_origin_changes_are_refused_and_send_nothing() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let cookie = h(
        "Cookie",
        &format!("sigbox_console_{}={}", ui.port, ui.token),
    );
    let json = h("Content-Type", "application/json");
    let body = Some(r#"{"type":"ABORT","target":"ALL"}"#);
    let refused = [
        // A page of another site posting with the person's cookie.
        vec![
            cookie.clone(),
            json.clone(),
            h("Origin", "http://evil.example"),
        ],
        vec![cookie.clone(), json.clone(), h("Origin", "null")],
        vec![
            cookie.clone(),
            json.clone(),
            h("Origin", &format!("http://127.0.0.1:{}", ui.port + 1)),
        ],
        // With the cookie alone and no Origin: not a request a script of ours makes.
        vec![cookie.clone(), json.clone()],
        // The right Origin, but the browser says another site made it.
        vec![
            cookie.clone(),
            json.clone(),
            h("Origin", &ui.origin()),
            h("Sec-Fetch-Site", "cross-site"),
        ],
        // Even a script's bearer token does not make another origin's request good.
        vec![
            ui.bearer(),
            json.clone(),
            h("Origin", "http://evil.example"),
        ],
    ];
    for headers in refused {
        let r = ui.request("POST", "/api/send", &headers, body);
        assert_eq!(r.status, 403, "{headers:?}: {r:?}");
    }
    // A form post (no JSON) is refused before anything is read.
    let r = ui.request(
        "POST",
        "/api/send",
        &[ui.bearer(), h("Content-Type", "text/plain")],
        body,
    );
    assert_eq!(r.status, 415);
    assert!(names(&root.join("inputs")).is_empty(), "nothing was sent");
    // The page's own request passes.
    let r = ui.request(
        "POST",
        "/api/send",
        &[
            cookie,
            json,
            h("Origin", &ui.origin()),
            h("Sec-Fetch-Site", "same-origin"),
        ],
        body,
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(names(&root.join("inputs")).len(), 1);
}

#[test]
fn a_path_in_an_id_is_refused() {
    let (d, root) = mailbox();
    std::fs::write(
        d.path().join("secret.json"),
        r#"{"type":"STEER","message":"secret"}"#,
    )
    .unwrap();
    let ui = Ui::start(&[&root], &[]);
    for id in [
        "..%2Fsecret",
        "..%2F..%2Fsecret",
        "%2Fetc%2Fpasswd",
        "a%2F..%2F..%2Fsecret",
        "..",
        ".hidden",
        "a%00b",
        "a%5Cb",
    ] {
        let r = ui.get(&format!("/api/signals/{id}"));
        assert_eq!(r.status, 400, "{id}: {r:?}");
        assert!(
            r.json()["error"].as_str().unwrap().contains("invalid id"),
            "{r:?}"
        );
        assert!(!r.body.contains("secret\""), "{r:?}");
    }
    // A real id is found; one that is not there is not.
    let id = send_cli(&root, &["info", "hello", "--target", "Executor"]);
    let r = ui.get(&format!("/api/signals/{id}"));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["message"], "hello");
    assert_eq!(ui.get("/api/signals/nothing-here").status, 404);
    assert_eq!(ui.get(&format!("/api/signals/{id}?root=7")).status, 400);
}

/// What `sigbox send` says on stderr for these arguments, without `sigbox: `.
fn cli_refusal(root: &std::path::Path, args: &[&str]) -> String {
    let mut all = vec!["send"];
    all.extend_from_slice(args);
    let out = sigbox(root, &all);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    err.trim().strip_prefix("sigbox: ").unwrap().to_string()
}

#[test]
fn bad_sends_are_refused_with_the_cli_s_words() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let long = "A".repeat(65);
    let cases: Vec<(Vec<&str>, serde_json::Value)> = vec![
        (vec!["bogus"], serde_json::json!({"type": "bogus"})),
        (
            vec!["steer", "m", "--target", ""],
            serde_json::json!({"type": "steer", "message": "m", "target": ""}),
        ),
        (
            vec!["steer", "m", "--target", "../x"],
            serde_json::json!({"type": "steer", "message": "m", "target": "../x"}),
        ),
        (
            vec!["steer", "m", "--target", "a/b"],
            serde_json::json!({"type": "steer", "message": "m", "target": "a/b"}),
        ),
        (
            vec!["steer", "m", "--target", "9lives"],
            serde_json::json!({"type": "steer", "message": "m", "target": "9lives"}),
        ),
        (
            vec!["steer", "m", "--target", &long],
            serde_json::json!({"type": "steer", "message": "m", "target": long}),
        ),
        (
            vec!["steer", "m", "--target", "none"],
            serde_json::json!({"type": "steer", "message": "m", "target": "none"}),
        ),
        (
            vec!["steer", "m", "--from", " "],
            serde_json::json!({"type": "steer", "message": "m", "from": " "}),
        ),
    ];
    for (args, body) in cases {
        let want = cli_refusal(&root, &args);
        let r = ui.send(&body.to_string());
        assert_eq!(r.status, 400, "{body}: {r:?}");
        assert_eq!(r.json()["error"].as_str().unwrap(), want, "{body}");
    }
    // Too large for the cap: the library's refusal, as the CLI says it.
    let big = "x".repeat(1 << 20);
    let want = {
        use std::io::Write;
        let mut child = std::process::Command::new(common::sigbox_bin())
            .arg("--root")
            .arg(&root)
            .args(["send", "info", "-"])
            .env("SIGBOX_DURABILITY", "relaxed")
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(big.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8(out.stderr).unwrap();
        err.trim().strip_prefix("sigbox: ").unwrap().to_string()
    };
    let r = ui.send(&serde_json::json!({"type": "info", "message": big}).to_string());
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"].as_str().unwrap(), want);
    assert!(names(&root.join("inputs")).is_empty(), "nothing was sent");
}

#[test]
fn a_send_makes_the_signal_the_cli_makes() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let cli = send_cli(
        &root,
        &["steer", "use v2", "--target", "executor", "--from", "ops"],
    );
    let r = ui.send(r#"{"type":"steer","message":"use v2","target":"executor","from":"ops"}"#);
    assert_eq!(r.status, 200, "{r:?}");
    let api = r.json()["id"].as_str().unwrap().to_string();
    let read = |id: &str| -> serde_json::Map<String, serde_json::Value> {
        let b = std::fs::read(root.join("inputs").join(format!("{id}.json"))).unwrap();
        serde_json::from_slice(&b).unwrap()
    };
    let (mut a, mut b) = (read(&cli), read(&api));
    assert!(api.ends_with(".STEER.Executor"), "{api}");
    for k in ["id", "created_at"] {
        assert!(a.remove(k).is_some() && b.remove(k).is_some(), "{k}");
    }
    assert_eq!(a, b);
    // No target field is ALL, as `sigbox send` without --target; null is --no-target.
    let all = ui.send(r#"{"type":"info","message":"hi"}"#).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(all.ends_with(".INFO.ALL"), "{all}");
    let none = ui.send(r#"{"type":"info","target":null}"#).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let cli_none = send_cli(&root, &["info", "--no-target"]);
    assert_eq!(none.rsplit('.').next(), cli_none.rsplit('.').next());
    // Unknown fields, wrong types and a root that is not there are refused by name.
    for (body, word) in [
        (r#"{"type":"info","colour":"red"}"#, "colour"),
        (r#"{"type":"info","target":3}"#, "target"),
        (r#"{"type":"info","root":4}"#, "root"),
        (r#"["info"]"#, "JSON object"),
        (r#"{"type":"info""#, "not JSON"),
    ] {
        let r = ui.send(body);
        assert_eq!(r.status, 400, "{body}");
        assert!(
            r.json()["error"].as_str().unwrap().contains(word),
            "{body}: {r:?}"
        );
    }
}

#[test]
fn the_state_shows_agents_waits_broadcasts_and_quarantine() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    send_cli(&root, &["steer", "one", "--target", "Executor"]);
    send_cli(&root, &["info", "two", "--target", "Executor"]);
    let b = send_cli(&root, &["info", "everyone"]);
    // The Planner takes its copy of the broadcast; the Executor takes its two signals.
    assert!(sigbox(&root, &["poll", "--as", "Planner"]).status.success());
    std::fs::write(root.join("inputs").join("broken.json"), "{ not json").unwrap();
    let out = sigbox(&root, &["poll", "--as", "Executor", "--max", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = ui.get("/api/state").json();
    let r = &s["roots"][0];
    let agent = |n: &str| {
        r["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == n)
            .cloned()
            .unwrap()
    };
    assert_eq!(agent("Executor")["pending"], 1, "{r:#}");
    assert_eq!(agent("Executor")["broadcasts"], 1);
    assert_eq!(agent("Planner")["broadcasts"], 0);
    assert_eq!(r["broadcasts"][0]["id"], b.as_str());
    assert_eq!(
        r["broadcasts"][0]["acked_by"],
        serde_json::json!(["Planner"])
    );
    assert_eq!(r["broadcasts"][0]["message"], "everyone");
    let q = &r["quarantine"]["items"][0];
    assert_eq!(q["name"], "broken.json", "{r:#}");
    assert!(q["clear"].as_str().unwrap().starts_with("rm -- "));
    assert!(
        r["quarantine"]["clear_all"]
            .as_str()
            .unwrap()
            .contains("gc --rejected")
    );
    // The timeline: the delivered STEER with its latency, then what still waits.
    let t = r["timeline"].as_array().unwrap();
    let done = t.iter().find(|x| x["type"] == "STEER").unwrap();
    assert_eq!(done["handled_by"], "Executor");
    assert!(done["latency_ms"].as_i64().unwrap() >= 0);
    assert!(
        t.iter()
            .any(|x| x["status"] == "pending" && x["type"] == "INFO")
    );
}

#[test]
fn several_roots_one_page() {
    let (_d1, a) = mailbox();
    let (_d2, b) = mailbox();
    let ui = Ui::start(&[&a, &b], &[]);
    let s = ui.get("/api/state").json();
    assert_eq!(s["roots"].as_array().unwrap().len(), 2);
    assert_eq!(s["roots"][1]["root"], b.to_string_lossy().as_ref());
    let r = ui.send(r#"{"type":"steer","message":"b","target":"Executor","root":1}"#);
    assert_eq!(r.status, 200);
    assert!(names(&a.join("inputs")).is_empty());
    assert_eq!(names(&b.join("inputs")).len(), 1);
}

#[test]
fn a_signal_sent_with_the_cli_arrives_as_an_event() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let mut ev = Events::connect(&ui);
    let id = send_cli(&root, &["steer", "hello", "--target", "Executor"]);
    let got = ev
        .wait_for(Duration::from_secs(20), |v| v["id"] == id.as_str())
        .expect("an event for the signal sent");
    assert_eq!(got["path"], format!("inputs/{id}.json"));
    assert_eq!(got["root"], 0);
    assert!(got["seq"].as_u64().unwrap() >= 1);
    // A file a person drops by hand arrives too; the console's own reads make no event.
    std::fs::write(root.join("inputs").join("note.json"), r#"{"type":"INFO"}"#).unwrap();
    ev.wait_for(Duration::from_secs(20), |v| v["path"] == "inputs/note.json")
        .expect("an event for the dropped file");
    // The write's own further events (its modification, its close), then quiet.
    while let Some(v) = ev.wait_for(Duration::from_millis(500), |_| true) {
        assert_eq!(v["path"], "inputs/note.json", "{v}");
    }
    for _ in 0..3 {
        assert_eq!(ui.get("/api/state").status, 200);
    }
    if let Some(v) = ev.wait_for(Duration::from_millis(700), |_| true) {
        panic!("reading the state made an event: {v}");
    }
    // A delivery: the claim moves it out of inputs/.
    assert!(
        sigbox(&root, &["poll", "--as", "Executor"])
            .status
            .success()
    );
    ev.wait_for(Duration::from_secs(20), |v| {
        v["path"] == format!("inputs/{id}.json")
            && (v["kind"] == "moved_out" || v["kind"] == "removed")
    })
    .expect("an event for the delivery");
}

#[test]
fn another_address_only_when_asked_and_with_a_warning() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &["--listen", "0.0.0.0:0"]);
    assert!(ui.url.starts_with("http://127.0.0.1:"), "{}", ui.url);
    assert_eq!(ui.get("/api/state").status, 200);
    let r = ui.request(
        "GET",
        "/api/state",
        &[ui.bearer(), h("Host", &format!("evil.example:{}", ui.port))],
        None,
    );
    assert_eq!(r.status, 403);
    let err = ui.stop();
    assert!(err.contains("WARNING"), "{err}");
    // The default is loopback, without a warning.
    let ui = Ui::start(&[&root], &[]);
    let err = ui.stop();
    assert!(!err.contains("WARNING"), "{err}");
}

/// `sigbox ui ...` runs `sigbox-ui` beside `sigbox`: every `--root` after `ui` is served, and
/// the global one when given.
#[test]
fn sigbox_ui_serves_every_root_it_is_given() {
    let (_d1, a) = mailbox();
    let (_d2, b) = mailbox();
    let (_d3, c) = mailbox();
    let served = |args: Vec<&std::ffi::OsStr>| -> Vec<String> {
        let mut child = std::process::Command::new(common::sigbox_bin())
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .env("SIGBOX_DURABILITY", "relaxed")
            .env("SIGBOX_ROOT", &c)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let (addr, token) = line
            .trim()
            .trim_start_matches("http://")
            .split_once("/?token=")
            .unwrap_or_else(|| panic!("{line:?}"));
        let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
        let r = common::http(
            port,
            "GET",
            "/api/state",
            &[h("Authorization", &format!("Bearer {token}"))],
            None,
            Some(addr),
        );
        let _ = child.kill();
        let _ = child.wait();
        r.json()["roots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["root"].as_str().unwrap().to_string())
            .collect()
    };
    let s = |p: &std::path::Path| p.to_string_lossy().into_owned();
    let (a_, b_) = (a.as_os_str(), b.as_os_str());
    let ui = std::ffi::OsStr::new("ui");
    let root = std::ffi::OsStr::new("--root");
    assert_eq!(served(vec![ui, root, a_, root, b_]), [s(&a), s(&b)]);
    assert_eq!(served(vec![root, a_, ui, root, b_]), [s(&a), s(&b)]);
    assert_eq!(served(vec![root, a_, ui]), [s(&a)]);
    assert_eq!(
        served(vec![ui]),
        [s(&c)],
        "SIGBOX_ROOT when no --root is given"
    );
}

/// `inputs/` moved away and made again while the console runs: a send goes to the `inputs/`
/// there now, as `sigbox send`'s does, never to the directory moved away.
#[test]
fn a_send_goes_to_the_inputs_there_now() {
    let (d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    assert_eq!(ui.send(r#"{"type":"info","message":"one"}"#).status, 200);
    let away = d.path().join("away");
    std::fs::create_dir(&away).unwrap();
    std::fs::rename(root.join("inputs"), away.join("inputs")).unwrap();
    std::fs::create_dir(root.join("inputs")).unwrap();
    // At once: a handle that looked again at its directories only now and then would still
    // write to the one moved away.
    let r = ui.send(r#"{"type":"info","message":"two"}"#);
    assert_eq!(r.status, 200, "{r:?}");
    let id = r.json()["id"].as_str().unwrap().to_string();
    assert_eq!(names(&root.join("inputs")), [format!("{id}.json")]);
    assert_eq!(names(&away.join("inputs")).len(), 1, "only the first");
}
