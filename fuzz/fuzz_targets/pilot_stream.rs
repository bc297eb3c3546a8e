//! Fuzz target: see `sigbox_tests::fuzz_checks::pilot_stream`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sigbox_tests::fuzz_checks::pilot_stream(data));
