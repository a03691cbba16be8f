//! `cargo xtask <task>`: the project's tasks, one entry point (`cargo xtask help`).

mod references;
mod util;

use util::Result;

/// The tasks: name, arguments, what it does.
const TASKS: &[(&str, &str, &str)] = &[(
    "check-references",
    "[--self-test | --rules]",
    "refuse tracked files that point outside the repository (design notes, tracker numbers, the words of one GPU harness)",
)];

fn help() {
    println!("usage: cargo xtask <task> [arguments]\n\ntasks:");
    for (name, args, what) in TASKS {
        println!("  {name} {args}\n      {what}");
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result: Result<()> = match args.first().map(String::as_str) {
        None | Some("help" | "--help" | "-h") => {
            help();
            Ok(())
        }
        Some("check-references") => references::run(&args[1..]),
        Some(other) => Err(format!("unknown task `{other}` (cargo xtask help lists the tasks)").into()),
    };
    if let Err(e) = result {
        eprintln!("xtask: {e}");
        std::process::exit(1);
    }
}
