//! Unit tests of the seam: sized reads, group syncs, poisoning.

use std::fs::{self, File};

use super::read::read_checked;
use super::*;

fn bytes(r: ReadOutcome) -> Vec<u8> {
    match r {
        ReadOutcome::Bytes(b, _) => b,
        other => panic!("expected bytes, got {other:?}"),
    }
}

#[test]
fn a_file_is_read_whole_whatever_its_size() {
    let dir = tempfile::tempdir().unwrap();
    for len in [0usize, 1, 164, 4096, 70_000] {
        let p = dir.path().join(format!("f{len}"));
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        fs::write(&p, &data).unwrap();
        assert_eq!(
            bytes(read_checked(&File::open(&p).unwrap(), &p, None, 1 << 20).unwrap()),
            data
        );
        if len > 0 {
            let over = read_checked(&File::open(&p).unwrap(), &p, None, len as u64 - 1).unwrap();
            assert!(
                matches!(over, ReadOutcome::TooLarge { size, .. } if size == len as u64),
                "{over:?}"
            );
        }
    }
}

#[cfg(target_os = "linux")]
#[test]
fn a_file_longer_than_its_stat_size_is_read_to_its_end_within_the_cap() {
    // procfs files report size 0 and hold more: the single sized read comes back longer
    // than the size, and the rest is read on to the end.
    let read = |cap| {
        read_checked(
            &File::open("/proc/self/status").unwrap(),
            Path::new("/proc/self/status"),
            None,
            cap,
        )
        .unwrap()
    };
    let all = bytes(read(1 << 20));
    assert!(all.starts_with(b"Name:") && all.ends_with(b"\n"), "{all:?}");
    assert!(matches!(
        read(16),
        ReadOutcome::TooLarge { size: 17, cap: 16 }
    ));
}

#[test]
fn a_claimed_file_keeps_one_descriptor_that_reads_and_records() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.json");
    fs::write(&p, b"{\"type\":\"INFO\"}\n").unwrap();
    let io = Io::new(IoOptions::new().durability(Durability::RelaxedNoFsync));
    let (r, file) = io.read_claimed(&p, 1 << 20).unwrap();
    assert_eq!(bytes(r), b"{\"type\":\"INFO\"}\n");
    let file = file.unwrap();
    io.replace_tail(&file, &p, (14, 16), b",\"h\":1}\n")
        .unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"{\"type\":\"INFO\",\"h\":1}\n");
    // A shorter tail cuts the file where it ends.
    io.replace_tail(&file, &p, (14, 22), b"}").unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"{\"type\":\"INFO\"}");

    // Anything but a regular file comes back without a descriptor, as read_untrusted
    // reports it.
    let (r, file) = io.read_claimed(dir.path(), 1 << 20).unwrap();
    assert!(matches!(r, ReadOutcome::NotRegular("a directory")) && file.is_none());
    #[cfg(unix)]
    {
        let link = dir.path().join("l.json");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        let (r, file) = io.read_claimed(&link, 1 << 20).unwrap();
        assert!(matches!(r, ReadOutcome::NotRegular("a symlink")) && file.is_none());
        // A FIFO opens without blocking (no writer is waiting), and is never read.
        let fifo = dir.path().join("f.json");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let (r, file) = io.read_claimed(&fifo, 1 << 20).unwrap();
        assert!(matches!(r, ReadOutcome::NotRegular("a FIFO, socket or device")) && file.is_none());
    }
    let (r, file) = io.read_claimed(&dir.path().join("gone"), 1 << 20).unwrap();
    assert!(matches!(r, ReadOutcome::Gone) && file.is_none());
}

#[cfg(target_os = "linux")]
#[test]
fn reads_leave_the_access_time_alone() {
    use std::time::{Duration, SystemTime};
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.json");
    fs::write(&p, b"{\"type\":\"INFO\"}\n").unwrap();
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(946_684_800);
    let backdate = || {
        let f = File::options().write(true).open(&p).unwrap();
        f.set_times(fs::FileTimes::new().set_accessed(old)).unwrap();
    };
    let atime = || fs::metadata(&p).unwrap().accessed().unwrap();
    // The control: under `relatime` an access time older than the modification time is
    // updated by the next read. A filesystem mounted `noatime` never does: nothing to test.
    backdate();
    fs::read(&p).unwrap();
    if atime() == old {
        eprintln!("skipped: this filesystem does not record access times");
        return;
    }
    let io = Io::new(IoOptions::new().durability(Durability::RelaxedNoFsync));
    backdate();
    bytes(io.read_untrusted(&p, 1 << 20).unwrap());
    assert_eq!(atime(), old, "read_untrusted");
    let (r, file) = io.read_claimed(&p, 1 << 20).unwrap();
    bytes(r);
    assert!(file.is_some());
    assert_eq!(atime(), old, "read_claimed");
}

