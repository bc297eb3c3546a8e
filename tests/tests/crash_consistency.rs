//! Guards against lost, duplicated or half-visible signals after a crash at any filesystem step.
//!
//! Each writing operation runs against a [`Recorder`] that freezes the filesystem at effect n,
//! for every n until the operation completes. The recorded effects are replayed into a
//! [`Model`], which writes out what a crash at that moment may leave on disk (directories as of
//! their last fsync, file data as of its last fsync). A fresh mailbox is opened on that image
//! and drained by every agent; then: nothing sent is lost, nothing acknowledged before the crash
//! is delivered again, a signal delivered a second time is always marked as a redelivery
//! (its consumer died before acknowledging it), and no partial file is ever read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sigbox::{Durability, IoOptions, Mailbox, MailboxOptions, NewSignal, SignalType, Target};
use sigbox_tests::crash::{Model, Op, Recorder, copy_tree};

const AGENTS: [&str; 5] = [
    "Executor",
    "Planner",
    "Questioner",
    "Reviewer",
    "Orchestrator",
];

fn opts() -> MailboxOptions {
    let mut o = MailboxOptions::new();
    o.settle(Duration::ZERO);
    o
}

fn send(mb: &Mailbox, ty: SignalType, target: Target, msg: &str) -> String {
    mb.send(NewSignal::new(ty).target(target).message(msg))
        .unwrap()
}

fn agent(a: &str) -> Target {
    Target::Agent(a.into())
}

/// The starting mailbox every scenario shares, and what each agent must eventually receive.
struct Base {
    expected: BTreeMap<&'static str, BTreeSet<String>>,
    broadcast: String,
}

fn base(root: &Path) -> Base {
    let mb = opts().init(root).unwrap();
    let e1 = send(&mb, SignalType::Steer, agent("Executor"), "e1");
    let b = send(&mb, SignalType::Info, Target::All, "to all");
    let e2 = send(&mb, SignalType::Info, agent("Executor"), "e2");
    let p = send(&mb, SignalType::Steer, agent("Planner"), "p");
    let n = send(&mb, SignalType::Info, Target::None, "no target");
    // A hand-written upstream file for the Executor.
    std::fs::write(
        root.join("inputs/signal.260208-143000Z.yaml"),
        "type: INFO\ntarget: Executor\nmessage: from a person\n",
    )
    .unwrap();
    let f = "signal.260208-143000Z".to_string();
    let mut expected: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    expected.insert("Executor", [e1, e2, f, b.clone()].into());
    expected.insert("Planner", [p, b.clone()].into());
    expected.insert("Orchestrator", [n, b.clone()].into());
    expected.insert("Questioner", [b.clone()].into());
    expected.insert("Reviewer", [b.clone()].into());
    Base {
        expected,
        broadcast: b,
    }
}

/// One delivery: the agent, the signal id, its redelivery count, and whether it was
/// acknowledged (the consumer's `ack` returned) before the crash.
#[derive(Clone, Debug)]
struct Got {
    agent: String,
    id: String,
    again: u32,
    acked: bool,
}

type Handed = Vec<Got>;

/// Checks a sequence of deliveries: a second delivery of a signal to an agent is marked and
/// never follows an acknowledged one. Returns the (agent, id) pairs seen.
fn check_deliveries<'a>(
    ctx: &str,
    all: impl Iterator<Item = &'a Got>,
) -> BTreeSet<(String, String)> {
    let mut acked = BTreeSet::new();
    let mut seen = BTreeSet::new();
    for g in all {
        let key = (g.agent.clone(), g.id.clone());
        assert!(
            !acked.contains(&key),
            "{ctx}: {} delivered to {} again after it was acknowledged",
            g.id,
            g.agent
        );
        if !seen.insert(key.clone()) {
            assert!(
                g.again > 0,
                "{ctx}: {} delivered twice to {}, the second time unmarked",
                g.id,
                g.agent
            );
        }
        if g.acked {
            acked.insert(key);
        }
    }
    seen
}

/// Runs `op` with the filesystem frozen at effect `n`. Returns what it handed over, whether
/// it completed, the recorder, and an optional id that a completed `send` promises.
fn run_frozen(
    root: &Path,
    n: usize,
    mode: Mode,
    op: &dyn Fn(&Mailbox, &mut Handed) -> Option<String>,
) -> (Handed, bool, Arc<Recorder>, Option<String>) {
    let rec = Arc::new(Recorder::freezing_at(n));
    let mb = opts()
        .hook(rec.clone())
        .portable_rename(mode == Mode::Portable)
        .link_claims(mode == Mode::Link)
        .open(root)
        .unwrap();
    let mut handed = Vec::new();
    let promised = op(&mb, &mut handed);
    let completed = rec.attempted() <= n;
    (handed, completed, rec, promised)
}

/// Every pending signal of the crash image at `root`, each agent's passes until one delivers
/// nothing, claiming by link (`by_link`) or by rename: the rule of the filesystem, forced, so
/// that what an image is checked with does not depend on where the test runs.
fn drain(root: &Path, by_link: bool) -> (Handed, Vec<String>) {
    let mut o = opts();
    o.durability(Durability::RelaxedNoFsync)
        .link_claims(by_link);
    let mb = o.open(root).unwrap();
    let mut got = Vec::new();
    let mut rejected = Vec::new();
    for a in AGENTS {
        for _ in 0..20 {
            let pass = mb.pass(a, None).unwrap();
            assert!(pass.interrupted.is_none());
            rejected.extend(
                pass.rejected
                    .iter()
                    .map(|r| format!("{}: {}", r.name, r.reason)),
            );
            if pass.delivered.is_empty() {
                break;
            }
            // Acknowledged by the next pass of this handle.
            got.extend(pass.delivered.iter().map(|s| Got {
                agent: a.to_string(),
                // By stem: the replay copies files, so a dropped file's key changes.
                id: sigbox_tests::stem(&s.id),
                again: s.redelivery(),
                acked: true,
            }));
        }
    }
    (got, rejected)
}

/// Records what a pass of `agent` delivered, then acknowledges it: what `ack` confirmed is
/// marked acknowledged.
fn handed_of(mb: &Mailbox, pass: sigbox::Result<sigbox::Pass>, agent: &str, handed: &mut Handed) {
    if let Ok(p) = pass {
        let acked = mb.ack(agent).is_ok();
        handed.extend(p.delivered.into_iter().map(|s| Got {
            agent: agent.to_string(),
            again: s.redelivery(),
            id: sigbox_tests::stem(&s.id),
            acked,
        }));
    }
}

