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
