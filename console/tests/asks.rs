//! Approval requests in the console (spec/console.md, spec/asks.md): the requests in
//! `/api/state`, `POST /api/asks/<id>/answer` waking a `sigbox ask` blocked in another
//! process, its refusals in `sigbox answer`'s words, and the refusals of the console's guard
//! (no token, another origin, a path in an id) leaving the request open.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Events, Ui, mailbox, sigbox};
use serde_json::{Value, json};

fn h(k: &str, v: &str) -> (String, String) {
    (k.to_string(), v.to_string())
}

/// `POST /api/asks/<id>/answer` as a script does: bearer token, JSON, no `Origin`.
fn answer(ui: &Ui, id: &str, body: &Value) -> common::Response {
    ui.request(
        "POST",
        &format!("/api/asks/{id}/answer"),
        &[ui.bearer(), h("Content-Type", "application/json")],
        Some(&body.to_string()),
    )
}

/// `sigbox ask --as AGENT ARGS` waiting in its own process.
fn ask_blocked(root: &Path, agent: &str, args: &[&str]) -> Child {
    Command::new(common::sigbox_bin())
        .arg("--root")
        .arg(root)
        .args(["--settle", "0", "ask", "--as", agent])
        .args(args)
        .env("SIGBOX_DURABILITY", "relaxed")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `sigbox ask --no-wait`: the id it printed.
fn ask_open(root: &Path, agent: &str, args: &[&str]) -> String {
    let mut all = vec!["ask", "--as", agent, "--no-wait"];
    all.extend_from_slice(args);
    let out = sigbox(root, &all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// What `sigbox answer ARGS` says on stderr, without `sigbox: ` (it must refuse, exit 2).
fn cli_refusal(root: &Path, args: &[&str]) -> String {
    let mut all = vec!["answer"];
    all.extend_from_slice(args);
    let out = sigbox(root, &all);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    err.trim().strip_prefix("sigbox: ").unwrap().to_string()
}

/// The `asks` section of the first root.
fn asks_state(ui: &Ui) -> Value {
    let r = ui.get("/api/state");
    assert_eq!(r.status, 200, "{r:?}");
    r.json()["roots"][0]["asks"].clone()
}

fn open_ids(ui: &Ui) -> Vec<String> {
    asks_state(ui)["open"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_string())
        .collect()
}

/// Waits until `f` holds (generous: a liveness bound, not a speed).
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_answer_through_the_api_wakes_a_blocked_ask() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let mut asker = ask_blocked(
        &root,
        "Executor",
        &[
            "--key",
            "deploy-42",
            "--timeout",
            "300s",
            "--to",
            "alice",
            "deploy to prod?",
        ],
    );
    until("the request in the state", || {
        open_ids(&ui) == ["Executor.deploy-42"]
    });
    let a = asks_state(&ui);
    let open = &a["open"][0];
    assert_eq!(open["id"], "Executor.deploy-42");
    assert_eq!(open["from"], "Executor");
    assert_eq!(open["to"], "alice");
    assert_eq!(open["message"], "deploy to prod?");
    assert_eq!(open["choices"], json!(["approve", "deny"]));
    assert!(open["deadline_ms"].as_i64().unwrap() > open["asked_ms"].as_i64().unwrap());
    assert!(asker.try_wait().unwrap().is_none(), "the asker waits");
    // A request written by hand (as a hook writes one, with its context), its message over
    // the cut: shown, the context as text, the message cut.
    let long = "y".repeat(5000);
    let hand = json!({"kind": "sigbox.ask", "id": "Reviewer.hand", "from": "Reviewer",
        "to": null, "message": long, "choices": ["allow", "deny"],
        "asked_at": "2026-01-01T00:00:00.000000Z", "deadline": null, "key": "hand",
        "context": {"tool_name": "Bash", "tool_input": {"command": "rm -rf <b>/</b>"}}});
    std::fs::write(
        root.join("asks").join("Reviewer.hand.request.json"),
        format!("{hand}\n"),
    )
    .unwrap();
    let a = asks_state(&ui);
    assert_eq!(a["open_total"], 2, "{a}");
    let hand = &a["open"][0];
    assert_eq!(hand["id"], "Reviewer.hand", "oldest first");
    let context = hand["context"].as_str().unwrap();
    assert!(
        context.contains("\"tool_name\": \"Bash\"") && context.contains("rm -rf <b>/</b>"),
        "{context}"
    );
    assert_eq!(hand["message"].as_str().unwrap().chars().count(), 2001);
    assert!(hand["message"].as_str().unwrap().ends_with('…'));

    let r = answer(
        &ui,
        "Executor.deploy-42",
        &json!({"choice": "approve", "message": "go ahead", "from": "alice"}),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(v["id"], "Executor.deploy-42");
    assert_eq!(v["choice"], "approve");
    assert_eq!(v["answered_by"], "alice");

    // The blocked asker wakes with that answer: the choice on stdout, exit 0.
    let out = asker.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "approve");
    let said = String::from_utf8(out.stderr).unwrap();
    assert!(
        said.contains("by alice") && said.contains("go ahead"),
        "{said}"
    );

    // A second answer: refused, naming the first, in the CLI's words.
    let r = answer(&ui, "Executor.deploy-42", &json!({"choice": "deny"}));
    assert_eq!(r.status, 409, "{r:?}");
    let want = cli_refusal(&root, &["Executor.deploy-42", "deny", "--from", "bob"]);
    assert!(
        want.contains("already answered \"approve\" by alice"),
        "{want}"
    );
    assert_eq!(r.json()["error"], want.as_str());

    // The state now shows it answered, with who, and how long it took.
    let a = asks_state(&ui);
    assert_eq!(a["open_total"], 1);
    assert_eq!(a["open"][0]["id"], "Reviewer.hand");
    let closed = &a["closed"][0];
    assert_eq!(closed["status"], "answered");
    assert_eq!(closed["choice"], "approve");
    assert_eq!(closed["answer_message"], "go ahead");
    assert_eq!(closed["answered_by"], "alice");
    assert!(closed["took_ms"].as_i64().unwrap() >= 0);
}

#[test]
fn bad_answers_are_refused_with_the_cli_s_words() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let id = ask_open(&root, "Executor", &["--choices", "yes,no", "ship it?"]);
    let late = ask_open(&root, "Planner", &["--timeout", "300ms", "late?"]);
    std::thread::sleep(Duration::from_millis(600));
    let cases: Vec<(&str, Value, Vec<&str>, u16)> = vec![
        // A choice the request does not offer.
        (&id, json!({"choice": "approve"}), vec![&id, "approve"], 400),
        // An id with no request.
        (
            "Executor.nothing",
            json!({"choice": "yes"}),
            vec!["Executor.nothing", "yes"],
            404,
        ),
        // An id the library's rule refuses (a dot only between agent and key).
        (
            "Executor.a.b",
            json!({"choice": "yes"}),
            vec!["Executor.a.b", "yes"],
            400,
        ),
        // An answerer's name with a control character.
        (
            &id,
            json!({"choice": "yes", "from": "al\u{7}ice"}),
            vec![&id, "yes", "--from", "al\u{7}ice"],
            400,
        ),
    ];
    for (id, body, args, status) in cases {
        let want = cli_refusal(&root, &args);
        let r = answer(&ui, id, &body);
        assert_eq!(r.status, status, "{body}: {r:?}");
        assert_eq!(r.json()["error"], want.as_str(), "{body}");
    }
    // Past its deadline: the answer records the expiry and is refused; the CLI then says the
    // same.
    let r = answer(&ui, &late, &json!({"choice": "approve"}));
    assert_eq!(r.status, 409, "{r:?}");
    let want = cli_refusal(&root, &[&late, "approve"]);
    assert!(want.contains("expired at"), "{want}");
    assert_eq!(r.json()["error"], want.as_str());
    // Unknown fields, wrong types, no choice, a root that is not there: refused by name.
    for (body, word) in [
        (json!({"choice": "yes", "colour": "red"}), "colour"),
        (json!({"choice": 3}), "choice"),
        (json!({"message": "hi"}), "choice is missing"),
        (json!({"choice": "yes", "message": 3}), "message"),
        (json!({"choice": "yes", "root": 2}), "root"),
        (json!(["yes"]), "JSON object"),
    ] {
        let r = answer(&ui, &id, &body);
        assert_eq!(r.status, 400, "{body}");
        assert!(
            r.json()["error"].as_str().unwrap().contains(word),
            "{body}: {r:?}"
        );
    }
    // None of it answered: the request is open, and the console's answer is still possible,
    // under the console's name when the body names no one.
    assert!(
        !root
            .join("asks")
            .join(format!("{id}.outcome.json"))
            .exists()
    );
    let r = answer(&ui, &id, &json!({"choice": "no"}));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json()["answered_by"], "console");
}