/// How claims move in a run (spec/mailbox.md §9.9, §9.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `renameat2(RENAME_NOREPLACE)`.
    Rename,
    /// The portable no-clobber rename of filesystems that refuse the flag.
    Portable,
    /// Claims by link, for filesystems whose rename is not atomic across directories.
    Link,
}

/// Every crash state of `op`, with `renameat2(RENAME_NOREPLACE)`, again with the portable
/// rename of filesystems that refuse it (spec/mailbox.md §9.9), and again with claims by link
/// (§9.10). The two renames must make the same effects (the portable path adds no `link`, no
/// `unlink`, nothing a crash could leave half-done), so the same states, each checked. Claims
/// by link are checked on a second image of each state too: the shared directories synced by
/// another process at the moment of the crash (a filesystem whose rename is not atomic across
/// directories can then keep a claim's removal from its source and lose its arrival).
/// Returns the number of crash states checked (with the rename).
fn enumerate(
    label: &str,
    prepare: &dyn Fn(&Path, &Base) -> Handed,
    op: &dyn Fn(&Mailbox, &mut Handed) -> Option<String>,
    check_broadcast_everyone: bool,
) -> usize {
    let (states, _) = enumerate_with(label, prepare, op, check_broadcast_everyone, Mode::Rename);
    let (portable, _) =
        enumerate_with(label, prepare, op, check_broadcast_everyone, Mode::Portable);
    assert_eq!(
        states, portable,
        "{label}: the portable rename makes other effects than RENAME_NOREPLACE"
    );
    let (linked, lost) = enumerate_with(label, prepare, op, check_broadcast_everyone, Mode::Link);
    assert!(linked >= states, "{label}: {linked} states by link");
    assert_eq!(lost, 0);
    states
}

/// Checks one crash image (`crashed`) against what the scenario promised. With `count_lost`,
/// a lost signal is counted (returned) instead of failing.
#[allow(clippy::too_many_arguments)]
fn check_image(
    ctx: &str,
    crashed: &Path,
    b: &Base,
    before: &Handed,
    handed: &Handed,
    promised: Option<&String>,
    check_broadcast_everyone: bool,
    count_lost: bool,
    by_link: bool,
) -> usize {
    let (after, rejected) = drain(crashed, by_link);
    assert!(
        rejected.is_empty(),
        "{ctx}: a partial or invalid file was visible: {rejected:?}"
    );
    let all = || before.iter().chain(handed).chain(&after);
    let seen: BTreeSet<(String, String)> = if count_lost {
        all().map(|g| (g.agent.clone(), g.id.clone())).collect()
    } else {
        check_deliveries(ctx, all())
    };
    let mut lost = 0;
    for (a, ids) in &b.expected {
        for id in ids {
            if *id == b.broadcast && !check_broadcast_everyone {
                continue;
            }
            if !seen.contains(&(a.to_string(), id.clone())) {
                assert!(
                    count_lost,
                    "{ctx}: {id} for {a} was lost\nbefore: {before:?}\nhanded: {handed:?}\nafter: {after:?}"
                );
                lost += 1;
            }
        }
    }
    if let Some(id) = promised
        && !seen.contains(&("Executor".to_string(), id.clone()))
    {
        assert!(
            count_lost,
            "{ctx}: send returned {id} but the signal was lost"
        );
        lost += 1;
    }
    lost
}

/// Enumerates every crash state of `op` in `mode`; returns how many, and how many signals
/// the images with another process's syncs lost (counted for the renames, which can lose
/// there; a failure for claims by link, which must not).
fn enumerate_with(
    label: &str,
    prepare: &dyn Fn(&Path, &Base) -> Handed,
    op: &dyn Fn(&Mailbox, &mut Handed) -> Option<String>,
    check_broadcast_everyone: bool,
    mode: Mode,
) -> (usize, usize) {
    let tmp = sigbox_tests::crash::image_dir();
    let template = tmp.path().join("template");
    let b = base(&template);
    let before = prepare(&template, &b);
    let mut states = 0;
    let mut lost = 0;
    for n in 0.. {
        let work = tmp.path().join(format!("work{n}"));
        copy_tree(&template, &work);
        let mut model = Model::snapshot(&work);
        let (handed, completed, rec, promised) = run_frozen(&work, n, mode, op);
        for o in rec.ops() {
            model.apply(&o);
        }
        let crashed = tmp.path().join(format!("crashed{n}"));
        states += 1;
        let ctx = format!("{label}: crash at effect {n} (completed: {completed}, {mode:?})");
        // Each image is read by a process that claims by the crashed one's rule, and by one
        // that claims by the other (the root read later on another filesystem, or with
        // SIGBOX_LINK_CLAIMS set otherwise): either recovers it whole.
        for by_link in readers(mode) {
            let read = format!("read by {}", if by_link { "link" } else { "rename" });
            let check = |what: &str, count_lost| {
                check_image(
                    &format!("{ctx}, {what}{read}"),
                    &crashed,
                    &b,
                    &before,
                    &handed,
                    promised.as_ref(),
                    check_broadcast_everyone,
                    count_lost,
                    by_link,
                )
            };
            model.durable(&crashed);
            check("", false);
            std::fs::remove_dir_all(&crashed).unwrap();
            // Another process synced the directories every process writes (`inputs/` at
            // each send, a buffer at each move into it) just before the crash.
            synced_by_another(&model, &work).durable(&crashed);
            let l = check(
                "shared directories synced by another process, ",
                mode != Mode::Link,
            );
            // Counted once, with the crashed process's own rule.
            if by_link == (mode == Mode::Link) {
                lost += l;
            }
            std::fs::remove_dir_all(&crashed).unwrap();
        }
        std::fs::remove_dir_all(&work).unwrap();
        if completed {
            break;
        }
    }
    eprintln!(
        "{label}: {states} crash states checked ({mode:?}), {lost} lost to another process's syncs"
    );
    (states, lost)
}

/// The rules, by link or by rename, that the readers of an image left by a process claiming
/// in `mode` claim by: its own first, then the other.
fn readers(mode: Mode) -> [bool; 2] {
    let own = mode == Mode::Link;
    [own, !own]
}

/// `model` with `inputs/` and the buffers of the mailbox at `work` synced, as another process
/// (a sender, the orchestrator) may have done just before a crash.
fn synced_by_another(model: &Model, work: &Path) -> Model {
    let mut shared = model.clone();
    let mut dirs = vec![work.join("inputs")];
    dirs.extend(shared.live_dirs(&work.join("buffered")));
    for d in dirs {
        shared.apply(&Op::SyncDir(d));
    }
    shared
}

/// The operation under test: one pass of `agent`, recording what it handed over.
fn pass_of(agent: &'static str) -> impl Fn(&Mailbox, &mut Handed) -> Option<String> {
    move |mb, h| {
        handed_of(mb, mb.pass(agent, None), agent, h);
        None
    }
}

