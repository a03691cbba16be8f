//! An RDNA 3 / 3.5 (GFX11) wave32 interpreter for the project's AMD code objects.
//!
//! Written from AMD's RDNA3 / RDNA3.5 ISA reference and LLVM's AMDGPU usage
//! document. See `README.md` in this crate for what is covered.

/// Declares an error type of a message and where it arose (`$at`), shown as
/// `$fmt` with the place first, so that the crate's error types read alike.
macro_rules! located_error {
    ($(#[$doc:meta])* $name:ident { $at:ident: $ty:ty }, $fmt:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct $name {
            pub $at: $ty,
            pub msg: String,
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, $fmt, self.$at, self.msg)
            }
        }

        impl std::error::Error for $name {}
    };
}

pub mod codeobj;
pub mod decode;
pub mod dispatch;
pub mod exec;
pub mod mem;
pub mod opcodes;
pub mod race;
