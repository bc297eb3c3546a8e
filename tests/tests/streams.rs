//! Guards the Flux and Pilot stream parsers: every upstream rule as a named case, and the
//! property that any split of a stream into chunks gives the same events as the whole stream
//! (upstream Flux misses a signal split across two reads).

use sigbox::flux::{self, FluxEvent, FluxParser, Routing, Verdict};
use sigbox::pilot::{PilotEvent, PilotParser, PilotSummary, phase_progress};

fn flux_all(input: &str) -> Vec<FluxEvent> {
    let mut p = FluxParser::default();
    let mut out = p.feed(input.as_bytes());
    out.extend(p.finish());
    out
}

/// Table cases: (input, expected events as compact strings).
macro_rules! flux_cases {
    ($($name:ident: $input:expr => [$($want:expr),*];)*) => {$(
        #[test]
        fn $name() {
            let got: Vec<String> = flux_all($input).iter().map(describe).collect();
            let want: Vec<&str> = vec![$($want),*];
            assert_eq!(got, want, "input: {:?}", $input);
        }
    )*};
}

fn describe(e: &FluxEvent) -> String {
    match e {
        FluxEvent::Signal(s) => {
            let mut d = format!("{}:{}", s.line, s.verdict.as_str());
            if let Some(r) = &s.reason {
                d.push_str(&format!(" reason={r}"));
            }
            if let Some(t) = s.target_state() {
                d.push_str(&format!(" target={t}"));
            }
            if let Some(q) = s.question() {
                d.push_str(&format!(" question={q}"));
            }
            d
        }
        FluxEvent::Error { line, error } => format!(
            "{line}:error {}",
            &error[..error.find(';').unwrap_or(error.len())]
        ),
        FluxEvent::TooLong { line, .. } => format!("{line}:too long"),
    }
}

flux_cases! {
    flux_proceed: "{\"flux:signal\": {\"verdict\": \"proceed\"}}\n" => ["1:proceed"];
    flux_each_verdict: "{\"flux:signal\":{\"verdict\":\"hold\"}}\n{\"flux:signal\":{\"verdict\":\"rework\"}}\n{\"flux:signal\":{\"verdict\":\"abort\"}}\n" => ["1:hold", "2:rework", "3:abort"];
    flux_hold_already_complete: "{\"flux:signal\": {\"verdict\": \"hold\", \"reason\": \"already_complete\", \"meta\": {\"targetState\": \"review\"}}}" => ["1:hold reason=already_complete target=review"];
    flux_hold_needs_human: "{\"flux:signal\": {\"verdict\": \"hold\", \"reason\": \"needs_human\", \"meta\": {\"question\": \"which DB?\"}}}" => ["1:hold reason=needs_human question=which DB?"];
    flux_plain_output_ignored: "building...\nnot json {\n[1,2]\n{\"other\": 1}\n" => [];
    flux_trimmed_and_crlf: "   {\"flux:signal\": {\"verdict\": \"proceed\"}}   \r\n" => ["1:proceed"];
    flux_missing_verdict_is_error: "{\"flux:signal\": {\"reason\": \"x\"}}" => ["1:error invalid flux:signal verdict: missing"];
    flux_unknown_verdict_is_error: "{\"flux:signal\": {\"verdict\": \"maybe\"}}" => ["1:error invalid flux:signal verdict: \"maybe\""];
    flux_non_string_verdict_is_error: "{\"flux:signal\": {\"verdict\": 3}}" => ["1:error invalid flux:signal verdict: 3"];
    flux_signal_not_an_object_is_output: "{\"flux:signal\": \"proceed\"}\n{\"flux:signal\": null}" => [];
    flux_invalid_json_mentioning_key_is_output: "{\"flux:signal\": {\"verdict\": \"proceed\"}" => [];
    flux_embedded_tool_result: "{\"type\":\"user\",\"message\":{\"content\":[{\"type\":\"tool_result\",\"content\":\"ok\\n{\\\"flux:signal\\\":{\\\"verdict\\\":\\\"abort\\\"}}\"}]}}" => ["1:abort"];
    flux_embedded_tool_use_result_stdout: "{\"type\":\"user\",\"tool_use_result\":{\"stdout\":\"{\\\"flux:signal\\\":{\\\"verdict\\\":\\\"rework\\\"}}\"},\"message\":{\"content\":[]}}" => ["1:rework"];
    flux_line_numbers_count_every_line: "a\nb\n\n{\"flux:signal\":{\"verdict\":\"proceed\"}}\n" => ["4:proceed"];
}

