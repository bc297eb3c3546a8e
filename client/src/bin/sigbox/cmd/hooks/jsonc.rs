//! A settings file as text, edited in place: parsed with the byte span of every value (JSON,
//! and the comments and trailing commas of JSONC, which editors write), so that an edit
//! inserts or removes one member or element and leaves every other byte as it was: its
//! indentation, escapes, number forms, key order and comments.

use serde_json::{Map, Value};

/// A parsed value and where it is in the text.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// Its first byte.
    pub(crate) start: usize,
    /// One past its last byte.
    pub(crate) end: usize,
    /// What it is.
    pub(crate) kind: Kind,
}

/// The kinds of value, with their parts.
#[derive(Debug, Clone)]
pub(crate) enum Kind {
    /// `{...}`: its members in order (a key written twice appears twice).
    Object(Vec<Member>),
    /// `[...]`: its elements in order.
    Array(Vec<Node>),
    /// A string, number, `true`, `false` or `null`, decoded.
    Scalar(Value),
}

/// An object's member: its key (decoded) and value.
#[derive(Debug, Clone)]
pub(crate) struct Member {
    /// The key, decoded.
    pub(crate) key: String,
    /// Where the key's opening quote is.
    pub(crate) start: usize,
    /// The value.
    pub(crate) value: Node,
}

impl Node {
    /// The value, as a runtime reading the file sees it (a key written twice: the last wins).
    pub(crate) fn value(&self) -> Value {
        match &self.kind {
            Kind::Scalar(v) => v.clone(),
            Kind::Array(items) => Value::Array(items.iter().map(Node::value).collect()),
            Kind::Object(members) => {
                let mut m = Map::new();
                for member in members {
                    m.insert(member.key.clone(), member.value.value());
                }
                Value::Object(m)
            }
        }
    }

    /// The last member named `key` (the one a runtime reads), with its index.
    pub(crate) fn member(&self, key: &str) -> Option<(usize, &Member)> {
        match &self.kind {
            Kind::Object(members) => members.iter().enumerate().rev().find(|(_, m)| m.key == key),
            _ => None,
        }
    }

    /// What it is, for a message: "an object", "a string", ...
    pub(crate) fn what(&self) -> &'static str {
        match &self.kind {
            Kind::Object(_) => "an object",
            Kind::Array(_) => "an array",
            Kind::Scalar(Value::String(_)) => "a string",
            Kind::Scalar(Value::Number(_)) => "a number",
            Kind::Scalar(Value::Bool(_)) => "a boolean",
            Kind::Scalar(_) => "null",
        }
    }

    /// The spans of its members or elements (a member from its key), in order.
    fn parts(&self) -> Vec<(usize, usize)> {
        match &self.kind {
            Kind::Object(members) => members.iter().map(|m| (m.start, m.value.end)).collect(),
            Kind::Array(items) => items.iter().map(|n| (n.start, n.end)).collect(),
            Kind::Scalar(_) => Vec::new(),
        }
    }
}

/// A parsed text: its root value, its comments and its trailing commas.
#[derive(Debug)]
pub(crate) struct Doc {
    /// The root value.
    pub(crate) root: Node,
    /// The span of every comment, in order.
    pub(crate) comments: Vec<(usize, usize)>,
    /// Where each comma with no member or element after it is.
    pub(crate) trailing_commas: Vec<usize>,
}

/// Line and column (1-based, in characters) of byte `at` in `text`.
pub(crate) fn line_col(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, col)
}

/// Parses `text` (JSON, or JSONC: comments and trailing commas). `Err` names the place and
/// what was wrong.
pub(crate) fn parse(text: &str) -> Result<Doc, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        at: 0,
        comments: Vec::new(),
        trailing: Vec::new(),
        depth: 0,
    };
    p.skip()?;
    let root = p.value()?;
    p.skip()?;
    if p.at < p.s.len() {
        return Err(p.err("more after the end of the JSON value"));
    }
    Ok(Doc {
        root,
        comments: p.comments,
        trailing_commas: p.trailing,
    })
}