/// A filesystem that gives a freed inode number to the next file made (ext4 does; tmpfs never
/// does): the control without which the pin test below proves nothing.
#[cfg(target_os = "linux")]
fn reuses_inodes(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let a = dir.join("control-a");
    fs::write(&a, b"a").unwrap();
    let old = fs::symlink_metadata(&a).unwrap().ino();
    fs::remove_file(&a).unwrap();
    let b = dir.join("control-b");
    fs::write(&b, b"b").unwrap();
    let again = fs::symlink_metadata(&b).unwrap().ino() == old;
    fs::remove_file(&b).unwrap();
    again
}

#[cfg(target_os = "linux")]
#[test]
fn a_removed_files_inode_is_given_to_no_other_file_before_its_removal_is_durable() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    if !reuses_inodes(dir.path()) {
        eprintln!("skipped: this filesystem does not give a freed inode to the next file");
        return;
    }
    let ino = |p: &Path| fs::symlink_metadata(p).unwrap().ino();
    // Where a directory's fsync orders nothing (claims by link): an unlink keeps the inode in
    // use until the directory is synced, so a power loss cannot bring the old name back on a
    // new file.
    let io = Io::new(IoOptions::new().link_claims(true));
    io.set_root(dir.path()).unwrap();
    let marker = dir.path().join("marker");
    fs::write(&marker, b"{}").unwrap();
    let old = ino(&marker);
    assert!(io.remove(&marker).unwrap());
    let next = dir.path().join("next");
    fs::write(&next, b"x").unwrap();
    assert_ne!(
        ino(&next),
        old,
        "the removed file's inode went to a new file before its removal was synced"
    );
    assert_eq!(io.pins.lock().unwrap().len(), 1);
    // Synced: the removal is durable, the inode goes.
    io.sync_dir(dir.path()).unwrap();
    assert!(io.pins.lock().unwrap().is_empty());
    // Elsewhere (a journal orders the two), nothing is pinned.
    let journaled = Io::new(IoOptions::new().link_claims(false));
    journaled.set_root(dir.path()).unwrap();
    assert!(journaled.remove(&next).unwrap());
    assert!(journaled.pins.lock().unwrap().is_empty());
    // A handle dropped with removals not synced syncs them first: the pins go with it.
    let io = Io::new(IoOptions::new().link_claims(true));
    io.set_root(dir.path()).unwrap();
    let many: Vec<_> = (0..super::order::MAX_PINS + 3)
        .map(|i| {
            let p = dir.path().join(format!("m{i}"));
            fs::write(&p, b"m").unwrap();
            p
        })
        .collect();
    for p in &many {
        assert!(io.remove(p).unwrap());
    }
    // Past the bound, the directory was synced and its pins let go, then pinned again.
    assert!(io.pins.lock().unwrap().len() < super::order::MAX_PINS);
    drop(io);
}

#[cfg(target_os = "linux")]
#[test]
fn a_write_holds_the_roots_fsync_lock_from_its_stage_to_its_directorys_fsync() {
    use std::sync::Mutex;
    // At every effect of a write into place, another open of the root (as another process
    // would take it) finds the root's fsync lock taken: no other process's fsync of the
    // destination's directory can write the stage's name before the stage's inode.
    struct Probe {
        root: std::path::PathBuf,
        seen: Mutex<Vec<(String, bool)>>,
    }
    impl FsHook for Probe {
        fn before(&self, op: &FsOp<'_>) -> io::Result<()> {
            let other = File::open(&self.root)?;
            let free =
                rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                    .is_ok();
            let name = format!("{op:?}");
            let name = name
                .split(['(', ' '])
                .next()
                .unwrap_or_default()
                .to_string();
            self.seen.lock().unwrap().push((name, !free));
            Ok(())
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(Probe {
        root: dir.path().to_path_buf(),
        seen: Mutex::new(Vec::new()),
    });
    let io = Io::new(IoOptions::new().link_claims(true).hook(probe.clone()));
    io.set_root(dir.path()).unwrap();
    let sub = dir.path().join("inputs");
    assert!(io.create_dir_durable(&sub).unwrap());
    let dest = sub.join("s.json");
    let stage = sub.join(".1.0123456789abcdef.send.tmp");
    let placed =
        crate::atomic::write_atomic(&io, &stage, &dest, b"{}\n", crate::atomic::Clobber::No)
            .unwrap();
    assert_eq!(placed, crate::atomic::Placed::Done);
    assert!(io.remove_owned(&dest).unwrap());
    let seen = probe.seen.lock().unwrap();
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    for k in [
        "CreateDir",
        "CreateFile",
        "Write",
        "SyncFile",
        "Rename",
        "SyncDir",
        "ReplaceTail",
        "Remove",
    ] {
        assert!(kinds.contains(&k), "{k} not seen: {kinds:?}");
    }
    let unlocked: Vec<_> = seen.iter().filter(|(_, held)| !held).collect();
    assert!(
        unlocked.is_empty(),
        "effects run without the root's fsync lock: {unlocked:?}"
    );
    drop(seen);
    // Outside a change the lock is free again.
    let other = File::open(dir.path()).unwrap();
    assert!(
        rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok()
    );
}
