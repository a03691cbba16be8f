//! `cargo xtask <task>`: the project's tasks, one entry point. `cargo xtask help` lists them and
//! `cargo xtask <task> --help` describes one.

mod checks;
mod ci;
mod consumer;
mod fuzz;
mod gpu;
mod references;
mod sim;
mod util;

use util::Result;

type Task = fn(&[String]) -> Result<()>;

/// The tasks: name, arguments, what it does, the function.
const TASKS: &[(&str, &str, &str, Task)] = &[
    ("ci", "", "every check of CI after the README's commands (.ci/run runs both)", ci::run_task),
    (
        "check-references",
        "[--self-test | --rules]",
        "refuse tracked files that point outside the repository",
        references::run,
    ),
    ("sim-test", "[CARGO TEST ARGS]", "the suite's HIP cases on the simulated gfx1151", sim::test),
    ("sim-selftest", "", "the self-test on the simulated gfx1151, and its executed instructions", sim::selftest),
    ("predict-gfx1151", "", "the gfx1151 model on the simulated device (about 5 min)", sim::predict),
    (
        "consumer",
        "",
        "tests/consumer on mlxcel's toolchain: a kernel through the Rust API and the C ABI",
        consumer::consumer,
    ),
    ("package", "", "cargo package and cargo publish --dry-run of the published crates", consumer::package),
    ("leak-check", "", "valgrind over the CPU backend and the C ABI consumer", checks::leak_check),
    ("ptx-spills", "[ARCH...]", "ptxas on the PTX for sm_80 to sm_121: no local memory", checks::ptx_spills),
    ("codegen", "save|compare [DIR] [--no-build]", "save or compare the AMD code objects and the PTX", checks::codegen),
    ("fuzz", "short|long|minimize|build ...", "the cargo-fuzz targets, without cargo-fuzz", fuzz::run_task),
    ("gpu-pack", "tier3|bench|mlx... [--only-sm SM]", "build what a GPU host runs, into .gpu-pack/", gpu::pack),
    ("gpu-run", "tier3|bench|mlx|profile", "run scripts/gpu-host/NAME.sh (on a GPU host with Rust)", gpu::run_on_host),
    (
        "fork-headers",
        "--overlay DIR --mlx DIR --fork DIR ...",
        "the shim's ROCm branch against the real MLX-ROCm fork's headers",
        checks::fork_headers,
    ),
    ("sass-stalls", "LISTING START END", "ptxas's fixed waits over a loop of a SASS listing", checks::sass_stalls),
];

fn help() {
    println!("usage: cargo xtask <task> [arguments]   (cargo xtask <task> --help describes one)\n\ntasks:");
    for (name, args, what, _) in TASKS {
        println!("  {:<17} {what}", name);
        if !args.is_empty() {
            println!("  {:<17}   {name} {args}", "");
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        None | Some("help" | "--help" | "-h") => {
            help();
            Ok(())
        }
        Some(name) => match TASKS.iter().find(|t| t.0 == name) {
            Some((.., task)) => task(&args[1..]),
            None => Err(format!("unknown task `{name}` (cargo xtask help lists the tasks)").into()),
        },
    };
    if let Err(e) = result {
        eprintln!("xtask: {e}");
        std::process::exit(1);
    }
}
