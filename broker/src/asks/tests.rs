use std::time::Duration;

use super::*;

fn mailbox() -> (tempfile::TempDir, Mailbox) {
    let dir = tempfile::tempdir().unwrap();
    let mb = Mailbox::init(dir.path().join("r")).unwrap();
    (dir, mb)
}

#[test]
fn one_answer_and_every_other_refused_naming_why() {
    let (_d, mb) = mailbox();
    let asks = Asks::new(&mb);
    let a = asks
        .ask(
            &NewAsk::new("Executor", "deploy?")
                .key("k")
                .choices(["yes", "no"]),
        )
        .unwrap();
    assert!(!a.attached);
    assert_eq!(a.request.id, "Executor.k");
    let hostile_long = format!("Executor.{}", "k".repeat(300));
    // (id, choice, by, what the refusal says); the first row is the one answer.
    let table: [(&str, &str, &str, Option<&str>); 9] = [
        (
            "Executor.k",
            "maybe",
            "alice",
            Some("\"maybe\" is not offered (yes, no)"),
        ),
        ("Executor.k", "yes", "alice", None),
        (
            "Executor.k",
            "no",
            "bob",
            Some("already answered \"yes\" by alice"),
        ),
        ("Executor.k", "yes", "alice", Some("already answered")),
        ("Executor.other", "yes", "bob", Some("no such request")),
        ("../../etc/passwd", "yes", "bob", Some("invalid request id")),
        ("Executor./x", "yes", "bob", Some("invalid request id")),
        (&hostile_long, "yes", "bob", Some("over 128")),
        ("Executor.k", "yes", "bo\nb", Some("invalid answerer name")),
    ];
    for (id, choice, by, refused) in table {
        let r = asks.answer(id, choice, Some("fine"), by).unwrap();
        match (r, refused) {
            (Ok(Outcome::Answered(a)), None) => {
                assert_eq!((a.choice.as_str(), a.by.as_str()), ("yes", "alice"));
                assert_eq!(a.message.as_deref(), Some("fine"));
            }
            (Err(refusal), Some(why)) => {
                let line = refusal.to_string();
                assert!(line.contains(why), "{id} {choice}: {line}");
                assert!(!line.contains('\n'), "{line}");
            }
            (r, want) => panic!("{id} {choice} {by}: {r:?}, wanted {want:?}"),
        }
    }
    let listed = asks.list().unwrap();
    assert_eq!(listed.requests.len(), 1);
    assert_eq!(listed.requests[0].status(Utc::now()), Status::Answered);
}

#[test]
fn a_key_asked_again_reattaches_and_another_question_under_it_is_refused() {
    let (_d, mb) = mailbox();
    let asks = Asks::new(&mb);
    let ask = NewAsk::new("Executor", "deploy?").key("k");
    asks.ask(&ask).unwrap();
    let again = asks.ask(&ask).unwrap();
    assert!(again.attached);
    assert!(again.outcome.is_none());
    asks.answer("Executor.k", "approve", None, "alice")
        .unwrap()
        .unwrap();
    let again = asks.ask(&ask).unwrap();
    assert!(matches!(again.outcome, Some(Outcome::Answered(_))));
    let other = asks.ask(&NewAsk::new("Executor", "drop the db?").key("k"));
    let e = other.unwrap_err();
    assert!(
        e.to_string().contains("already names another question"),
        "{e}"
    );
    // One request file, one outcome: no second request.
    let names: Vec<_> = std::fs::read_dir(asks.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn at_the_deadline_the_request_expires_and_a_late_answer_is_refused() {
    let (_d, mb) = mailbox();
    let asks = Asks::new(&mb);
    let a = asks
        .ask(&NewAsk::new("Executor", "quick?").timeout(Duration::from_millis(50)))
        .unwrap();
    let id = a.request.id;
    assert_eq!(asks.expire(&id, "Executor").unwrap(), None, "not yet");
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(
        asks.list().unwrap().requests[0].status(Utc::now()),
        Status::Expired
    );
    // A late answer records the expiry itself, and is refused.
    let r = asks
        .answer(&id, "approve", None, "alice")
        .unwrap()
        .unwrap_err();
    assert!(r.to_string().contains("expired at"), "{r}");
    assert!(matches!(
        asks.expire(&id, "Executor").unwrap(),
        Some(Outcome::Expired { .. })
    ));
}

#[test]
fn outcomes_dropped_by_hand_for_a_request_that_is_not_open_are_quarantined() {
    let (_d, mb) = mailbox();
    let asks = Asks::new(&mb);
    let id = asks
        .ask(&NewAsk::new("Executor", "deploy?").key("k"))
        .unwrap()
        .request
        .id;
    let forged = [
        r#"{"kind":"sigbox.outcome","id":"Executor.k","request":"0000000000000000","status":"answered","choice":"approve","message":null,"answered_by":"mallory","answered_at":"2026-01-01T00:00:00Z"}"#,
        "not json",
    ];
    for f in forged {
        std::fs::write(asks.outcome_path(&id), f).unwrap();
        // Listing reads only.
        assert_eq!(asks.list().unwrap().requests[0].outcome, None);
        assert!(asks.outcome_path(&id).exists());
        // The asker's read quarantines it, with its reason.
        assert_eq!(asks.outcome(&id).unwrap(), None);
        assert!(!asks.outcome_path(&id).exists());
    }
    let rejected: Vec<_> = std::fs::read_dir(mb.root().join("rejected"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(rejected.len(), 4, "{rejected:?}");
    assert!(
        rejected
            .iter()
            .any(|n| n.ends_with(".outcome.json.reason.json"))
    );
    // A hard link in the outcome's place is never read, and does not block the real answer.
    let outside = mb.root().parent().unwrap().join("outside.json");
    std::fs::write(&outside, forged[0]).unwrap();
    std::fs::hard_link(&outside, asks.outcome_path(&id)).unwrap();
    let won = asks.answer(&id, "deny", None, "alice").unwrap().unwrap();
    assert!(matches!(won, Outcome::Answered(a) if a.choice == "deny"));
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), forged[0]);
}

#[test]
fn a_request_written_by_hand_is_read_with_its_checks() {
    let (_d, mb) = mailbox();
    let asks = Asks::new(&mb);
    std::fs::create_dir(asks.dir()).unwrap();
    std::fs::write(
        asks.request_path("Planner.h"),
        r#"{"kind":"sigbox.ask","id":"Planner.h","from":"Planner","to":null,"message":"ok?","choices":["a","b"],"asked_at":"2026-01-01T00:00:00Z","deadline":null}"#,
    )
    .unwrap();
    std::fs::write(
        asks.request_path("Planner.bad"),
        r#"{"kind":"sigbox.ask","id":"Planner.other","from":"Planner","message":"x","choices":["a"],"asked_at":"2026-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    let l = asks.list().unwrap();
    assert_eq!(l.requests.len(), 1);
    assert_eq!(l.invalid.len(), 1);
    assert!(l.invalid[0].1.contains("file's name"), "{:?}", l.invalid);
    assert!(
        asks.answer("Planner.h", "b", None, "alice")
            .unwrap()
            .is_ok()
    );
    let r = asks
        .answer("Planner.bad", "a", None, "alice")
        .unwrap()
        .unwrap_err();
    assert!(r.to_string().contains("not a valid request"), "{r}");
}

#[test]
fn a_symlink_in_place_of_asks_is_refused_not_followed() {
    let (d, mb) = mailbox();
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, mb.root().join(ASKS_DIR)).unwrap();
    let asks = Asks::new(&mb);
    let e = asks.ask(&NewAsk::new("Executor", "x")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PathEscape, "{e}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}
