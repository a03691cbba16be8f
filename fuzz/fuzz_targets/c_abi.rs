//! Arbitrary arguments into every C ABI function on the CPU backend
//! (fuzz/harness/c_abi.rs says what must hold).
#![no_main]

#[path = "../harness/c_abi.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
