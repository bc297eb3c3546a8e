//! How sigbox's programs write log records as text: one record on one line, every value as
//! text with its control characters escaped, so that a hostile file name in a field never
//! breaks a line or moves a person's cursor. Fields hold paths as plain text
//! (`%path.display()`), never `Debug`-quoted, so that under `--json` a path is the JSON string
//! of the path itself.

use std::borrow::Cow;

/// `s` with every control character but a tab escaped (`\n`, `\r`, `\u{1b}`): text from
/// senders (a message, a file name, a reason quoting either) never moves the cursor, clears
/// the screen or rings the bell of a person's terminal, and one record stays one line.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c.is_control() && c != '\t') {
        return s.into();
    }
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\t' {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// The field formatter of text log records (`tracing_subscriber::fmt().fmt_fields(...)`):
/// the message as it is, then `name=value` for each field, separated by spaces, every value
/// as plain text (a string unquoted, a path as `%path.display()` gives it) with its control
/// characters escaped ([`escape_controls`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct TextFields;

/// [`TextFields`], for `fmt_fields`.
pub fn text_fields() -> TextFields {
    TextFields
}

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for TextFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        let mut v = TextVisitor {
            writer: &mut writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut v);
        v.result
    }
}

/// Writes one record's fields as [`TextFields`] says.
struct TextVisitor<'a, 'w> {
    writer: &'a mut tracing_subscriber::fmt::format::Writer<'w>,
    first: bool,
    result: std::fmt::Result,
}

impl TextVisitor<'_, '_> {
    fn put(&mut self, field: &tracing::field::Field, text: &str) {
        if self.result.is_err() {
            return;
        }
        let sep = if std::mem::take(&mut self.first) {
            ""
        } else {
            " "
        };
        let text = escape_controls(text);
        self.result = match field.name() {
            "message" => write!(self.writer, "{sep}{text}"),
            name => write!(self.writer, "{sep}{name}={text}"),
        };
    }
}

impl tracing::field::Visit for TextVisitor<'_, '_> {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.put(field, value);
    }

    fn record_error(
        &mut self,
        field: &tracing::field::Field,
        value: &(dyn std::error::Error + 'static),
    ) {
        self.put(field, &value.to_string());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.put(field, &format!("{value:?}"));
    }
}
