//! With MLXCEL_AMDGPU_NO_TOOLCHAIN_INSTALL=1, a missing toolchain stops the build with the one
//! command that installs it, and nothing is installed. (A process of its own: it sets the
//! variable.)

use gpu_builder::toolchain::{NO_INSTALL_ENV, Toolchain, install_command};

#[test]
fn a_missing_toolchain_is_not_installed_and_the_error_gives_the_command() {
    let absent = "nightly-1999-01-01";
    // SAFETY: the only test of this process; nothing else reads the environment concurrently.
    unsafe { std::env::set_var(NO_INSTALL_ENV, "1") };
    let err = Toolchain::ensure(absent).unwrap_err();
    assert!(err.contains(&install_command(absent)), "{err}");
    assert!(err.contains(NO_INSTALL_ENV), "{err}");
    assert!(Toolchain::find(absent).unwrap().is_none(), "{absent} was installed");
    // The builder passes the error on.
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let err = gpu_builder::Builder::new(manifest, std::env::temp_dir())
        .toolchain(absent)
        .amdgpu_targets(["gfx1151"])
        .build()
        .unwrap_err();
    assert!(err.contains("rustup toolchain install nightly-1999-01-01"), "{err}");
}
