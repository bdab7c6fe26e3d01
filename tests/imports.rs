//! The module graph of `docs/design.md#the-module-graph`, held against the
//! code: every `crate::` path in non-test code under `src/` names a
//! top-level module of a lower layer than the file's own. Layers forbid
//! cycles among the top-level modules, imports against the flow, and the
//! dashboard leaning on the command line.
//!
//! It reads the source as text (comments, string literals and
//! `#[cfg(test)]` items left out), so it needs nothing built.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules, lowest first: each may use only those of lower
/// layers. The order is the one `docs/design.md` draws.
const LAYERS: &[&[&str]] = &[
    // Values and helpers every layer shares.
    &["text", "backoff", "secrets", "run"],
    // Schedules, instants and clocks.
    &["schedule"],
    // Counters and gauges, told plain values.
    &["telemetry"],
    // Connections, the database's clock, the database URL and backend.
    &["db"],
    // The job file; the replica registry; the history's rows.
    &["config", "registry", "history"],
    // Crontab import; the lease rows and their keeper.
    &["crontab", "lease"],
    // Processes, their guard and the users they run as.
    &["runner"],
    // Telling someone.
    &["notify"],
    // The library's error type.
    &["error"],
    // The tick loops, claims and the executor.
    &["scheduler"],
    // What an operator asks and does, for the command line and the web.
    &["ops"],
    // The dashboard and API.
    &["web"],
    // The command line, which starts everything.
    &["cli"],
];

/// Top-level modules that are test support only.
const TEST_ONLY: &[&str] = &["testing"];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// `text` without comments and without the contents of string and char
/// literals (which may hold `crate::` or a `//`).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if chars[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !is_ident(chars.get(i.wrapping_sub(1)).copied())
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                if chars[j] == '\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if chars.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next.is_some() && chars.get(i + 2) == Some(&'\'') {
            // 'x'
            out.push_str("' '");
            i += 3;
        } else if c == '\'' && next == Some('\\') {
            // '\n', '\u{..}'
            let mut j = i + 2;
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: Option<char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || c == '_')
}

/// `code` without the items marked `#[cfg(test)]` or `#[cfg(all(test, …))]`.
fn without_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    let next_test_item = |rest: &str| {
        ["#[cfg(test)]", "#[cfg(all(test,"]
            .iter()
            .filter_map(|mark| rest.find(mark))
            .min()
    };
    while let Some(at) = next_test_item(rest) {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        // The item ends at its first `;` outside braces, or at the brace
        // that closes its first `{`.
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        out.extend(item[..end].chars().filter(|c| *c == '\n'));
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The top-level modules `code` names through `crate::`, with the line of
/// each mention.
fn crate_paths(code: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if is_ident(code[..at].chars().next_back()) {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let after = &code[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // crate::{a, b::c, d::{e, f}}: the names at the group's top.
            let mut depth = 0usize;
            let mut token = String::new();
            let mut first = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        if first && !token.is_empty() {
                            found.push((token.clone(), line));
                        }
                        first = true;
                        token.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 && first {
                    if is_ident(Some(c)) {
                        token.push(c);
                    } else if !token.is_empty() {
                        found.push((token.clone(), line));
                        first = false;
                    }
                }
            }
            if first && !token.is_empty() {
                found.push((token, line));
            }
        } else {
            let name: String = after.chars().take_while(|c| is_ident(Some(*c))).collect();
            found.push((name, line));
        }
    }
    found
}

fn sources(dir: &Path, files: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                sources(&path, files);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            files.push(path);
        }
    }
}

