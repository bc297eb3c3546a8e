//! Fuzz target: see `sigbox_tests::fuzz_checks::flux_result`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sigbox_tests::fuzz_checks::flux_result(data));
