//! Terminal escape sequences in a run's output, made fit for a page: the
//! common SGR colours (the eight foreground colours, bright or not, and
//! bold) become CSS classes of the text they apply to, and every other
//! escape sequence (cursor movement, OSC titles and links, other SGR
//! attributes, device strings) and every control character but newline
//! and tab is dropped, so that none is shown as a box. The text itself is
//! never markup: each piece is escaped by maud or set as `textContent`.
//!
//! [`Ansi`] is one stream's decoder and keeps its state between calls: a
//! sequence or a colour may span the chunks a stream is read in.

/// The classes of the foreground colours 0 to 7; black and white (0 and
/// 7) are the box's own colours, shown as they are.
const COLOURS: [&str; 8] = [
    "",
    "a-red",
    "a-green",
    "a-yellow",
    "a-blue",
    "a-magenta",
    "a-cyan",
    "",
];

/// The longest control sequence kept while it is read: a longer one is
/// dropped whole all the same, without being held.
const MAX_PARAMS: usize = 64;

/// The longest string (an OSC title or link, a device string) dropped
/// before what follows is taken as text again: a string left open, by a
/// job or by mis-encoded text, hides no more than this.
const MAX_STRING: usize = 256;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Style {
    colour: Option<u8>,
    bold: bool,
}