/// Stream-json events (one JSON object per line, as `claude -p --output-format stream-json`
/// prints them), each shape read as upstream's `parseSignalLine` reads it: a signal upstream
/// takes is taken, one it ignores is not, and where upstream takes nothing from a line holding
/// a signal (or fails on it), the line is an error event, never a signal and never silence.
/// `S(v)` is a stream-json-escaped signal line with verdict `v`.
macro_rules! stream_json_cases {
    ($($name:ident: $shape:expr => [$($want:expr),*];)*) => {$(
        #[test]
        fn $name() {
            let sig = |v: &str| format!("{{\\\"flux:signal\\\":{{\\\"verdict\\\":\\\"{v}\\\"}}}}");
            let line = $shape.replace("S(rework)", &sig("rework")).replace("S(abort)", &sig("abort"))
                .replace("S(maybe)", &sig("maybe"));
            let got: Vec<String> = flux_all(&line).iter().map(describe).collect();
            let want: Vec<&str> = vec![$($want),*];
            assert_eq!(got, want, "line: {line}");
        }
    )*};
}

stream_json_cases! {
    // `user` events: `message` must be present and truthy before anything is read.
    sj_user_stdout_with_message_is_taken: r#"{"type":"user","message":{"content":[]},"tool_use_result":{"stdout":"ok\nS(rework)\n"}}"# => ["1:rework"];
    sj_user_stdout_without_message_is_not_taken: r#"{"type":"user","tool_use_result":{"stdout":"S(rework)"}}"# => ["1:error not taken: a stream-json `user` event without `message` (upstream's parser reads nothing of it)"];
    sj_user_stdout_message_null_is_not_taken: r#"{"type":"user","message":null,"tool_use_result":{"stdout":"S(rework)"}}"# => ["1:error not taken: a stream-json `user` event without `message` (upstream's parser reads nothing of it)"];
    sj_user_stdout_message_false_is_not_taken: r#"{"type":"user","message":false,"tool_use_result":{"stdout":"S(rework)"}}"# => ["1:error not taken: a stream-json `user` event without `message` (upstream's parser reads nothing of it)"];
    sj_user_stdout_message_zero_is_not_taken: r#"{"type":"user","message":0,"tool_use_result":{"stdout":"S(rework)"}}"# => ["1:error not taken: a stream-json `user` event without `message` (upstream's parser reads nothing of it)"];
    sj_user_stdout_message_empty_string_is_not_taken: r#"{"type":"user","message":"","tool_use_result":{"stdout":"S(rework)"}}"# => ["1:error not taken: a stream-json `user` event without `message` (upstream's parser reads nothing of it)"];
    sj_user_stdout_message_string_is_taken: r#"{"type":"user","message":"x","tool_use_result":{"stdout":"S(rework)"}}"# => ["1:rework"];
    sj_user_stdout_message_empty_object_is_taken: r#"{"type":"user","message":{},"tool_use_result":{"stdout":"S(rework)"}}"# => ["1:rework"];
    sj_user_without_message_or_signal_is_output: r#"{"type":"user","tool_use_result":{"stdout":"no flux:signal here"}}"# => [];
    // The order: tool_use_result.stdout first, then the parts in order; the first wins, and
    // an invalid verdict found first is the line's error.
    sj_user_stdout_before_content: r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"S(abort)"}]},"tool_use_result":{"stdout":"S(rework)"}}"# => ["1:rework"];
    sj_user_bad_verdict_in_stdout_first_is_an_error: r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"S(abort)"}]},"tool_use_result":{"stdout":"S(maybe)"}}"# => ["1:error invalid flux:signal verdict: \"maybe\""];
    sj_user_first_tool_result_wins: r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"S(abort)"},{"type":"tool_result","content":"S(rework)"}]}}"# => ["1:abort"];
    // Parts: only `tool_result` parts with string content; a null part upstream fails on.
    sj_user_tool_result_array_content_is_output: r#"{"type":"user","message":{"content":[{"type":"tool_result","content":[{"type":"text","text":"S(abort)"}]}]}}"# => [];
    sj_user_text_part_is_output: r#"{"type":"user","message":{"content":[{"type":"text","text":"S(abort)"}]}}"# => [];
    sj_user_content_string_is_output: r#"{"type":"user","message":{"content":"S(abort)"}}"# => [];
    sj_user_null_part_before_the_signal_is_an_error: r#"{"type":"user","message":{"content":[null,{"type":"tool_result","content":"S(abort)"}]}}"# => ["1:error not taken: message.content[0] is null (upstream's parser fails on it, a TypeError, and takes nothing from this line)"];
    sj_user_null_part_after_the_signal_is_not_reached: r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"S(abort)"},null]}}"# => ["1:abort"];
    sj_user_other_parts_are_skipped: r#"{"type":"user","message":{"content":[1,"x",true,[],{"type":"tool_result","content":"S(abort)"}]}}"# => ["1:abort"];
    // Other event types are never looked into.
    sj_assistant_text_is_output: r#"{"type":"assistant","message":{"content":[{"type":"text","text":"S(abort)"}]}}"# => [];
    sj_assistant_tool_use_echo_is_output: r#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Bash","input":{"command":"echo 'S(abort)'"}}]}}"# => [];
    sj_assistant_tool_result_shape_is_output: r#"{"type":"assistant","message":{"content":[{"type":"tool_result","content":"S(abort)"}]},"tool_use_result":{"stdout":"S(abort)"}}"# => [];
    sj_result_event_is_output: r#"{"type":"result","subtype":"success","result":"S(abort)"}"# => [];
    sj_type_is_case_sensitive: r#"{"type":"User","message":{},"tool_use_result":{"stdout":"S(abort)"}}"# => [];
    // A signal at the top level is taken whatever the event around it.
    sj_direct_signal_in_a_user_event_without_message: r#"{"type":"user","flux:signal":{"verdict":"hold"}}"# => ["1:hold"];
    // `flux:signal` an array: an object to upstream (`typeof`), without a verdict.
    flux_signal_array_is_an_error: r#"{"flux:signal":[]}"# => ["1:error invalid flux:signal verdict: missing (flux:signal is an array, not an object)"];
    sj_embedded_signal_array_is_an_error: r#"{"type":"user","message":{},"tool_use_result":{"stdout":"{\"flux:signal\":[\"proceed\"]}"}}"# => ["1:error invalid flux:signal verdict: missing (flux:signal is an array, not an object)"];
    // An embedded line: trimmed as JavaScript trims (a BOM yes, NEL no), a key twice ambiguous.
    sj_embedded_bom_is_trimmed: "{\"type\":\"user\",\"message\":{},\"tool_use_result\":{\"stdout\":\"\u{feff}S(rework)\"}}" => ["1:rework"];
    sj_embedded_nel_is_not_trimmed: "{\"type\":\"user\",\"message\":{},\"tool_use_result\":{\"stdout\":\"\u{85}S(rework)\"}}" => [];
    flux_nel_is_not_trimmed: "\u{85}{\"flux:signal\":{\"verdict\":\"abort\"}}" => [];
    sj_embedded_key_twice_is_an_error: r#"{"type":"user","message":{},"tool_use_result":{"stdout":"{\"flux:signal\":{\"verdict\":\"abort\",\"verdict\":\"proceed\"}}"}}"# => ["1:error duplicate key `verdict` (a field may appear once) at line 1 column 54"];
    // A key spelt with `\uXXXX` escapes is the key to upstream's JSON.parse: at the top level,
    // escaped once or twice inside a tool's output; a lone surrogate without the key is output.
    flux_escaped_key_is_taken: r#"{"\u0066lux:signal":{"verdict":"abort"}}"# => ["1:abort"];
    sj_embedded_escaped_key_is_taken: r#"{"type":"user","message":{},"tool_use_result":{"stdout":"{\"flux\\u003asignal\":{\"verdict\":\"abort\"}}"}}"# => ["1:abort"];
    sj_outer_escaped_key_is_taken: r#"{"type":"user","message":{},"tool_use_result":{"stdout":"{\"\u0066lux:signal\":{\"verdict\":\"abort\"}}"}}"# => ["1:abort"];
    flux_lone_surrogate_without_the_key_is_output: r#"{"text":"\ud800 and \u0066"}"# => [];
    sj_embedded_key_twice_elsewhere_is_output: r#"{"type":"user","message":{},"tool_use_result":{"stdout":"{\"a\":1,\"a\":2,\"b\":\"flux:signal\"}"}}"# => [];
}

