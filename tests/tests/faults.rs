//! Guards against silent half-state: after a failed fsync a handle refuses every further
//! write, and a failed step never leaves a visible partial signal.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use sigbox::{ErrorKind, FsHook, FsOp, MailboxOptions, NewSignal, SignalType, Target};

/// Fails the first fsync of a directory, then lets everything through.
struct FailOneDirSync(AtomicBool);

impl FsHook for FailOneDirSync {
    fn before(&self, op: &FsOp<'_>) -> io::Result<()> {
        if matches!(op, FsOp::SyncDir(_)) && !self.0.swap(true, Ordering::SeqCst) {
            return Err(io::Error::other("injected EIO"));
        }
        Ok(())
    }
}

/// Fails every write of file data.
struct FailWrites;

impl FsHook for FailWrites {
    fn before(&self, op: &FsOp<'_>) -> io::Result<()> {
        match op {
            FsOp::Write(..) | FsOp::ReplaceTail(..) => Err(io::Error::from_raw_os_error(28)), // ENOSPC
            _ => Ok(()),
        }
    }
}

fn sig() -> NewSignal {
    let mut s = NewSignal::new(SignalType::Info);
    s.target(Target::Agent("Executor".into())).message("m");
    s
}

#[test]
fn a_failed_fsync_poisons_the_handle() {
    let tmp = tempfile::tempdir().unwrap();
    sigbox::Mailbox::init(tmp.path()).unwrap();
    let mb = MailboxOptions::new()
        .hook(Arc::new(FailOneDirSync(AtomicBool::new(false))))
        .open(tmp.path())
        .unwrap();
    let err = mb.send(&sig()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(err.to_string().contains("fsync failed"), "{err}");
    assert!(mb.is_poisoned());
    // The hook would let this one through; the handle must refuse on its own.
    let err = mb.send(&sig()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Poisoned, "{err}");
    let err = mb.pass("Executor", None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Poisoned, "{err}");
    // A fresh handle sees the first signal (its rename happened; only its fsync failed) and
    // works normally.
    let fresh = sigbox::Mailbox::open(tmp.path()).unwrap();
    assert_eq!(fresh.pass("Executor", None).unwrap().delivered.len(), 1);
}

#[test]
fn a_failed_write_leaves_nothing_visible() {
    let tmp = tempfile::tempdir().unwrap();
    sigbox::Mailbox::init(tmp.path()).unwrap();
    let mb = MailboxOptions::new()
        .hook(Arc::new(FailWrites))
        .open(tmp.path())
        .unwrap();
    let err = mb.send(&sig()).unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    assert!(!mb.is_poisoned(), "a failed write is not a failed fsync");
    assert!(sigbox_tests::names(&tmp.path().join("inputs")).is_empty());
    assert!(
        sigbox_tests::names(&tmp.path().join("tmp")).is_empty(),
        "staged file removed"
    );
}

/// Fails the creation and the writes of files whose path contains `needle`.
struct FailFilesLike(&'static str);

impl FsHook for FailFilesLike {
    fn before(&self, op: &FsOp<'_>) -> io::Result<()> {
        match op {
            FsOp::CreateFile(p) | FsOp::Write(p, _) | FsOp::ReplaceTail(p, ..)
                if p.to_string_lossy().contains(self.0) =>
            {
                Err(io::Error::from_raw_os_error(28)) // ENOSPC
            }
            _ => Ok(()),
        }
    }
}

#[test]
fn a_quarantine_whose_reason_cannot_be_written_leaves_the_file_in_place_and_delivers_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = MailboxOptions::new();
    opts.settle(std::time::Duration::ZERO);
    let clean = opts.init(tmp.path()).unwrap();
    std::fs::write(clean.inputs_dir().join("bad.yaml"), "type: [unclosed\n").unwrap();
    let mb = opts
        .clone()
        .hook(Arc::new(FailFilesLike(".reason.")))
        .open(tmp.path())
        .unwrap();
    let good = mb
        .send(
            sigbox::NewSignal::new(sigbox::SignalType::Steer)
                .target(sigbox::Target::Agent("Executor".into()))
                .message("still delivered"),
        )
        .unwrap();
    // The full disk stops the quarantine, not the pass (spec/mailbox.md §8): what is there is
    // delivered, and the file waits where it was.
    let p = mb.pass("Executor", None).unwrap();
    assert_eq!(
        p.delivered
            .iter()
            .map(|s| s.id.as_str())
            .collect::<Vec<_>>(),
        [good.as_str()]
    );
    assert!(p.rejected.is_empty());
    assert!(
        clean.inputs_dir().join("bad.yaml").exists(),
        "moved without its reason"
    );
    assert!(clean.rejected().unwrap().is_empty());
    // Once the reason can be written, the file is quarantined with it.
    let p = clean.pass("Executor", None).unwrap();
    assert_eq!(p.rejected.len(), 1);
    assert!(clean.rejected().unwrap()[0].reason.contains("invalid YAML"));
}

#[test]
fn a_claim_whose_record_cannot_be_appended_is_undone() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = sigbox::Mailbox::init(tmp.path()).unwrap();
    let id = clean.send(&sig()).unwrap();
    let mb = MailboxOptions::new()
        .hook(Arc::new(FailFilesLike("/claimed/")))
        .open(tmp.path())
        .unwrap();
    let err = mb.pass("Executor", None).unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    assert!(!mb.is_poisoned(), "a failed write is not a failed fsync");
    assert!(
        sigbox_tests::names(&tmp.path().join("processed")).is_empty(),
        "claimed and not handed over"
    );
    assert!(
        sigbox_tests::names(&tmp.path().join("claimed/Executor/0")).is_empty(),
        "left in flight"
    );
    let again = clean.pass("Executor", None).unwrap();
    assert_eq!(again.delivered.len(), 1);
    assert_eq!(again.delivered[0].id, id);
}

