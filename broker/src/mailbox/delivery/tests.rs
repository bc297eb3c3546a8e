//! Unit tests of slot and marker names.

use std::ffi::OsStr;

use super::redeliver::is_plain_name;
use super::slot::slot_number;

#[test]
fn slot_numbers_are_plain_decimal_names() {
    assert_eq!(slot_number(OsStr::new("0")), Some(0));
    assert_eq!(slot_number(OsStr::new("17")), Some(17));
    for bad in ["", "-1", "1a", ".1", "1234567890", "x"] {
        assert_eq!(slot_number(OsStr::new(bad)), None, "{bad}");
    }
}

#[test]
fn a_marker_names_one_file_and_no_path() {
    assert!(is_plain_name("2026-x-INFO-ALL-1.json"));
    for bad in ["", ".", "..", "../inputs/x.json", "a/b.json", "/etc/passwd"] {
        assert!(!is_plain_name(bad), "{bad}");
    }
}