#[test]
fn flux_keeps_optional_fields_and_floors_tokens() {
    let e = flux_all(
        r#"{"flux:signal": {"verdict": "proceed", "summary": "done", "cost_usd": 0.42, "tokens_in": 10.9, "tokens_out": 3, "meta": {"k": 1}, "reason": 7}}"#,
    );
    let FluxEvent::Signal(s) = &e[0] else {
        panic!("{e:?}")
    };
    assert_eq!(s.summary.as_deref(), Some("done"));
    assert_eq!(s.cost_usd, Some(0.42));
    assert_eq!((s.tokens_in, s.tokens_out), (Some(10), Some(3)));
    assert_eq!(s.meta.as_ref().unwrap()["k"], 1);
    assert_eq!(
        s.reason, None,
        "a non-string reason is dropped, as upstream"
    );
}

#[test]
fn flux_last_signal_wins() {
    let mut p = FluxParser::default();
    p.feed(b"{\"flux:signal\":{\"verdict\":\"hold\"}}\n{\"flux:signal\":{\"verdict\":\"oops\"}}\n{\"flux:signal\":{\"verdict\":\"proceed\"}}\n");
    assert_eq!(p.last().unwrap().verdict, Verdict::Proceed);
}

#[test]
fn flux_over_long_line_is_reported_and_memory_stays_bounded() {
    let mut p = FluxParser::new(64);
    let mut events = Vec::new();
    for _ in 0..10_000 {
        events.extend(p.feed(&[b'x'; 1000])); // 10 MB without a newline
    }
    events.extend(p.feed(b"\n{\"flux:signal\":{\"verdict\":\"abort\"}}\n"));
    assert_eq!(events.len(), 2);
    assert!(matches!(
        events[0],
        FluxEvent::TooLong {
            line: 1,
            len: 10_000_000
        }
    ));
    assert!(matches!(&events[1], FluxEvent::Signal(s) if s.line == 2));
}

