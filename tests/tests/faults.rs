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
            FsOp::Write(..) => Err(io::Error::from_raw_os_error(28)), // ENOSPC
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
            FsOp::CreateFile(p) | FsOp::Write(p, _) if p.to_string_lossy().contains(self.0) => {
                Err(io::Error::from_raw_os_error(28)) // ENOSPC
            }
            _ => Ok(()),
        }
    }
}

#[test]
fn a_quarantine_whose_reason_cannot_be_written_leaves_the_file_in_place() {
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
    let err = mb.pass("Executor", None).unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
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
        .hook(Arc::new(FailFilesLike("/processed/")))
        .open(tmp.path())
        .unwrap();
    let err = mb.pass("Executor", None).unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    assert!(!mb.is_poisoned(), "a failed write is not a failed fsync");
    assert!(
        sigbox_tests::names(&tmp.path().join("processed")).is_empty(),
        "claimed and not handed over"
    );
    let again = clean.pass("Executor", None).unwrap();
    assert_eq!(again.delivered.len(), 1);
    assert_eq!(again.delivered[0].id, id);
}