fn nothing(_: &Path, _: &Base) -> Handed {
    Vec::new()
}

#[test]
fn crash_during_send() {
    let states = enumerate(
        "send",
        &nothing,
        &|mb, _| {
            mb.send(
                NewSignal::new(SignalType::Steer)
                    .target(agent("Executor"))
                    .message("s"),
            )
            .ok()
        },
        true,
    );
    assert!(states >= 5);
}

#[test]
fn crash_during_claim() {
    let states = enumerate(
        "executor pass (claim + broadcast ack)",
        &nothing,
        &pass_of("Executor"),
        true,
    );
    assert!(states >= 15);
}

/// The image with the shared directories synced by another process has teeth: claims by
/// rename lose signals there (the removal from `inputs/` durable, the arrival in the slot
/// not), which is why filesystems whose rename is not atomic across directories claim by
/// link (§9.10), and why `enumerate` checks that image for claims by link.
#[test]
fn claims_by_rename_lose_signals_to_another_processs_sync() {
    let (_, lost) = enumerate_with(
        "executor pass by rename",
        &nothing,
        &pass_of("Executor"),
        true,
        Mode::Rename,
    );
    assert!(lost > 0, "no state lost a signal: the image tests nothing");
}

#[test]
fn crash_during_orchestrator_pass() {
    let states = enumerate(
        "orchestrator pass (buffer + claim + ack)",
        &nothing,
        &pass_of("Orchestrator"),
        true,
    );
    assert!(states >= 15);
}

#[test]
fn crash_during_claim_from_buffer() {
    // The orchestrator has buffered the Planner's signal; the Planner now comes back.
    let states = enumerate(
        "planner pass from buffer",
        &|root, _| {
            let mb = opts().open(root).unwrap();
            let p = mb.pass("Orchestrator", None).unwrap();
            // No agent holds presence here, so every targeted signal is buffered.
            assert_eq!(p.buffered.len(), 4, "{:?}", p.buffered);
            assert!(p.buffered.iter().any(|b| b.agent == "Planner"));
            let mut h = Vec::new();
            handed_of(&mb, Ok(p), "Orchestrator", &mut h);
            h
        },
        &pass_of("Planner"),
        true,
    );
    assert!(states >= 10);
}

#[test]
fn crash_during_broadcast_archive() {
    // Every quorum agent but the orchestrator has acked; its pass acks and archives.
    let states = enumerate(
        "orchestrator archive",
        &|root, _| {
            let mb = opts().open(root).unwrap();
            let mut h = Vec::new();
            for a in ["Questioner", "Reviewer"] {
                handed_of(&mb, mb.pass(a, None), a, &mut h);
            }
            h
        },
        &|mb, h| {
            let p = mb.pass("Orchestrator", None);
            handed_of(mb, p, "Orchestrator", h);
            None
        },
        true,
    );
    assert!(states >= 10);
}

#[test]
fn crash_during_finish() {
    let states = enumerate(
        "finish",
        &|root, b| {
            let mb = opts().open(root).unwrap();
            let mut h = Vec::new();
            handed_of(&mb, mb.pass("Reviewer", None), "Reviewer", &mut h);
            assert!(h.iter().any(|g| g.id == b.broadcast));
            h
        },
        &|mb, _| {
            let _ = mb.finish("Orchestrator");
            None
        },
        false,
    );
    assert!(states >= 5);
}

#[test]
fn crash_during_quarantine_and_gc() {
    for mode in [Mode::Rename, Mode::Link] {
        quarantine_and_gc(mode);
    }
}

fn quarantine_and_gc(mode: Mode) {
    let tmp = sigbox_tests::crash::image_dir();
    let template = tmp.path().join("t");
    let mb = opts().init(&template).unwrap();
    let good = send(&mb, SignalType::Steer, agent("Executor"), "good");
    std::fs::write(template.join("inputs/broken.yaml"), "type: [unclosed\n").unwrap();
    std::fs::write(template.join("tmp/123.abandoned.send.tmp"), "partial").unwrap();
    drop(mb);
    let mut states = 0;
    for n in 0.. {
        let work = tmp.path().join(format!("w{n}"));
        copy_tree(&template, &work);
        let mut model = Model::snapshot(&work);
        let rec = Arc::new(Recorder::freezing_at(n));
        let mb = opts()
            .hook(rec.clone())
            .link_claims(mode == Mode::Link)
            .open(&work)
            .unwrap();
        let mut handed = Vec::new();
        handed_of(&mb, mb.pass("Executor", None), "Executor", &mut handed);
        let _ = mb.gc(Duration::ZERO, 100);
        let completed = rec.attempted() <= n;
        for o in rec.ops() {
            model.apply(&o);
        }
        let crashed = tmp.path().join(format!("c{n}"));
        model.durable(&crashed);
        states += 1;
        // The broken file is never lost: it is in inputs/ or in rejected/ (maybe both after a
        // crash between the two directory fsyncs), and its bytes are intact where it is.
        let in_inputs = crashed.join("inputs/broken.yaml");
        let in_rejected = crashed.join("rejected/broken.yaml");
        assert!(
            in_inputs.exists() || in_rejected.exists(),
            "crash at {n}: broken file lost"
        );
        for p in [&in_inputs, &in_rejected] {
            if p.exists() {
                assert_eq!(
                    std::fs::read(p).unwrap(),
                    b"type: [unclosed\n",
                    "crash at {n}"
                );
            }
        }
        let (after, _) = drain(&crashed, mode == Mode::Link);
        let seen = check_deliveries(&format!("crash at {n}"), handed.iter().chain(&after));
        assert!(
            seen.contains(&("Executor".to_string(), good.clone())),
            "crash at {n}: good signal lost"
        );
        assert!(
            crashed.join("rejected/broken.yaml").exists(),
            "crash at {n}"
        );
        if completed {
            break;
        }
    }
    eprintln!("quarantine + gc: {states} crash states checked ({mode:?})");
    assert!(states >= 8);
}