macro_rules! result_cases {
    ($($name:ident: $doc:expr => $valid:expr, $routing:expr, $needle:expr;)*) => {$(
        #[test]
        fn $name() {
            let r = flux::validate_result($doc.as_bytes());
            assert_eq!(r.valid, $valid, "{:?}", r.errors);
            assert_eq!(r.routing, $routing);
            let needle: &str = $needle;
            if !needle.is_empty() {
                assert!(r.errors.iter().any(|e| e.contains(needle)), "{:?}", r.errors);
            }
            if !r.valid {
                assert_eq!(r.routing, None, "an invalid document never routes (never proceed)");
            }
        }
    )*};
}

result_cases! {
    result_pass_routes_on_pass: r#"{"verdict": "pass", "summary": "Implemented the parser."}"# => true, Some(Routing::OnPass), "";
    result_fail_routes_on_fail: r#"{"verdict": "fail", "summary": "Tests still red."}"# => true, Some(Routing::OnFail), "";
    result_blocked_routes_fallback: r#"{"verdict": "blocked", "summary": "Need credentials.", "blockers": [{"title": "No key", "description": "API key missing"}]}"# => true, Some(Routing::Fallback), "";
    result_full_document: r#"{"verdict": "pass", "summary": "ok", "comment": "c", "artifacts": ["a.md"], "meta": {"model": "m", "input_tokens": 1, "output_tokens": 2}}"# => true, Some(Routing::OnPass), "";
    result_missing_verdict: r#"{"summary": "x"}"# => false, None, "missing required `verdict`";
    result_unknown_verdict: r#"{"verdict": "proceed", "summary": "x"}"# => false, None, "`verdict` must be";
    result_empty_summary: r#"{"verdict": "pass", "summary": "  "}"# => false, None, "`summary` must not be empty";
    result_missing_summary: r#"{"verdict": "pass"}"# => false, None, "missing required `summary`";
    result_bad_blockers: r#"{"verdict": "blocked", "summary": "x", "blockers": [{"description": "no title"}]}"# => false, None, "blockers[0]";
    result_bad_artifacts: r#"{"verdict": "pass", "summary": "x", "artifacts": [1]}"# => false, None, "`artifacts` must be";
    result_bad_meta_tokens: r#"{"verdict": "pass", "summary": "x", "meta": {"input_tokens": -5}}"# => false, None, "meta.input_tokens";
    result_not_json: "verdict: pass" => false, None, "invalid JSON";
    result_not_object: "[]" => false, None, "not a JSON object";
}