/// The deepest nesting parsed: a settings file is shallow, and a deeper one is not one.
const MAX_DEPTH: usize = 256;

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    at: usize,
    comments: Vec<(usize, usize)>,
    trailing: Vec<usize>,
    depth: usize,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> String {
        let (line, col) = line_col(self.text, self.at);
        format!("{what} at line {line}, column {col}")
    }

    /// Skips whitespace and comments, recording the comments.
    fn skip(&mut self) -> Result<(), String> {
        loop {
            match self.s.get(self.at) {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.at += 1,
                Some(b'/') if self.s.get(self.at + 1) == Some(&b'/') => {
                    let start = self.at;
                    while self.at < self.s.len() && self.s[self.at] != b'\n' {
                        self.at += 1;
                    }
                    self.comments.push((start, self.at));
                }
                Some(b'/') if self.s.get(self.at + 1) == Some(&b'*') => {
                    let start = self.at;
                    let Some(len) = self.text[self.at + 2..].find("*/") else {
                        return Err(self.err("a comment that is never closed"));
                    };
                    self.at += 2 + len + 2;
                    self.comments.push((start, self.at));
                }
                _ => return Ok(()),
            }
        }
    }

    fn value(&mut self) -> Result<Node, String> {
        let start = self.at;
        match self.s.get(self.at) {
            None => Err(self.err("the text ends where a value was expected")),
            Some(b'{') => self.container(b'}', true),
            Some(b'[') => self.container(b']', false),
            Some(b'"') => {
                let end = self.string_end()?;
                let v: Value = serde_json::from_str(&self.text[start..end])
                    .map_err(|e| self.err(&format!("a bad string ({})", bare(&e))))?;
                Ok(Node {
                    start,
                    end,
                    kind: Kind::Scalar(v),
                })
            }
            Some(_) => {
                let mut end = start;
                while end < self.s.len()
                    && (self.s[end].is_ascii_alphanumeric() || b"+-.".contains(&self.s[end]))
                {
                    end += 1;
                }
                let token = &self.text[start..end];
                let v: Value = serde_json::from_str(token)
                    .ok()
                    .filter(|v: &Value| !v.is_string() && !v.is_object() && !v.is_array())
                    .ok_or_else(|| self.err("an unexpected character"))?;
                self.at = end;
                Ok(Node {
                    start,
                    end,
                    kind: Kind::Scalar(v),
                })
            }
        }
    }

    /// The end of the string starting at `self.at`, moving past it.
    fn string_end(&mut self) -> Result<usize, String> {
        let mut i = self.at + 1;
        while i < self.s.len() {
            match self.s[i] {
                b'\\' => i += 2,
                b'"' => {
                    self.at = i + 1;
                    return Ok(i + 1);
                }
                _ => i += 1,
            }
        }
        Err(self.err("a string that is never closed"))
    }

    fn container(&mut self, close: u8, object: bool) -> Result<Node, String> {
        let start = self.at;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err("values nested too deep"));
        }
        self.at += 1;
        let mut members = Vec::new();
        let mut items = Vec::new();
        let mut comma: Option<usize> = None;
        loop {
            self.skip()?;
            match self.s.get(self.at) {
                None => return Err(self.err("the text ends inside an object or array")),
                Some(&c) if c == close => {
                    if let Some(at) = comma {
                        self.trailing.push(at);
                    }
                    self.at += 1;
                    break;
                }
                _ if !(members.is_empty() && items.is_empty()) && comma.is_none() => {
                    return Err(self.err(if object {
                        "`,` or `}` expected"
                    } else {
                        "`,` or `]` expected"
                    }));
                }
                _ => {}
            }
            if object {
                if self.s.get(self.at) != Some(&b'"') {
                    return Err(self.err("a quoted key expected"));
                }
                let kstart = self.at;
                let kend = self.string_end()?;
                let key: String = serde_json::from_str(&self.text[kstart..kend])
                    .map_err(|e| self.err(&format!("a bad key ({})", bare(&e))))?;
                self.skip()?;
                if self.s.get(self.at) != Some(&b':') {
                    return Err(self.err("`:` expected"));
                }
                self.at += 1;
                self.skip()?;
                let value = self.value()?;
                members.push(Member {
                    key,
                    start: kstart,
                    value,
                });
            } else {
                items.push(self.value()?);
            }
            self.skip()?;
            comma = None;
            if self.s.get(self.at) == Some(&b',') {
                comma = Some(self.at);
                self.at += 1;
            }
        }
        self.depth -= 1;
        Ok(Node {
            start,
            end: self.at,
            kind: if object {
                Kind::Object(members)
            } else {
                Kind::Array(items)
            },
        })
    }
}

