//! Pilot: fenced `pilot-signal` blocks in an agent's output. See `spec/streams.md`.

use serde_json::{Map, Value, json};

use crate::lines::{Line, LineSplitter};

/// A Pilot signal, with upstream's defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct PilotSignal {
    /// 1-based line of the opening fence.
    pub line: usize,
    /// Protocol version (missing or 0 → 2).
    pub v: i64,
    /// `status`, `phase`, `exit`, `stagnation`, ... (missing → `status`).
    pub signal_type: String,
    /// INIT, RESEARCH, IMPL, VERIFY, COMPLETE, or empty.
    pub phase: String,
    /// Clamped to 0..=100; 0 when absent.
    pub progress: i64,
    /// `iteration`.
    pub iteration: Option<i64>,
    /// `max_iterations`.
    pub max_iterations: Option<i64>,
    /// `exit_signal`.
    pub exit_signal: bool,
    /// `success`.
    pub success: Option<bool>,
    /// `reason`.
    pub reason: Option<String>,
    /// `message`.
    pub message: Option<String>,
    /// `indicators`.
    pub indicators: Option<Map<String, Value>>,
}

impl PilotSignal {
    /// True for an exit: `exit_signal: true` or type `exit`.
    pub fn is_exit(&self) -> bool {
        self.exit_signal || self.signal_type == "exit"
    }

    /// The signal as JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "line": self.line, "v": self.v, "type": self.signal_type, "phase": self.phase,
            "progress": self.progress, "iteration": self.iteration,
            "max_iterations": self.max_iterations, "exit_signal": self.exit_signal,
            "success": self.success, "reason": self.reason, "message": self.message,
            "indicators": self.indicators,
        })
    }
}

/// What the parser reports.
#[derive(Clone, Debug, PartialEq)]
pub enum PilotEvent {
    /// A signal block.
    Signal(PilotSignal),
    /// A block skipped with a warning (bad JSON, unterminated, too long) or an over-long line.
    Warning {
        /// 1-based line.
        line: usize,
        /// What was wrong.
        message: String,
    },
}

/// The progress the dashboard shows for a phase: INIT 0, RESEARCH 25, IMPL 50, VERIFY 80,
/// COMPLETE 100; `None` for other phases.
pub fn phase_progress(phase: &str) -> Option<i64> {
    Some(match phase {
        "INIT" => 0,
        "RESEARCH" => 25,
        "IMPL" => 50,
        "VERIFY" => 80,
        "COMPLETE" => 100,
        _ => return None,
    })
}

/// The running summary upstream's dashboard methods compute.
#[derive(Clone, Debug, PartialEq)]
pub struct PilotSummary {
    /// Signals seen.
    pub signals: usize,
    /// Progress of the last `status` signal, else -1 (`GetLatestProgress`).
    pub progress: i64,
    /// The last non-empty phase, else "" (`GetLatestPhase`).
    pub phase: String,
    /// Any exit signal (`HasExitSignal`).
    pub exit: bool,
    /// `success` of the last exit signal that had one.
    pub success: Option<bool>,
    /// Warnings (skipped blocks).
    pub warnings: usize,
}

impl Default for PilotSummary {
    fn default() -> Self {
        PilotSummary {
            signals: 0,
            progress: -1,
            phase: String::new(),
            exit: false,
            success: None,
            warnings: 0,
        }
    }
}

impl PilotSummary {
    /// Folds one event in.
    pub fn update(&mut self, e: &PilotEvent) {
        match e {
            PilotEvent::Warning { .. } => self.warnings += 1,
            PilotEvent::Signal(s) => {
                self.signals += 1;
                if s.signal_type == "status" {
                    self.progress = s.progress;
                }
                if !s.phase.is_empty() {
                    self.phase = s.phase.clone();
                }
                if s.is_exit() {
                    self.exit = true;
                    if s.success.is_some() {
                        self.success = s.success;
                    }
                }
            }
        }
    }

    /// `{"signals", "progress", "phase", "phase_progress", "exit", "success", "warnings"}`.
    pub fn to_json(&self) -> Value {
        json!({
            "signals": self.signals,
            "progress": self.progress,
            "phase": self.phase,
            "phase_progress": phase_progress(&self.phase),
            "exit": self.exit,
            "success": self.success,
            "warnings": self.warnings,
        })
    }
}

/// Default cap on a line and on a block: 1 MiB.
pub const MAX_BLOCK: usize = 1024 * 1024;

#[derive(Debug)]
enum State {
    Outside,
    /// Inside another fenced block: its content is never a signal.
    OtherFence,
    /// Inside a `pilot-signal` block opened at this line.
    Block(usize),
}

/// An incremental parser of `pilot-signal` blocks: any split of the stream gives the same
/// events.
#[derive(Debug)]
pub struct PilotParser {
    lines: LineSplitter,
    state: State,
    block: Vec<u8>,
    max_block: usize,
    overflowed: bool,
    fence: memchr::memmem::Finder<'static>,
}

