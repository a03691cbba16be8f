//! `mlxcel-amdgpu`: the command (see [`mlxcel_amdgpu_testkit::cli`]), whose
//! default is the self-test; `cargo run --release` at the repository root runs it.

fn main() -> std::process::ExitCode {
    mlxcel_amdgpu_testkit::cli::main()
}