/// What serde_json says of an error, without its place (given by the caller, in the file).
fn bare(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rsplit_once(" at line ") {
        Some((what, _)) => what.to_string(),
        None => s,
    }
}

/// One edit: the bytes `start..end` replaced by `with`.
#[derive(Debug, Clone)]
pub(crate) struct Edit {
    start: usize,
    end: usize,
    with: String,
}

/// `text` with `edits` applied (spans that do not overlap, in any order).
pub(crate) fn apply(text: &str, mut edits: Vec<Edit>) -> String {
    edits.sort_by_key(|e| std::cmp::Reverse(e.start));
    let mut out = text.to_string();
    for e in edits {
        out.replace_range(e.start..e.end, &e.with);
    }
    out
}

impl Doc {
    /// True when a comment lies in `start..end`.
    fn comment_in(&self, start: usize, end: usize) -> Option<(usize, usize)> {
        self.comments
            .iter()
            .copied()
            .find(|&(s, e)| s >= start && e <= end)
    }

    /// The edits that remove part `i` of `container` (an object's member or an array's
    /// element), with the comma and the blank space that went with it, keeping every
    /// comment: what [`Doc::insert`] adds, removed byte for byte.
    pub(crate) fn remove(&self, text: &str, container: &Node, i: usize) -> Vec<Edit> {
        let parts = container.parts();
        let (start, end) = parts[i];
        let cut = |s: usize, e: usize| Edit {
            start: s,
            end: e,
            with: String::new(),
        };
        if parts.len() == 1 {
            // The only part: the blank space on both sides goes too, up to a comment or
            // the brackets (a trailing comma after it included).
            let from = self
                .comments
                .iter()
                .filter(|&&(s, e)| s > container.start && e <= start)
                .map(|&(_, e)| e)
                .max()
                .unwrap_or(container.start + 1);
            let to = self
                .comments
                .iter()
                .filter(|&&(s, _)| s >= end && s < container.end)
                .map(|&(s, _)| s)
                .min()
                .unwrap_or(container.end - 1);
            // Between the part and `to`: blank space and at most a trailing comma.
            return vec![cut(from, to)];
        }
        if i + 1 < parts.len() {
            // Not the last: it, its comma and the blank space up to what follows.
            let next = parts[i + 1].0;
            let comma = self.comma_after(text, end, next).unwrap_or(end);
            let mut to = comma + 1;
            while to < next && text.as_bytes()[to].is_ascii_whitespace() {
                to += 1;
            }
            return vec![cut(start, to)];
        }
        // The last: the comma before it, and the blank space from there (or from the last
        // comment between) to its end.
        let prev = parts[i - 1].1;
        let comma = self.comma_after(text, prev, start);
        let after_comments = self
            .comments
            .iter()
            .filter(|&&(s, e)| s >= prev && e <= start)
            .map(|&(_, e)| e)
            .max();
        match (comma, after_comments) {
            (Some(c), Some(from)) => vec![cut(c, c + 1), cut(from, end)],
            (Some(c), None) => vec![cut(c, end)],
            (None, _) => vec![cut(start, end)],
        }
    }