impl Default for PilotParser {
    fn default() -> Self {
        PilotParser::new(MAX_BLOCK)
    }
}

impl PilotParser {
    /// A parser capping lines and blocks at `max` bytes.
    pub fn new(max: usize) -> PilotParser {
        PilotParser {
            lines: LineSplitter::new(max),
            state: State::Outside,
            block: Vec::new(),
            max_block: max,
            overflowed: false,
            fence: memchr::memmem::Finder::new(b"```").into_owned(),
        }
    }

    /// Feeds a chunk; returns the events of the blocks it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<PilotEvent> {
        let mut out = Vec::new();
        // Every state change happens on a line with a fence: only those lines need looking at;
        // inside a block the lines between come as raw runs.
        let mut lines = std::mem::replace(&mut self.lines, LineSplitter::new(0));
        let fence = self.fence.clone();
        lines.feed_sparse(chunk, std::slice::from_ref(&fence), &mut |l| {
            self.line(l, &mut out)
        });
        self.lines = lines;
        out
    }

    /// Ends the stream; an unterminated block is reported, not parsed.
    pub fn finish(&mut self) -> Vec<PilotEvent> {
        let mut out = Vec::new();
        let mut lines = std::mem::replace(&mut self.lines, LineSplitter::new(0));
        lines.finish(&mut |l| self.line(l, &mut out));
        self.lines = lines;
        if let State::Block(start) = self.state {
            out.push(PilotEvent::Warning {
                line: start,
                message: "pilot-signal block never closed: skipped".into(),
            });
            self.state = State::Outside;
            self.block.clear();
        }
        out
    }

    fn line(&mut self, l: Line<'_>, out: &mut Vec<PilotEvent>) {
        let (n, text) = match l {
            Line::Text(n, t) => (n, t),
            Line::Gap(raw) => {
                if let State::Block(_) = self.state {
                    for line in raw.split_inclusive(|&b| b == b'\n') {
                        let line = line.strip_suffix(b"\n").unwrap_or(line);
                        self.block_line(line.strip_suffix(b"\r").unwrap_or(line));
                    }
                }
                return;
            }
            Line::TooLong(n, len) => {
                out.push(PilotEvent::Warning {
                    line: n,
                    message: format!("line of {len} bytes is over the cap: skipped"),
                });
                if let State::Block(_) = self.state {
                    self.overflowed = true;
                }
                return;
            }
        };
        let t = text.trim_ascii();
        match self.state {
            State::Outside => {
                if t.starts_with(b"```") {
                    if t == b"```pilot-signal" {
                        self.state = State::Block(n);
                        self.block.clear();
                        self.overflowed = false;
                    } else {
                        self.state = State::OtherFence;
                    }
                }
            }
            State::OtherFence => {
                if t == b"```" {
                    self.state = State::Outside;
                }
            }
            State::Block(start) => {
                if t == b"```" {
                    self.state = State::Outside;
                    let body = std::mem::take(&mut self.block);
                    out.push(if self.overflowed {
                        PilotEvent::Warning {
                            line: start,
                            message: "pilot-signal block over the size cap: skipped".into(),
                        }
                    } else {
                        parse_block(start, &body)
                    });
                } else {
                    self.block_line(text);
                }
            }
        }
    }
}

impl PilotParser {
    /// Adds one line (without its line ending) to the open block, or marks the block over the
    /// cap. The one place block content grows: the block must not depend on how the stream
    /// was split into chunks.
    fn block_line(&mut self, line: &[u8]) {
        if self.block.len() + line.len() + 1 > self.max_block {
            self.overflowed = true;
            self.block.clear();
        } else if !self.overflowed {
            self.block.extend_from_slice(line);
            self.block.push(b'\n');
        }
    }
}

/// Parses the JSON of one block with upstream's defaults; bad JSON is a warning.
pub fn parse_block(line: usize, body: &[u8]) -> PilotEvent {
    let obj = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => o,
        Ok(other) => {
            return PilotEvent::Warning {
                line,
                message: format!("pilot-signal block is not a JSON object: {other}"),
            };
        }
        Err(e) => {
            return PilotEvent::Warning {
                line,
                message: format!("pilot-signal block is not valid JSON: {e}"),
            };
        }
    };
    let int = |k: &str| {
        obj.get(k)
            .and_then(|v| v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)))
    };
    let string = |k: &str| obj.get(k).and_then(Value::as_str).map(str::to_string);
    let v = match int("v") {
        None | Some(0) => 2,
        Some(v) => v,
    };
    let signal_type = string("type")
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| "status".into());
    PilotEvent::Signal(PilotSignal {
        line,
        v,
        signal_type,
        phase: string("phase").unwrap_or_default(),
        progress: int("progress").unwrap_or(0).clamp(0, 100),
        iteration: int("iteration"),
        max_iterations: int("max_iterations"),
        exit_signal: obj
            .get("exit_signal")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        success: obj.get("success").and_then(Value::as_bool),
        reason: string("reason"),
        message: string("message"),
        indicators: obj.get("indicators").and_then(Value::as_object).cloned(),
    })
}
