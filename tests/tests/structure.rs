//! The shape of the source tree holds: in every crate of the workspace (the members of the
//! root `Cargo.toml`; the `tests` and `bench` crates, `fuzz/` and each crate's `tests/` and
//! `benches/` folders aside), no `.rs` file is over [`MAX_LINES`] lines, whole file, and no
//! two modules import each other in a loop: neither the top-level modules of a crate, nor the
//! files of one folder (`super::x`, `crate::m::x` between the files of `m/`), directly or
//! through a longer cycle.
//!
//! Every path written in code counts, not only `use` lines: `crate::a::B` inside an
//! expression is an import of `a`. Comments and string literals are cut first. A path through
//! a `pub use` is followed to where it leads (`crate::Mailbox` is an import of `mailbox`). A
//! parent and its own children may name each other (`mod.rs` declares its files, they use
//! what it holds): only modules that are not one inside the other can make a loop. Code under
//! `#[cfg(test)]` is cut from the import graph (a test may set things up with any module),
//! never from the line count.
//!
//! The checker is tested on planted trees first, so that the test on the real workspace
//! cannot pass vacuously.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The most lines a source file may have.
const MAX_LINES: usize = 700;

/// Workspace members whose files are not held to these rules: cross-crate tests, benchmarks.
const EXEMPT_CRATES: &[&str] = &["tests", "bench", "benches", "fuzz"];

/// Folders of a crate whose files are not held to these rules.
const EXEMPT_DIRS: &[&str] = &["tests", "benches", "bench", "fuzz", "target"];

// ---------------------------------------------------------------------------------------------
// Finding the files.

/// The crates of the workspace at `root` held to the rules, by folder relative to `root`.
fn member_crates(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("{}: {e}", root.join("Cargo.toml").display()));
    let members = array_of(&manifest, "members");
    let excluded = array_of(&manifest, "exclude");
    members
        .into_iter()
        .filter(|m| !excluded.contains(m))
        .filter(|m| {
            let last = m.rsplit('/').next().unwrap_or(m);
            !EXEMPT_CRATES.contains(&last)
        })
        .map(PathBuf::from)
        .collect()
}