#[test]
fn a_path_in_an_id_is_refused_before_any_path_is_made() {
    let (d, root) = mailbox();
    // The real things a path in an id would reach: a request beside the root's parent, and
    // one in a subdirectory of asks/ (each with the id such a path would give it).
    let request = |id: &str| {
        json!({"kind": "sigbox.ask", "id": id, "from": "Executor", "to": null,
               "message": "planted", "choices": ["approve", "deny"],
               "asked_at": "2026-01-01T00:00:00.000000Z", "deadline": null, "key": null,
               "context": null})
        .to_string()
    };
    std::fs::write(
        d.path().join("secret.request.json"),
        request("../../secret"),
    )
    .unwrap();
    std::fs::write(root.join("secret.request.json"), request("../secret")).unwrap();
    let ui = Ui::start(&[&root], &[]);
    for id in [
        "..%2Fsecret",
        "..%2F..%2Fsecret",
        "%2E%2E%2Fsecret",
        "%2Fetc%2Fpasswd",
        ".hidden",
        "a%00b",
        "a%5Cb",
        "a%2Fb",
    ] {
        let r = answer(&ui, id, &json!({"choice": "approve"}));
        assert_eq!(r.status, 400, "{id}: {r:?}");
        assert!(
            r.json()["error"].as_str().unwrap().contains("invalid id"),
            "{id}: {r:?}"
        );
    }
    // Nothing was made: no asks/, no outcome beside the planted requests.
    assert!(!root.join("asks").exists(), "asks/ was made");
    assert!(!root.join("secret.outcome.json").exists());
    assert!(!d.path().join("secret.outcome.json").exists());
    // With asks/ there and a request planted one level down.
    std::fs::create_dir_all(root.join("asks").join("a")).unwrap();
    std::fs::write(
        root.join("asks").join("a").join("b.request.json"),
        request("a/b"),
    )
    .unwrap();
    for id in ["a%2Fb", "a%2F..%2Fa%2Fb"] {
        let r = answer(&ui, id, &json!({"choice": "approve"}));
        assert_eq!(r.status, 400, "{id}: {r:?}");
    }
    assert_eq!(
        common::names(&root.join("asks").join("a")),
        ["b.request.json"]
    );
    assert_eq!(common::names(&root.join("asks")), ["a"]);
}