impl Style {
    fn class(self) -> String {
        let colour = self.colour.map_or("", |c| COLOURS[usize::from(c & 7)]);
        match (colour, self.bold) {
            ("", false) => String::new(),
            ("", true) => "a-bold".to_string(),
            (colour, false) => colour.to_string(),
            (colour, true) => format!("{colour} a-bold"),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
enum State {
    /// Plain text.
    #[default]
    Text,
    /// After ESC.
    Escape,
    /// After ESC and intermediate bytes (`ESC ( B`).
    Intermediate,
    /// In a CSI sequence, its parameters so far.
    Csi(String),
    /// In a string (OSC, DCS, SOS, PM, APC), until BEL or ST, a newline
    /// or [`MAX_STRING`] characters; how many so far.
    Str(usize),
    /// After ESC inside a string: `\` ends it.
    StrEscape,
    /// After a carriage return: a newline follows, or the line is shown
    /// as ended.
    Return,
}

/// One stream's decoder.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ansi {
    style: Style,
    state: State,
}

/// A piece of text and the classes of its colour (empty for none).
pub(crate) type Span = (String, String);

impl Ansi {
    /// `text`'s pieces, each in one style, with the escape sequences
    /// applied or dropped.
    pub(crate) fn feed(&mut self, text: &str) -> Vec<Span> {
        let mut spans: Vec<Span> = Vec::new();
        let mut current = String::new();
        let mut class = self.style.class();
        let flush = |current: &mut String, class: &str, spans: &mut Vec<Span>| {
            if !current.is_empty() {
                match spans.last_mut() {
                    Some((text, c)) if c == class => text.push_str(current),
                    _ => spans.push((std::mem::take(current), class.to_string())),
                }
                current.clear();
            }
        };
        for c in text.chars() {
            match std::mem::take(&mut self.state) {
                State::Return => {
                    // A lone carriage return (a progress bar) ends its line.
                    current.push('\n');
                    if c != '\n' {
                        self.text(c, &mut current);
                    }
                }
                State::Text => self.text(c, &mut current),
                State::Escape => self.escape(c),
                State::Intermediate => {
                    if (' '..='/').contains(&c) {
                        self.state = State::Intermediate;
                    }
                }
                State::Csi(mut params) => match c {
                    '@'..='~' => {
                        if c == 'm' {
                            flush(&mut current, &class, &mut spans);
                            self.sgr(&params);
                            class = self.style.class();
                        }
                    }
                    '\u{1b}' => self.state = State::Escape,
                    _ => {
                        if params.len() < MAX_PARAMS {
                            params.push(c);
                        }
                        self.state = State::Csi(params);
                    }
                },
                State::Str(n) => match c {
                    '\u{7}' | '\u{9c}' => {}
                    '\u{1b}' => self.state = State::StrEscape,
                    // No string spans lines, nor goes on for ever: what
                    // follows is text again.
                    '\n' => self.text(c, &mut current),
                    _ if n >= MAX_STRING => self.text(c, &mut current),
                    _ => self.state = State::Str(n + 1),
                },
                State::StrEscape => {
                    // ESC \ ends the string; any other ESC sequence ends it
                    // too, and is read as itself.
                    if c != '\\' {
                        self.escape(c);
                    }
                }
            }
        }
        flush(&mut current, &class, &mut spans);
        spans
    }

    /// The character after an ESC.
    fn escape(&mut self, c: char) {
        match c {
            '[' => self.state = State::Csi(String::new()),
            ']' | 'P' | 'X' | '^' | '_' => self.state = State::Str(0),
            ' '..='/' => self.state = State::Intermediate,
            '\u{1b}' => self.state = State::Escape,
            _ => {}
        }
    }

    /// A character of plain text. The 8-bit CSI starts a sequence, which
    /// ends at its first final byte; the 8-bit openers of strings are
    /// dropped, not taken as one: in UTF-8 output they come from text
    /// encoded twice (`”` as `â€` and U+009D) far more often than from a
    /// terminal.
    fn text(&mut self, c: char, current: &mut String) {
        match c {
            '\u{1b}' => self.state = State::Escape,
            '\u{9b}' => self.state = State::Csi(String::new()),
            '\r' => self.state = State::Return,
            '\n' | '\t' => current.push(c),
            c if c.is_control() => {}
            c => current.push(c),
        }
    }

    /// Applies an SGR sequence's parameters.
    fn sgr(&mut self, params: &str) {
        let mut codes = params
            .split([';', ':'])
            .map(|p| p.trim().parse::<u16>().unwrap_or(0));
        if params.is_empty() {
            self.style = Style::default();
            return;
        }
        while let Some(code) = codes.next() {
            match code {
                0 => self.style = Style::default(),
                1 => self.style.bold = true,
                22 => self.style.bold = false,
                30..=37 => self.style.colour = Some((code - 30) as u8),
                90..=97 => self.style.colour = Some((code - 90) as u8),
                39 => self.style.colour = None,
                // 256 colours and true colours: shown in the box's own.
                38 | 48 | 58 => match codes.next() {
                    Some(5) => {
                        codes.next();
                    }
                    Some(2) => {
                        codes.nth(2);
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
}

/// `text` decoded whole, from the default style.
pub(crate) fn spans(text: &str) -> Vec<Span> {
    Ansi::default().feed(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(spans: &[Span]) -> String {
        spans.iter().map(|(text, _)| text.as_str()).collect()
    }

    fn span(text: &str, class: &str) -> Span {
        (text.to_string(), class.to_string())
    }

    #[test]
    fn colours_become_classes() {
        assert_eq!(
            spans("ok \x1b[31mfailed\x1b[0m done\n"),
            vec![
                span("ok ", ""),
                span("failed", "a-red"),
                span(" done\n", "")
            ]
        );
        assert_eq!(
            spans("\x1b[1;32mbold green\x1b[22m green\x1b[39m plain\x1b[92m bright\x1b[m."),
            vec![
                span("bold green", "a-green a-bold"),
                span(" green", "a-green"),
                span(" plain", ""),
                span(" bright", "a-green"),
                span(".", "")
            ]
        );
        // 256 and true colours, backgrounds, underline: the text stays,
        // without a class; the colour after them is still read.
        assert_eq!(
            spans("\x1b[38;5;196mx\x1b[48;2;1;2;3;34my\x1b[4mz"),
            vec![span("x", ""), span("yz", "a-blue")]
        );
    }

    #[test]
    fn every_other_sequence_and_control_is_dropped() {
        let text = "\x1b[2J\x1b[1;1Hclear\x1b]0;title\x07 \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \
                    \x1bPdevice\x1b\\\x1b(Bcharset\x1b7saved\x1b8 bell\x07 back\x08 del\x7f c1\u{9b}31m \u{85}nel";
        let shown = plain(&spans(text));
        assert_eq!(shown, "clear link charsetsaved bell back del c1 nel");
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        assert_eq!(
            spans("\u{9b}31mred"),
            vec![span("red", "a-red")],
            "an 8-bit CSI"
        );
    }

    /// A string left open hides nothing past its line, past its length or
    /// past the next sequence; text encoded twice hides nothing.
    #[test]
    fn a_string_left_open_ends() {
        assert_eq!(plain(&spans("\x1b]0;title\nnext line")), "\nnext line");
        let long = format!("\x1b]{}after", "t".repeat(MAX_STRING));
        assert_eq!(plain(&spans(&long)), "after");
        assert_eq!(spans("\x1b]0;title\x1b[31mred"), vec![span("red", "a-red")]);
        assert_eq!(
            plain(&spans("a \u{e2}\u{20ac}\u{9d}quote\u{e2}\u{20ac}\u{9d} b")),
            "a â€quoteâ€ b"
        );
        let mut ansi = Ansi::default();
        assert_eq!(plain(&ansi.feed("\x1b]8;;http://x")), "");
        assert_eq!(plain(&ansi.feed("\x1b\\link")), "link");
    }

    #[test]
    fn carriage_returns_end_lines() {
        assert_eq!(plain(&spans("a\r\nb\rc\r")), "a\nb\nc");
        let mut ansi = Ansi::default();
        assert_eq!(plain(&ansi.feed("10%\r")), "10%");
        assert_eq!(plain(&ansi.feed("20%\r\n")), "\n20%\n");
    }

    /// A sequence cut between two chunks is read whole; the colour goes on
    /// into the next chunk; markup is text.
    #[test]
    fn state_carries_across_chunks() {
        let mut ansi = Ansi::default();
        assert_eq!(ansi.feed("a\x1b["), vec![span("a", "")]);
        assert_eq!(ansi.feed("3"), Vec::<Span>::new());
        assert_eq!(ansi.feed("3mb"), vec![span("b", "a-yellow")]);
        assert_eq!(ansi.feed("<b>c</b>"), vec![span("<b>c</b>", "a-yellow")]);
        // An endless sequence holds no more than its bound.
        let mut endless = Ansi::default();
        endless.feed(&format!("\x1b[{}", "1;".repeat(10_000)));
        assert!(matches!(&endless.state, State::Csi(p) if p.len() <= MAX_PARAMS));
        assert_eq!(plain(&endless.feed("mtext")), "text");
    }
}