/// The strings of the TOML array `key = [...]` (on one line or several) in `manifest`.
fn array_of(manifest: &str, key: &str) -> Vec<String> {
    let Some(start) = manifest.lines().position(|l| {
        let l = l.trim_start();
        l.starts_with(key) && l[key.len()..].trim_start().starts_with('=')
    }) else {
        return Vec::new();
    };
    let mut text = String::new();
    for line in manifest.lines().skip(start) {
        text.push_str(line.split('#').next().unwrap_or(""));
        text.push('\n');
        if line.contains(']') {
            break;
        }
    }
    let inner = text
        .split_once('[')
        .and_then(|(_, r)| r.split_once(']'))
        .map_or("", |(i, _)| i);
    inner
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Every `.rs` file under `dir`, its exempt and hidden folders aside, sorted.
fn rust_files(dir: &Path, top: bool, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            if name.starts_with('.') || name == "target" || (top && EXEMPT_DIRS.contains(&&*name)) {
                continue;
            }
            rust_files(&e.path(), false, out);
        } else if kind.is_file() && name.ends_with(".rs") {
            out.push(e.path());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reading code: comments and literals cut, then tokens.

/// `src` with its comments, string literals and character literals blanked (newlines kept,
/// so that line numbers still hold).
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    let mut i = 0;
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    while i < b.len() {
        let c = b[i];
        // Line comment.
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
            continue;
        }
        // Block comment, nested.
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            continue;
        }
        let prev_ident = i > 0 && ident(b[i - 1]);
        // Raw strings: r"..", r#".."#, br#".."#, cr#".."#.
        if !prev_ident && (c == b'r' || ((c == b'b' || c == b'c') && b.get(i + 1) == Some(&b'r'))) {
            let mut j = if c == b'r' { i + 1 } else { i + 2 };
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) == Some(&b'"') {
                let end: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let mut k = j + 1;
                while k < b.len() && !b[k..].starts_with(&end) {
                    k += 1;
                }
                let stop = (k + end.len()).min(b.len());
                for &x in &b[i..stop] {
                    blank(&mut out, x);
                }
                i = stop;
                continue;
            }
        }
        // Strings: "..", b"..", c"..".
        if c == b'"' || (!prev_ident && (c == b'b' || c == b'c') && b.get(i + 1) == Some(&b'"')) {
            let mut k = if c == b'"' { i + 1 } else { i + 2 };
            while k < b.len() && b[k] != b'"' {
                k += if b[k] == b'\\' { 2 } else { 1 };
            }
            let stop = (k + 1).min(b.len());
            for &x in &b[i..stop] {
                blank(&mut out, x);
            }
            i = stop;
            continue;
        }
        // Character literals ('x', '\n', '\u{1b}', b'x'); a lifetime ('a) is left alone.
        if c == b'\'' {
            let close = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| i + 2 + p)
            } else {
                // One character, maybe several bytes long, then the quote.
                let s = &src[i + 1..];
                s.chars()
                    .next()
                    .filter(|ch| s[ch.len_utf8()..].starts_with('\''))
                    .map(|ch| i + 1 + ch.len_utf8())
            };
            if let Some(close) = close {
                for &x in &b[i..=close] {
                    blank(&mut out, x);
                }
                i = close + 1;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A token of stripped code, with its line (from 1).
#[derive(Debug, Clone)]
struct Tok {
    text: String,
    line: usize,
}

/// The tokens of stripped code: identifiers (and numbers), `::`, and single punctuation.
fn tokens(code: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = code.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '\n' {
            line += 1;
        } else if c.is_whitespace() {
        } else if c.is_alphanumeric() || c == '_' {
            let mut end = i + c.len_utf8();
            while let Some(&(j, d)) = chars.peek() {
                if d.is_alphanumeric() || d == '_' {
                    end = j + d.len_utf8();
                    chars.next();
                } else {
                    break;
                }
            }
            let mut text = code[i..end].to_string();
            // A raw identifier, r#name, is the name.
            if text == "r" && code[end..].starts_with('#') {
                text.clear();
            }
            if !text.is_empty() {
                out.push(Tok { text, line });
            }
        } else if c == ':' && chars.peek().is_some_and(|&(_, d)| d == ':') {
            chars.next();
            out.push(Tok {
                text: "::".into(),
                line,
            });
        } else {
            out.push(Tok {
                text: c.to_string(),
                line,
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The modules of a crate and the paths each names.

/// Where a path starts.
#[derive(Debug, Clone, PartialEq)]
enum Base {
    /// `crate::`
    Crate,
    /// `self::`, `super::`, `super::super::`: the module so many levels up (0: this one).
    Up(usize),
    /// A bare first segment (`use a::b` in a `use` line): a child module, or another crate.
    Relative,
}

/// A path written in code: where it starts, its segments, its line.
#[derive(Debug, Clone)]
struct Written {
    base: Base,
    segments: Vec<String>,
    line: usize,
    /// Inside which inline modules of the file (`mod x { .. }`) it is written.
    inline: Vec<String>,
    /// True for a `pub use`: the last segment is then a name of the module too.
    reexport: bool,
    alias: Option<String>,
}

/// What one file says: the paths it writes, and its children declared `#[cfg(test)]`.
#[derive(Debug, Default)]
struct FileReading {
    paths: Vec<Written>,
    test_children: Vec<String>,
}

/// Expands the use tree starting at `toks[i]` (after a `::` or at a group's item) into
/// `prefix`-led paths; returns the index after the tree.
fn use_tree(
    toks: &[Tok],
    mut i: usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Option<String>, usize)>,
) -> usize {
    let mut segs = prefix;
    loop {
        let Some(t) = toks.get(i) else {
            out.push((segs, None, toks.last().map_or(0, |t| t.line)));
            return i;
        };
        match t.text.as_str() {
            "{" => {
                i += 1;
                loop {
                    match toks.get(i).map(|t| t.text.as_str()) {
                        None => return i,
                        Some("}") => return i + 1,
                        Some(",") => i += 1,
                        Some("self") => {
                            let line = toks[i].line;
                            i += 1;
                            let alias = alias_at(toks, &mut i);
                            out.push((segs.clone(), alias, line));
                        }
                        Some(_) => i = use_tree(toks, i, segs.clone(), out),
                    }
                }
            }
            "*" => {
                out.push((segs, None, t.line));
                return i + 1;
            }
            s if is_ident(s) => {
                segs.push(s.to_string());
                let line = t.line;
                i += 1;
                if toks.get(i).is_some_and(|t| t.text == "::")
                    && toks
                        .get(i + 1)
                        .is_some_and(|t| t.text == "{" || t.text == "*" || is_ident(&t.text))
                {
                    i += 1;
                    continue;
                }
                let alias = alias_at(toks, &mut i);
                out.push((segs, alias, line));
                return i;
            }
            _ => {
                out.push((segs, None, t.line));
                return i;
            }
        }
    }
}

/// `as name` at `toks[*i]`: the name, and `*i` past it.
fn alias_at(toks: &[Tok], i: &mut usize) -> Option<String> {
    if toks.get(*i).is_some_and(|t| t.text == "as") {
        let a = toks.get(*i + 1).map(|t| t.text.clone());
        *i += 2;
        return a;
    }
    None
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// True when the attribute between `toks[open]` (`[`) and its `]` is `cfg(test)`, or a `cfg`
/// that needs `test` (`cfg(all(test, unix))`); returns it and the index after the `]`.
fn cfg_test_attr(toks: &[Tok], open: usize) -> (bool, usize) {
    let mut depth = 0;
    let mut j = open;
    let mut words = Vec::new();
    while let Some(t) = toks.get(j) {
        match t.text.as_str() {
            "[" => depth += 1,
            "]" => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            s => words.push(s),
        }
        j += 1;
    }
    let test = words.first() == Some(&"cfg")
        && words.contains(&"test")
        && !words.contains(&"not")
        && !words.contains(&"any");
    (test, j + 1)
}

/// Index after the item starting at `toks[i]`: its `;`, or its `{..}` block at depth 0.
fn skip_item(toks: &[Tok], mut i: usize) -> usize {
    let mut depth = 0i32;
    while let Some(t) = toks.get(i) {
        match t.text.as_str() {
            "(" | "[" => depth += 1,
            ")" | "]" => depth -= 1,
            ";" if depth == 0 => return i + 1,
            "{" if depth == 0 => {
                let mut braces = 0;
                while let Some(t) = toks.get(i) {
                    match t.text.as_str() {
                        "{" => braces += 1,
                        "}" => {
                            braces -= 1;
                            if braces == 0 {
                                return i + 1;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                return i;
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// Every path a file writes (outside `#[cfg(test)]` items), and its `#[cfg(test)] mod x;`.
fn read_file(src: &str) -> FileReading {
    let toks = tokens(&strip(src));
    let mut reading = FileReading::default();
    // Inline modules open: (name, brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i].text;
        match t.as_str() {
            "#" if toks.get(i + 1).is_some_and(|t| t.text == "[") => {
                let (test, after) = cfg_test_attr(&toks, i + 1);
                if !test {
                    i = after;
                    continue;
                }
                // Further attributes, then the item.
                let mut j = after;
                while toks.get(j).is_some_and(|t| t.text == "#") {
                    j = cfg_test_attr(&toks, j + 1).1;
                }
                let mut k = j;
                if toks.get(k).is_some_and(|t| t.text == "pub") {
                    k += 1;
                    if toks.get(k).is_some_and(|t| t.text == "(") {
                        while toks.get(k).is_some_and(|t| t.text != ")") {
                            k += 1;
                        }
                        k += 1;
                    }
                }
                if toks.get(k).is_some_and(|t| t.text == "mod")
                    && toks.get(k + 2).is_some_and(|t| t.text == ";")
                    && inline.is_empty()
                {
                    reading.test_children.push(toks[k + 1].text.clone());
                }
                i = skip_item(&toks, j);
                continue;
            }
            "mod" if toks.get(i + 2).is_some_and(|t| t.text == "{") => {
                inline.push((toks[i + 1].text.clone(), depth + 1));
                depth += 1;
                i += 3;
                continue;
            }
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            "use" => {
                // `pub use`, `pub(crate) use`, `pub(super) use`.
                let before = |n: usize| i.checked_sub(n).map(|k| toks[k].text.as_str());
                let reexport = before(1) == Some("pub")
                    || (before(1) == Some(")")
                        && before(3) == Some("(")
                        && before(4) == Some("pub"));
                let mut found = Vec::new();
                let mut j = i + 1;
                if toks.get(j).is_some_and(|t| t.text == "::") {
                    j += 1; // `use ::name` names another crate
                    i = skip_item(&toks, j);
                    continue;
                }
                let end = use_tree(&toks, j, Vec::new(), &mut found);
                for (segs, alias, line) in found {
                    if let Some(w) = written(segs, line, &inline, reexport, alias) {
                        reading.paths.push(w);
                    }
                }
                i = end.max(i + 1);
                continue;
            }
            "crate" | "super" | "self"
                if toks.get(i + 1).is_some_and(|t| t.text == "::")
                    && !(i > 0 && toks[i - 1].text == "::") =>
            {
                let mut found = Vec::new();
                let end = use_tree(&toks, i, Vec::new(), &mut found);
                for (segs, alias, line) in found {
                    if let Some(w) = written(segs, line, &inline, false, alias) {
                        reading.paths.push(w);
                    }
                }
                i = end.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    reading
}

/// A path from its segments as written (`crate`, `self`, `super` first or not).
fn written(
    segs: Vec<String>,
    line: usize,
    inline: &[(String, usize)],
    reexport: bool,
    alias: Option<String>,
) -> Option<Written> {
    let mut segs = segs.into_iter().peekable();
    let base = match segs.peek().map(String::as_str) {
        Some("crate") => {
            segs.next();
            Base::Crate
        }
        Some("self") => {
            segs.next();
            Base::Up(0)
        }
        Some("super") => {
            let mut n = 0;
            while segs.peek().is_some_and(|s| s == "super") {
                segs.next();
                n += 1;
            }
            Base::Up(n)
        }
        Some(_) => Base::Relative,
        None => return None,
    };
    Some(Written {
        base,
        segments: segs.collect(),
        line,
        inline: inline.iter().map(|(n, _)| n.clone()).collect(),
        reexport,
        alias,
    })
}

/// One crate (a library, or one binary): its modules by path, and the file of each.
struct ModuleTree {
    /// Module path (`["mailbox", "claim"]`) to its file.
    files: BTreeMap<Vec<String>, PathBuf>,
    /// What each module's file says.
    readings: HashMap<Vec<String>, FileReading>,
}

/// The module tree of the crate whose root file is `dir/<root_file>`: every `.rs` file under
/// `dir` (those in `skip` aside) by its path as a module.
fn module_tree(dir: &Path, root_file: &str, skip: &[PathBuf]) -> ModuleTree {
    let mut all = Vec::new();
    rust_files(dir, false, &mut all);
    let mut files = BTreeMap::new();
    for f in all {
        if skip.iter().any(|s| f.starts_with(s)) {
            continue;
        }
        let rel = f.strip_prefix(dir).unwrap();
        let mut segs: Vec<String> = rel
            .iter()
            .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        if segs.len() == 1 && segs[0] == root_file.trim_end_matches(".rs") {
            segs.clear();
        } else if segs.len() == 1 && (segs[0] == "lib" || segs[0] == "main") {
            continue; // another crate's root in the same folder
        } else if segs.last().is_some_and(|s| s == "mod") {
            segs.pop();
        }
        files.insert(segs, f);
    }
    let readings = files
        .iter()
        .map(|(m, f)| {
            let src = std::fs::read_to_string(f).unwrap_or_default();
            (m.clone(), read_file(&src))
        })
        .collect();
    ModuleTree { files, readings }
}

impl ModuleTree {
    /// True when module `m` is declared `#[cfg(test)]` by its parent, or inside one that is.
    fn test_only(&self, m: &[String]) -> bool {
        (1..=m.len()).any(|n| {
            let (parent, child) = (&m[..n - 1], &m[n - 1]);
            self.readings
                .get(parent)
                .is_some_and(|r| r.test_children.contains(child))
        })
    }

    /// The module a path written in module `at` leads to, following `pub use`s; `None` for
    /// another crate's.
    fn resolve(&self, at: &[String], w: &Written, hops: usize) -> Option<Vec<String>> {
        let mut here: Vec<String> = match w.base {
            Base::Crate => Vec::new(),
            Base::Up(n) => {
                let mut m = at.to_vec();
                m.extend(w.inline.iter().cloned());
                if n > m.len() {
                    return None;
                }
                m.truncate(m.len() - n);
                m
            }
            Base::Relative => {
                let mut m = at.to_vec();
                m.extend(w.inline.iter().cloned());
                let first = w.segments.first()?;
                let mut child = m.clone();
                child.push(first.clone());
                if !self.files.contains_key(&child) {
                    return None;
                }
                m
            }
        };
        self.walk(&mut here, &w.segments, hops);
        Some(here)
    }

    /// Descends from `here` along `segments` while they name modules, or names a module
    /// re-exports; `here` ends at the deepest module reached.
    fn walk(&self, here: &mut Vec<String>, segments: &[String], hops: usize) {
        for (k, s) in segments.iter().enumerate() {
            let mut next = here.clone();
            next.push(s.clone());
            if self.files.contains_key(&next) {
                *here = next;
                continue;
            }
            // A name the module re-exports: where it comes from.
            if hops < 8
                && let Some(r) = self.readings.get(&*here)
                && let Some(w) = r.paths.iter().find(|w| {
                    w.reexport
                        && w.inline.is_empty()
                        && w.alias.as_ref().or(w.segments.last()) == Some(s)
                })
                && let Some(mut to) = self.resolve(here, w, hops + 1)
            {
                // The rest of the path, from where the name comes from.
                self.walk(&mut to, &segments[k + 1..], hops + 1);
                *here = to;
            }
            return;
        }
    }
}

/// An import of one module by another: where it is written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    file: PathBuf,
    line: usize,
    path: String,
}

/// The imports between the children of one folder: (from, to) to the places that make them.
type Imports = BTreeMap<(String, String), BTreeSet<Edge>>;

/// Loops among the modules of one crate: for each folder, the siblings that import each other
/// (directly or through a cycle), with the places that make each edge.
fn loops(tree: &ModuleTree, show: &dyn Fn(&Path) -> String) -> Vec<String> {
    // Per folder (module path), per (from child, to child): the places.
    let mut graph: BTreeMap<Vec<String>, Imports> = BTreeMap::new();
    for (m, reading) in &tree.readings {
        if tree.test_only(m) {
            continue;
        }
        for w in &reading.paths {
            let Some(to) = tree.resolve(m, w, 0) else {
                continue;
            };
            // The folder both live in, and the child of it on each side.
            let mut from = m.clone();
            from.extend(w.inline.iter().cloned());
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue; // one inside the other: a parent and its children
            }
            let (a, b) = (from[common].clone(), to[common].clone());
            let mut text = match &w.base {
                Base::Crate => "crate".to_string(),
                Base::Up(0) => "self".to_string(),
                Base::Up(n) => vec!["super"; *n].join("::"),
                Base::Relative => String::new(),
            };
            for s in &w.segments {
                if !text.is_empty() {
                    text.push_str("::");
                }
                text.push_str(s);
            }
            graph
                .entry(to[..common].to_vec())
                .or_default()
                .entry((a, b))
                .or_default()
                .insert(Edge {
                    file: tree.files[m].clone(),
                    line: w.line,
                    path: text,
                });
        }
    }
    let mut out = Vec::new();
    for (folder, edges) in &graph {
        let nodes: BTreeSet<&String> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
        for scc in strongly_connected(&nodes, edges) {
            let place = if folder.is_empty() {
                "top-level modules".to_string()
            } else {
                format!("files of {}/", folder.join("/"))
            };
            let mut msg = format!(
                "import loop among the {place} {}:",
                scc.iter().cloned().collect::<Vec<_>>().join(", ")
            );
            for ((a, b), places) in edges {
                if scc.contains(a) && scc.contains(b) {
                    let first = places.iter().next().unwrap();
                    let _ = write!(
                        msg,
                        "\n    {a} -> {b}: {} place(s), e.g. {}:{} `{}`",
                        places.len(),
                        show(&first.file),
                        first.line,
                        first.path
                    );
                }
            }
            out.push(msg);
        }
    }
    out
}

/// The strongly connected sets of more than one node (Tarjan).
fn strongly_connected(nodes: &BTreeSet<&String>, edges: &Imports) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        next: usize,
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: HashSet<&'a str>,
        out: Vec<BTreeSet<String>>,
        succ: HashMap<&'a str, Vec<&'a str>>,
    }
    fn visit<'a>(v: &'a str, s: &mut State<'a>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        for w in s.succ.get(v).cloned().unwrap_or_default() {
            if !s.index.contains_key(w) {
                visit(w, s);
                let l = s.low[w].min(s.low[v]);
                s.low.insert(v, l);
            } else if s.on.contains(w) {
                let l = s.index[w].min(s.low[v]);
                s.low.insert(v, l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                set.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                s.out.push(set);
            }
        }
    }
    let mut succ: HashMap<&str, Vec<&str>> = HashMap::new();
    for (a, b) in edges.keys() {
        succ.entry(a).or_default().push(b);
    }
    let mut s = State {
        next: 0,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on: HashSet::new(),
        out: Vec::new(),
        succ,
    };
    for v in nodes {
        if !s.index.contains_key(v.as_str()) {
            visit(v, &mut s);
        }
    }
    s.out
}

// ---------------------------------------------------------------------------------------------
// The checks.

/// Every breach of the rules in the workspace at `root`, one line (or paragraph) each, paths
/// relative to `root`.
fn violations(root: &Path) -> Vec<String> {
    let show = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
    let mut out = Vec::new();
    for member in member_crates(root) {
        let dir = root.join(&member);
        let mut files = Vec::new();
        rust_files(&dir, true, &mut files);
        for f in &files {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let n = text.lines().count();
            if n > MAX_LINES {
                out.push(format!(
                    "{}: {n} lines, over {MAX_LINES}: split it by role",
                    show(f)
                ));
            }
        }
        for (root_dir, root_file, skip) in crate_roots(&dir) {
            let tree = module_tree(&root_dir, &root_file, &skip);
            for l in loops(&tree, &show) {
                out.push(format!("{} ({root_file}): {l}", show(&root_dir)));
            }
        }
    }
    out
}

/// The crate roots in a package folder: (folder of its modules, root file name, folders of
/// other roots to leave out).
fn crate_roots(pkg: &Path) -> Vec<(PathBuf, String, Vec<PathBuf>)> {
    let src = pkg.join("src");
    let bin = src.join("bin");
    let mut out = Vec::new();
    for root in ["lib.rs", "main.rs"] {
        if src.join(root).is_file() {
            out.push((src.clone(), root.to_string(), vec![bin.clone()]));
            break;
        }
    }
    if let Ok(entries) = std::fs::read_dir(&bin) {
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            if p.join("main.rs").is_file() {
                out.push((p, "main.rs".into(), Vec::new()));
            }
        }
    }
    out
}

/// The workspace this crate is part of.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

// ---------------------------------------------------------------------------------------------
// The checker, on planted trees.

/// A scratch workspace with one library crate `lib` holding `files` (path under `lib/src/`,
/// text).
fn planted(files: &[(&str, String)]) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(
        root.join("Cargo.toml"),
        "[workspace]\nmembers = [\n  \"lib\",\n  \"tests\", # exempt\n]\n",
    )
    .unwrap();
    for (path, text) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let v = violations(root);
    (dir, v)
}

fn lines(n: usize) -> String {
    "// a line\n".repeat(n)
}

fn src(text: &str) -> String {
    text.to_string()
}

#[test]
fn a_file_over_the_limit_fails_and_one_at_it_passes() {
    let (_d, v) = planted(&[
        ("lib/src/lib.rs", src("mod a;\nmod b;\n")),
        ("lib/src/a.rs", lines(701)),
        ("lib/src/b.rs", lines(700)),
    ]);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].starts_with("lib/src/a.rs: 701 lines"), "{v:#?}");
}

#[test]
fn exempt_crates_and_folders_are_not_counted() {
    let (_d, v) = planted(&[
        ("lib/src/lib.rs", src("")),
        ("lib/tests/big.rs", lines(900)),
        ("lib/benches/big.rs", lines(900)),
        ("tests/src/big.rs", lines(900)),
        ("lib/src/deep/tests/big.rs", lines(701)),
    ]);
    // A `tests/` folder inside `src/` is source like any other.
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].starts_with("lib/src/deep/tests/big.rs: 701"), "{v:#?}");
}

#[test]
fn two_modules_in_a_loop_fail_naming_both_and_where() {
    let (_d, v) = planted(&[
        ("lib/src/lib.rs", src("mod a;\nmod b;\nmod c;\n")),
        ("lib/src/a.rs", src("use crate::b::Thing;\n")),
        (
            "lib/src/b.rs",
            src("pub struct Thing;\nfn f() -> usize {\n    crate::a::MAX + 1\n}\n"),
        ),
        ("lib/src/c.rs", src("use crate::a;\n")),
    ]);
    assert_eq!(v.len(), 1, "{v:#?}");
    let m = &v[0];
    assert!(m.contains("top-level modules a, b"), "{m}");
    assert!(
        m.contains("a -> b: 1 place(s), e.g. lib/src/a.rs:1 `crate::b::Thing`"),
        "{m}"
    );
    assert!(
        m.contains("b -> a: 1 place(s), e.g. lib/src/b.rs:3 `crate::a::MAX`"),
        "{m}"
    );
    assert!(!m.contains("c ->") && !m.contains("-> c"), "{m}");
}

#[test]
fn three_modules_in_a_loop_fail() {
    let (_d, v) = planted(&[
        ("lib/src/lib.rs", src("mod a;\nmod b;\nmod c;\n")),
        ("lib/src/a.rs", src("use crate::{b::{self, X}};\n")),
        ("lib/src/b/mod.rs", src("mod inner;\n")),
        ("lib/src/b/inner.rs", src("fn f() { crate::c::g() }\n")),
        ("lib/src/c.rs", src("pub fn g() { let _ = crate::a::A; }\n")),
    ]);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].contains("top-level modules a, b, c"), "{v:#?}");
    assert!(
        v[0].contains("b -> c: 1 place(s), e.g. lib/src/b/inner.rs:1"),
        "{v:#?}"
    );
}

#[test]
fn sibling_files_in_a_loop_fail_and_parent_child_do_not() {
    let (_d, v) = planted(&[
        ("lib/src/lib.rs", src("mod m;\n")),
        (
            "lib/src/m/mod.rs",
            src("mod x;\nmod y;\npub(crate) use x::Held;\nstruct M;\n"),
        ),
        ("lib/src/m/x.rs", src("pub struct Held;\nuse super::M;\n")),
        (
            "lib/src/m/y.rs",
            src("use super::Held;\npub struct Delivery;\n"),
        ),
        // x names y's type through the folder's path.
        ("lib/src/m/z.rs", src("")),
    ]);
    assert!(
        v.is_empty(),
        "y -> x only, through the parent's re-export: {v:#?}"
    );
    let (_d, v) = planted(&[
        ("lib/src/lib.rs", src("mod m;\n")),
        (
            "lib/src/m/mod.rs",
            src("mod x;\nmod y;\npub(crate) use x::Held;\n"),
        ),
        (
            "lib/src/m/x.rs",
            src("pub struct Held;\nfn f(d: crate::m::y::Delivery) {}\n"),
        ),
        (
            "lib/src/m/y.rs",
            src("use super::Held;\npub struct Delivery;\n"),
        ),
    ]);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].contains("files of m/ x, y"), "{v:#?}");
    assert!(
        v[0].contains("x -> y: 1 place(s), e.g. lib/src/m/x.rs:2 `crate::m::y::Delivery`"),
        "{v:#?}"
    );
    assert!(
        v[0].contains("y -> x: 1 place(s), e.g. lib/src/m/y.rs:1 `super::Held`"),
        "{v:#?}"
    );
}

