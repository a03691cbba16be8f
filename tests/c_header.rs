//! The checked-in C header matches what cbindgen generates from host/ffi.rs
//! (and host/kernels/moe/shape.rs, the struct the Rust API and the C ABI share).
//! After changing the ABI: `MLXCEL_AMDGPU_BLESS=1 cargo test --test c_header`.

use std::path::Path;

#[test]
fn header_is_in_sync_with_the_abi() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("host/ffi.rs"))
        .with_src(root.join("host/kernels/moe/shape.rs"))
        .generate()
        .expect("cbindgen parses host/ffi.rs and host/kernels/moe/shape.rs")
        .write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = root.join("include/mlxcel_amdgpu.h");
    if std::env::var_os("MLXCEL_AMDGPU_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/mlxcel_amdgpu.h is stale: regenerate it with `MLXCEL_AMDGPU_BLESS=1 cargo test --test c_header` and commit it"
    );
}
