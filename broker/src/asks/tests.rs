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

/// Two roots as two hosts: A, where the request is asked, and B, which imports it.
fn hosts() -> (tempfile::TempDir, Mailbox, Mailbox) {
    let dir = tempfile::tempdir().unwrap();
    let a = Mailbox::init(dir.path().join("a")).unwrap();
    let b = Mailbox::init(dir.path().join("b")).unwrap();
    (dir, a, b)
}

fn file(mb: &Mailbox, name: &str) -> Vec<u8> {
    std::fs::read(mb.root().join("asks").join(name)).unwrap()
}

fn proposal_bytes(mb: &Mailbox, p: &Proposal) -> Vec<u8> {
    file(mb, &format!("{}.answer.{}.json", p.id, p.proposal))
}

#[test]
fn an_answer_on_another_host_is_proposed_applied_at_home_and_carried_back() {
    let (_d, a, b) = hosts();
    let (on_a, on_b) = (Asks::new(&a), Asks::new(&b));
    on_a.ask(&NewAsk::new("Executor", "deploy?").key("k"))
        .unwrap();
    let request = file(&a, "Executor.k.request.json");
    assert_eq!(
        on_b.import_request("hostA", &request).unwrap(),
        ImportedAsk::Written
    );
    assert_eq!(
        on_b.import_request("hostA", &request).unwrap(),
        ImportedAsk::AlreadyHere
    );
    assert_eq!(on_b.home("Executor.k").unwrap().as_deref(), Some("hostA"));
    assert_eq!(on_a.home("Executor.k").unwrap(), None);
    // B never records an outcome for it: `answer` says where it is decided.
    let r = on_b.answer("Executor.k", "approve", None, "bob").unwrap();
    assert!(matches!(r, Err(Refusal::Elsewhere { .. })), "{r:?}");
    let AnswerAnywhere::Proposed(p) = on_b
        .answer_anywhere("Executor.k", "approve", Some("ok"), "bob")
        .unwrap()
    else {
        panic!("not proposed")
    };
    assert!(!b.root().join("asks/Executor.k.outcome.json").exists());
    assert_eq!(on_b.proposal_status(&p).unwrap(), ProposalStatus::Pending);
    let listed = on_b.list().unwrap();
    assert_eq!(listed.requests[0].home.as_deref(), Some("hostA"));
    assert_eq!(listed.requests[0].proposals.len(), 1);
    // Home applies it: the one answer, naming the proposal.
    let o = on_a
        .apply_proposal(&proposal_bytes(&b, &p), "hostB")
        .unwrap()
        .unwrap();
    assert!(matches!(&o, Outcome::Answered(x) if x.by == "bob" && x.choice == "approve"));
    let outcome = file(&a, "Executor.k.outcome.json");
    // Applied twice (a second delivery): refused, naming the first.
    let again = on_a
        .apply_proposal(&proposal_bytes(&b, &p), "hostB")
        .unwrap();
    assert!(again.unwrap_err().contains("already answered"));
    // A's outcome comes back to B, byte for byte: the proposal won.
    assert_eq!(on_b.import_outcome(&outcome).unwrap(), ImportedAsk::Written);
    assert_eq!(
        on_b.import_outcome(&outcome).unwrap(),
        ImportedAsk::AlreadyHere
    );
    assert_eq!(file(&b, "Executor.k.outcome.json"), outcome);
    assert_eq!(on_b.proposal_status(&p).unwrap(), ProposalStatus::Won);
    // Now B refuses a second answer itself.
    let late = on_b
        .answer_anywhere("Executor.k", "deny", None, "carol")
        .unwrap();
    assert!(matches!(
        late,
        AnswerAnywhere::Refused(Refusal::Answered { .. })
    ));
    // A's own outcome is never replaced by an import.
    assert!(matches!(
        on_a.import_outcome(&outcome).unwrap(),
        ImportedAsk::Refused(_)
    ));
}

#[test]
fn racing_answers_on_two_hosts_one_wins_and_the_loser_is_told() {
    let (_d, a, b) = hosts();
    let (on_a, on_b) = (Asks::new(&a), Asks::new(&b));
    on_a.ask(&NewAsk::new("Executor", "deploy?").key("r"))
        .unwrap();
    let request = file(&a, "Executor.r.request.json");
    on_b.import_request("hostA", &request).unwrap();
    let AnswerAnywhere::Proposed(p) = on_b
        .answer_anywhere("Executor.r", "deny", None, "bob")
        .unwrap()
    else {
        panic!("not proposed")
    };
    // A's own answer is first.
    assert!(
        on_a.answer("Executor.r", "approve", None, "alice")
            .unwrap()
            .is_ok()
    );
    let refused = on_a
        .apply_proposal(&proposal_bytes(&b, &p), "hostB")
        .unwrap()
        .unwrap_err();
    assert!(
        refused.contains("already answered \"approve\" by alice"),
        "{refused}"
    );
    on_b.import_outcome(&file(&a, "Executor.r.outcome.json"))
        .unwrap();
    assert_eq!(on_b.proposal_status(&p).unwrap(), ProposalStatus::Lost);
    let listed = on_b.list().unwrap();
    assert_eq!(listed.requests[0].proposals[0].1, ProposalStatus::Lost);
}

