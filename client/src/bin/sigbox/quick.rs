//! The command lines a checkpoint runs on every call (`poll`, `wait`, `hook`), read without
//! building clap's whole command tree: building it (every subcommand, every argument and its
//! help text, the global options copied into each) is more than half of what such a process
//! pays to start (spec/cli.md, "Start-up").
//!
//! This reader takes only the plainest form of those command lines: known options, each at
//! most once, values that do not look like options, valid values. Anything else (help,
//! version, a typo, a value clap would refuse, a form it would read differently) is left to
//! clap, so every refusal and every message stays clap's. A test compares the two on many
//! command lines: whatever this reader takes, clap reads the same way.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;

use crate::cli::{
    AgentArgs, Cli, Command, HookArgs, NoAnswer, PermissionArgs, Runtime, WaitArgs, parse_duration,
    parse_settle,
};

/// The command line `args` (the program's name first) as clap would read it, or `None` when
/// it is not one of the plain forms this reader takes.
pub(crate) fn parse(args: &[OsString]) -> Option<Cli> {
    let mut words = Vec::with_capacity(args.len());
    for a in args.iter().skip(1) {
        words.push(a.to_str()?); // clap reads these as UTF-8 or refuses them
    }
    let mut g = Globals::default();
    let mut i = 0;
    // The global options before the subcommand.
    let sub = loop {
        let w = *words.get(i)?;
        i += 1;
        if !g.take(w, &words, &mut i)? {
            break w;
        }
    };
    g.after = true;
    let mut opts = Opts::default();
    let mut positional: Vec<&str> = Vec::new();
    while let Some(&w) = words.get(i) {
        i += 1;
        if g.take(w, &words, &mut i)? {
            continue;
        }
        if let Some(long) = w.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            if name.is_empty() {
                return None; // `--`: clap's to read
            }
            if FLAGS.contains(&name) {
                if inline.is_some() {
                    return None;
                }
                opts.set(name, "")?;
            } else if VALUED.contains(&name) {
                let v = value(inline, &words, &mut i)?;
                opts.set(name, v)?;
            } else {
                return None;
            }
        } else if w.starts_with('-') {
            return None; // a short option or `-`
        } else {
            positional.push(w);
        }
    }
    let command = match sub {
        "poll" if positional.is_empty() => Command::Poll(opts.agent(&[])?),
        "wait" if positional.is_empty() => Command::Wait(WaitArgs {
            agent: opts.agent(&["timeout", "poll"])?,
            timeout: opts.duration("timeout")?,
            poll_interval: opts.duration("poll")?,
        }),
        "hook" if positional.len() == 1 => Command::Hook(opts.hook(positional[0])?),
        _ => return None,
    };
    Some(Cli {
        root: g.root.map(PathBuf::from),
        json: g.json,
        settle: g.settle,
        durability: g.durability,
        verbose: g.verbose,
        command,
    })
}

/// The global options (`Cli`'s), anywhere on the line.
#[derive(Default)]
struct Globals<'a> {
    root: Option<&'a str>,
    json: bool,
    settle: Option<Duration>,
    durability: Option<String>,
    verbose: u8,
    seen: Vec<&'a str>,
    /// Past the subcommand's name.
    after: bool,
    /// Where `-v` was counted: clap keeps only the subcommand's count when both have one.
    verbose_at: [bool; 2],
}

impl<'a> Globals<'a> {
    /// Notes where `-v` was counted; counted on both sides of the subcommand's name, the line
    /// is left to clap.
    fn counted(&mut self) -> Option<bool> {
        self.verbose_at[usize::from(self.after)] = true;
        (!(self.verbose_at[0] && self.verbose_at[1])).then_some(true)
    }

    /// Takes `w` (and its value, after it) when it is a global option: `Some(true)`; not one:
    /// `Some(false)`; one this reader leaves to clap: `None`.
    fn take(&mut self, w: &'a str, words: &[&'a str], i: &mut usize) -> Option<bool> {
        if w.len() > 1 && w.starts_with('-') && !w.starts_with("--") {
            // `-v`, `-vv`: counted, as often as given.
            if !w[1..].bytes().all(|b| b == b'v') {
                return None;
            }
            self.verbose = self.verbose.checked_add(u8::try_from(w.len() - 1).ok()?)?;
            return self.counted();
        }
        let Some(long) = w.strip_prefix("--") else {
            return Some(false);
        };
        let (name, inline) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (long, None),
        };
        match name {
            "verbose" if inline.is_none() => {
                self.verbose = self.verbose.checked_add(1)?;
                return self.counted();
            }
            "json" if inline.is_none() => {}
            "root" | "settle" | "durability" => {}
            _ => return Some(false),
        }
        if self.seen.contains(&name) {
            return None;
        }
        self.seen.push(name);
        match name {
            "json" => self.json = true,
            "root" => self.root = Some(value(inline, words, i)?),
            "settle" => self.settle = Some(parse_settle(value(inline, words, i)?).ok()?),
            _ => {
                let v = value(inline, words, i)?;
                // clap keeps the value as given, matched without regard to case.
                if !["durable", "relaxed"]
                    .iter()
                    .any(|d| d.eq_ignore_ascii_case(v))
                {
                    return None;
                }
                self.durability = Some(v.to_string());
            }
        }
        Some(true)
    }
}

