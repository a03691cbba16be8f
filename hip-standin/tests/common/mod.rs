//! Shared by the tests that reach the stand-in through hip.rs: ROCM_PATH points
//! at a prefix whose lib/ holds the built cdylib (not a test target of its own).
#![allow(dead_code)] // each test target uses its own part

use mlxcel_amdgpu::Device;
use std::path::PathBuf;
use std::sync::Once;

/// The ROCM_PATH-style prefix of this process.
fn prefix() -> PathBuf {
    std::env::temp_dir().join(format!("hip-standin-{}", std::process::id()))
}

/// The stand-in library hip.rs loads: `<prefix>/lib/libamdhip64.so`.
pub fn standin_path() -> PathBuf {
    point_rocm_path_at_the_standin();
    prefix().join("lib").join("libamdhip64.so")
}

/// Copies the built stand-in into the prefix and points ROCM_PATH at it; also
/// turns on coverage recording and strict-wait mode.
pub fn point_rocm_path_at_the_standin() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // target/<profile>/deps/<test>: cargo test leaves the cdylib in deps/,
        // cargo build also in target/<profile>/.
        let exe = std::env::current_exe().unwrap();
        let deps = exe.parent().unwrap();
        let lib = [deps.join("libamdhip64_standin.so"), deps.parent().unwrap().join("libamdhip64_standin.so")]
            .into_iter()
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("the stand-in cdylib libamdhip64_standin.so is not in {}", deps.display()));
        let libdir = prefix().join("lib");
        std::fs::create_dir_all(&libdir).unwrap();
        std::fs::copy(&lib, libdir.join("libamdhip64.so")).unwrap();
        // SAFETY: set once, before any thread of this test reads the environment through hip.rs.
        unsafe {
            std::env::set_var("RDNA_SIM_COVERAGE", coverage_file());
            // Loads' registers hold poison until their s_waitcnt: a missing wait fails.
            std::env::set_var("RDNA_SIM_STRICT_WAIT", "1");
            std::env::set_var("ROCM_PATH", prefix());
            std::env::remove_var("HIP_PATH");
        }
    });
}

/// Where the stand-in appends the mnemonics this process's launches executed.
pub fn coverage_file() -> PathBuf {
    std::env::temp_dir().join(format!("hip-standin-{}-coverage.txt", std::process::id()))
}

/// HIP device 0 of the stand-in (the simulated gfx1151), through hip.rs.
pub fn device() -> Device {
    point_rocm_path_at_the_standin();
    Device::hip(0).unwrap_or_else(|e| panic!("Device::hip(0) on the stand-in: {e}"))
}
