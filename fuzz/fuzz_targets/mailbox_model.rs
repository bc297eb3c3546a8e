//! Fuzz target: see `sigbox_tests::fuzz_checks::mailbox_model`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sigbox_tests::fuzz_checks::mailbox_model(data));
