//! Text from outside (job output, commands, pause reasons, instance ids)
//! shown where a control character would do harm: a terminal reading the
//! logs would obey an escape sequence, and a bidirectional override
//! (U+202E) would reverse what a page shows after it. Also bytes as
//! lowercase hex (tokens, digests) and back, and secrets masked in text
//! that is kept or shown.

use std::borrow::Cow;

/// The bidirectional formatting characters: embeddings, overrides,
/// isolates and marks.
pub(crate) fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// `text` for a log line: every control character but the tab, and every
/// bidirectional one, written as its escape (`\u{1b}`).
pub(crate) fn for_log(text: &str) -> Cow<'_, str> {
    if !text
        .chars()
        .any(|c| (c.is_control() && c != '\t') || is_bidi_control(c))
    {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if (c.is_control() && c != '\t') || is_bidi_control(c) {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// What a secret is written as wherever it would otherwise be shown.
pub(crate) const REDACTED: &str = "[redacted]";

/// The shortest secret value masked in a run's output: a shorter one
/// (`1`, `yes`) would mask half the output and reveal the secret by its
/// gaps.
pub(crate) const MIN_MASKED: usize = 4;

/// `text` (a run's output) with each of `secrets` at least
/// [`MIN_MASKED`] bytes long written as `[redacted]`.
pub(crate) fn mask_secrets<'t>(text: &'t str, secrets: &[String]) -> Cow<'t, str> {
    let mut masked = Cow::Borrowed(text);
    for secret in secrets.iter().filter(|s| s.len() >= MIN_MASKED) {
        if masked.contains(secret.as_str()) {
            masked = Cow::Owned(masked.replace(secret.as_str(), REDACTED));
        }
    }
    masked
}

/// `html` (a page, already escaped) with every bidirectional control
/// character shown as its code point (`⟨U+202E⟩`) instead of obeyed.
pub(crate) fn bidi_visible(html: &str) -> Cow<'_, str> {
    if !html.chars().any(is_bidi_control) {
        return Cow::Borrowed(html);
    }
    Cow::Owned(
        html.chars()
            .map(|c| {
                if is_bidi_control(c) {
                    format!("⟨U+{:04X}⟩", u32::from(c))
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// `bytes` as lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes `text` spells in hex (either case); `None` if it is not hex.
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printed_secrets_are_masked_but_short_ones() {
        let secrets = ["hunter2".to_string(), "no".to_string()];
        assert_eq!(
            mask_secrets("pw=hunter2, again hunter2; no", &secrets),
            "pw=[redacted], again [redacted]; no"
        );
        assert!(matches!(
            mask_secrets("nothing here", &secrets),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn controls_are_written_out() {
        assert_eq!(for_log("plain\ttext"), "plain\ttext");
        assert_eq!(for_log("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(for_log("a\rb\u{7}"), "a\\u{d}b\\u{7}");
        assert_eq!(for_log("r1\u{202E}evil"), "r1\\u{202e}evil");
        assert_eq!(
            bidi_visible("<p>r1\u{202E}lave</p>"),
            "<p>r1⟨U+202E⟩lave</p>"
        );
        assert_eq!(bidi_visible("é ü 中"), "é ü 中");
    }
}
