//! `mlxcel-amdgpu`: the command (see the testkit's `cli` module), a binary
//! of the root package, so that `cargo run` at the repository root runs the
//! self-test. The root package cannot depend on the testkit crate (the testkit
//! depends on its library), so this binary compiles the testkit's modules
//! into itself; their tests run in the testkit crate (this target has none).
//! What only the tests use of them is unused here.

#![allow(dead_code)]

mod cli;
mod fixtures;
mod reference;
mod selftest;

fn main() -> std::process::ExitCode {
    cli::main()
}