/// The state a claimer leaves when it dies between `link` and `unlink` (the portable no-clobber
/// rename): the signal under both names, as two links to one file. It must be delivered
/// exactly once, and nothing may be quarantined as a suspicious hard link.
#[test]
fn interrupted_link_unlink_claim_is_finished_once() {
    let tmp = tempfile::tempdir().unwrap();
    let mb = opts().init(tmp.path()).unwrap();
    let id = send(&mb, SignalType::Steer, agent("Executor"), "linked");
    let name = format!("{id}.json");
    std::fs::hard_link(
        tmp.path().join("inputs").join(&name),
        tmp.path().join("processed").join(&name),
    )
    .unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    assert_eq!(pass.delivered.len(), 1, "{pass:?}");
    assert_eq!(pass.delivered[0].id, id);
    assert!(pass.rejected.is_empty(), "{:?}", pass.rejected);
    assert!(mb.pass("Executor", None).unwrap().delivered.is_empty());
    assert!(sigbox_tests::names(&tmp.path().join("inputs")).is_empty());
    let rec = mb.processed().unwrap();
    assert_eq!(rec.len(), 1);
    let sig = rec[0].as_ref().unwrap();
    assert_eq!(sig.fields["handling_metadata"]["handled_by"], "Executor");
}

/// A crash after the handling block was appended and fsynced, before the directories were:
/// the source name still points at the annotated file. It is delivered once, not refused.
#[test]
fn interrupted_claim_with_appended_block_is_finished_once() {
    let tmp = tempfile::tempdir().unwrap();
    let mb = opts().init(tmp.path()).unwrap();
    let id = send(&mb, SignalType::Info, agent("Executor"), "annotated");
    let input = tmp.path().join("inputs").join(format!("{id}.json"));
    let mut bytes = std::fs::read(&input).unwrap();
    bytes.extend_from_slice(
        br#"{"handling_metadata":{"handled_by":"Executor","handled_at":"x","action_taken":"delivered"}}
"#,
    );
    std::fs::write(&input, &bytes).unwrap();
    std::fs::write(
        tmp.path().join("processed").join(format!("{id}.json")),
        &bytes,
    )
    .unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    assert_eq!(pass.delivered.len(), 1);
    assert_eq!(pass.delivered[0].message.as_deref(), Some("annotated"));
    assert!(pass.rejected.is_empty());
    assert!(mb.pass("Executor", None).unwrap().delivered.is_empty());
}

/// Enumerates crash points of `op` on a tree prepared by `prepare`, and checks each durable
/// image with `check`. Returns the number of crash states.
fn enumerate_tree(
    prepare: &dyn Fn(&Path),
    op: &dyn Fn(&Path, Arc<Recorder>) -> bool,
    check: &dyn Fn(&Path, usize, bool),
) -> usize {
    enumerate_tree_shared(prepare, op, check, false)
}

/// [`enumerate_tree`]; with `shared`, every state is checked a second time with `inputs/`
/// and the buffers synced by another process at the moment of the crash (see `enumerate`).
fn enumerate_tree_shared(
    prepare: &dyn Fn(&Path),
    op: &dyn Fn(&Path, Arc<Recorder>) -> bool,
    check: &dyn Fn(&Path, usize, bool),
    shared: bool,
) -> usize {
    let tmp = sigbox_tests::crash::image_dir();
    let template = tmp.path().join("t");
    std::fs::create_dir_all(&template).unwrap();
    prepare(&template);
    let mut states = 0;
    for n in 0.. {
        let work = tmp.path().join(format!("w{n}"));
        copy_tree(&template, &work);
        let mut model = Model::snapshot(&work);
        let rec = Arc::new(Recorder::freezing_at(n));
        let ok = op(&work, rec.clone());
        let completed = rec.attempted() <= n;
        for o in rec.ops() {
            model.apply(&o);
        }
        let crashed = tmp.path().join(format!("c{n}"));
        model.durable(&crashed);
        check(&crashed, n, ok);
        std::fs::remove_dir_all(&crashed).unwrap();
        if shared {
            let mut other = model.clone();
            let mut dirs = vec![work.join("inputs")];
            dirs.extend(other.live_dirs(&work.join("buffered")));
            for d in dirs {
                other.apply(&Op::SyncDir(d));
            }
            let crashed = tmp.path().join(format!("s{n}"));
            other.durable(&crashed);
            check(&crashed, n, ok);
            std::fs::remove_dir_all(&crashed).unwrap();
        }
        std::fs::remove_dir_all(&work).unwrap();
        states += 1;
        if completed {
            break;
        }
    }
    states
}