#[test]
fn no_module_imports_one_it_must_not() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut wrong = Vec::new();
    let mut edges: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut unknown = Vec::new();
    let reexports = root_reexports(&root);
    for file in &files {
        let relative = file.strip_prefix(&root).expect("under src");
        let first = relative
            .components()
            .next()
            .expect("a component")
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if matches!(first.as_str(), "lib" | "main") || TEST_ONLY.contains(&first.as_str()) {
            continue;
        }
        let Some(own) = layer_of(&first) else {
            unknown.push(format!(
                "{}: module {first} is in no layer",
                relative.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read");
        let code = without_tests(&code_only(&text));
        for (name, line) in crate_paths(&code) {
            if name == first || name.is_empty() {
                continue;
            }
            // A name the crate root re-exports (`crate::Error`) is the
            // module's it comes from; a macro's names no module.
            let name = reexports.get(&name).cloned().unwrap_or(name);
            if name == first {
                continue;
            }
            let Some(theirs) = layer_of(&name) else {
                if TEST_ONLY.contains(&name.as_str()) {
                    wrong.push(format!(
                        "src/{}:{line}: {first} uses test support {name} outside a test",
                        relative.display()
                    ));
                }
                continue;
            };
            *edges.entry((first.clone(), name.clone())).or_default() += 1;
            if theirs >= own {
                wrong.push(format!(
                    "src/{}:{line}: {first} (layer {own}) uses {name} (layer {theirs}): only lower layers may be used",
                    relative.display()
                ));
            }
        }
    }
    assert!(unknown.is_empty(), "{}", unknown.join("\n"));
    assert!(
        edges.contains_key(&("scheduler".to_string(), "lease".to_string())),
        "the check found no imports at all: {edges:?}"
    );
    assert!(
        wrong.is_empty(),
        "imports against the module graph (docs/design.md#the-module-graph):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_reader_sees_paths_in_code_only() {
    let text = r##"
use crate::{db::{self, Store}, config, lease::keeper::Deadlines};
// crate::web in a comment
/* crate::cli in /* a nested */ block */
let s = "crate::cli in a string"; let r = r#"crate::cli"#;
let c = '"'; let t = crate::telemetry::count();
#[cfg(test)]
mod tests { use crate::cli; }
#[cfg(all(test, feature = "sqlite"))]
use crate::web;
fn f() -> notcrate::x { crate::schedule::now() }
"##;
    let names: Vec<String> = crate_paths(&without_tests(&code_only(text)))
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, ["db", "config", "lease", "telemetry", "schedule"]);
}

/// Every path `code` names after `prefix` (`crate::`, `super::`, `self::`),
/// as its segments, a group (`{a, b::c}`) spread into one path per member,
/// with the line of each; `*` and `self` members end a path.
fn paths_after(code: &str, prefix: &str) -> Vec<(Vec<String>, usize)> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        if is_ident(code[..at].chars().next_back()) || code[..at].ends_with("::") {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let mut start = Vec::new();
        if prefix == "super::" {
            start.push("super".to_string());
        }
        spread(&code[at + prefix.len()..], start, line, &mut found);
    }
    found
}

/// The path at the start of `text`, after the segments `before`.
fn spread(text: &str, before: Vec<String>, line: usize, found: &mut Vec<(Vec<String>, usize)>) {
    let mut segments = before;
    let mut rest = text.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            // Members at the group's top level, split at its commas.
            let mut depth = 0usize;
            let mut member_start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        spread(&group[member_start..i], segments.clone(), line, found);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        spread(&group[member_start..i], segments.clone(), line, found);
                        member_start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let name: String = rest.chars().take_while(|c| is_ident(Some(*c))).collect();
        if name.is_empty() || name == "self" {
            break;
        }
        rest = &rest[name.len()..];
        segments.push(name);
        match rest.strip_prefix("::") {
            Some(after) => rest = after.trim_start(),
            None => break,
        }
    }
    if !segments.is_empty() && segments.iter().any(|s| s != "super") {
        found.push((segments, line));
    }
}

/// The names the crate root re-exports (`pub use self::error::Error;`),
/// each with the top-level module it comes from.
fn root_reexports(root: &Path) -> BTreeMap<String, String> {
    let lib = std::fs::read_to_string(root.join("lib.rs")).expect("read lib.rs");
    let code = without_tests(&code_only(&lib));
    let mut names = BTreeMap::new();
    for statement in code.split(';') {
        let Some(at) = statement.find("pub use ") else {
            continue;
        };
        let path = statement[at + "pub use ".len()..].trim();
        let path = path
            .strip_prefix("self::")
            .or(path.strip_prefix("crate::"))
            .unwrap_or(path);
        let mut found = Vec::new();
        spread(path, Vec::new(), 0, &mut found);
        for (segments, _) in found {
            if let (Some(module), Some(name)) = (segments.first(), segments.last())
                && segments.len() > 1
            {
                names.insert(name.clone(), module.clone());
            }
        }
    }
    names
}

/// The module path of a source file under `root`: `runner/live.rs` is
/// `runner::live`, `runner/mod.rs` is `runner`, `lib.rs` is the root.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(root).expect("under src");
    let mut path: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if matches!(
        path.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        path.pop();
    }
    path
}

