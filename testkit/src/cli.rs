//! The `mlxcel-amdgpu` command (the root package's binary, `src/main.rs`).
//!
//! - `selftest` (the default): pick the device, run every available kernel and
//!   dtype against the reference implementations, print a table.
//! - `inspect`: print every embedded code object and its kernels' resources.
//! - `--help` (`-h`, `help`), `--version` (`-V`).
//!
//! Arguments are checked strictly: anything unexpected is a usage error (exit
//! status 2) that names it. Output goes through [`Out`], which stops quietly
//! when stdout is closed (`mlxcel-amdgpu inspect | head -1`) instead of
//! panicking as `println!` does.

use mlxcel_amdgpu::Device;
use mlxcel_amdgpu::code_object::CodeObject;
use mlxcel_amdgpu::embedded::{AMDGPU_CODE_OBJECTS, PTX};

use crate::selftest;
use std::ffi::OsString;
use std::io::{self, Write};
use std::process::ExitCode;

const VERSION: &str = env!("CARGO_PKG_VERSION");

const USAGE: &str = "usage: mlxcel-amdgpu [COMMAND]

commands:
  selftest  run every available kernel against the references on the default device
            (the default; MLXCEL_AMDGPU_BACKEND=hip|cuda|cpu forces a backend)
  inspect   print every embedded code object and its kernels' resources

options:
  -h, --help     print this help
  -V, --version  print the version";

/// Exit status of a usage error (as for most command-line tools).
const USAGE_ERROR: u8 = 2;

#[derive(Debug, PartialEq, Eq)]
enum Command {
    Selftest,
    Inspect,
    Help,
    Version,
}

/// The command the arguments (without the program name) ask for, or what is wrong with them.
fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Command, String> {
    let mut args = args.into_iter();
    let Some(first) = args.next() else {
        return Ok(Command::Selftest);
    };
    let first = first.into_string().map_err(|a| format!("argument {a:?} is not valid UTF-8"))?;
    let command = match first.as_str() {
        "selftest" => Command::Selftest,
        "inspect" => Command::Inspect,
        "help" | "--help" | "-h" => Command::Help,
        "--version" | "-V" => Command::Version,
        other if other.starts_with('-') => return Err(format!("unknown option {other:?}")),
        other => return Err(format!("unknown command {other:?}")),
    };
    match args.next() {
        None => Ok(command),
        Some(extra) => Err(format!("unexpected argument {extra:?} after {first:?}")),
    }
}

/// Runs the command that the process's arguments ask for.
pub fn main() -> ExitCode {
    let command = match parse_args(std::env::args_os().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(io::stderr(), "mlxcel-amdgpu: {e}\n\n{USAGE}");
            return ExitCode::from(USAGE_ERROR);
        }
    };
    let mut out = Out::new();
    let status = match command {
        Command::Selftest => run_selftest(&mut out),
        Command::Inspect => inspect(&mut out),
        Command::Help => {
            out.line(&format!("mlxcel-amdgpu {VERSION}: {}\n\n{USAGE}", env!("CARGO_PKG_DESCRIPTION")));
            ExitCode::SUCCESS
        }
        Command::Version => {
            out.line(&format!("mlxcel-amdgpu {VERSION}"));
            ExitCode::SUCCESS
        }
    };
    match out.finish() {
        Ok(()) => status,
        Err(e) => {
            let _ = writeln!(io::stderr(), "mlxcel-amdgpu: cannot write to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Stdout that never panics: after the reader has gone (EPIPE) every further
/// write is skipped; any other error is kept for [`Out::finish`].
struct Out {
    stdout: io::StdoutLock<'static>,
    closed: bool,
    error: Option<io::Error>,
}

impl Out {
    fn new() -> Out {
        Out { stdout: io::stdout().lock(), closed: false, error: None }
    }

    fn text(&mut self, text: &str) {
        if self.closed || self.error.is_some() {
            return;
        }
        match self.stdout.write_all(text.as_bytes()) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => self.closed = true,
            Err(e) => self.error = Some(e),
        }
    }

    fn line(&mut self, text: &str) {
        self.text(text);
        self.text("\n");
    }

    /// Flushes; `Ok` also when the reader closed the pipe early.
    fn finish(mut self) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        match self.stdout.flush() {
            Err(e) if e.kind() != io::ErrorKind::BrokenPipe && !self.closed => Err(e),
            _ => Ok(()),
        }
    }
}

fn run_selftest(out: &mut Out) -> ExitCode {
    let device = match Device::default_device() {
        Ok(d) => d,
        Err(e) => {
            let _ = writeln!(io::stderr(), "no device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcomes = selftest::run(&device);
    out.text(&selftest::render(&device, &outcomes));
    if outcomes.iter().all(|o| o.passed) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn inspect(out: &mut Out) -> ExitCode {
    let mut ok = true;
    for object in AMDGPU_CODE_OBJECTS {
        match CodeObject::parse(object.bytes) {
            Ok(parsed) => {
                out.line(&format!("== {} ({} bytes)", object.processor, object.bytes.len()));
                out.line(&parsed.summary());
            }
            Err(e) => {
                ok = false;
                let _ = writeln!(io::stderr(), "== {}: {e}", object.processor);
            }
        }
    }
    match PTX {
        Some(ptx) => out.line(&format!("== PTX for {} ({} bytes, feature `cuda`)", ptx.arch, ptx.text.len())),
        None => out.line("== no PTX embedded (build with --features cuda for NVIDIA verification)"),
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args(args.iter().map(OsString::from))
    }

    #[test]
    fn commands() {
        assert_eq!(parse(&[]), Ok(Command::Selftest));
        assert_eq!(parse(&["selftest"]), Ok(Command::Selftest));
        assert_eq!(parse(&["inspect"]), Ok(Command::Inspect));
        for h in ["help", "--help", "-h"] {
            assert_eq!(parse(&[h]), Ok(Command::Help));
        }
        for v in ["--version", "-V"] {
            assert_eq!(parse(&[v]), Ok(Command::Version));
        }
    }

    #[test]
    fn strict_arguments() {
        assert_eq!(parse(&["inspect", "extra", "junk"]), Err("unexpected argument \"extra\" after \"inspect\"".into()));
        assert_eq!(parse(&["selftest", "x"]), Err("unexpected argument \"x\" after \"selftest\"".into()));
        assert_eq!(parse(&["--version", "x"]), Err("unexpected argument \"x\" after \"--version\"".into()));
        assert_eq!(parse(&["frobnicate"]), Err("unknown command \"frobnicate\"".into()));
        assert_eq!(parse(&["--frobnicate"]), Err("unknown option \"--frobnicate\"".into()));
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_argument() {
        use std::os::unix::ffi::OsStringExt;
        let e = parse_args([OsString::from_vec(vec![0xff, b'x'])]).unwrap_err();
        assert!(e.contains("not valid UTF-8"), "{e}");
    }
}