#[test]
fn comments_strings_and_test_code_make_no_import() {
    let (_d, v) = planted(&[
        ("lib/src/lib.rs", src("mod a;\nmod b;\n")),
        ("lib/src/a.rs", src("use crate::b;\n")),
        (
            "lib/src/b.rs",
            src(concat!(
                "// crate::a::X\n",
                "/* crate::a::Y /* nested */ crate::a::Z */\n",
                "const S: &str = \"crate::a::W\";\n",
                "const R: &str = r#\"crate::a::\"V\"#;\n",
                "const C: char = '\"'; fn f<'a>(x: &'a str) {}\n",
                "#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n",
                "#[cfg(test)]\nuse crate::a::T;\n",
                "#[cfg(test)]\nmod more;\n",
            )),
        ),
        ("lib/src/b/more.rs", src("use crate::a;\n")),
    ]);
    assert!(v.is_empty(), "{v:#?}");
    // The same file with one real path in code: a loop.
    let (_d, v) = planted(&[
        ("lib/src/lib.rs", src("mod a;\nmod b;\n")),
        ("lib/src/a.rs", src("use crate::b;\n")),
        (
            "lib/src/b.rs",
            src("const C: char = '\"'; fn f() { let _ = \"x\"; crate::a::go(); }\n"),
        ),
    ]);
    assert_eq!(v.len(), 1, "{v:#?}");
}

