//! A crash at every filesystem step of asking, answering and expiring (spec/asks.md §4,
//! "Crash states"): each operation runs against a [`Recorder`] that freezes the filesystem at
//! effect n, for every n until it completes; the [`Model`] writes what a crash then may leave
//! (directories as of their last fsync, file data as of its last fsync), and also the tree as
//! it was live (as if another process had synced everything). On each image: no request is
//! lost or half there, a request `ask` returned is there, an answer `answer` returned is there,
//! there is never more than one outcome, and what follows (asking again by key, answering)
//! finds exactly one outcome.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sigbox::asks::{Asks, NewAsk, Outcome, Refusal};
use sigbox::{Mailbox, MailboxOptions};
use sigbox_tests::crash::{Model, Recorder, copy_tree};

const ID: &str = "Executor.k";

fn question() -> NewAsk {
    NewAsk::new("Executor", "deploy?")
        .key("k")
        .timeout(Duration::from_secs(3600))
}

fn open(root: &Path, link_claims: bool) -> Mailbox {
    MailboxOptions::new()
        .link_claims(link_claims)
        .open(root)
        .unwrap()
}

/// Every `.request.json` and `.outcome.json` in `asks/` (dot-files are stages, never read).
fn names(root: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(root.join("asks")) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

/// Runs `op` against a fresh copy of `template` frozen at every effect in turn; calls `check`
/// with the durable image and the live image of each crash, the operation's result, and
/// whether it completed. Returns how many crash points were checked.
fn each_crash<T>(
    template: &Path,
    scratch: &Path,
    link_claims: bool,
    op: &dyn Fn(&Mailbox) -> T,
    check: &dyn Fn(&str, &Path, Option<&T>),
) -> usize {
    for n in 0.. {
        let work = scratch.join(format!("w{n}"));
        copy_tree(template, &work);
        let mut model = Model::snapshot(&work);
        let rec = Arc::new(Recorder::freezing_at(n));
        let mb = MailboxOptions::new()
            .link_claims(link_claims)
            .hook(rec.clone())
            .open(&work)
            .unwrap();
        let r = op(&mb);
        let completed = rec.attempted() <= n;
        for o in rec.ops() {
            model.apply(&o);
        }
        for (kind, live) in [("durable", false), ("live", true)] {
            let img = scratch.join(format!("c{n}-{kind}"));
            if live {
                model.live(&img);
            } else {
                model.durable(&img);
            }
            let what = format!("crash at {n} ({kind} image)");
            // What the operation returned counts only when it ran to its end.
            check(&what, &img, completed.then_some(&r));
        }
        if completed {
            return n + 1;
        }
    }
    unreachable!()
}

#[test]
fn a_crash_while_asking_leaves_the_request_whole_or_absent_never_two() {
    for link in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let template = tmp.path().join("t");
        Mailbox::init(&template).unwrap();
        let states = each_crash(
            &template,
            tmp.path(),
            link,
            &|mb| Asks::new(mb).ask(&question()).is_ok(),
            &|what, img, returned| {
                let mb = open(img, link);
                let asks = Asks::new(&mb);
                let before = names(img);
                match asks.request(ID).unwrap() {
                    Ok(r) => assert_eq!(r.message, "deploy?", "{what}"),
                    Err(Refusal::Unknown { .. }) => {
                        assert_ne!(
                            returned,
                            Some(&true),
                            "{what}: a request ask returned is lost"
                        )
                    }
                    Err(other) => panic!("{what}: a half request: {other}"),
                }
                // The asker started again re-attaches to it, or asks it now: one request.
                let again = asks.ask(&question()).unwrap();
                assert_eq!(
                    again.attached,
                    before.iter().any(|n| n.ends_with(".request.json"))
                );
                assert_eq!(names(img), [format!("{ID}.request.json")], "{what}");
                assert!(asks.answer(ID, "approve", None, "alice").unwrap().is_ok());
            },
        );
        eprintln!("ask (link claims {link}): {states} crash points");
        assert!(states >= 4);
    }
}