#[test]
fn crash_during_goblin_writes_and_transitions() {
    use sigbox::goblin::{Goblin, GoblinSignal, PipelineState, Stage};
    let old = br#"{"commits": 1}"#;
    let body: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(r#"{"commits": 5, "files_changed": 8}"#).unwrap();
    // Replacing a signal file: old or new, whole, never torn or lost.
    let states = enumerate_tree(
        &|t| {
            std::fs::create_dir_all(t.join(".goblin")).unwrap();
            std::fs::write(t.join(".goblin/build-complete"), old).unwrap();
        },
        &|w, rec| {
            let g = Goblin::open_with(w, IoOptions::new().hook(rec)).unwrap();
            g.write(GoblinSignal::BuildComplete, Some(body.clone()))
                .is_ok()
        },
        &|c, n, ok| {
            let got = std::fs::read(c.join(".goblin/build-complete")).expect("signal file lost");
            let v: serde_json::Value = serde_json::from_slice(&got).unwrap_or_else(|e| {
                panic!(
                    "crash at {n}: torn file {:?}: {e}",
                    String::from_utf8_lossy(&got)
                )
            });
            if ok {
                assert_eq!(
                    v["commits"], 5,
                    "crash at {n}: the write returned but was lost"
                );
            } else {
                assert!(v["commits"] == 1 || v["commits"] == 5, "crash at {n}: {v}");
            }
        },
    );
    // Consuming it on a transition (moved to .consumed/) and saving the stage.
    let states2 = enumerate_tree(
        &|t| {
            std::fs::create_dir_all(t.join(".goblin")).unwrap();
            std::fs::write(t.join(".goblin/build-complete"), old).unwrap();
        },
        &|w, rec| {
            let g = Goblin::open_with(w, IoOptions::new().hook(rec)).unwrap();
            g.set_aside(GoblinSignal::BuildComplete, true).is_ok()
                && g.save_state(PipelineState {
                    stage: Stage::Review,
                    retries: 0,
                })
                .is_ok()
        },
        &|c, n, ok| {
            let here = c.join(".goblin/build-complete").exists();
            let consumed: Vec<_> = std::fs::read_dir(c.join(".goblin/.consumed"))
                .map(|rd| rd.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            assert!(
                here || !consumed.is_empty(),
                "crash at {n}: the signal was lost"
            );
            for p in &consumed {
                assert_eq!(std::fs::read(p).unwrap(), old, "crash at {n}");
            }
            if ok {
                assert!(!here, "crash at {n}: consumed twice");
                let st = std::fs::read_to_string(c.join(".goblin/.sigbox-state.json")).unwrap();
                assert!(st.contains("REVIEW"), "crash at {n}: {st}");
            }
        },
    );
    eprintln!("goblin: {} crash states checked", states + states2);
    assert!(states + states2 >= 10);
}

#[test]
fn crash_during_mux_signal_writes() {
    use sigbox::mux::{self, MuxFields, MuxFormat, MuxStatus};
    let states = enumerate_tree(
        &|t| std::fs::create_dir_all(t.join("tmp/mux/s1")).unwrap(),
        &|w, rec| {
            let fields = MuxFields {
                path: Some("tmp/out.md".into()),
                size: Some(42),
                ..MuxFields::default()
            };
            mux::write_signal_with(
                w,
                Path::new("tmp/mux/s1/implement"),
                MuxStatus::Success,
                &fields,
                MuxFormat::Kv,
                IoOptions::new().hook(rec),
            )
            .is_ok()
        },
        &|c, n, ok| {
            let f = c.join("tmp/mux/s1/.signals/implement.done");
            match std::fs::read_to_string(&f) {
                Ok(text) => {
                    let r = mux::parse_record(text.as_bytes()).unwrap();
                    assert_eq!(
                        r.get("size").and_then(|v| v.as_str()),
                        Some("42"),
                        "crash at {n}: torn {text:?}"
                    );
                }
                Err(_) => assert!(
                    !ok,
                    "crash at {n}: the write returned but the signal is gone"
                ),
            }
            // Staging files are dot-files: never counted as signals.
            let found = mux::find(&c.join("tmp/mux/s1"), None).unwrap();
            assert!(found.done.len() <= 1, "crash at {n}");
        },
    );
    eprintln!("mux: {states} crash states checked");
    assert!(states >= 6);
}

/// A crash during the append of a dropped YAML file's handling block: the source name came
/// back (its directory was not synced) with a zero-filled tail, and processed/ holds the record.
/// The signal is delivered once, not quarantined as malformed.
#[test]
fn interrupted_yaml_claim_with_a_zero_tail_is_finished_once() {
    let tmp = tempfile::tempdir().unwrap();
    let mb = opts().init(tmp.path()).unwrap();
    let body = "type: INFO\ntarget: Executor\nmessage: torn\n";
    let mut torn = body.as_bytes().to_vec();
    torn.extend_from_slice(&[0u8; 24]);
    // The crash left one file under two names (the rename's new entry durable, the removal of
    // the old one not), its append torn: a size extended over zeros.
    std::fs::write(tmp.path().join("inputs/note.yaml"), &torn).unwrap();
    std::fs::hard_link(
        tmp.path().join("inputs/note.yaml"),
        tmp.path().join("processed/note.yaml"),
    )
    .unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    assert!(pass.rejected.is_empty(), "{:?}", pass.rejected);
    assert_eq!(pass.delivered.len(), 1);
    assert_eq!(pass.delivered[0].message.as_deref(), Some("torn"));
    assert!(mb.pass("Executor", None).unwrap().delivered.is_empty());
    // Without a claim to finish, the same bytes dropped by a person are malformed: refused.
    std::fs::write(tmp.path().join("inputs/other.yaml"), &torn).unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    assert!(pass.delivered.is_empty());
    assert_eq!(pass.rejected.len(), 1);
    // A new drop under a name processed before is another file (another inode), not the
    // leftover of that claim: the same bytes are refused there too.
    std::fs::write(
        tmp.path().join("processed/again.yaml"),
        format!("{body}handling_metadata:\n  handled_by: Executor\n"),
    )
    .unwrap();
    std::fs::write(tmp.path().join("inputs/again.yaml"), &torn).unwrap();
    let pass = mb.pass("Executor", None).unwrap();
    assert!(pass.delivered.is_empty(), "{:?}", pass.delivered);
    assert_eq!(pass.rejected.len(), 1);
    assert_eq!(pass.rejected[0].name, "again.yaml");
}

/// A pass claims in groups: each claim renames into the handle's slot and appends its handling
/// block (never synced: a record, not a promise), then the group is made durable together (the
/// slot fsynced once, then `inputs/` once) before anything is handed over; at most 64 claims
/// per group. The acknowledgement moves them all into `processed/` and fsyncs it once.
#[test]
fn claims_of_a_pass_commit_together() {
    for mode in [Mode::Rename, Mode::Link] {
        claims_commit_together(mode);
    }
}

/// The effects of passes over 1 to 130 signals: group commits of at most 64 claims, each
/// claim by rename (or by link: every link of the group, the slot's fsync, then each source
/// removed and each record written, §9.10), the slot synced before `inputs/`.
fn claims_commit_together(mode: Mode) {
    for (k, groups) in [(1, 1), (5, 1), (64, 1), (65, 2), (130, 3)] {
        let tmp = tempfile::tempdir().unwrap();
        let mb = opts().init(tmp.path()).unwrap();
        let ids: Vec<String> = (0..k)
            .map(|i| send(&mb, SignalType::Info, agent("Executor"), &format!("m{i}")))
            .collect();
        let rec = Arc::new(Recorder::new());
        let mb = opts()
            .hook(rec.clone())
            .link_claims(mode == Mode::Link)
            .open(tmp.path())
            .unwrap();
        let pass = mb.pass("Executor", None).unwrap();
        let got: Vec<String> = pass.delivered.iter().map(|s| s.id.clone()).collect();
        assert_eq!(got, ids, "every signal, in FIFO order");
        for s in &pass.delivered {
            // A delivered signal carries the handling block appended to its record.
            assert_eq!(s.fields["handling_metadata"]["handled_by"], "Executor");
            assert_eq!(s.fields["handling_metadata"]["action_taken"], "delivered");
            assert_eq!(s.redelivery(), 0);
        }
        let ops = rec.ops();
        let processed = tmp.path().join("processed");
        let inputs = tmp.path().join("inputs");
        let claimed = tmp.path().join("claimed");
        let agent_dir = claimed.join("Executor");
        let slot = agent_dir.join("0");
        // The first claim makes the slot: each new directory, then its parent.
        let made = [
            Op::CreateDir(agent_dir.clone()),
            Op::SyncDir(agent_dir.clone()),
            Op::SyncDir(claimed.clone()),
            Op::CreateDir(slot.clone()),
            Op::SyncDir(slot.clone()),
            Op::SyncDir(agent_dir.clone()),
        ];
        assert_eq!(format!("{:?}", &ops[..6]), format!("{made:?}"));
        let ops = &ops[6..];
        let count = |f: &dyn Fn(&Op) -> bool| ops.iter().filter(|o| f(o)).count();
        let linked = mode == Mode::Link;
        assert_eq!(count(&|o| matches!(o, Op::Rename(..))), k);
        assert_eq!(
            count(&|o| matches!(o, Op::Link(..))),
            if linked { k } else { 0 }
        );
        assert_eq!(
            count(&|o| matches!(o, Op::Remove(..))),
            if linked { k } else { 0 }
        );
        assert_eq!(
            count(&|o| matches!(o, Op::ReplaceTail(..))),
            k,
            "one handling record per claim"
        );
        assert_eq!(
            count(&|o| matches!(o, Op::SyncFile(_))),
            0,
            "no file synced"
        );
        assert_eq!(
            count(&|o| matches!(o, Op::SyncDir(d) if *d == slot)),
            groups,
            "{k} claims"
        );
        assert_eq!(
            count(&|o| matches!(o, Op::SyncDir(d) if *d == inputs)),
            groups,
            "{k} claims"
        );
        assert_eq!(
            count(&|o| matches!(o, Op::SyncDir(d) if *d == processed)),
            0
        );
        // Within each group: by rename, every rename and record, then the slot, then
        // inputs/; by link, every link, then the slot, then every source's removal (moved
        // aside beside the link and unlinked there) and record, then inputs/.
        let mut phase = 0;
        for o in ops {
            let p = match o {
                Op::Rename(..) | Op::ReplaceTail(..) if !linked => 0,
                Op::Link(from, to) if from.starts_with(&inputs) && to.starts_with(&slot) => 0,
                Op::SyncDir(d) if *d == slot => 1,
                Op::Rename(from, to)
                    if linked && from.starts_with(&inputs) && to.starts_with(&slot) =>
                {
                    2
                }
                Op::Remove(p) | Op::ReplaceTail(p, ..) if linked && p.starts_with(&slot) => 2,
                Op::SyncDir(d) if *d == inputs => 3,
                other => panic!("{mode:?}: unexpected effect {other:?}"),
            };
            assert!(
                p >= phase || (phase == 3 && p == 0),
                "{k} claims ({mode:?}): {o:?} out of order in {ops:?}"
            );
            phase = p;
        }
        // The acknowledgement: k renames from the slot into processed/, one fsync.
        let before = rec.ops().len();
        assert_eq!(mb.ack("Executor").unwrap(), k);
        let acked = &rec.ops()[before..];
        assert_eq!(acked.len(), k + 1, "{acked:?}");
        assert!(
            acked[..k]
                .iter()
                .all(|o| matches!(o, Op::Rename(from, to) if from.starts_with(&slot) && to.starts_with(&processed)))
        );
        assert!(matches!(&acked[k], Op::SyncDir(d) if *d == processed));
        assert_eq!(mb.processed().unwrap().len(), k);
    }
}

/// Crashes an Executor pass at every effect, over the signals `prepare` leaves (it returns
/// their ids): each is delivered exactly once, counting what the pass handed over and what
/// passes after the crash deliver. Returns the number of crash states and the set of how many
/// signals the crashed pass handed over.
fn crash_executor_pass(
    prepare: &dyn Fn(&Mailbox) -> Vec<String>,
    mode: Mode,
) -> (usize, BTreeSet<usize>) {
    let ids = std::sync::Mutex::new(BTreeSet::<String>::new());
    let handed = std::sync::Mutex::new(Handed::new());
    let sizes = std::sync::Mutex::new(BTreeSet::new());
    let states = enumerate_tree_shared(
        &|t| {
            let mb = opts().init(t).unwrap();
            ids.lock().unwrap().extend(prepare(&mb));
        },
        &|w, rec| {
            let mb = opts()
                .hook(rec)
                .link_claims(mode == Mode::Link)
                .open(w)
                .unwrap();
            let mut h = handed.lock().unwrap();
            h.clear();
            let pass = mb.pass("Executor", None);
            let whole = pass.as_ref().is_ok_and(|p| p.interrupted.is_none());
            handed_of(&mb, pass, "Executor", &mut h);
            whole && h.iter().all(|g| g.acked)
        },
        &|c, n, _| {
            let (after, rejected) = drain(c, mode == Mode::Link);
            assert!(rejected.is_empty(), "crash at {n}: {rejected:?}");
            let h = handed.lock().unwrap();
            let seen = check_deliveries(&format!("crash at {n}"), h.iter().chain(&after));
            let seen: BTreeSet<String> = seen.into_iter().map(|(_, id)| id).collect();
            assert_eq!(
                seen,
                *ids.lock().unwrap(),
                "crash at {n}: lost or unexpected signals"
            );
            sizes.lock().unwrap().insert(h.len());
        },
        mode == Mode::Link,
    );
    (states, sizes.into_inner().unwrap())
}

fn send_executor(mb: &Mailbox, prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            send(
                mb,
                SignalType::Info,
                agent("Executor"),
                &format!("{prefix}{i}"),
            )
        })
        .collect()
}

