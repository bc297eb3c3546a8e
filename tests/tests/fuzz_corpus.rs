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

#[test]
fn mailbox_model_corpus() {
    assert!(checks::replay("mailbox_model", checks::mailbox_model) > 0);
}

#[test]
fn mailbox_model_on_generated_sequences() {
    // A few hundred fixed pseudo-random sequences, so the ordinary test run exercises the
    // model even where no fuzzer ran; each checked on its own (several at once).
    let mut x = 0x243F_6A88_85A3_08D3u64;
    let sequences: Vec<Vec<u8>> = (0..300)
        .map(|_| {
            let len = 8 + (x % 40) as usize;
            (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect()
        })
        .collect();
    sigbox_tests::par_each(&sequences, |data| checks::mailbox_model(data));
}
