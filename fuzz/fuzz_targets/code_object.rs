//! Arbitrary bytes into the ELF reader and the AMDGPU metadata decoder
//! (fuzz/harness/code_object.rs says what must hold).
#![no_main]

#[path = "../harness/code_object.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