/// Crash at every effect of a pass over 66 signals (two groups: 64, then 2): none is lost,
/// none is handed over before its group is durable.
#[test]
fn crash_during_groups_of_claims() {
    for mode in [Mode::Rename, Mode::Link] {
        let (states, sizes) = crash_executor_pass(&|mb| send_executor(mb, "g", 66), mode);
        eprintln!("groups of claims: {states} crash states checked ({mode:?})");
        assert!(states >= 66 * 3);
        // Handed over only in whole groups, oldest first.
        assert_eq!(sizes, BTreeSet::from([0, 64, 66]), "{mode:?}");
    }
}

#[test]
fn crash_during_a_group_from_a_buffer_and_inputs() {
    // One pass claims from two source directories: the agent's buffer (older signals) and
    // inputs/. The commit syncs processed/, then inputs/, then the buffer (inputs/ first: see
    // a_buffered_signal_claimed_before_a_power_loss_is_not_delivered_again): a crash between
    // the two leaves the claims from inputs/ durable, and they must have been handed over.
    for mode in [Mode::Rename, Mode::Link] {
        let (states, sizes) = crash_executor_pass(
            &|mb| {
                let mut ids = send_executor(mb, "b", 3);
                // Executor holds no presence lock: the orchestrator buffers the three.
                let p = mb.pass("Orchestrator", None).unwrap();
                assert_eq!(p.buffered.len(), 3);
                ids.extend(send_executor(mb, "i", 3));
                ids
            },
            mode,
        );
        eprintln!("group from a buffer and inputs/: {states} crash states checked ({mode:?})");
        // Nothing, the three from inputs/ (the buffer not synced yet), or all six.
        assert_eq!(sizes, BTreeSet::from([0, 3, 6]), "{mode:?}");
    }
}

/// A hook that records into a shared [`Recorder`] and fails one directory's fsync: the moment
/// a process dies between two fsyncs, while other processes go on.
struct DiesBeforeSyncing {
    rec: Arc<Recorder>,
    dir: std::path::PathBuf,
}