fn pilot_all(input: &str) -> (Vec<PilotEvent>, PilotSummary) {
    let mut p = PilotParser::default();
    let mut out = p.feed(input.as_bytes());
    out.extend(p.finish());
    let mut s = PilotSummary::default();
    for e in &out {
        s.update(e);
    }
    (out, s)
}

fn block(json: &str) -> String {
    format!("```pilot-signal\n{json}\n```\n")
}

macro_rules! pilot_cases {
    ($($name:ident: $input:expr => signals $n:expr, progress $prog:expr, phase $phase:expr, exit $exit:expr, warnings $w:expr;)*) => {$(
        #[test]
        fn $name() {
            let (_, s) = pilot_all(&$input);
            assert_eq!((s.signals, s.progress, s.phase.as_str(), s.exit, s.warnings), ($n, $prog, $phase, $exit, $w), "{s:?}");
        }
    )*};
}

pilot_cases! {
    pilot_none: "no signals here\n" => signals 0, progress -1, phase "", exit false, warnings 0;
    pilot_seed_status_block: "```pilot-signal\n{\n\"v\": 2,\n\"type\": \"status\",\n\"phase\": \"IMPL\",\n\"progress\": 65,\n\"iteration\": 5,\n\"max_iterations\": 10,\n\"message\": \"Implementing user authentication\"\n}\n```\n" => signals 1, progress 65, phase "IMPL", exit false, warnings 0;
    pilot_progress_clamped_high: block(r#"{"progress": 150}"#) => signals 1, progress 100, phase "", exit false, warnings 0;
    pilot_progress_clamped_low: block(r#"{"progress": -10}"#) => signals 1, progress 0, phase "", exit false, warnings 0;
    pilot_type_defaults_to_status: block(r#"{"progress": 30}"#) => signals 1, progress 30, phase "", exit false, warnings 0;
    pilot_latest_progress_from_last_status_only: format!("{}{}", block(r#"{"type":"status","progress":40}"#), block(r#"{"type":"phase","phase":"VERIFY","progress":99}"#)) => signals 2, progress 40, phase "VERIFY", exit false, warnings 0;
    pilot_latest_phase_is_last_non_empty: format!("{}{}", block(r#"{"phase":"RESEARCH"}"#), block(r#"{"phase":""}"#)) => signals 2, progress 0, phase "RESEARCH", exit false, warnings 0;
    pilot_exit_by_flag: block(r#"{"v":2,"type":"status","exit_signal":true}"#) => signals 1, progress 0, phase "", exit true, warnings 0;
    pilot_exit_by_type: block(r#"{"v":2,"type":"exit","success":false,"reason":"blocked: tests failing after 3 retry attempts"}"#) => signals 1, progress -1, phase "", exit true, warnings 0;
    pilot_bad_json_skipped_with_warning: format!("{}{}", block("{not json"), block(r#"{"progress": 5}"#)) => signals 1, progress 5, phase "", exit false, warnings 1;
    pilot_other_fences_ignored: "```json\n{\"progress\": 90}\n```\n```\n```pilot-signal\n{}\n```\n```\n" => signals 0, progress -1, phase "", exit false, warnings 0;
    pilot_unterminated_block_warned: "```pilot-signal\n{\"progress\": 5}\n" => signals 0, progress -1, phase "", exit false, warnings 1;
    pilot_crlf_fences: "```pilot-signal\r\n{\"progress\": 12}\r\n```\r\n" => signals 1, progress 12, phase "", exit false, warnings 0;
    pilot_stagnation: block(r#"{"v":2,"type":"stagnation","iteration":8,"max_iterations":10,"indicators":{"same_error":true,"no_progress":true}}"#) => signals 1, progress -1, phase "", exit false, warnings 0;
}

#[test]
fn pilot_defaults_and_fields() {
    let (events, _) = pilot_all(&format!(
        "text\n{}",
        block(r#"{"v": 0, "indicators": {"same_error": true}, "success": true}"#)
    ));
    let PilotEvent::Signal(s) = &events[0] else {
        panic!()
    };
    assert_eq!((s.v, s.signal_type.as_str(), s.line), (2, "status", 2));
    assert_eq!(s.indicators.as_ref().unwrap()["same_error"], true);
    assert_eq!(s.success, Some(true));
}

#[test]
fn pilot_phase_to_progress() {
    let m: Vec<_> = ["INIT", "RESEARCH", "IMPL", "VERIFY", "COMPLETE", "OTHER"]
        .iter()
        .map(|p| phase_progress(p))
        .collect();
    assert_eq!(m, [Some(0), Some(25), Some(50), Some(80), Some(100), None]);
}

// ---------------------------------------------------------------- split invariance

/// A small deterministic generator (xorshift64*): enough to explore splits, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn mixed_stream() -> Vec<u8> {
    let mut s = String::new();
    s.push_str(
        "starting\r\n{\"flux:signal\": {\"verdict\": \"proceed\", \"summary\": \"warm-up\"}}\n",
    );
    s.push_str(
        "```pilot-signal\n{\"v\":2,\"type\":\"status\",\"phase\":\"IMPL\",\"progress\":65}\n```\n",
    );
    s.push_str("{\"flux:signal\": {\"verdict\": \"nope\"}}\n```rust\nfn main() {}\n```\n");
    s.push_str(&"x".repeat(300));
    s.push('\n');
    s.push_str("{\"flux:signal\": {\"verdict\": \"hold\", \"reason\": \"needs_human\", \"meta\": {\"question\": \"ok?\"}}}\r\n");
    // A key spelt with an escape (upstream's JSON.parse reads it), beside plain escapes.
    s.push_str("{\"text\": \"caf\\u00e9\"}\n{\"\\u0066lux:signal\": {\"verdict\": \"rework\"}}\n");
    s.push_str("```pilot-signal\r\n{bad json}\r\n```\r\n```pilot-signal\n{\"type\":\"exit\",\"exit_signal\":true,\"success\":true}\n```\n");
    s.push_str("unterminated last line {\"flux:signal\": {\"verdict\": \"abort\"}}");
    s.into_bytes()
}

fn split_and_parse(data: &[u8], rng: &mut Rng) -> (Vec<FluxEvent>, Vec<PilotEvent>) {
    let (mut f, mut p) = (FluxParser::new(256), PilotParser::new(256));
    let (mut fe, mut pe) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < data.len() {
        let n = match rng.below(4) {
            0 => 1,
            1 => 1 + rng.below(8) as usize,
            _ => 1 + rng.below(200) as usize,
        };
        let end = (i + n).min(data.len());
        fe.extend(f.feed(&data[i..end]));
        pe.extend(p.feed(&data[i..end]));
        i = end;
    }
    fe.extend(f.finish());
    pe.extend(p.finish());
    (fe, pe)
}

#[test]
fn any_split_gives_the_same_events() {
    let data = mixed_stream();
    let whole = {
        let (mut f, mut p) = (FluxParser::new(256), PilotParser::new(256));
        let mut fe = f.feed(&data);
        fe.extend(f.finish());
        let mut pe = p.feed(&data);
        pe.extend(p.finish());
        (fe, pe)
    };
    // The stream really exercises every kind of event.
    assert_eq!(
        whole
            .0
            .iter()
            .filter(|e| matches!(e, FluxEvent::Signal(_)))
            .count(),
        3
    );
    assert!(whole.0.iter().any(|e| matches!(e, FluxEvent::Error { .. })));
    assert!(
        whole
            .0
            .iter()
            .any(|e| matches!(e, FluxEvent::TooLong { .. }))
    );
    assert_eq!(
        whole
            .1
            .iter()
            .filter(|e| matches!(e, PilotEvent::Signal(_)))
            .count(),
        2
    );
    assert!(
        whole
            .1
            .iter()
            .any(|e| matches!(e, PilotEvent::Warning { .. }))
    );
    for seed in 1..=3000u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let got = split_and_parse(&data, &mut rng);
        assert_eq!(got, whole, "seed {seed}");
    }
}

#[test]
fn a_signal_split_across_two_reads_is_not_missed() {
    let line = br#"{"flux:signal": {"verdict": "abort"}}"#;
    for cut in 1..line.len() {
        let mut p = FluxParser::default();
        let mut e = p.feed(&line[..cut]);
        e.extend(p.feed(&line[cut..]));
        e.extend(p.feed(b"\n"));
        assert_eq!(e.len(), 1, "cut at {cut}");
    }
}
