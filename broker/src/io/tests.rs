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
