//! A worker process for the multi-process race tests.
//!
//! `race_worker produce ROOT PRODUCER COUNT AGENT`: sends COUNT signals to AGENT, messages
//! `PRODUCER:SEQ`.
//! `race_worker consume ROOT AGENT DONE_FILE`: runs checkpoint passes until DONE_FILE exists
//! and a pass after that delivers nothing; prints one `ID MESSAGE` line per delivery.

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
    let mb = opts.open(&args[2]).expect("open mailbox");
    match args[1].as_str() {
        "produce" => {
            let count: u64 = args[4].parse().unwrap();
            for seq in 0..count {
                let mut s = NewSignal::new(SignalType::Info);
                s.target(Target::Agent(args[5].clone()))
                    .message(format!("{}:{seq}", args[3]));
                mb.send(&s).expect("send");
            }
        }
        "consume" => {
            let agent = &args[3];
            let done = Path::new(&args[4]);
            let _presence = mb.presence(agent).expect("presence");
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            loop {
                let finished = done.exists();
                let pass = mb.pass(agent, None).expect("pass");
                assert!(pass.interrupted.is_none());
                for s in &pass.delivered {
                    writeln!(out, "{} {}", s.id, s.message.as_deref().unwrap_or("")).unwrap();
                }
                if pass.delivered.is_empty() {
                    if finished {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            out.flush().unwrap();
        }
        other => panic!("unknown mode {other}"),
    }
}