#[test]
fn a_crash_while_answering_leaves_one_outcome_or_none_and_the_request() {
    for link in [false, true] {
        for forged in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let template = tmp.path().join("t");
            let mb = Mailbox::init(&template).unwrap();
            Asks::new(&mb).ask(&question()).unwrap();
            if forged {
                // A file dropped by hand in the outcome's place: quarantined by the answer.
                std::fs::write(template.join(format!("asks/{ID}.outcome.json")), "forged").unwrap();
            }
            drop(mb);
            let states = each_crash(
                &template,
                tmp.path(),
                link,
                &|mb| {
                    Asks::new(mb)
                        .answer(ID, "approve", Some("go"), "alice")
                        .map(|r| r.is_ok())
                        .unwrap_or(false)
                },
                &|what, img, returned| {
                    let mb = open(img, link);
                    let asks = Asks::new(&mb);
                    assert!(
                        asks.request(ID).unwrap().is_ok(),
                        "{what}: the request is lost"
                    );
                    let first = asks.outcome(ID).unwrap();
                    match &first {
                        Some(Outcome::Answered(a)) => {
                            assert_eq!((a.choice.as_str(), a.by.as_str()), ("approve", "alice"))
                        }
                        None => assert_ne!(
                            returned,
                            Some(&true),
                            "{what}: an answer `answer` returned is lost"
                        ),
                        Some(o) => panic!("{what}: {o:?}"),
                    }
                    if forged {
                        // The dropped file is never lost: in its place or quarantined.
                        let kept = std::fs::read_dir(img.join("rejected"))
                            .map(|d| d.count())
                            .unwrap_or(0)
                            > 0
                            || std::fs::read(img.join(format!("asks/{ID}.outcome.json")))
                                .is_ok_and(|b| b == b"forged");
                        assert!(kept || first.is_some(), "{what}: the dropped file is gone");
                    }
                    // A second answer: refused naming alice when hers stands, else the one.
                    let second = asks.answer(ID, "deny", None, "bob").unwrap();
                    match (&first, second) {
                        (Some(_), Err(r)) => {
                            assert!(r.to_string().contains("by alice"), "{what}: {r}")
                        }
                        (None, Ok(_)) => {}
                        (f, s) => panic!("{what}: first {f:?}, then {s:?}"),
                    }
                    assert!(asks.outcome(ID).unwrap().is_some(), "{what}");
                    let outcomes = names(img)
                        .iter()
                        .filter(|n| n.ends_with(".outcome.json"))
                        .count();
                    assert_eq!(outcomes, 1, "{what}");
                },
            );
            eprintln!("answer (link {link}, forged {forged}): {states} crash points");
            assert!(states >= 4);
        }
    }
}

#[test]
fn a_crash_while_expiring_leaves_the_expiry_or_nothing_and_a_late_answer_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let template = tmp.path().join("t");
    let mb = Mailbox::init(&template).unwrap();
    Asks::new(&mb)
        .ask(
            &NewAsk::new("Executor", "now?")
                .key("k")
                .timeout(Duration::ZERO),
        )
        .unwrap();
    drop(mb);
    let states = each_crash(
        &template,
        tmp.path(),
        false,
        &|mb| {
            Asks::new(mb)
                .expire(ID, "Executor")
                .ok()
                .flatten()
                .is_some()
        },
        &|what, img, returned| {
            let mb = open(img, false);
            let asks = Asks::new(&mb);
            let o = asks.outcome(ID).unwrap();
            assert!(
                matches!(o, Some(Outcome::Expired { .. }))
                    || (o.is_none() && returned != Some(&true)),
                "{what}: {o:?}"
            );
            let late = asks.answer(ID, "approve", None, "alice").unwrap();
            assert!(
                matches!(late, Err(Refusal::Expired { .. })),
                "{what}: {late:?}"
            );
            assert!(matches!(
                asks.outcome(ID).unwrap(),
                Some(Outcome::Expired { .. })
            ));
        },
    );
    eprintln!("expire: {states} crash points");
    assert!(states >= 4);
}