/// Records every directory creation and directory fsync, in order.
#[derive(Default)]
struct DirOps(std::sync::Mutex<Vec<(bool, std::path::PathBuf)>>);

impl FsHook for DirOps {
    fn before(&self, op: &FsOp<'_>) -> io::Result<()> {
        let mut ops = self.0.lock().unwrap();
        match op {
            FsOp::CreateDir(p) => ops.push((true, p.to_path_buf())),
            FsOp::SyncDir(p) => ops.push((false, p.to_path_buf())),
            _ => {}
        }
        Ok(())
    }
}

#[test]
fn every_new_directory_is_synced_before_its_parent() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = Arc::new(DirOps::default());
    let mut opts = MailboxOptions::new();
    opts.hook(hook.clone());
    // init (the root's missing parents too), a buffer, an ack directory.
    let mb = opts.init(tmp.path().join("a/b/signals")).unwrap();
    let mut s = NewSignal::new(SignalType::Steer);
    s.target(Target::Agent("Planner".into()));
    mb.send(&s).unwrap();
    mb.send(&NewSignal::new(SignalType::Info)).unwrap();
    let p = mb.pass("Orchestrator", None).unwrap();
    assert_eq!(p.buffered.len(), 1);
    let ops = hook.0.lock().unwrap().clone();
    let created: Vec<_> = ops
        .iter()
        .filter(|(c, _)| *c)
        .map(|(_, p)| p.clone())
        .collect();
    assert!(created.len() >= 11, "{created:?}");
    for dir in &created {
        let made = ops.iter().position(|(c, p)| *c && p == dir).unwrap();
        let own = ops[made..]
            .iter()
            .position(|(c, p)| !*c && p == dir)
            .unwrap_or_else(|| panic!("{} never synced", dir.display()));
        let parent = ops[made..]
            .iter()
            .position(|(c, p)| !*c && Some(p.as_path()) == dir.parent())
            .unwrap_or_else(|| panic!("{}'s parent never synced", dir.display()));
        assert!(own < parent, "{} synced after its parent", dir.display());
    }
}

/// What a [`Renames`] hook saw: the files created, and the renames (from, to), in order.
#[derive(Clone, Default)]
struct Seen {
    created: Vec<std::path::PathBuf>,
    renames: Vec<(std::path::PathBuf, std::path::PathBuf)>,
}

/// Records the files created and the renames, in order.
#[derive(Default)]
struct Renames(std::sync::Mutex<Seen>);

impl FsHook for Renames {
    fn before(&self, op: &FsOp<'_>) -> io::Result<()> {
        let mut seen = self.0.lock().unwrap();
        match op {
            FsOp::CreateFile(p) => seen.created.push(p.to_path_buf()),
            FsOp::Rename { from, to, .. } => {
                seen.renames.push((from.to_path_buf(), to.to_path_buf()))
            }
            _ => {}
        }
        Ok(())
    }
}

