//! Tier 1: the command line, run as a user runs it (the built binary).

use mlxcel_amdgpu::embedded::AMDGPU_CODE_OBJECTS;
use mlxcel_amdgpu::kernels_device::geometry::xielu::BF16_WORKGROUP_MEM_BYTES;
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

/// The tool under test: `MLXCEL_AMDGPU_CLI` when set (the tier-3 script runs
/// test binaries where cargo's path does not exist), else the one cargo built.
fn bin() -> String {
    std::env::var("MLXCEL_AMDGPU_CLI").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mlxcel-amdgpu").into())
}

fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("run mlxcel-amdgpu")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn version() {
    for flag in ["--version", "-V"] {
        let o = run(&[flag]);
        assert!(o.status.success(), "{flag}: {o:?}");
        assert_eq!(stdout(&o), format!("mlxcel-amdgpu {}\n", env!("CARGO_PKG_VERSION")));
        assert_eq!(stderr(&o), "");
    }
}

#[test]
fn help_lists_the_subcommands() {
    for flag in ["--help", "-h", "help"] {
        let o = run(&[flag]);
        assert!(o.status.success(), "{flag}: {o:?}");
        let text = stdout(&o);
        assert!(text.contains(env!("CARGO_PKG_VERSION")), "{text}");
        for word in ["selftest", "the default", "inspect", "--version", "--help"] {
            assert!(text.contains(word), "{flag} does not mention {word}:\n{text}");
        }
    }
}

#[test]
fn unexpected_arguments_are_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["inspect", "extra", "junk"], "unexpected argument \"extra\""),
        (&["selftest", "--fast"], "unexpected argument \"--fast\""),
        (&["--version", "now"], "unexpected argument \"now\""),
        (&["frobnicate"], "unknown command \"frobnicate\""),
        (&["--frobnicate"], "unknown option \"--frobnicate\""),
    ];
    for (args, want) in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert_eq!(stdout(&o), "", "{args:?}");
        let err = stderr(&o);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(err.contains("usage: mlxcel-amdgpu"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn inspect_shows_launch_sized_workgroup_memory() {
    let o = run(&["inspect"]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    assert_eq!(text.matches("== ").count(), AMDGPU_CODE_OBJECTS.len() + 1, "{text}");
    // The header says what the LDS column means.
    assert!(text.contains("LDS: static bytes + bytes given at launch"), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("xielu_bf16 ")).collect();
    assert_eq!(rows.len(), AMDGPU_CODE_OBJECTS.len(), "{text}");
    let lds = format!("0+{BF16_WORKGROUP_MEM_BYTES} (launch)");
    for row in rows {
        assert!(row.contains(&lds), "{row:?} does not show {lds:?}");
    }
    // A kernel without launch-sized memory shows the static amount only.
    let f32_row = text.lines().find(|l| l.starts_with("xielu_f32 ")).expect("xielu_f32 row");
    assert!(!f32_row.contains("(launch)"), "{f32_row}");
}

#[test]
fn inspect_into_a_closed_pipe_exits_cleanly() {
    // The reader is gone before the first write: every write fails with EPIPE.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let o = Command::new(bin()).arg("inspect").stdout(writer).stderr(Stdio::piped()).output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stderr(&o), "");
}

#[test]
fn inspect_piped_into_head_exits_cleanly() {
    // As `inspect | head -1`: read one line, then close the pipe.
    let mut child =
        Command::new(bin()).arg("inspect").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("== "), "{first:?}");
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}