    /// Where the comma between `from` and `to` (outside comments) is.
    fn comma_after(&self, text: &str, from: usize, to: usize) -> Option<usize> {
        let mut i = from;
        while i < to {
            if let Some((_, e)) = self.comment_in(i, to).filter(|&(s, _)| s == i) {
                i = e;
                continue;
            }
            if text.as_bytes()[i] == b',' {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// The edit that adds `piece` (a member `"key": value`, or an element) at the end of
    /// `container`, laid out as the container's other parts are (on their own lines, with
    /// their indentation, or on one line); into an empty container, on lines of its own
    /// indented one level deeper when the file is on several lines (or this is the root).
    pub(crate) fn insert(&self, text: &str, container: &Node, piece: &Piece) -> Edit {
        let parts = container.parts();
        let unit = indent_unit(text);
        let nl = newline(text);
        if let Some(&(start, end)) = parts.last() {
            let line_start = text[..start].rfind('\n').map_or(0, |n| n + 1);
            let indent = &text[line_start..start];
            let on_own_line = !indent.is_empty()
                && indent.bytes().all(|b| b == b' ' || b == b'\t')
                && text[container.start..start].contains('\n');
            let with = if on_own_line {
                format!(",{nl}{indent}{}", piece.render(indent, &unit, nl))
            } else {
                format!(", {}", piece.compact())
            };
            return Edit {
                start: end,
                end,
                with,
            };
        }
        let line_start = text[..container.start].rfind('\n').map_or(0, |n| n + 1);
        let outer: String = text[line_start..container.start]
            .chars()
            .take_while(|c| *c == ' ' || *c == '\t')
            .collect();
        let is_root = self.root.start == container.start;
        // The inside of an empty container: blank space, and comments kept where they are.
        let inside_start = self
            .comments
            .iter()
            .filter(|&&(s, e)| s > container.start && e < container.end)
            .map(|&(_, e)| e)
            .max()
            .unwrap_or(container.start + 1);
        let close = container.end - 1;
        let with = if is_root || text.trim_end().contains('\n') {
            let inner = format!("{outer}{unit}");
            format!("{nl}{inner}{}{nl}{outer}", piece.render(&inner, &unit, nl))
        } else {
            piece.compact()
        };
        Edit {
            start: inside_start,
            end: close,
            with,
        }
    }

    /// The edit that puts `value` where `node` is.
    pub(crate) fn replace(&self, text: &str, node: &Node, piece: &Piece) -> Edit {
        let line_start = text[..node.start].rfind('\n').map_or(0, |n| n + 1);
        let outer: String = text[line_start..node.start]
            .chars()
            .take_while(|c| *c == ' ' || *c == '\t')
            .collect();
        let with = if text.trim_end().contains('\n') {
            piece.render(&outer, &indent_unit(text), newline(text))
        } else {
            piece.compact()
        };
        Edit {
            start: node.start,
            end: node.end,
            with,
        }
    }
}

/// What is inserted: a member (key and value) or an element.
#[derive(Debug, Clone)]
pub(crate) struct Piece {
    /// The key, for an object's member.
    pub(crate) key: Option<String>,
    /// The value.
    pub(crate) value: Value,
}

impl Piece {
    /// On several lines, each after the first prefixed with `indent`, nested levels indented
    /// by `unit`.
    fn render(&self, indent: &str, unit: &str, nl: &str) -> String {
        // Two spaces a level as serialized (a string holds no line break: JSON escapes it),
        // then the file's own.
        let pretty = serde_json::to_string_pretty(&self.value).expect("JSON serializes");
        let body = pretty
            .lines()
            .enumerate()
            .map(|(i, l)| {
                let rest = l.trim_start_matches(' ');
                let levels = (l.len() - rest.len()) / 2;
                let lead = if i == 0 { "" } else { indent };
                format!("{lead}{}{rest}", unit.repeat(levels))
            })
            .collect::<Vec<_>>()
            .join(nl);
        match &self.key {
            Some(k) => format!("{}: {body}", Value::from(k.as_str())),
            None => body,
        }
    }

    /// On one line.
    fn compact(&self) -> String {
        let body = self.value.to_string();
        match &self.key {
            Some(k) => format!("{}: {body}", Value::from(k.as_str())),
            None => body,
        }
    }
}

/// The line ending `text` uses: `\r\n` when it has one, else `\n`.
fn newline(text: &str) -> &'static str {
    if text.contains("\r\n") { "\r\n" } else { "\n" }
}

/// The indentation one level adds in `text`: that of its first indented line, else two
/// spaces.
fn indent_unit(text: &str) -> String {
    text.lines()
        .skip(1)
        .map(|l| {
            l.chars()
                .take_while(|c| *c == ' ' || *c == '\t')
                .collect::<String>()
        })
        .find(|w| !w.is_empty())
        .unwrap_or_else(|| "  ".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(text: &str, path: &[&str], piece: Piece) -> (String, String) {
        let doc = parse(text).unwrap();
        let mut node = &doc.root;
        for k in path {
            node = &node.member(k).unwrap().1.value;
        }
        let added = apply(text, vec![doc.insert(text, node, &piece)]);
        let doc2 = parse(&added).unwrap();
        let mut node = &doc2.root;
        for k in path {
            node = &node.member(k).unwrap().1.value;
        }
        let last = node.parts().len() - 1;
        let removed = apply(&added, doc2.remove(&added, node, last));
        (added, removed)
    }

    #[test]
    fn an_insert_then_its_removal_gives_back_the_text() {
        let member = Piece {
            key: Some("hooks".into()),
            value: serde_json::json!({"Stop": [{"hooks": []}]}),
        };
        for text in [
            "{\n  \"model\": \"opus\"\n}\n",
            "{\"model\": \"opus\"}",
            "{\n\t\"a\": 1.50,\n\t\"b\": \"\\u00e9\"\n}",
            "{\n    \"a\": [1, 2],   // note\n    \"b\": 2\n}\n",
        ] {
            let (added, removed) = roundtrip(text, &[], member.clone());
            assert_eq!(removed, text, "{added}");
            assert_eq!(
                parse(&added).unwrap().root.value()["hooks"]["Stop"][0]["hooks"],
                serde_json::json!([])
            );
        }
        let element = Piece {
            key: None,
            value: serde_json::json!({"x": 1}),
        };
        for text in [
            "{\"l\": [1]}",
            "{\n  \"l\": [\n    1\n  ]\n}",
            "{\"l\": [1, /* c */ 2]}",
        ] {
            let (_, removed) = roundtrip(text, &["l"], element.clone());
            assert_eq!(removed, text);
        }
    }

    #[test]
    fn removals_keep_comments_and_their_neighbours() {
        let text = "[\n  1,\n  // keep\n  2,\n  3\n]";
        let doc = parse(text).unwrap();
        assert_eq!(
            apply(text, doc.remove(text, &doc.root, 0)),
            "[\n  // keep\n  2,\n  3\n]"
        );
        assert_eq!(
            apply(text, doc.remove(text, &doc.root, 2)),
            "[\n  1,\n  // keep\n  2\n]"
        );
        let text = "{ /* a */ \"x\": 1, }";
        let doc = parse(text).unwrap();
        assert_eq!(doc.trailing_commas.len(), 1);
        assert_eq!(apply(text, doc.remove(text, &doc.root, 0)), "{ /* a */}");
    }

    #[test]
    fn bad_text_is_refused_with_its_place() {
        for (bad, place) in [
            ("{\"a\": 1,\n \"b\" 2}", "line 2, column 6"),
            ("{\"a\": tru}", "line 1, column 7"),
            ("[1, 2", "line 1, column 6"),
            ("{} x", "line 1, column 4"),
            ("/* open", "line 1, column 1"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(place), "{bad}: {e}");
        }
        let deep = "[".repeat(1000);
        assert!(parse(&deep).unwrap_err().contains("too deep"));
    }
}
