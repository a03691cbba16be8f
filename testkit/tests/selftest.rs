//! The main job (`cargo run --release`): on the CPU emulator every case runs and
//! passes and the table says that the shapes are reduced; the report names, for
//! every GPU backend it did not use, the reason, and ends with the device it
//! verified; `MLXCEL_AMDGPU_EXPECT_HIP` / `_CUDA` make the command fail when
//! that backend is not the one verified.

use std::process::{Command, Output};

use mlxcel_amdgpu::{BackendKind, Device, Error};
use mlxcel_amdgpu_testkit::selftest;

const EXPECT_VARS: [&str; 2] = [selftest::EXPECT_HIP_ENV, selftest::EXPECT_CUDA_ENV];

/// Why device 0 of `kind` cannot be used here, as the self-test words it, or
/// `None` when it can.
fn unusable(kind: BackendKind) -> Option<String> {
    match Device::open(kind) {
        Ok(d) => d.info().kernels.as_ref().err().map(|why| format!("has no kernels: {why}")),
        Err(Error::BackendUnavailable { reason, .. }) => Some(reason),
        Err(e) => Some(e.to_string()),
    }
}

/// The command-line tool's default command, with `MLXCEL_AMDGPU_BACKEND` and
/// the expectation variables removed and then `env` set.
fn selftest_command(env: &[(&str, &str)]) -> (Output, String) {
    // `MLXCEL_AMDGPU_CLI` when set (the tier-3 script runs test binaries where
    // cargo's path does not exist), else the tool cargo built.
    let bin = std::env::var("MLXCEL_AMDGPU_CLI").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mlxcel-amdgpu").into());
    let mut cmd = Command::new(bin);
    cmd.env_remove("MLXCEL_AMDGPU_BACKEND");
    for var in EXPECT_VARS {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("the mlxcel-amdgpu binary runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out, text)
}

fn last_line(text: &str) -> &str {
    text.lines().last().unwrap_or("")
}

#[test]
fn selftest_passes_on_the_emulator_and_says_its_shapes_are_reduced() {
    let dev = Device::cpu();
    // `run_cases`, not `run`: an expectation variable set for the whole test
    // run (on a GPU machine) must not fail this emulator check.
    let outcomes = selftest::run_cases(&dev);
    let table = selftest::render(&dev, &outcomes);
    println!("{table}");
    // The probe, then 5 kernels x 3 dtypes.
    assert_eq!(outcomes.len(), 16, "{table}");
    assert!(outcomes.iter().all(|o| o.passed && o.millis.is_some()), "{table}");
    assert!(table.contains("reduced shapes"), "{table}");
    assert!(table.contains("16 passed, 0 failed"), "{table}");
    // Both GPU backends were not used here, each with its reason; the last line
    // names the device.
    assert!(table.lines().any(|l| l.starts_with("hip: not used: ")), "{table}");
    assert!(table.lines().any(|l| l.starts_with("cuda: not used: ")), "{table}");
    assert_eq!(last_line(&table), "verified: CPU emulator (host) — not a GPU", "{table}");
}

/// The default command: exit 0 where every case passes, a `not used` line with
/// the reason for every GPU backend other than the device's, and a last line
/// naming the device verified.
#[test]
fn default_run_says_which_backend_ran_and_why_the_others_did_not() {
    let (out, text) = selftest_command(&[]);
    println!("{text}");
    assert!(out.status.success(), "{text}");
    let device_line = text.lines().find(|l| l.starts_with("device: ")).expect("a device line");
    for kind in [BackendKind::Hip, BackendKind::Cuda] {
        let used = device_line.contains(&format!("({kind}, "));
        let line = text.lines().find(|l| l.starts_with(&format!("{kind}: not used: ")));
        assert_eq!(line.is_some(), !used, "{kind}: {text}");
        // On a machine without the backend, the line carries the backend's own reason.
        if let (Some(line), Some(why)) = (line, unusable(kind)) {
            assert!(line.ends_with(&why), "{kind}: expected the reason {why:?} in {line:?}");
        }
    }
    assert!(last_line(&text).starts_with("verified: "), "{text}");
    if device_line.contains("(cpu, ") {
        assert_eq!(last_line(&text), "verified: CPU emulator (host) — not a GPU", "{text}");
    }
}

/// An expectation variable with the CPU emulator forced: the self-test fails
/// and says why, on any machine; where the backend is absent, with its reason.
fn expectation_fails_on_the_emulator(var: &str, kind: BackendKind) {
    let (out, text) = selftest_command(&[("MLXCEL_AMDGPU_BACKEND", "cpu"), (var, "1")]);
    println!("{text}");
    assert!(!out.status.success(), "{var}=1 with the emulator must fail: {text}");
    let failed = text.lines().find(|l| l.starts_with("FAILED: ")).unwrap_or_else(|| panic!("no FAILED line: {text}"));
    assert!(failed.contains(var) && failed.contains(&format!("not on {kind}")), "{failed}");
    match unusable(kind) {
        Some(why) => assert!(failed.ends_with(&why), "expected the reason {why:?} in {failed:?}"),
        None => assert!(failed.contains("MLXCEL_AMDGPU_BACKEND=cpu selects the cpu backend"), "{failed}"),
    }
    // The table still ran, and the last line still names what was verified.
    assert!(text.contains("16 passed, 0 failed"), "{text}");
    assert_eq!(last_line(&text), "verified: CPU emulator (host) — not a GPU", "{text}");
}

#[test]
fn expect_hip_fails_when_hip_is_not_the_device_verified() {
    expectation_fails_on_the_emulator(selftest::EXPECT_HIP_ENV, BackendKind::Hip);
}

#[test]
fn expect_cuda_fails_when_cuda_is_not_the_device_verified() {
    // Without the feature, the reason given is that the build has no CUDA support.
    if !cfg!(feature = "cuda") {
        let why = unusable(BackendKind::Cuda).expect("no CUDA without the feature");
        assert!(why.contains("this build has no CUDA support"), "{why}");
    }
    expectation_fails_on_the_emulator(selftest::EXPECT_CUDA_ENV, BackendKind::Cuda);
}

/// `MLXCEL_AMDGPU_SELFTEST_REPS` sets the timed launches per case and says so
/// in the table (0: one launch per case, no warm-up); a value that is not a
/// count fails every case with an error naming the variable.
#[test]
fn the_timed_launches_can_be_set_and_a_bad_count_is_refused() {
    for (reps, note) in [
        ("2", "note: MLXCEL_AMDGPU_SELFTEST_REPS=2: the times are medians of that many launches"),
        ("0", "note: MLXCEL_AMDGPU_SELFTEST_REPS=0: one launch per case, checked and timed, no warm-up"),
    ] {
        let (out, text) = selftest_command(&[("MLXCEL_AMDGPU_BACKEND", "cpu"), (selftest::REPS_ENV, reps)]);
        assert!(out.status.success(), "{reps}: {text}");
        assert!(text.contains(note), "{reps}: {text}");
    }
    for bad in ["-1", "many", ""] {
        let (out, text) = selftest_command(&[("MLXCEL_AMDGPU_BACKEND", "cpu"), (selftest::REPS_ENV, bad)]);
        assert!(!out.status.success(), "{bad}: {text}");
        let want = format!("invalid argument `MLXCEL_AMDGPU_SELFTEST_REPS`: \"{bad}\" is not a count (0 or more)");
        assert!(text.contains(&want), "{bad}: {text}");
    }
}
