//! Fuzz target: see `sigbox_tests::fuzz_checks::names`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sigbox_tests::fuzz_checks::names(data));