#[test]
fn a_name_through_the_crate_root_leads_to_its_module() {
    let (_d, v) = planted(&[
        (
            "lib/src/lib.rs",
            src("mod a;\nmod b;\npub use a::{Handle as Mailbox, Other};\n"),
        ),
        (
            "lib/src/a.rs",
            src("pub struct Handle;\nuse crate::b::report;\n"),
        ),
        (
            "lib/src/b.rs",
            src("pub fn report(m: &crate::Mailbox) {}\n"),
        ),
    ]);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(
        v[0].contains("b -> a: 1 place(s), e.g. lib/src/b.rs:1 `crate::Mailbox`"),
        "{v:#?}"
    );
}

#[test]
fn binaries_are_crates_of_their_own() {
    let (_d, v) = planted(&[
        ("lib/src/lib.rs", src("mod a;\n")),
        ("lib/src/a.rs", src("")),
        ("lib/src/bin/tool/main.rs", src("mod cmd;\nmod out;\n")),
        ("lib/src/bin/tool/cmd.rs", src("use crate::out;\n")),
        (
            "lib/src/bin/tool/out.rs",
            src("fn f() { crate::cmd::run() }\n"),
        ),
    ]);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(
        v[0].starts_with(
            "lib/src/bin/tool (main.rs): import loop among the top-level modules cmd, out"
        ),
        "{v:#?}"
    );
}

/// The real workspace.
#[test]
fn the_workspace_keeps_its_structure() {
    let root = workspace_root();
    let v = violations(&root);
    assert!(
        v.is_empty(),
        "the source tree breaks its structure rules ({} violation(s)):\n{}",
        v.len(),
        v.join("\n")
    );
}