impl sigbox::FsHook for DiesBeforeSyncing {
    fn before(&self, op: &sigbox::FsOp<'_>) -> std::io::Result<()> {
        if matches!(op, sigbox::FsOp::SyncDir(d) if *d == self.dir) {
            return Err(std::io::Error::other("the process died here"));
        }
        self.rec.before(op)
    }

    fn after(&self, op: &sigbox::FsOp<'_>, ok: bool) {
        self.rec.after(op, ok);
    }
}

#[test]
fn a_buffered_signal_claimed_before_a_power_loss_is_not_delivered_again() {
    // The orchestrator moves a signal into an absent agent's buffer and syncs the buffer, but
    // dies before syncing inputs/. The agent starts at once, claims the signal from its buffer,
    // acts on it and acknowledges it. Then the power fails: on a filesystem whose renames are not atomic
    // across directories, inputs/ may come back as of its last fsync, still holding the
    // signal. The agent must not receive it a second time.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("t");
    let id = {
        let mb = opts().init(&root).unwrap();
        send(&mb, SignalType::Steer, agent("Executor"), "once")
    };
    let mut model = Model::snapshot(&root);
    let rec = Arc::new(Recorder::new());
    let orch = opts()
        .hook(Arc::new(DiesBeforeSyncing {
            rec: rec.clone(),
            dir: root.join("inputs"),
        }))
        .open(&root)
        .unwrap();
    assert!(
        orch.pass("Orchestrator", None).is_err(),
        "died at the fsync"
    );
    assert!(
        root.join("buffered/Executor")
            .join(format!("{id}.json"))
            .exists()
    );
    let exec = opts().hook(rec.clone()).open(&root).unwrap();
    let first = exec.pass("Executor", None).unwrap();
    assert_eq!(first.delivered.len(), 1);
    assert_eq!(first.delivered[0].id, id);
    assert_eq!(exec.ack("Executor").unwrap(), 1);

    for o in rec.ops() {
        model.apply(&o);
    }
    let after = tmp.path().join("after");
    model.durable(&after);
    let mut again = Vec::new();
    for _ in 0..2 {
        for a in ["Orchestrator", "Executor"] {
            let mb = opts().open(&after).unwrap();
            again.extend(
                mb.pass(a, None)
                    .unwrap()
                    .delivered
                    .into_iter()
                    .map(|s| s.id),
            );
        }
    }
    assert!(
        again.is_empty(),
        "delivered again after the power loss: {again:?}"
    );
}

/// Every crash state of `op` claiming by link (the rule of ext4 without a journal), each image
/// checked once for every set of the directories left unsynced that the filesystem may have
/// written back by itself: such a filesystem writes a directory's block when it likes, so a
/// later removal in one directory can outlive an earlier one in another. Returns how many
/// images were checked.
fn enumerate_writebacks(
    label: &str,
    prepare: &dyn Fn(&Path, &Base) -> Handed,
    op: &dyn Fn(&Mailbox, &mut Handed) -> Option<String>,
) -> usize {
    let tmp = sigbox_tests::crash::image_dir();
    let template = tmp.path().join("template");
    let b = base(&template);
    let before = prepare(&template, &b);
    let mut images = 0;
    for n in 0.. {
        let work = tmp.path().join(format!("work{n}"));
        copy_tree(&template, &work);
        let mut model = Model::snapshot(&work);
        let (handed, completed, rec, promised) = run_frozen(&work, n, Mode::Link, op);
        for o in rec.ops() {
            model.apply(&o);
        }
        let dirty = model.dirty_dirs();
        assert!(
            dirty.len() <= 10,
            "{label}: {} directories unsynced",
            dirty.len()
        );
        for set in 0..1u32 << dirty.len() {
            let mut image = model.clone();
            let written: Vec<&Path> = (0..dirty.len())
                .filter(|i| set & 1 << i != 0)
                .map(|i| dirty[i].as_path())
                .collect();
            for d in &written {
                image.apply(&Op::SyncDir(d.to_path_buf()));
            }
            let crashed = tmp.path().join(format!("crashed{n}-{set}"));
            image.durable(&crashed);
            let ctx = format!(
                "{label}: crash at effect {n} (completed: {completed}), written back: {:?}",
                written
                    .iter()
                    .map(|d| d.strip_prefix(&work).unwrap())
                    .collect::<Vec<_>>()
            );
            check_image(
                &ctx,
                &crashed,
                &b,
                &before,
                &handed,
                promised.as_ref(),
                true,
                false,
                true,
            );
            std::fs::remove_dir_all(&crashed).unwrap();
            images += 1;
        }
        std::fs::remove_dir_all(&work).unwrap();
        if completed {
            break;
        }
    }
    eprintln!("{label}: {images} images checked (by link, every write-back)");
    images
}

/// A broadcast delivered and acknowledged, and one whose hand-over failed and that is taken
/// back (its ack and marker removed), each cut off at every step, with any directory left
/// unsynced written back or not: the broadcast is never lost to its agent, nor delivered to
/// it twice unmarked.
#[test]
fn crash_during_a_broadcast_acknowledged_or_taken_back() {
    let images = enumerate_writebacks("broadcast acknowledged", &nothing, &|mb, h| {
        let p = mb.pass("Questioner", None);
        handed_of(mb, p, "Questioner", h);
        None
    });
    assert!(images >= 10);
    let images = enumerate_writebacks("broadcast taken back", &nothing, &|mb, _| {
        let full = &mut |_: &[sigbox::Signal]| Err(std::io::Error::from_raw_os_error(28));
        let taken = mb.pass_with("Questioner", None, &sigbox::PassControl::new(), full);
        assert!(taken.is_err());
        None
    });
    assert!(images >= 10);
}

/// Claims, buffering, a claim from a buffer and an archive by link, each cut off at every step
/// with any directory left unsynced written back or not: nothing is lost or delivered twice
/// unmarked.
#[test]
fn crash_during_claims_by_link_with_every_write_back() {
    let mut images = 0;
    for a in ["Executor", "Orchestrator"] {
        images += enumerate_writebacks(&format!("{a} pass"), &nothing, &|mb, h| {
            handed_of(mb, mb.pass(a, None), a, h);
            None
        });
    }
    images += enumerate_writebacks(
        "planner pass from buffer",
        &|root, _| {
            let mb = opts().open(root).unwrap();
            let mut h = Vec::new();
            handed_of(&mb, mb.pass("Orchestrator", None), "Orchestrator", &mut h);
            h
        },
        &pass_of("Planner"),
    );
    images += enumerate_writebacks(
        "orchestrator archive",
        &|root, _| {
            let mb = opts().open(root).unwrap();
            let mut h = Vec::new();
            for a in ["Questioner", "Reviewer", "Executor", "Planner"] {
                handed_of(&mb, mb.pass(a, None), a, &mut h);
            }
            h
        },
        &pass_of("Orchestrator"),
    );
    assert!(images >= 100);
}

