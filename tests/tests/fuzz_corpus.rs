//! Guards against regressions found by fuzzing: replays every file of the committed fuzz
//! corpus (`fuzz/corpus/<target>/`) through the same checks the fuzz targets run.

use sigbox_tests::fuzz_checks as checks;

#[test]
fn flux_stream_corpus() {
    assert!(checks::replay("flux_stream", checks::flux_stream) > 0);
}

#[test]
fn pilot_stream_corpus() {
    assert!(checks::replay("pilot_stream", checks::pilot_stream) > 0);
}

#[test]
fn flux_result_corpus() {
    assert!(checks::replay("flux_result", checks::flux_result) > 0);
}

#[test]
fn names_corpus() {
    assert!(checks::replay("names", checks::names) > 0);
}

#[test]
fn bodies_corpus() {
    assert!(checks::replay("bodies", checks::bodies) > 0);
}
