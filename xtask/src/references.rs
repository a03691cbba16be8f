//! `cargo xtask check-references`: no tracked file points outside the repository.
//!
//! A reader of a clone has this repository and nothing else: not the design notes the project
//! started from, not its issue tracker, not the remote GPU host the project's GPU runs went
//! through. So no tracked file may name those notes' files, cite a tracker number, or (outside the
//! dated logs of `docs/log/`, which keep the words of their time) speak of how the work was
//! organised: sessions, numbered runs, the GPU host's own vocabulary. The rules are below, each
//! with the reason it gives when it fires; `--self-test` plants one reference of each rule and
//! checks that each is caught.

use std::path::Path;

use crate::util::{Result, git_ls_files, repo_root};

/// Where a rule applies.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scope {
    /// Every tracked text file.
    Everywhere,
    /// Every tracked text file outside `docs/log/`.
    OutsideLogs,
}

/// A forbidden reference: `pattern` is matched case-insensitively at a word start, where
/// `{n}` stands for one or more ASCII digits, and must end at a word end (the next character is
/// not a letter, a digit, `_` or `-`).
struct Rule {
    pattern: &'static str,
    scope: Scope,
    why: &'static str,
}

const DESIGN_NOTES: &str = "the design notes the project started from, which a clone does not have: point at docs/contracts.md or docs/design.md";
const TRACKER: &str =
    "a number of the project's issue tracker, which a reader of the repository cannot see: say what it was";
const ORGANISATION: &str = "how the work was organised, not what is true: dated logs under docs/log/ may keep it";
const HARNESS: &str = "the vocabulary of one remote GPU harness: say \"a GPU host\" and name the inputs";

const RULES: &[Rule] = &[
    Rule { pattern: "shared/design", scope: Scope::Everywhere, why: DESIGN_NOTES },
    Rule { pattern: "kernels.md", scope: Scope::Everywhere, why: DESIGN_NOTES },
    Rule { pattern: "numerics.md", scope: Scope::Everywhere, why: DESIGN_NOTES },
    Rule { pattern: "design notes", scope: Scope::Everywhere, why: DESIGN_NOTES },
    Rule { pattern: "the spec", scope: Scope::Everywhere, why: DESIGN_NOTES },
    Rule { pattern: "spec section", scope: Scope::Everywhere, why: DESIGN_NOTES },
    Rule { pattern: "spec sections", scope: Scope::Everywhere, why: DESIGN_NOTES },
    Rule { pattern: "issue {n}", scope: Scope::Everywhere, why: TRACKER },
    Rule { pattern: "issues {n}", scope: Scope::Everywhere, why: TRACKER },
    Rule { pattern: "issue #{n}", scope: Scope::Everywhere, why: TRACKER },
    Rule { pattern: "issues #{n}", scope: Scope::Everywhere, why: TRACKER },
    Rule { pattern: "(#{n}", scope: Scope::Everywhere, why: TRACKER },
    Rule { pattern: "session", scope: Scope::OutsideLogs, why: ORGANISATION },
    Rule { pattern: "sessions", scope: Scope::OutsideLogs, why: ORGANISATION },
    Rule { pattern: "run {n}", scope: Scope::OutsideLogs, why: ORGANISATION },
    Rule { pattern: "runs {n}", scope: Scope::OutsideLogs, why: ORGANISATION },
    Rule { pattern: "device machine", scope: Scope::OutsideLogs, why: HARNESS },
    Rule { pattern: "device time", scope: Scope::OutsideLogs, why: HARNESS },
    Rule { pattern: "device call", scope: Scope::OutsideLogs, why: HARNESS },
    Rule { pattern: "lockout", scope: Scope::OutsideLogs, why: HARNESS },
    Rule { pattern: "carried with the call", scope: Scope::OutsideLogs, why: HARNESS },
    Rule { pattern: "carry [", scope: Scope::OutsideLogs, why: HARNESS },
];

/// This file states the rules, so it holds every pattern; the data of the fuzz targets is
/// libFuzzer's, not prose.
const EXEMPT: &[&str] = &["xtask/src/references.rs", "fuzz/corpus/", "fuzz/regressions/"];

const LOGS: &str = "docs/log/";

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The length of `pattern` matched at the start of `text`, if it matches there.
fn match_at(pattern: &[u8], text: &[u8]) -> Option<usize> {
    let (mut p, mut t) = (0, 0);
    while p < pattern.len() {
        if pattern[p..].starts_with(b"{n}") {
            let digits = text[t..].iter().take_while(|c| c.is_ascii_digit()).count();
            if digits == 0 {
                return None;
            }
            t += digits;
            p += 3;
        } else {
            if t >= text.len() || !text[t].eq_ignore_ascii_case(&pattern[p]) {
                return None;
            }
            t += 1;
            p += 1;
        }
    }
    Some(t)
}

/// Every match of `rule` in `line`: (byte offset, matched text).
fn find(rule: &Rule, line: &str) -> Vec<(usize, String)> {
    let (pattern, text) = (rule.pattern.as_bytes(), line.as_bytes());
    let mut found = Vec::new();
    for start in 0..text.len() {
        if start > 0 && is_word(text[start - 1]) && is_word(pattern[0]) {
            continue;
        }
        if let Some(len) = match_at(pattern, &text[start..]) {
            let end = start + len;
            let ends_word = !is_word(*pattern.last().unwrap()) && !pattern.ends_with(b"{n}");
            if ends_word || end == text.len() || !(is_word(text[end]) || text[end] == b'-') {
                found.push((start, String::from_utf8_lossy(&text[start..end]).into_owned()));
            }
        }
    }
    found
}