#[test]
fn imports_that_are_not_what_they_say_are_refused() {
    let (_d, a, b) = hosts();
    let (on_a, on_b) = (Asks::new(&a), Asks::new(&b));
    on_a.ask(&NewAsk::new("Executor", "deploy?").key("h"))
        .unwrap();
    on_b.ask(&NewAsk::new("Executor", "other?").key("h"))
        .unwrap();
    // B has its own request under the id: the import is refused, nothing marked.
    let request = file(&a, "Executor.h.request.json");
    assert!(matches!(
        on_b.import_request("hostA", &request).unwrap(),
        ImportedAsk::Refused(_)
    ));
    assert_eq!(on_b.home("Executor.h").unwrap(), None);
    // An outcome for B's own request, from elsewhere: refused.
    on_a.answer("Executor.h", "approve", None, "alice")
        .unwrap()
        .unwrap();
    assert!(matches!(
        on_b.import_outcome(&file(&a, "Executor.h.outcome.json"))
            .unwrap(),
        ImportedAsk::Refused(_)
    ));
    assert!(!b.root().join("asks/Executor.h.outcome.json").exists());
    // Not a request, an invalid id, a proposal that is not one.
    for bad in [
        &b"[]"[..],
        br#"{"id":"../x"}"#,
        br#"{"kind":"sigbox.ask","id":"A.k"}"#,
    ] {
        assert!(matches!(
            on_b.import_request("hostA", bad).unwrap(),
            ImportedAsk::Refused(_)
        ));
    }
    assert!(on_a.apply_proposal(b"{}", "hostB").unwrap().is_err());
    // A proposal for an earlier request under a reused id (its digest): refused.
    let forged = serde_json::json!({"kind": "sigbox.proposal", "id": "Executor.h",
        "request": "0000000000000000", "proposal": "0".repeat(32), "home": "hostA",
        "choice": "deny", "answered_by": "mallory", "proposed_at": "2026-01-01T00:00:00Z"});
    let r = on_a
        .apply_proposal(forged.to_string().as_bytes(), "hostB")
        .unwrap();
    assert!(r.is_err());
    // On a host that imported a request, an outcome dropped by hand gives way to the home's.
    on_a.ask(&NewAsk::new("Executor", "more?").key("f"))
        .unwrap();
    on_b.import_request("hostA", &file(&a, "Executor.f.request.json"))
        .unwrap();
    on_a.answer("Executor.f", "deny", None, "alice")
        .unwrap()
        .unwrap();
    let real = file(&a, "Executor.f.outcome.json");
    let forged = String::from_utf8(real.clone())
        .unwrap()
        .replace("\"deny\"", "\"approve\"")
        .replace("alice", "mallory");
    std::fs::write(b.root().join("asks/Executor.f.outcome.json"), &forged).unwrap();
    assert_eq!(on_b.import_outcome(&real).unwrap(), ImportedAsk::Written);
    assert_eq!(file(&b, "Executor.f.outcome.json"), real);
    assert!(b.root().join("rejected/Executor.f.outcome.json").exists());
    // A marker that is not one: an error naming it, for whoever answers.
    std::fs::write(b.root().join("asks/Executor.h.home.json"), "junk").unwrap();
    let e = on_b.answer("Executor.h", "approve", None, "x").unwrap_err();
    assert!(e.to_string().contains("Executor.h.home.json"), "{e}");
}

#[test]
fn an_answer_too_long_for_its_outcome_is_refused_and_records_nothing() {
    let (_d, mb) = mailbox();
    let asks = Asks::new(&mb);
    let id = asks
        .ask(&NewAsk::new("Executor", "deploy?").key("big"))
        .unwrap()
        .request
        .id;
    // Control characters are written escaped, six bytes each: 11,000 of them pass 64 KiB.
    let long = "\u{1}".repeat(11_000);
    let e = asks
        .answer(&id, "approve", Some(&long), "alice")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TooLarge, "{e}");
    assert!(e.to_string().contains("nothing was recorded"), "{e}");
    assert!(!asks.outcome_path(&id).exists());
    // The request is still open, and the next answer is the one.
    let won = asks
        .answer(&id, "deny", Some("short"), "bob")
        .unwrap()
        .unwrap();
    assert!(matches!(won, Outcome::Answered(a) if a.choice == "deny"));
    let again = asks.answer(&id, "approve", None, "carol").unwrap();
    assert!(again.is_err());
    assert!(matches!(asks.outcome(&id).unwrap(), Some(Outcome::Answered(a)) if a.choice == "deny"));
}

#[test]
fn a_timeout_past_a_century_is_a_century_and_the_request_stays_answerable() {
    let (_d, mb) = mailbox();
    let asks = Asks::new(&mb);
    for (key, t) in [
        ("a", Duration::from_secs(u64::MAX)),
        ("b", Duration::from_secs(87_600_000 * 3600)),
    ] {
        let r = asks
            .ask(&NewAsk::new("Executor", "later?").key(key).timeout(t))
            .unwrap()
            .request;
        let d = r.deadline.unwrap();
        let years = (d - r.asked_at).num_days() / 365;
        assert!((99..=100).contains(&years), "{key}: {years} years");
        let won = asks.answer(&r.id, "approve", None, "alice").unwrap();
        assert!(won.is_ok(), "{key}: {won:?}");
    }
}

#[test]
fn an_outcome_answered_before_its_request_was_asked_is_quarantined() {
    let (_d, mb) = mailbox();
    let asks = Asks::new(&mb);
    let id = asks
        .ask(&NewAsk::new("Executor", "deploy?").key("early"))
        .unwrap()
        .request
        .id;
    let request = std::fs::read(asks.request_path(&id)).unwrap();
    let forged = format!(
        r#"{{"kind":"sigbox.outcome","id":"{id}","request":"{}","status":"answered","choice":"approve","message":null,"answered_by":"mallory","answered_at":"1970-01-01T00:00:00Z"}}"#,
        id::digest(&request)
    );
    std::fs::write(asks.outcome_path(&id), forged).unwrap();
    assert_eq!(asks.outcome(&id).unwrap(), None);
    assert!(!asks.outcome_path(&id).exists());
}