/// An option's value: after `=`, or the next word; one that looks like an option, or is
/// empty, is left to clap.
fn value<'a>(inline: Option<&'a str>, words: &[&'a str], i: &mut usize) -> Option<&'a str> {
    let v = match inline {
        Some(v) => v,
        None => {
            let v = *words.get(*i)?;
            *i += 1;
            v
        }
    };
    (!v.is_empty() && !v.starts_with('-')).then_some(v)
}

/// The subcommands' options that take no value.
const FLAGS: &[&str] = &["discard", "strict"];
/// The subcommands' options that take one.
const VALUED: &[&str] = &[
    "as",
    "state",
    "max",
    "timeout",
    "poll",
    "event",
    "pause-wait",
    "pause-keep",
    "permission-wait",
    "permission-default",
];

/// The subcommand's options as given, each at most once.
#[derive(Default)]
struct Opts<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Opts<'a> {
    fn set(&mut self, name: &'a str, v: &'a str) -> Option<()> {
        if self.get(name).is_some() {
            return None; // given twice: clap refuses it
        }
        self.0.push((name, v));
        Some(())
    }

    fn get(&self, name: &str) -> Option<&'a str> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }

    /// True when every option given is one of `allowed`.
    fn only(&self, allowed: &[&str]) -> bool {
        self.0.iter().all(|(n, _)| allowed.contains(n))
    }

    fn duration(&self, name: &str) -> Option<Option<Duration>> {
        match self.get(name) {
            None => Some(None),
            Some(v) => Some(Some(parse_duration(v).ok()?)),
        }
    }

    /// `poll`'s options (and `wait`'s, with its own `also`).
    fn agent(&self, also: &[&str]) -> Option<AgentArgs> {
        let mut allowed = vec!["as", "state", "max", "discard"];
        allowed.extend_from_slice(also);
        if !self.only(&allowed) {
            return None;
        }
        let max = match self.get("max") {
            None => None,
            // clap's u64 range 1..: decimal digits, no sign.
            Some(v) if v.bytes().all(|b| b.is_ascii_digit()) => {
                Some(v.parse::<u64>().ok().filter(|&n| n >= 1)?)
            }
            Some(_) => return None,
        };
        Some(AgentArgs {
            agent: self.get("as")?.to_string(),
            state: self.get("state").map(str::to_string),
            max,
            discard: self.get("discard").is_some(),
        })
    }

    /// `hook RUNTIME`'s options.
    fn hook(&self, runtime: &str) -> Option<HookArgs> {
        if !self.only(&[
            "as",
            "state",
            "event",
            "pause-wait",
            "pause-keep",
            "strict",
            "permission-wait",
            "permission-default",
        ]) {
            return None;
        }
        let permission_default = match self.get("permission-default") {
            Some(v) => NoAnswer::from_str(v, false).ok()?,
            // clap reads the variable when the option is not given: only its plainest form
            // is taken here.
            None => match std::env::var_os("SIGBOX_PERMISSION_DEFAULT") {
                None => NoAnswer::Prompt,
                Some(v) => NoAnswer::from_str(v.to_str()?, false).ok()?,
            },
        };
        Some(HookArgs {
            runtime: Runtime::from_str(runtime, false).ok()?,
            agent: self.get("as")?.to_string(),
            state: self.get("state").map(str::to_string),
            event: self.get("event").map(str::to_string),
            pause_wait: parse_duration(self.get("pause-wait").unwrap_or("25s")).ok()?,
            pause_keep: parse_duration(self.get("pause-keep").unwrap_or("10m")).ok()?,
            strict: self.get("strict").is_some(),
            permission: PermissionArgs {
                permission_wait: self.duration("permission-wait")?,
                permission_default,
            },
        })
    }
}

#[cfg(test)]
mod tests;