#[test]
fn every_staged_file_is_renamed_within_its_own_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let hook = Arc::new(Renames::default());
    let mut opts = MailboxOptions::new();
    opts.hook(hook.clone()).settle(std::time::Duration::ZERO);
    let mb = opts.init(tmp.path().join("signals")).unwrap();
    mb.send(&sig()).unwrap(); // a send
    mb.send(&NewSignal::new(SignalType::Info)).unwrap(); // a broadcast: an ack
    std::fs::write(mb.inputs_dir().join("bad.yaml"), "type: [\n").unwrap(); // a reason
    let p = mb.pass("Executor", None).unwrap();
    assert_eq!((p.delivered.len(), p.rejected.len()), (2, 1));
    let io = sigbox::IoOptions {
        hook: Some(hook.clone()),
        ..sigbox::IoOptions::new()
    };
    let g = sigbox::goblin::Goblin::open_with(tmp.path(), &io).unwrap();
    g.write(sigbox::goblin::GoblinSignal::BuildComplete, None)
        .unwrap();
    let Seen { created, renames } = hook.0.lock().unwrap().clone();
    let staged: Vec<_> = renames
        .iter()
        .filter(|(from, _)| created.contains(from))
        .collect();
    // send, ack, reason, goblin signal: each staged and renamed once.
    assert!(staged.len() >= 4, "{renames:?}");
    for (from, to) in staged {
        assert_eq!(
            from.parent(),
            to.parent(),
            "{} staged outside {}'s directory: a power loss could bring its name back",
            from.display(),
            to.display()
        );
    }
}

#[test]
fn a_group_that_cannot_be_handed_over_is_put_back() {
    let tmp = tempfile::tempdir().unwrap();
    let mut opts = MailboxOptions::new();
    opts.settle(std::time::Duration::ZERO);
    let mb = opts.init(tmp.path()).unwrap();
    let mut sent = std::collections::HashSet::new();
    for _ in 0..100 {
        sent.insert(mb.send(&sig()).unwrap());
    }
    sent.insert(mb.send(&NewSignal::new(SignalType::Info)).unwrap()); // a broadcast
    let dropped = [
        (
            "note.json",
            r#"{"type": "STEER", "target": "Executor", "message": "by hand"}"#,
        ),
        (
            "note.yaml",
            "type: INFO\ntarget: Executor\nmessage: by hand\n",
        ),
    ];
    for (name, body) in dropped {
        std::fs::write(mb.inputs_dir().join(name), body).unwrap();
        sent.insert(name.rsplit_once('.').unwrap().0.to_string());
    }
    let full = || Err(io::Error::from_raw_os_error(28)); // ENOSPC, as on /dev/full
    let err = mb
        .pass_with("Executor", None, &sigbox::PassControl::new(), &mut |_| {
            full()
        })
        .unwrap_err();
    assert!(err.to_string().contains("pending again"), "{err}");
    assert!(!mb.is_poisoned());
    assert!(
        sigbox_tests::names(&tmp.path().join("processed")).is_empty(),
        "a claim not handed over stayed in processed/"
    );
    // Put back where it was, not left in flight (where it would come again, but marked).
    assert_eq!(
        sigbox_tests::in_flight(tmp.path()),
        0,
        "left in its claim slot"
    );
    assert!(mb.rejected().unwrap().is_empty(), "{:?}", mb.rejected());
    // Everything is delivered by the next pass, once, the broadcast included.
    let p = mb.pass("Executor", None).unwrap();
    assert!(p.delivered.iter().all(|s| s.redelivery() == 0));
    let got: std::collections::HashSet<String> = p
        .delivered
        .into_iter()
        .map(|s| sigbox_tests::stem(&s.id))
        .collect();
    assert_eq!(got, sent);
    assert!(mb.pass("Executor", None).unwrap().delivered.is_empty());
}

/// Plays the orchestrator at the moment a consumer is about to claim its oldest signal from
/// `inputs/`: moves that signal into the consumer's buffer first (the agent looked absent).
struct BufferFirst {
    root: std::path::PathBuf,
    done: AtomicBool,
}

impl FsHook for BufferFirst {
    fn before(&self, op: &FsOp<'_>) -> io::Result<()> {
        let from = match op {
            FsOp::Rename { from, .. } | FsOp::Link { from, .. } => *from,
            _ => return Ok(()),
        };
        if from.parent() == Some(self.root.join("inputs").as_path())
            && !self.done.swap(true, Ordering::SeqCst)
        {
            let buffer = self.root.join("buffered/Executor");
            std::fs::create_dir_all(&buffer)?;
            std::fs::rename(from, buffer.join(from.file_name().unwrap()))?;
        }
        Ok(())
    }
}

