//! The command reference against the command line: every subcommand `kfs-iceberg
//! --help` lists, and every subcommand of those (`quarantine list`, `progress set`,
//! `dead-letters replay`, ...), has a heading naming it in docs/guide/commands.md, and
//! that heading's section names every long option the subcommand's `--help` prints.
//! The global options (`--stack`) need only be named somewhere in the page. Runs the
//! built binary's help only: no server.

use crate::support::{kfs, output_of, repo};

/// The command reference, relative to the workspace root.
const DOC: &str = "docs/guide/commands.md";

/// Options every clap command has, never documented per command.
const BUILT_IN: [&str; 2] = ["--help", "--version"];

/// `kfs-iceberg PATH... --help`'s standard output, without terminal styling.
fn help(path: &[String]) -> String {
    let mut command = kfs();
    command
        .args(path)
        .arg("--help")
        .env("NO_COLOR", "1")
        .env_remove("CLICOLOR_FORCE");
    let output = output_of(&mut command);
    assert!(
        output.status.success(),
        "`{}` failed: {}",
        shown(path, "--help"),
        String::from_utf8_lossy(&output.stderr)
    );
    strip_styles(&String::from_utf8_lossy(&output.stdout))
}

/// `kfs-iceberg PATH... SUFFIX` as an operator types it.
fn shown(path: &[String], suffix: &str) -> String {
    let mut words = vec!["kfs-iceberg".to_owned()];
    words.extend(path.iter().cloned());
    if !suffix.is_empty() {
        words.push(suffix.to_owned());
    }
    words.join(" ")
}