#[test]
fn answers_without_the_token_or_from_another_origin_are_refused() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let id = ask_open(&root, "Executor", &["deploy?"]);
    let path = format!("/api/asks/{id}/answer");
    let body = Some(r#"{"choice":"approve"}"#);
    let json = h("Content-Type", "application/json");
    let cookie = h(
        "Cookie",
        &format!("sigbox_console_{}={}", ui.port, ui.token),
    );
    for (headers, status) in [
        // No token at all, a wrong one.
        (vec![json.clone()], 401),
        (
            vec![
                json.clone(),
                h("Authorization", &format!("Bearer {}", "0".repeat(64))),
            ],
            403,
        ),
        // A page of another site posting with the person's cookie.
        (
            vec![
                cookie.clone(),
                json.clone(),
                h("Origin", "http://evil.example"),
            ],
            403,
        ),
        // The cookie alone, no Origin.
        (vec![cookie.clone(), json.clone()], 403),
        // The right Origin, but the browser says another site made it.
        (
            vec![
                cookie.clone(),
                json.clone(),
                h("Origin", &ui.origin()),
                h("Sec-Fetch-Site", "cross-site"),
            ],
            403,
        ),
        // Another Host (DNS rebinding), token or not.
        (
            vec![
                ui.bearer(),
                json.clone(),
                h("Host", &format!("evil.example:{}", ui.port)),
            ],
            403,
        ),
        // A form of another site (no JSON).
        (vec![ui.bearer(), h("Content-Type", "text/plain")], 415),
    ] {
        let r = ui.request("POST", &path, &headers, body);
        assert_eq!(r.status, status, "{headers:?}: {r:?}");
    }
    assert_eq!(open_ids(&ui), [id.as_str()], "still open");
    assert!(
        !root
            .join("asks")
            .join(format!("{id}.outcome.json"))
            .exists()
    );
    // The page's own request passes.
    let r = ui.request(
        "POST",
        &path,
        &[
            cookie,
            json,
            h("Origin", &ui.origin()),
            h("Sec-Fetch-Site", "same-origin"),
        ],
        body,
    );
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn requests_and_answers_from_the_cli_arrive_as_events() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let mut ev = Events::connect(&ui);
    // The first request makes asks/: its file, or a rescan of the new directory, is told.
    let id = ask_open(&root, "Executor", &["--key", "k1", "first?"]);
    ev.wait_for(Duration::from_secs(20), |v| {
        v["path"] == format!("asks/{id}.request.json")
            || (v["kind"] == "rescan" && v["path"] == "asks")
    })
    .expect("an event for the first request");
    assert_eq!(open_ids(&ui), [id.as_str()]);
    // Later ones each make their own event.
    let second = ask_open(&root, "Planner", &["--key", "k2", "second?"]);
    ev.wait_for(Duration::from_secs(20), |v| {
        v["path"] == format!("asks/{second}.request.json")
    })
    .expect("an event for the second request");
    // An answer from the CLI: its outcome is an event, and the request leaves the open list.
    let out = sigbox(&root, &["answer", &id, "deny", "not now", "--from", "bob"]);
    assert!(out.status.success(), "{out:?}");
    ev.wait_for(Duration::from_secs(20), |v| {
        v["path"] == format!("asks/{id}.outcome.json")
    })
    .expect("an event for the answer");
    assert_eq!(open_ids(&ui), [second.as_str()]);
    let closed = &asks_state(&ui)["closed"][0];
    assert_eq!(closed["id"], id.as_str());
    assert_eq!(closed["answered_by"], "bob");
    assert_eq!(closed["answer_message"], "not now");
}

