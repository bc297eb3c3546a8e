//! Request ids, keys, choices and the names people give (spec/asks.md §2, §3): pure rules, each
//! saying why a text breaks it.

/// The longest key, in bytes.
pub(crate) const KEY_MAX: usize = 128;
/// The most choices a request offers.
pub(crate) const CHOICES_MAX: usize = 16;
/// The longest choice, in bytes.
pub(crate) const CHOICE_MAX: usize = 32;
/// The longest `answered_by` or `to`, in bytes.
pub(crate) const NAME_MAX: usize = 128;

/// The choices a request offers when its asker names none.
pub const DEFAULT_CHOICES: [&str; 2] = ["approve", "deny"];

fn word_problem(s: &str, what: &str, max: usize) -> Option<String> {
    if s.is_empty() {
        return Some(format!("{what} is empty"));
    }
    if s.len() > max {
        return Some(format!("{what} is {} bytes, over {max}", s.len()));
    }
    s.chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        .map(|c| format!("{what} holds {c:?}: only letters, digits, '_' and '-' are allowed"))
}

/// Why `key` is not a request key (1 to 128 bytes of `[A-Za-z0-9_-]`), or `None`.
pub fn key_problem(key: &str) -> Option<String> {
    word_problem(key, "the key", KEY_MAX)
}

/// Why `choice` is not a choice (1 to 32 bytes of `[A-Za-z0-9_-]`), or `None`.
pub fn choice_problem(choice: &str) -> Option<String> {
    word_problem(choice, "a choice", CHOICE_MAX)
}

/// Why `choices` is not a request's list of choices (1 to 16 distinct valid choices), or `None`.
pub fn choices_problem<S: AsRef<str>>(choices: &[S]) -> Option<String> {
    if choices.is_empty() {
        return Some("no choices".into());
    }
    if choices.len() > CHOICES_MAX {
        return Some(format!("{} choices, at most {CHOICES_MAX}", choices.len()));
    }
    for (i, c) in choices.iter().enumerate() {
        if let Some(p) = choice_problem(c.as_ref()) {
            return Some(p);
        }
        if choices[..i].iter().any(|d| d.as_ref() == c.as_ref()) {
            return Some(format!("the choice {:?} is given twice", c.as_ref()));
        }
    }
    None
}

/// Why `name` is not a name a person gives (`--from`, `--to`): 1 to 128 bytes, no control
/// character; or `None`.
pub fn person_problem(name: &str) -> Option<String> {
    if name.trim().is_empty() {
        return Some("the name is empty".into());
    }
    if name.len() > NAME_MAX {
        return Some(format!("the name is {} bytes, over {NAME_MAX}", name.len()));
    }
    name.chars()
        .find(|c| c.is_control())
        .map(|c| format!("the name holds the control character {c:?}"))
}

/// The id of the request `agent` asks under `key`: `<agent>.<key>`.
pub fn ask_id(agent: &str, key: &str) -> String {
    format!("{agent}.{key}")
}

/// Why `id` is not a request id (`<agent>.<key>`, spec/asks.md §2), or `None`. Checked before
/// any path is made from an id: an id that passes holds no `/`, no `..`, no NUL or control
/// character, and is at most 193 bytes.
pub fn id_problem(id: &str) -> Option<String> {
    let Some((agent, key)) = id.split_once('.') else {
        return Some("an id is <agent>.<key> (no dot here)".into());
    };
    if let Some(why) = crate::signal::agent_name_problem(agent) {
        return Some(format!("its agent part: {why}"));
    }
    key_problem(key).map(|why| format!("its key part: {why}"))
}

/// The agent part of a valid id.
pub fn agent_of(id: &str) -> &str {
    id.split_once('.').map_or(id, |(a, _)| a)
}

/// The key part of a valid id.
pub fn key_of(id: &str) -> &str {
    id.split_once('.').map_or("", |(_, k)| k)
}

/// FNV-1a, 64 bits, as 16 lower-case hex digits: the digest an outcome carries of its request.
pub fn digest(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_become_paths_are_refused_by_rule() {
        let long_key = "k".repeat(KEY_MAX);
        let longest = format!("{}.{long_key}", "A".repeat(64));
        let good: [&str; 5] = [
            "Executor.k",
            "Planner.deploy-42",
            "a.0",
            "X_1.a_b-c",
            &longest,
        ];
        for id in good {
            assert_eq!(id_problem(id), None, "{id}");
            assert!(format!("{id}.outcome.json").len() <= 255, "{id}");
        }
        let over = format!("Executor.{}", "k".repeat(KEY_MAX + 1));
        let table: [(&str, &str); 14] = [
            ("", "no dot"),
            ("Executor", "no dot"),
            ("../x", "agent part"),
            ("..", "agent part"),
            ("Executor./x", "'/'"),
            ("Executor.a/b", "'/'"),
            ("Executor...", "'.'"),
            ("Executor.a.b", "'.'"),
            ("Executor.", "empty"),
            (".k", "agent part"),
            ("ALL.k", "agent part"),
            ("Exe cutor.k", "agent part"),
            ("Executor.a\u{0}b", "'\\0'"),
            (&over, "over 128"),
        ];
        for (id, why) in table {
            let p = id_problem(id).unwrap_or_else(|| panic!("{id:?} passed"));
            assert!(p.contains(why), "{id:?}: {p}");
        }
    }

    #[test]
    fn choices_are_words_distinct_and_few() {
        assert_eq!(choices_problem(&DEFAULT_CHOICES), None);
        let table: [(&[&str], &str); 5] = [
            (&[], "no choices"),
            (&["a", "a"], "twice"),
            (&["a b"], "' '"),
            (&[""], "empty"),
            (&["x"; 17], "at most 16"),
        ];
        for (c, why) in table {
            let p = choices_problem(c).expect("refused");
            assert!(p.contains(why), "{c:?}: {p}");
        }
    }

    #[test]
    fn names_people_give_have_no_controls() {
        assert_eq!(person_problem("alice"), None);
        assert_eq!(person_problem("Alice Smith"), None);
        assert!(person_problem("").is_some());
        assert!(person_problem("  ").is_some());
        assert!(person_problem("a\nb").is_some());
        assert!(person_problem(&"x".repeat(129)).is_some());
    }
}
