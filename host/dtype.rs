//! Element types of activations, at run time.

use std::fmt;

/// The storage dtype of a kernel's activations. Each dtype is its own kernel
/// symbol (`xielu_bf16`), so a launch can never run code compiled for another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    /// Every dtype, in a fixed order.
    pub const ALL: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::Bf16];

    /// The suffix of kernel symbols: `f32`, `f16`, `bf16`.
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        }
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }

    /// Parses `f32`, `f16`, `bf16`.
    pub fn parse(s: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == s)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
