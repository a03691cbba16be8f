//! `mlxcel-amdgpu`: the command-line entry point.
//!
//! - `selftest` (the default): pick the device, run every available kernel and
//!   dtype against the reference implementations, print a table.
//! - `inspect`: print every embedded code object and its kernels' resources.

use mlxcel_amdgpu::code_object::CodeObject;
use mlxcel_amdgpu::embedded::{AMDGPU_CODE_OBJECTS, PTX};
use mlxcel_amdgpu::{Device, selftest};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("inspect") => inspect(),
        Some("selftest") | None => run_selftest(),
        Some("help" | "--help" | "-h") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("unknown command {other:?}\n{USAGE}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: mlxcel-amdgpu [selftest | inspect]
  selftest  run every available kernel against the references on the default device
            (MLXCEL_AMDGPU_BACKEND=hip|cuda|cpu forces a backend)
  inspect   print every embedded code object and its kernels' resources";

fn run_selftest() -> ExitCode {
    let device = match Device::default_device() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("no device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcomes = selftest::run(&device);
    print!("{}", selftest::render(&device, &outcomes));
    if outcomes.iter().all(|o| o.passed) { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn inspect() -> ExitCode {
    let mut ok = true;
    for object in AMDGPU_CODE_OBJECTS {
        match CodeObject::parse(object.bytes) {
            Ok(parsed) => {
                println!("== {} ({} bytes)", object.processor, object.bytes.len());
                println!("{}", parsed.summary());
            }
            Err(e) => {
                ok = false;
                eprintln!("== {}: {e}", object.processor);
            }
        }
    }
    match PTX {
        Some(ptx) => println!("== PTX for {} ({} bytes, feature `cuda`)", ptx.arch, ptx.text.len()),
        None => println!("== no PTX embedded (build with --features cuda for NVIDIA verification)"),
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
