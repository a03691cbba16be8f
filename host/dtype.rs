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

/// An activation element type of the typed API: `f32`, [`half::f16`] or
/// [`half::bf16`]. Its [`Dtype`] picks the kernel instance, so a typed buffer
/// can only reach the kernel compiled for its type.
pub trait Element: bytemuck::Pod + Send + Sync + sealed::Sealed {
    const DTYPE: Dtype;
    /// `v` rounded to this type (to nearest, ties to even).
    fn from_f32(v: f32) -> Self;
    /// The value widened to f32 (exact).
    fn to_f32(self) -> f32;
    /// The storage bits, zero-extended.
    fn to_bits_u32(self) -> u32;
}

impl Element for f32 {
    const DTYPE: Dtype = Dtype::F32;
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn to_bits_u32(self) -> u32 {
        self.to_bits()
    }
}
/// The 16-bit elements, through the `half` crate's conversions.
macro_rules! half_element {
    ($($t:ident => $dtype:ident),*) => {$(
        impl Element for half::$t {
            const DTYPE: Dtype = Dtype::$dtype;
            fn from_f32(v: f32) -> Self {
                half::$t::from_f32(v)
            }
            fn to_f32(self) -> f32 {
                half::$t::to_f32(self)
            }
            fn to_bits_u32(self) -> u32 {
                self.to_bits() as u32
            }
        }
    )*};
}
half_element!(f16 => F16, bf16 => Bf16);

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// Runs `$body` with the type alias `$t` bound to the [`Element`] of the
/// run-time dtype `$dtype`: for callers that hold typed buffers of a dtype
/// chosen at run time (tests and benchmarks that loop over dtypes). The raw
/// launchers and the C ABI take the dtype as a value and need no type.
#[macro_export]
macro_rules! with_element {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::Dtype::F32 => {
                type $t = f32;
                $body
            }
            $crate::Dtype::F16 => {
                type $t = $crate::half::f16;
                $body
            }
            $crate::Dtype::Bf16 => {
                type $t = $crate::half::bf16;
                $body
            }
        }
    };
}
