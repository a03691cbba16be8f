//! `mlxcel-amdgpu`: the command-line entry point.
//!
//! - `inspect`: print every embedded code object and its kernels' resources.

use mlxcel_amdgpu::code_object::CodeObject;
use mlxcel_amdgpu::embedded::{AMDGPU_CODE_OBJECTS, PTX};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("inspect") => inspect(),
        Some("help" | "--help" | "-h") => {
            println!("usage: mlxcel-amdgpu [inspect]");
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("unknown command {other:?}; usage: mlxcel-amdgpu [inspect]");
            ExitCode::FAILURE
        }
        None => inspect(),
    }
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