/// The text without ANSI escape sequences (`ESC [ ... letter`).
fn strip_styles(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for next in chars.by_ref() {
                if next.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// The leading run of name characters of `text`.
fn leading_name(text: &str) -> &str {
    let end = text.find(|c: char| !is_name_char(c)).unwrap_or(text.len());
    &text[..end]
}

/// How many spaces `line` starts with.
fn indent(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

/// The subcommands a help text lists under `Commands:`, without clap's own `help`.
fn subcommands(help: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut listing = false;
    for line in help.lines() {
        if indent(line) == 0 && !line.is_empty() {
            listing = line.trim_end() == "Commands:";
            continue;
        }
        // An entry starts two spaces in; its wrapped description further in.
        if listing && indent(line) == 2 {
            let name = leading_name(&line[2..]);
            if !name.is_empty() && name != "help" {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// The long options a help text prints (`-x, --name <VALUE>` or `--name`), in order.
fn long_options(help: &str) -> Vec<String> {
    let mut options = Vec::new();
    for line in help.lines() {
        // Options start two to six spaces in; descriptions wrapped under them further.
        if !(2..=6).contains(&indent(line)) {
            continue;
        }
        let mut rest = line.trim_start();
        // `-h, --help`: the short form first.
        let bytes = rest.as_bytes();
        if bytes.len() > 4
            && bytes[0] == b'-'
            && bytes[1].is_ascii_alphanumeric()
            && bytes[2] == b','
            && bytes[3] == b' '
        {
            rest = &rest[4..];
        }
        if let Some(name) = rest.strip_prefix("--") {
            let name = leading_name(name);
            if !name.is_empty() {
                let option = format!("--{name}");
                if !options.contains(&option) {
                    options.push(option);
                }
            }
        }
    }
    options
}

/// Whether `text` names `word` on its own: not as the start of a longer name
/// (`--catalog` is not named by `--catalog-type`).
fn names(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(is_name_char) && !after.is_some_and(is_name_char)
    })
}

/// A heading of the page and the text of its section (up to the next heading of the
/// same or a higher level).
struct Section {
    heading: String,
    text: String,
}

/// The page's sections, one per heading, code blocks not taken for headings.
fn sections(page: &str) -> Vec<Section> {
    let mut headings: Vec<(usize, usize, String)> = Vec::new(); // (line, level, text)
    let lines: Vec<&str> = page.lines().collect();
    let mut fenced = false;
    for (number, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let level = line.len() - line.trim_start_matches('#').len();
        if line[level..].starts_with(' ') {
            headings.push((number, level, line[level..].trim().to_owned()));
        }
    }
    headings
        .iter()
        .enumerate()
        .map(|(i, (start, level, heading))| {
            let end = headings[i + 1..]
                .iter()
                .find(|(_, next_level, _)| next_level <= level)
                .map_or(lines.len(), |(line, _, _)| *line);
            Section {
                heading: heading.clone(),
                text: lines[*start..end].join("\n"),
            }
        })
        .collect()
}

/// The section whose heading names `kfs-iceberg PATH...` itself: a heading naming
/// one of its subcommands (`kfs-iceberg quarantine list` for `quarantine`) is that
/// subcommand's.
fn section_of<'a>(
    sections: &'a [Section],
    path: &[String],
    children: &[String],
) -> Option<&'a Section> {
    let command = shown(path, "");
    sections.iter().find(|section| {
        let heading = &section.heading;
        heading.match_indices(&command).any(|(at, _)| {
            let before = heading[..at].chars().next_back();
            let rest = &heading[at + command.len()..];
            let child = rest.strip_prefix(' ').map(leading_name).unwrap_or("");
            !before.is_some_and(is_name_char)
                && !rest.chars().next().is_some_and(is_name_char)
                && !children.iter().any(|c| c == child)
        })
    })
}

/// Checks `kfs-iceberg PATH...` and its subcommands against the page; each problem
/// found is added to `missing`.
fn check(
    path: &[String],
    global: &[String],
    page: &str,
    sections: &[Section],
    missing: &mut Vec<String>,
) {
    let text = help(path);
    let children = subcommands(&text);
    if !path.is_empty() {
        let command = shown(path, "");
        match section_of(sections, path, &children) {
            None => missing.push(format!(
                "{DOC}: no heading names `{command}` (add one, e.g. \"## `{command}`\")"
            )),
            Some(section) => {
                for option in long_options(&text) {
                    if BUILT_IN.contains(&option.as_str()) || global.contains(&option) {
                        continue;
                    }
                    if !names(&section.text, &option) {
                        missing.push(format!(
                            "{DOC}: the section \"{}\" does not mention `{option}`, which `{}` prints",
                            section.heading,
                            shown(path, "--help")
                        ));
                    }
                }
            }
        }
    }
    if path.is_empty() {
        for option in global {
            if !names(page, option) {
                missing.push(format!(
                    "{DOC}: does not mention the global option `{option}`, which `kfs-iceberg --help` prints"
                ));
            }
        }
    }
    for child in children {
        let mut next = path.to_vec();
        next.push(child);
        check(&next, global, page, sections, missing);
    }
}

#[test]
fn the_command_reference_names_every_subcommand_and_option() {
    let page = std::fs::read_to_string(repo().join(DOC)).unwrap_or_else(|e| panic!("{DOC}: {e}"));
    let sections = sections(&page);
    let top = help(&[]);
    assert!(
        !subcommands(&top).is_empty(),
        "`kfs-iceberg --help` lists no subcommands under \"Commands:\":\n{top}"
    );
    let global: Vec<String> = long_options(&top)
        .into_iter()
        .filter(|option| !BUILT_IN.contains(&option.as_str()))
        .collect();
    let mut missing = Vec::new();
    check(&[], &global, &page, &sections, &mut missing);
    assert!(
        missing.is_empty(),
        "the command reference has drifted from the command line:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn help_texts_are_read_as_clap_prints_them() {
    let help = "Usage: kfs-iceberg quarantine <COMMAND>\n\nCommands:\n  list   List quarantined\n         segments\n  retry  Release\n  help   Print this message\n\nOptions:\n      --stack <NAME>\n          Work on a deployed stack, see --warehouse\n\n  -h, --help\n          Print help\n      --catalog-type <TYPE>  The catalog\n";
    assert_eq!(subcommands(help), ["list", "retry"]);
    assert_eq!(long_options(help), ["--stack", "--help", "--catalog-type"]);
    assert_eq!(strip_styles("\u{1b}[1m--all\u{1b}[0m"), "--all");
    assert!(names("`--catalog FILE`", "--catalog"));
    assert!(!names("`--catalog-type TYPE`", "--catalog"));
    let page = "# Commands\n\n## `kfs-iceberg quarantine`\n\ntext\n\n### `kfs-iceberg quarantine list`\n\n```\n# not a heading\n```\n\n## `kfs-iceberg run`\n\n--source\n";
    let sections = sections(page);
    let path = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    let children = path(&["list"]);
    let parent = section_of(&sections, &path(&["quarantine"]), &children);
    assert_eq!(
        parent.map(|s| s.heading.as_str()),
        Some("`kfs-iceberg quarantine`")
    );
    assert!(parent.is_some_and(|s| s.text.contains("# not a heading")));
    assert!(parent.is_some_and(|s| !s.text.contains("--source")));
    let list = section_of(&sections, &path(&["quarantine", "list"]), &[]);
    assert_eq!(
        list.map(|s| s.heading.as_str()),
        Some("`kfs-iceberg quarantine list`")
    );
    assert!(section_of(&sections, &path(&["status"]), &[]).is_none());
}