/// A directory made and written into at once (as the first `ask` makes `asks/` and its first
/// request): the file comes before the directory's watch, so it makes no event of its own; a
/// `rescan` naming the directory follows, once it is watched.
#[test]
fn a_file_in_a_new_directory_is_told_even_before_its_watch() {
    let (_d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let mut ev = Events::connect(&ui);
    let n = 40;
    for i in 0..n {
        let dir = root.join(format!("new{i}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("f.json"), "{}").unwrap();
    }
    let mut told = vec![false; n];
    while told.iter().any(|t| !t) {
        let Some(v) = ev.wait_for(Duration::from_secs(20), |_| true) else {
            let missed: Vec<usize> = (0..n).filter(|i| !told[*i]).collect();
            panic!("never told of the files in new{missed:?}");
        };
        let path = v["path"].as_str().unwrap_or_default();
        for (i, t) in told.iter_mut().enumerate() {
            if path == format!("new{i}/f.json")
                || (v["kind"] == "rescan" && path == format!("new{i}"))
            {
                *t = true;
            }
        }
    }
}

/// `asks/` moved away and made again, or a link planted in its place, while the console runs:
/// it reads and answers the requests at `asks/` now, as `sigbox answer` does, never the
/// directory that was there before, wherever it went.
#[test]
fn a_replaced_or_linked_asks_directory_is_not_followed() {
    let (d, root) = mailbox();
    let ui = Ui::start(&[&root], &[]);
    let first = ask_open(&root, "Executor", &["--key", "k1", "first?"]);
    // The console has read and answered there: whatever it keeps, it has kept.
    assert_eq!(open_ids(&ui), [first.as_str()]);
    assert_eq!(answer(&ui, &first, &json!({"choice": "maybe"})).status, 400);
    // Moved away, and made again by the next request.
    let away = d.path().join("away");
    std::fs::create_dir(&away).unwrap();
    std::fs::rename(root.join("asks"), away.join("asks")).unwrap();
    let second = ask_open(&root, "Executor", &["--key", "k2", "second?"]);
    // At once: a handle that looked again at its directories only now and then would still
    // read the one moved away.
    assert_eq!(open_ids(&ui), [second.as_str()], "the asks/ there now");
    let r = answer(&ui, &second, &json!({"choice": "approve"}));
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        root.join("asks")
            .join(format!("{second}.outcome.json"))
            .exists()
    );
    let r = answer(&ui, &first, &json!({"choice": "approve"}));
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(
        common::names(&away.join("asks")),
        [format!("{first}.request.json")],
        "nothing written in the directory moved away"
    );
    // A link in its place, to a directory holding an open request: refused, as the CLI
    // refuses it, and nothing written through it.
    std::fs::remove_dir_all(root.join("asks")).unwrap();
    std::os::unix::fs::symlink(away.join("asks"), root.join("asks")).unwrap();
    // At once, as for the directory made again.
    let want = {
        let out = sigbox(&root, &["answer", &first, "approve"]);
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let r = answer(&ui, &first, &json!({"choice": "approve"}));
    assert!(r.status >= 400, "{r:?}");
    let error = r.json()["error"].as_str().unwrap().to_string();
    assert!(error.contains("symlink"), "{error}");
    assert_eq!(format!("sigbox: {error}"), want.trim());
    assert_eq!(
        common::names(&away.join("asks")),
        [format!("{first}.request.json")],
        "nothing written through the link"
    );
    let a = asks_state(&ui);
    assert!(
        a["error"].as_str().unwrap().contains("symlink"),
        "the state says why: {a}"
    );
    assert_eq!(a["open"], json!([]));
}
