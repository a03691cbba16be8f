//! Replays the committed corpus of each fuzz target (fuzz/corpus/<target>) and
//! every input it ever failed on (fuzz/regressions/<target>) through the
//! target's own harness (fuzz/harness/<target>.rs), so `cargo test` checks them
//! without cargo-fuzz. docs/reliability.md, "Fuzzing", says how they were made.

#[path = "../fuzz/harness/c_abi.rs"]
mod c_abi_harness;
#[path = "../fuzz/harness/code_object.rs"]
mod code_object_harness;

use std::path::Path;

/// The files of `dir` (relative to the repository), sorted; at least `min`.
fn inputs(dir: &str, min: usize) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.file_name().is_some_and(|n| !n.to_string_lossy().starts_with('.')))
        .collect();
    files.sort();
    assert!(files.len() >= min, "{}: {} inputs, expected at least {min}", dir.display(), files.len());
    files.into_iter().map(|p| (p.display().to_string(), std::fs::read(&p).unwrap())).collect()
}

fn replay(dir: &str, min: usize, run: fn(&[u8])) {
    for (name, bytes) in inputs(dir, min) {
        eprintln!("replaying {name}");
        run(&bytes);
    }
}

/// For each target (its name, the module of its harness): the corpus and the
/// regressions, two tests, `<target>::corpus_replays_clean` and
/// `<target>::every_input_the_fuzzer_failed_on_passes`.
macro_rules! replay_tests {
    ($($target:ident => $harness:ident;)+) => {$(
        mod $target {
            #[test]
            fn corpus_replays_clean() {
                super::replay(concat!("fuzz/corpus/", stringify!($target)), 100, super::$harness::run);
            }

            #[test]
            fn every_input_the_fuzzer_failed_on_passes() {
                super::replay(concat!("fuzz/regressions/", stringify!($target)), 0, super::$harness::run);
            }
        }
    )+};
}

replay_tests! {
    c_abi => c_abi_harness;
    code_object => code_object_harness;
}
