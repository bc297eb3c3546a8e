//! A worker process for the multi-process race, kill and soak tests.
//!
//! `race_worker produce ROOT PRODUCER COUNT TARGETS`: sends COUNT signals, cycling through the
//! comma-separated TARGETS (agent names or ALL), messages `PRODUCER:SEQ`; after each `send`
//! returns it prints `SENT <id>`.
//! `race_worker consume ROOT AGENT DONE_FILE`: runs checkpoint passes until DONE_FILE exists
//! and a pass after that delivers nothing; prints one `<id> <message>` line per delivery.
//!
//! Environment: `RACE_RELAXED` (no fsync), `RACE_QUORUM` (comma-separated broadcast quorum).

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use sigbox::{Durability, MailboxOptions, NewSignal, SignalType, Target};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut opts = MailboxOptions::new();
    opts.settle(Duration::ZERO);
    if std::env::var_os("RACE_RELAXED").is_some() {
        opts.durability(Durability::RelaxedNoFsync);
    }
    if let Ok(q) = std::env::var("RACE_QUORUM") {
        opts.quorum(q.split(',').map(str::to_string));
    }
    let mb = opts.open(&args[2]).expect("open mailbox");
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args[1].as_str() {
        "produce" => {
            let count: u64 = args[4].parse().unwrap();
            let targets: Vec<Target> = args[5]
                .split(',')
                .map(|t| Target::parse(Some(t)).unwrap())
                .collect();
            for seq in 0..count {
                let mut s = NewSignal::new(SignalType::Info);
                s.target(targets[seq as usize % targets.len()].clone())
                    .message(format!("{}:{seq}", args[3]));
                let id = mb.send(&s).expect("send");
                writeln!(out, "SENT {id}").unwrap();
                out.flush().unwrap();
            }
        }
        "consume" => {
            let agent = &args[3];
            let done = Path::new(&args[4]);
            let _presence = mb.presence(agent).expect("presence");
            loop {
                let finished = done.exists();
                let pass = mb.pass(agent, None).expect("pass");
                assert!(pass.interrupted.is_none());
                for s in &pass.delivered {
                    // A redelivery (its first consumer died before acknowledging it) says so.
                    if s.redelivery() > 0 {
                        write!(out, "AGAIN {} ", s.redelivery()).unwrap();
                    }
                    writeln!(out, "{} {}", s.id, s.message.as_deref().unwrap_or("")).unwrap();
                }
                out.flush().unwrap();
                // Printed and flushed: handed over.
                mb.ack(agent).expect("ack");
                if pass.delivered.is_empty() {
                    if finished {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        other => panic!("unknown mode {other}"),
    }
}
