//! mlxcel-amdgpu-testkit: what the tests, the benchmarks and the self-test
//! need and the library that mlxcel links does not.
//!
//! - [`reference`]: the CPU reference implementations of every contract (the
//!   tests' oracle);
//! - [`fixtures`]: the reference inputs uploaded to a device;
//! - [`selftest`]: every available kernel and dtype against the references,
//!   as a table (the `mlxcel-amdgpu` command's default);
//! - [`cli`]: the `mlxcel-amdgpu` command (`src/main.rs`).

pub mod cli;
pub mod fixtures;
pub mod reference;
pub mod selftest;