/// What an export leaves for the next bridge: the stems of the signals in `bridge/outbox/`
/// (published again) and in `bridge/sent/` (recorded exported).
fn bridge_dir_stems(root: &Path, dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(root.join("bridge").join(dir))
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| !n.starts_with('.'))
                .map(|n| sigbox_tests::stem(n.strip_suffix(".json").unwrap_or(&n)))
                .collect()
        })
        .unwrap_or_default()
}

/// A bridge's round (spec/bridge.md §3, §4) crashed at every filesystem step: it takes the
/// signals of the agents not here (the Planner's, the orchestrator's) into its outbox,
/// "publishes" them (the server's acknowledgement is taken as given), records them exported,
/// then imports a signal from another host for the Executor. After the crash, every signal is
/// delivered here, or waits in `bridge/outbox/` for the next bridge to publish it again, or is
/// recorded in `bridge/sent/` only if it was published; never two of these; and the imported
/// signal, once `BridgeSide::import` said it was written, is delivered.
#[test]
fn crash_during_a_bridge_export_and_import() {
    for mode in [Mode::Rename, Mode::Portable, Mode::Link] {
        let tmp = sigbox_tests::crash::image_dir();
        let template = tmp.path().join("template");
        let b = base(&template);
        let import_id =
            "signal.20260208T143001.000000Z.0123456789abcdef0123456789abcdef.STEER.Executor";
        let import_body = format!(
            "{{\"id\": \"{import_id}\", \"type\": \"STEER\", \"target\": \"Executor\", \"message\": \"from h1\", \"bridged\": {{\"from\": \"h1\", \"hops\": 0}}}}\n"
        );
        let mut states = 0;
        for n in 0.. {
            let work = tmp.path().join(format!("work{n}"));
            copy_tree(&template, &work);
            let mut model = Model::snapshot(&work);
            let rec = Arc::new(Recorder::freezing_at(n));
            let mb = opts()
                .hook(rec.clone())
                .portable_rename(mode == Mode::Portable)
                .link_claims(mode == Mode::Link)
                .open(&work)
                .unwrap();
            let mut published = BTreeSet::new();
            let mut imported = false;
            let here = |a: &str| a == "Executor";
            let mut seen = sigbox::BroadcastsSeen::default();
            if let Ok(outs) = mb.bridge().take("h0", 64, &here, &mut seen) {
                published.extend(outs.iter().map(|o| sigbox_tests::stem(&o.id)));
                if mb.bridge().exported(&outs).is_ok() {
                    imported = matches!(
                        mb.bridge()
                            .import(&format!("{import_id}.json"), import_body.as_bytes()),
                        Ok(sigbox::Imported::Written)
                    );
                }
            }
            drop(mb);
            let completed = rec.attempted() <= n;
            for o in rec.ops() {
                model.apply(&o);
            }
            let crashed = tmp.path().join(format!("crashed{n}"));
            states += 1;
            let ctx =
                format!("bridge export: crash at effect {n} (completed: {completed}, {mode:?})");
            for by_link in readers(mode) {
                let read = format!("read by {}", if by_link { "link" } else { "rename" });
                model.durable(&crashed);
                let ctx = format!("{ctx}, {read}");
                check_bridge_image(&ctx, &crashed, &b, &published, imported, import_id, by_link);
                std::fs::remove_dir_all(&crashed).unwrap();
                if mode == Mode::Link {
                    // Another process synced inputs/ and the buffers just before the crash: by
                    // link, that loses nothing either (spec/mailbox.md §9.10).
                    synced_by_another(&model, &work).durable(&crashed);
                    let ctx = format!("{ctx}, shared directories synced by another process");
                    check_bridge_image(
                        &ctx, &crashed, &b, &published, imported, import_id, by_link,
                    );
                    std::fs::remove_dir_all(&crashed).unwrap();
                }
            }
            std::fs::remove_dir_all(&work).unwrap();
            if completed {
                assert!(imported, "{ctx}: the import did not happen");
                break;
            }
        }
        eprintln!("bridge export and import: {states} crash states checked ({mode:?})");
        assert!(states >= 10, "{states}");
    }
}

/// The checks of `crash_during_a_bridge_export_and_import` on one crash image.
fn check_bridge_image(
    ctx: &str,
    crashed: &Path,
    b: &Base,
    published: &BTreeSet<String>,
    imported: bool,
    import_id: &str,
    by_link: bool,
) {
    let outbox = bridge_dir_stems(crashed, "outbox");
    let sent = bridge_dir_stems(crashed, "sent");
    let (after, rejected) = drain(crashed, by_link);
    assert!(rejected.is_empty(), "{ctx}: {rejected:?}");
    let seen = check_deliveries(ctx, after.iter());
    let delivered = |a: &str, id: &str| seen.contains(&(a.to_string(), id.to_string()));
    for (a, ids) in &b.expected {
        for id in ids {
            let here = delivered(a, id);
            let waiting = outbox.contains(id);
            let recorded = sent.contains(id);
            if *a == "Executor" || *id == b.broadcast {
                assert!(
                    here,
                    "{ctx}: {id} for {a}, an agent here, was not delivered"
                );
                assert!(!waiting && !recorded, "{ctx}: {id} for {a} was exported");
                continue;
            }
            assert!(
                here || waiting || recorded,
                "{ctx}: {id} for {a} is lost: neither delivered nor in the outbox nor sent"
            );
            // Delivered here and exported would reach its agent twice. In the outbox
            // and recorded sent (the record's rename half durable) is published again,
            // and the stream drops the copy by its id.
            assert!(
                !(here && (waiting || recorded)),
                "{ctx}: {id} for {a} is delivered here and exported (outbox {waiting}, sent {recorded})"
            );
            assert!(
                !recorded || published.contains(id),
                "{ctx}: {id} recorded exported but never published"
            );
        }
    }
    if imported {
        assert!(
            delivered("Executor", import_id),
            "{ctx}: the imported signal was lost"
        );
    }
    // The next bridge reads its outbox without error and publishes what waits there.
    let again = opts().open(crashed).unwrap().bridge().outbox("h0").unwrap();
    for o in &again {
        assert!(
            outbox.contains(&sigbox_tests::stem(&o.id)),
            "{ctx}: {} not from the outbox",
            o.id
        );
    }
}
