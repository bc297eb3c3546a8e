//! Requests to a person (spec/asks.md): `ask`, `answer`, `asks`, their lines in `log`, and
//! the request and outcome files, each against its schema; each schema refusing a wrong shape.

use serde_json::{Value, json};

use super::{World, read_json};

pub(super) fn asks(w: &World) {
    let s = &w.s;
    w.run(&["init"]).expect(0);
    // Open, then answered; one asked with a context by hand; one that expires.
    let open = w.run(&[
        "--json",
        "ask",
        "--as",
        "Executor",
        "--key",
        "k1",
        "--to",
        "alice",
        "--timeout",
        "1h",
        "--no-wait",
        "deploy?",
    ]);
    let open = w.out(open.expect(0), "cli/ask.schema.json");
    w.err(&w.run(&["--json", "asks"]));
    let listed = w.out(w.run(&["--json", "asks"]).expect(0), "cli/asks.schema.json");
    assert_eq!(listed[0]["status"], "open");
    let answered = w.run(&[
        "--json",
        "answer",
        "Executor.k1",
        "approve",
        "ok",
        "--from",
        "alice",
    ]);
    w.out(answered.expect(0), "cli/ask.schema.json");
    let again = w.run(&[
        "--json", "ask", "--as", "Executor", "--key", "k1", "--to", "alice", "deploy?",
    ]);
    let outcome = w.out(again.expect(0), "cli/ask.schema.json");
    assert_eq!(outcome[0]["choice"], "approve");
    let late = w.run(&["--json", "answer", "Executor.k1", "deny"]);
    w.err(late.expect(2));
    let expired = w.run(&[
        "--json",
        "ask",
        "--as",
        "Planner",
        "--timeout",
        "10ms",
        "--choices",
        "a,b",
        "quick?",
    ]);
    let expired_line = w.out(expired.expect(1), "cli/ask.schema.json");
    assert_eq!(expired_line[0]["status"], "expired");
    std::fs::write(
        w.root.join("asks/Planner.bad.request.json"),
        r#"{"kind":"sigbox.ask","id":"Planner.other"}"#,
    )
    .unwrap();
    let all = w.out(
        w.run(&["--json", "asks", "--all"]).expect(0),
        "cli/asks.schema.json",
    );
    assert_eq!(all.len(), 3, "{all:?}");
    // The signal records before hold one that cannot be read (exit 2, said on stderr); the
    // requests are listed all the same.
    let log = w.out(w.run(&["--json", "log"]).expect(2), "cli/log.schema.json");
    assert_eq!(log.iter().filter(|l| l["kind"] == "ask").count(), 2);
    // The files.
    for e in std::fs::read_dir(w.root.join("asks")).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("Planner.bad") {
            continue;
        }
        let schema = if name.ends_with(".request.json") {
            "ask-request.schema.json"
        } else {
            "ask-outcome.schema.json"
        };
        s.check(schema, &read_json(&p), &name);
    }
    // Wrong shapes.
    let mut v = open[0].clone();
    v["id"] = json!("../x");
    s.reject("cli/ask.schema.json", &v, "an id with a path in it");
    let mut v = listed[0].clone();
    v["status"] = json!("maybe");
    s.reject("cli/asks.schema.json", &v, "a status that is none");
    let req = read_json(&w.root.join("asks/Executor.k1.request.json"));
    let mut v = req.clone();
    v["choices"] = json!(["a", "a"]);
    s.reject("ask-request.schema.json", &v, "a choice given twice");
    let out = read_json(&w.root.join("asks/Executor.k1.outcome.json"));
    let mut v: Value = out.clone();
    v.as_object_mut().unwrap().remove("answered_by");
    s.reject(
        "ask-outcome.schema.json",
        &v,
        "an answer without who gave it",
    );
}