/// The orchestrator moving a consumer's oldest signal into its buffer between the consumer's
/// scan and its claim does not let a later signal overtake it (spec/mailbox.md §4): the claim
/// lost in `inputs/` is made from the buffer, in its turn.
#[test]
fn a_signal_buffered_under_a_claim_keeps_its_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let plain = sigbox::Mailbox::init(&root).unwrap();
    for m in ["first", "second", "third"] {
        let mut s = sig();
        s.message(m);
        plain.send(&s).unwrap();
    }
    let mb = MailboxOptions::new()
        .hook(Arc::new(BufferFirst {
            root: root.clone(),
            done: AtomicBool::new(false),
        }))
        .open(&root)
        .unwrap();
    let got: Vec<String> = mb
        .pass("Executor", None)
        .unwrap()
        .delivered
        .into_iter()
        .map(|s| s.message.unwrap_or_default())
        .collect();
    assert_eq!(got, ["first", "second", "third"]);
}

/// Cuts every read of a file to at most `.0` bytes, and fails every read (EIO) and listing
/// (`.1`, `.2`) when asked: what a kernel may do to a read of a file another process writes,
/// or of a failing disk.
struct Reads(usize, bool, bool);

impl FsHook for Reads {
    fn before(&self, _: &FsOp<'_>) -> io::Result<()> {
        Ok(())
    }

    fn read(&self, op: &FsOp<'_>, len: usize) -> io::Result<usize> {
        match op {
            FsOp::Read(_) if self.1 => Err(io::Error::from_raw_os_error(5)), // EIO
            FsOp::List(_) if self.2 => Err(io::Error::from_raw_os_error(5)),
            FsOp::Read(_) => Ok(len.min(self.0)),
            _ => Ok(len),
        }
    }
}

#[test]
fn reads_cut_short_still_deliver_the_whole_signal() {
    let message = "m".repeat(3000);
    for cut in [1, 7, 4096] {
        let tmp = tempfile::tempdir().unwrap();
        let clean = sigbox::Mailbox::init(tmp.path()).unwrap();
        let mut s = sig();
        s.message(message.as_str());
        let id = clean.send(&s).unwrap();
        let mb = MailboxOptions::new()
            .hook(Arc::new(Reads(cut, false, false)))
            .open(tmp.path())
            .unwrap();
        let pass = mb.pass("Executor", None).unwrap();
        assert_eq!(pass.delivered.len(), 1, "cut {cut}");
        assert_eq!(pass.delivered[0].id, id);
        assert_eq!(pass.delivered[0].message.as_deref(), Some(message.as_str()));
        assert!(pass.rejected.is_empty(), "cut {cut}: {:?}", pass.rejected);
        assert_eq!(mb.ack("Executor").unwrap(), 1, "cut {cut}");
        let record = sigbox_tests::names(&tmp.path().join("processed"));
        assert_eq!(record.len(), 1, "cut {cut}: acknowledged into processed/");
    }
}

#[test]
fn a_failed_read_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = sigbox::Mailbox::init(tmp.path()).unwrap();
    let id = clean.send(&sig()).unwrap();
    let mb = MailboxOptions::new()
        .hook(Arc::new(Reads(usize::MAX, true, false)))
        .open(tmp.path())
        .unwrap();
    let err = mb.pass("Executor", None).unwrap_err();
    assert!(err.to_string().contains("cannot read"), "{err}");
    assert!(!mb.is_poisoned(), "a failed read is not a failed fsync");
    assert!(sigbox_tests::names(&tmp.path().join("processed")).is_empty());
    assert!(sigbox_tests::names(&tmp.path().join("rejected")).is_empty());
    drop(mb);
    let again = clean.pass("Executor", None).unwrap();
    assert_eq!(again.delivered.len(), 1);
    assert_eq!(again.delivered[0].id, id);
}

#[test]
fn a_failed_listing_fails_the_pass_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = sigbox::Mailbox::init(tmp.path()).unwrap();
    let id = clean.send(&sig()).unwrap();
    let mb = MailboxOptions::new()
        .hook(Arc::new(Reads(usize::MAX, false, true)))
        .open(tmp.path())
        .unwrap();
    let err = mb.pass("Executor", None).unwrap_err();
    assert!(err.to_string().contains("cannot list"), "{err}");
    drop(mb);
    let again = clean.pass("Executor", None).unwrap();
    assert_eq!(again.delivered.len(), 1);
    assert_eq!(again.delivered[0].id, id);
}