/// The modules each module uses, as edges between siblings: a use of
/// `runner::output` from `runner::live` is the edge `live -> output` under
/// `runner`; one from `web::live` is `web -> runner` at the top. A
/// module's use of its own parent or child is no edge.
fn sibling_edges(root: &Path) -> BTreeMap<(Vec<String>, Vec<String>), Vec<String>> {
    let mut files = Vec::new();
    sources(root, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(root, f)).collect();
    let reexports = root_reexports(root);
    let mut edges: BTreeMap<(Vec<String>, Vec<String>), Vec<String>> = BTreeMap::new();
    for file in &files {
        let own = module_of(root, file);
        if own.first().is_some_and(|m| TEST_ONLY.contains(&m.as_str())) {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read");
        let code = without_tests(&code_only(&text));
        let mut uses = Vec::new();
        for (path, line) in paths_after(&code, "crate::") {
            let path = match reexports.get(&path[0]) {
                Some(module) if path.len() == 1 || !modules.contains(&path[..1]) => {
                    vec![module.clone(), path[0].clone()]
                }
                _ => path,
            };
            uses.push((path, line));
        }
        for (path, line) in paths_after(&code, "super::") {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let Some(base) = own.len().checked_sub(ups) else {
                continue;
            };
            let mut resolved = own[..base].to_vec();
            resolved.extend(path[ups..].iter().cloned());
            uses.push((resolved, line));
        }
        for (path, line) in paths_after(&code, "self::") {
            let mut resolved = own.clone();
            resolved.extend(path);
            uses.push((resolved, line));
        }
        for (path, line) in uses {
            // The longest module the path names.
            let Some(target) = (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains(p))
            else {
                continue;
            };
            let common = own.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == own.len() || common == target.len() {
                continue;
            }
            let from = own[..=common].to_vec();
            let to = target[..=common].to_vec();
            let place = format!(
                "{}:{line}",
                file.strip_prefix(root).expect("under src").display()
            );
            edges.entry((from, to)).or_default().push(place);
        }
    }
    edges
}

/// The cycles of `edges`: each strongly connected set of two or more
/// modules, with the places of the uses that close it.
fn cycles(edges: &BTreeMap<(Vec<String>, Vec<String>), Vec<String>>) -> Vec<String> {
    let mut next: BTreeMap<&Vec<String>, Vec<&Vec<String>>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    // What each module reaches, through one use or more.
    let reach: BTreeMap<&Vec<String>, BTreeSet<&Vec<String>>> = next
        .keys()
        .map(|&from| {
            let mut seen = BTreeSet::new();
            let mut todo = next[from].clone();
            while let Some(at) = todo.pop() {
                if seen.insert(at) {
                    todo.extend(next[at].iter().copied());
                }
            }
            (from, seen)
        })
        .collect();
    let mut found = Vec::new();
    let mut done: BTreeSet<&Vec<String>> = BTreeSet::new();
    for (&node, reached) in &reach {
        if done.contains(node) || !reached.contains(node) {
            continue;
        }
        let set: BTreeSet<&Vec<String>> = reached
            .iter()
            .copied()
            .filter(|other| reach[other].contains(node))
            .collect();
        let mut lines = vec![
            set.iter()
                .map(|m| m.join("::"))
                .collect::<Vec<_>>()
                .join(", "),
        ];
        for ((a, b), places) in edges {
            if set.contains(a) && set.contains(b) {
                lines.push(format!(
                    "  {} uses {} at {}",
                    a.join("::"),
                    b.join("::"),
                    places.join(", ")
                ));
            }
        }
        found.push(lines.join("\n"));
        done.extend(set);
    }
    found
}

#[test]
fn no_modules_use_each_other_in_a_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = sibling_edges(&root);
    assert!(
        edges.contains_key(&(
            vec!["runner".to_string(), "live".to_string()],
            vec!["runner".to_string(), "output".to_string()]
        )),
        "the check found no uses between submodules: {edges:?}"
    );
    let found = cycles(&edges);
    assert!(
        found.is_empty(),
        "modules that use each other, directly or through others (docs/design.md#the-module-graph):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_reader_follows_groups_supers_and_the_roots_reexports() {
    let code = "use super::{live::Live, output::{Stream, Tail}, Process};\nuse super::super::db::Pool;\nfn f() -> crate::Error { todo!() }\n";
    let supers: Vec<Vec<String>> = paths_after(code, "super::")
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let expected: Vec<Vec<&str>> = vec![
        vec!["super", "live", "Live"],
        vec!["super", "output", "Stream"],
        vec!["super", "output", "Tail"],
        vec!["super", "Process"],
        vec!["super", "super", "db", "Pool"],
    ];
    assert_eq!(supers, expected);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    assert_eq!(
        root_reexports(&root).get("Error").map(String::as_str),
        Some("error")
    );
}
