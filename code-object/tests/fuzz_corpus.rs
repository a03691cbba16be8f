//! Replays the committed corpus of the `code_object` fuzz target
//! (fuzz/corpus/code_object) and every input it ever failed on
//! (fuzz/regressions/code_object) through the target's own harness,
//! fuzz/harness/code_object.rs, so `cargo test` checks them without cargo-fuzz.

#[path = "../../fuzz/harness/code_object.rs"]
mod harness;

use std::path::Path;

fn inputs(dir: &str, min: usize) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| !n.to_string_lossy().starts_with('.')))
        .collect();
    files.sort();
    assert!(files.len() >= min, "{}: {} inputs, expected at least {min}", dir.display(), files.len());
    files.into_iter().map(|p| (p.display().to_string(), std::fs::read(&p).unwrap())).collect()
}

fn replay(dir: &str, min: usize) {
    for (name, bytes) in inputs(dir, min) {
        eprintln!("replaying {name}");
        harness::run(&bytes);
    }
}

#[test]
fn the_code_object_corpus_replays_clean() {
    replay("fuzz/corpus/code_object", 100);
}

#[test]
fn every_code_object_input_the_fuzzer_failed_on_passes() {
    replay("fuzz/regressions/code_object", 0);
}