/// Holds the orchestrator's archive of a broadcast (its move out of `inputs/`), once, after
/// telling `go`, until told on `until`: what another process does meanwhile comes between the
/// archive's reading of the acks and its move.
struct SlowArchive {
    inputs: std::path::PathBuf,
    go: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
    until: std::sync::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl FsHook for SlowArchive {
    fn before(&self, op: &FsOp<'_>) -> io::Result<()> {
        let from = match op {
            FsOp::Rename { from, .. } | FsOp::Link { from, .. } => *from,
            _ => return Ok(()),
        };
        if from.parent() == Some(self.inputs.as_path())
            && let Some(go) = self.go.lock().unwrap().take()
        {
            go.send(()).unwrap();
            // Bounded: a take-back that waited for the archive would never let it go on.
            self.until
                .lock()
                .unwrap()
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("the take-back never ended while the archive was held");
        }
        Ok(())
    }
}

/// A broadcast's hand-over to the Executor fails while the orchestrator archives it, the
/// Executor's ack counted among the quorum's: after the archive (`before`), or between the
/// archive's reading of the acks and its move (`during`, the archive held there while the
/// take-back runs). The take-back never removes an ack the archive counted: the broadcast
/// stays in flight and the Executor's next pass delivers it, marked, from `processed/`.
/// Before, the ack was removed and the broadcast, archived as delivered to all, never
/// reached the Executor.
#[test]
fn a_broadcast_archived_while_its_hand_over_fails_still_reaches_the_agent() {
    for during in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let mut opts = MailboxOptions::new();
        opts.settle(std::time::Duration::ZERO);
        let mb = opts.init(tmp.path()).unwrap();
        let id = mb.send(&NewSignal::new(SignalType::Info)).unwrap(); // a broadcast
        for a in ["Planner", "Questioner", "Reviewer"] {
            assert_eq!(mb.pass(a, None).unwrap().delivered.len(), 1, "{a}");
            mb.ack(a).unwrap();
        }
        let (go, archiving) = std::sync::mpsc::channel();
        let (release, until) = std::sync::mpsc::channel();
        let mut orch_opts = opts.clone();
        if during {
            orch_opts.hook(Arc::new(SlowArchive {
                inputs: tmp.path().join("inputs"),
                go: std::sync::Mutex::new(Some(go.clone())),
                until: std::sync::Mutex::new(until),
            }));
        }
        let orch = orch_opts.open(tmp.path()).unwrap();
        let (handing, handed) = std::sync::mpsc::channel();
        let (fail, failing) = std::sync::mpsc::channel::<()>();
        let executor = std::thread::spawn({
            let mb = opts.open(tmp.path()).unwrap();
            move || {
                let err = mb
                    .pass_with("Executor", None, &sigbox::PassControl::new(), &mut |s| {
                        handing.send(s.len()).unwrap();
                        failing.recv().unwrap();
                        Err(io::Error::from_raw_os_error(28))
                    })
                    .unwrap_err();
                (mb, err.to_string())
            }
        });
        assert_eq!(handed.recv().unwrap(), 1);
        let archiver =
            std::thread::spawn(move || orch.pass("Orchestrator", None).map(|p| p.archived.len()));
        let (mb, err) = if during {
            archiving.recv().unwrap(); // the archive has read the acks
            fail.send(()).unwrap();
            // The take-back over, the archive goes on.
            let taken_back = executor.join().unwrap();
            release.send(()).unwrap();
            assert_eq!(archiver.join().unwrap().unwrap(), 1);
            taken_back
        } else {
            assert_eq!(archiver.join().unwrap().unwrap(), 1);
            fail.send(()).unwrap();
            executor.join().unwrap()
        };
        assert!(
            err.contains("stay in flight and come again, marked"),
            "{err}"
        );
        let again = mb.pass("Executor", None).unwrap();
        let got: Vec<(String, u32)> = again
            .delivered
            .iter()
            .map(|s| (s.id.clone(), s.redelivery()))
            .collect();
        assert_eq!(got, [(id.clone(), 1)], "during: {during}");
        mb.ack("Executor").unwrap();
        assert!(mb.pass("Executor", None).unwrap().delivered.is_empty());
        let record = mb.processed().unwrap();
        assert_eq!(record.len(), 1);
        let r = record[0].as_ref().unwrap();
        assert_eq!(r.fields["delivery_status"], "delivered");
        assert_eq!(mb.acked_by(&id).unwrap().len(), 5, "during: {during}");
    }
}
