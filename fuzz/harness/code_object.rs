//! The code-object fuzz harness, shared by the `code_object` fuzz target
//! (fuzz/fuzz_targets/code_object.rs) and the corpus replay test
//! (tests/fuzz_corpus.rs).
//!
//! The first byte picks the reader; the rest is its input:
//! - even: the whole code-object reader ([`CodeObject::parse`]: the ELF reader
//!   and then the metadata decoder on the note it finds), and for an object it
//!   accepts, everything the library then does with one (the `inspect` summary,
//!   the processor and features, the audit against the real kernel list);
//! - odd: the metadata decoder alone (the note's MessagePack), so that its
//!   inputs need not be wrapped in an ELF image.
//!
//! Every input must give a value or an error: a panic, an abort or a hang is a
//! finding (libFuzzer reports each).

use code_object::{CodeObject, audit_against_kernels, elf, metadata};
use kernels_device::entry::KERNELS;

/// Runs one input. Panics only where the library does.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode % 2 == 1 {
        if let Ok(meta) = metadata::decode(rest) {
            assert!(meta.kernels.len() <= rest.len(), "more kernels than bytes");
        }
        return;
    }
    // The ELF reader alone first: CodeObject::parse must agree with it.
    let read = elf::read(rest);
    match CodeObject::parse(rest) {
        Ok(object) => {
            assert!(read.is_ok(), "parse accepted what elf::read refused");
            let _ = object.summary();
            let _ = (object.processor(), object.target_features(), object.code_object_version());
            let _ = audit_against_kernels(&object, KERNELS);
        }
        Err(e) => assert!(!e.0.is_empty(), "an error without a message"),
    }
}