/// One reference found: where, what, and why it is refused.
#[derive(Debug)]
pub struct Finding {
    pub path: String,
    pub line: usize,
    pub text: String,
    pub why: &'static str,
}

/// The references in one file's text, under the rules that apply at `path`.
fn scan(path: &str, text: &str) -> Vec<Finding> {
    if EXEMPT.iter().any(|e| path.starts_with(e)) {
        return Vec::new();
    }
    let in_logs = path.starts_with(LOGS);
    let mut findings = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let mut in_line = Vec::new();
        for rule in RULES {
            if rule.scope == Scope::OutsideLogs && in_logs {
                continue;
            }
            in_line.extend(find(rule, line).into_iter().map(|(at, text)| (at, text, rule.why)));
        }
        // In the order they stand in the line.
        in_line.sort_by_key(|(at, ..)| *at);
        for (_, text, why) in in_line {
            findings.push(Finding { path: path.to_string(), line: number + 1, text, why });
        }
    }
    findings
}

/// Scans every tracked text file of the checkout at `root` (files that are not UTF-8, or hold a
/// NUL byte, are data).
fn scan_tree(root: &Path) -> Result<Vec<Finding>> {
    let mut findings = Vec::new();
    for path in git_ls_files(root)? {
        let Ok(bytes) = std::fs::read(root.join(&path)) else { continue };
        let Ok(text) = String::from_utf8(bytes) else { continue };
        if text.contains('\0') {
            continue;
        }
        findings.extend(scan(&path, &text));
    }
    Ok(findings)
}

/// One planted line per rule, in a file outside the logs, each of which must be reported; and
/// the same lines in a log, where only the rules for everywhere may fire.
fn self_test() -> Result<()> {
    let mut failures = Vec::new();
    for rule in RULES {
        let planted = rule.pattern.replace("{n}", "15");
        let line = format!("A line that plants `{planted}` among other words.");
        for (path, expected) in
            [("docs/planted.md", true), ("docs/log/2026-planted.md", rule.scope == Scope::Everywhere)]
        {
            let found = scan(path, &line).iter().any(|f| f.text.eq_ignore_ascii_case(&planted));
            if found != expected {
                failures
                    .push(format!("{path}: `{planted}` {}", if expected { "not caught" } else { "caught in a log" }));
            }
        }
    }
    // Near misses that must pass: a markdown anchor, a word that only contains a pattern, a
    // number that is not a tracker's, a rule's word inside a longer one.
    for clean in [
        "[numerics](#2-numerics)",
        "the issue slots were 93% busy",
        "a reissue 15 times",
        "sessionless",
        "rerun 3 times",
        "docs/contracts.md, section 5",
    ] {
        let found = scan("docs/planted.md", clean);
        if !found.is_empty() {
            failures.push(format!("a clean line was refused: {clean:?} ({found:?})"));
        }
    }
    if failures.is_empty() {
        println!("check-references --self-test: each of the {} rules caught its planted reference", RULES.len());
        Ok(())
    } else {
        Err(format!("check-references --self-test failed:\n  {}", failures.join("\n  ")).into())
    }
}

const USAGE: &str = "\
usage: cargo xtask check-references [--self-test | --rules]

Refuses any tracked text file that points outside the repository: the design notes' files, the
issue tracker's numbers, and (outside docs/log/) words of how the work was organised or of one
remote GPU harness. --rules lists what is refused and where; --self-test plants one reference of
each rule, checks that each is caught in a file outside the logs, that only the rules for
everywhere fire in a log, and that near misses pass.";

pub fn run(args: &[String]) -> Result<()> {
    if crate::util::wants_help(args, USAGE) {
        return Ok(());
    }
    match args {
        [] => {}
        [flag] if flag == "--self-test" => return self_test(),
        [flag] if flag == "--rules" => {
            for rule in RULES {
                let scope = if rule.scope == Scope::Everywhere { "everywhere" } else { "outside docs/log/" };
                println!("{:<24} {:<18} {}", rule.pattern, scope, rule.why);
            }
            return Ok(());
        }
        _ => return Err(USAGE.into()),
    }
    let root = repo_root()?;
    let findings = scan_tree(&root)?;
    if findings.is_empty() {
        println!("check-references: no tracked file points outside the repository ({} rules)", RULES.len());
        return Ok(());
    }
    for f in &findings {
        eprintln!("{}:{}: `{}`: {}", f.path, f.line, f.text, f.why);
    }
    Err(format!("check-references: {} references point outside the repository", findings.len()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_catches_its_planted_reference() {
        self_test().unwrap();
    }

    #[test]
    fn tracker_numbers_and_spec_files_are_caught() {
        let line = "see issue 15 and Issue #3 (#12), spec/kernels.md section 2";
        let found: Vec<String> = scan("src/lib.rs", line).into_iter().map(|f| f.text).collect();
        assert_eq!(found, ["issue 15", "Issue #3", "(#12", "kernels.md"]);
    }

    #[test]
    fn logs_keep_the_words_of_their_time_but_not_outside_pointers() {
        let line = "run 151 of the twenty-third session, issue 15's targets";
        assert_eq!(scan("docs/log/2026-verification.md", line).len(), 1);
        assert_eq!(scan("docs/verification.md", line).len(), 3);
    }

    #[test]
    fn the_rules_file_and_fuzz_data_are_exempt() {
        assert!(scan("xtask/src/references.rs", "issue 15").is_empty());
        assert!(scan("fuzz/corpus/c_abi/0a1b", "run 1").is_empty());
    }
}
