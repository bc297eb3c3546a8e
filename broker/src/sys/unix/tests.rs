//! Unit tests of the platform layer: listings and their entry kinds.

use super::*;
use rustix::fs::FileType;

#[test]
fn an_unknown_d_type_is_settled_by_lstat() {
    let never = || -> rustix::io::Result<FileType> { panic!("d_type was known") };
    assert_eq!(kind_of(FileType::RegularFile, never), EntryKind::File);
    assert_eq!(kind_of(FileType::Symlink, never), EntryKind::Symlink);
    assert_eq!(kind_of(FileType::Fifo, never), EntryKind::Special);
    assert_eq!(
        kind_of(FileType::Unknown, || Ok(FileType::Directory)),
        EntryKind::Dir
    );
    assert_eq!(
        kind_of(FileType::Unknown, || Ok(FileType::Socket)),
        EntryKind::Special
    );
    // Gone before the lstat: listed as a file, found gone when it is read.
    assert_eq!(
        kind_of(FileType::Unknown, || Err(rustix::io::Errno::NOENT)),
        EntryKind::File
    );
}

#[test]
fn a_listing_gives_every_entry_with_its_kind() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("f.json"), b"{}").unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::os::unix::fs::symlink("f.json", d.join("l.json")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        d.join("p.json"),
        FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    // More names than one 32 KiB getdents buffer holds.
    for i in 0..2000 {
        std::fs::write(d.join(format!("signal.{i:0>200}.json")), b"").unwrap();
    }
    let mut got = std::collections::BTreeMap::new();
    list_dir(d, |name, kind| {
        assert!(got.insert(name, kind).is_none(), "listed twice");
    })
    .unwrap();
    assert_eq!(got.len(), 2004);
    assert_eq!(got[std::ffi::OsStr::new("f.json")], EntryKind::File);
    assert_eq!(got[std::ffi::OsStr::new("sub")], EntryKind::Dir);
    assert_eq!(got[std::ffi::OsStr::new("l.json")], EntryKind::Symlink);
    assert_eq!(got[std::ffi::OsStr::new("p.json")], EntryKind::Special);
    assert!(!got.contains_key(std::ffi::OsStr::new(".")));
    assert!(!got.contains_key(std::ffi::OsStr::new("..")));
}

/// A listing is the directory at one moment: a name another process added after another is
/// never listed without it. The directory holds more names than one 32 KiB `getdents64`
/// buffer, and a shell adds names to it as fast as it can (nothing is removed), while this
/// thread lists it again and again. Listed in several calls, names added between two calls
/// land before or after where the first call stopped, and the listing misses earlier ones.
#[test]
fn a_listing_never_holds_a_later_name_without_an_earlier_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for i in 0..3000 {
        std::fs::write(d.join(format!("old.{i:0>60}")), b"").unwrap();
    }
    let mut writer = std::process::Command::new("sh")
        .arg("-c")
        .arg("i=0; while [ $i -lt 30000 ]; do : > n.$i; i=$((i+1)); done")
        .current_dir(d)
        .spawn()
        .unwrap();
    let (mut listings, mut while_adding) = (0, 0);
    let mut torn = Vec::new();
    loop {
        let done = writer.try_wait().unwrap().is_some();
        let mut seen: Vec<u64> = Vec::new();
        list_dir(d, |name, _| {
            if let Some(n) = name.to_str().and_then(|n| n.strip_prefix("n.")) {
                seen.push(n.parse().unwrap());
            }
        })
        .unwrap();
        seen.sort_unstable();
        listings += 1;
        if let Some(&last) = seen.last() {
            while_adding += usize::from(!done);
            let missing = last + 1 - seen.len() as u64;
            if missing > 0 {
                torn.push(format!("n.{last} listed without {missing} earlier names"));
            }
        }
        if done {
            break;
        }
    }
    assert!(
        torn.is_empty(),
        "{} of {listings} listings: {:?}",
        torn.len(),
        &torn[..torn.len().min(5)]
    );
    // The listings raced the writer.
    assert!(
        while_adding > 10,
        "only {while_adding} listings while names were added"
    );
}
