//! An RDNA 3 / 3.5 (GFX11) wave32 interpreter for the project's AMD code objects.
//!
//! Written from AMD's RDNA3 / RDNA3.5 ISA reference and LLVM's AMDGPU usage
//! document. See `README.md` in this crate for what is covered.

pub mod codeobj;
pub mod decode;
pub mod dispatch;
pub mod exec;
pub mod mem;
pub mod opcodes;
pub mod race;
