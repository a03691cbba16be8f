//! The C++ side, compiled as mlxcel-core compiles the MLX shim: by `cc` in the build script,
//! against the header that mlxcel-amdgpu's build script names (`links` metadata:
//! DEP_MLXCEL_AMDGPU_INCLUDE). The C ABI it calls is linked by Cargo from the dependency.

fn main() {
    let include = std::env::var("DEP_MLXCEL_AMDGPU_INCLUDE").expect("mlxcel-amdgpu names its include directory");
    println!("cargo::rerun-if-changed=src/consumer.cpp");
    cc::Build::new().cpp(true).std("c++17").include(&include).file("src/consumer.cpp").compile("consumer");
}
