//! `rdna-sim-coverage <object.hsaco> <coverage file>...`: how many of the
//! object's distinct mnemonics the launches recorded in the coverage files
//! executed (the files hip-standin appends to under `RDNA_SIM_COVERAGE`,
//! `<processor>\t<mnemonic>` lines), and which they never executed.
use std::collections::BTreeSet;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((object, coverage)) = args.split_first().filter(|(_, c)| !c.is_empty()) else {
        eprintln!("usage: rdna-sim-coverage <object.hsaco> <coverage file>...");
        return ExitCode::from(2);
    };
    let read = |path: &str| std::fs::read(path).map_err(|e| format!("rdna-sim-coverage: {path}: {e}"));
    let mut recorded = String::new();
    let image = match read(object) {
        Ok(image) => image,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    for path in coverage {
        match read(path) {
            Ok(r) => recorded.push_str(&String::from_utf8_lossy(&r)),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let co = match rdna_sim::codeobj::load(&image) {
        Ok(co) => co,
        Err(e) => {
            eprintln!("rdna-sim-coverage: {object}: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The processor as hip-standin records it: the last part of the target triple.
    let processor = co.arch.rsplit("--").next().unwrap_or("").to_string();
    let mut all = BTreeSet::new();
    for k in &co.kernels {
        for i in &k.insts {
            all.insert(i.mnemonic());
            all.extend(i.mnemonic_y().map(str::to_string));
        }
    }
    let executed: BTreeSet<String> = recorded
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(p, _)| *p == processor)
        .map(|(_, m)| m.to_string())
        .collect();
    let run = all.intersection(&executed).count();
    println!("{processor}: executed {run} of the {} distinct mnemonics of {object}", all.len());
    let missing: Vec<&str> = all.difference(&executed).map(String::as_str).collect();
    if !missing.is_empty() {
        println!("{processor}: never executed: {}", missing.join(" "));
    }
    ExitCode::SUCCESS
}
