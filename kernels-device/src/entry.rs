//! The exported kernel entry points: one unmangled symbol per kernel and dtype.
//!
//! [`kernels!`] stamps out, from one list:
//! - on GPU targets, an `extern "gpu-kernel"` function per entry (raw pointers
//!   and scalars only: a struct by value would silently become a pointer on amdgpu);
//! - everywhere, [`KERNELS`], the names and argument lists the host checks the
//!   code objects against and packs launches with;
//! - on the host, [`emulated`], which maps a symbol to a function that reads a
//!   packed argument buffer and runs the same body in the emulator.

use crate::args::{KernelArg, KernelSpec, Param};

macro_rules! kernels {
    ($( $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) => $body:path; )*) => {
        $(
            #[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
            #[unsafe(no_mangle)]
            pub unsafe extern "gpu-kernel" fn $name($($arg: $ty),*) {
                unsafe { $body($($arg),*) }
            }
        )*

        /// Every exported kernel, with its explicit arguments in order.
        pub const KERNELS: &[KernelSpec] = &[
            $( KernelSpec {
                name: stringify!($name),
                params: &[$( Param { name: stringify!($arg), kind: <$ty as KernelArg>::KIND } ),*],
            }, )*
        ];

        /// The host version of an entry point: reads a packed argument buffer
        /// (see [`crate::args::ArgReader`]) and runs the kernel body for the
        /// calling emulator lane.
        #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
        pub type EmulatedEntry = unsafe fn(*const u8);

        /// The host version of the entry point called `name`, if there is one.
        #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
        pub fn emulated(name: &str) -> Option<EmulatedEntry> {
            $(
                #[allow(non_snake_case)]
                unsafe fn $name(args: *const u8) {
                    unsafe {
                        let mut reader = crate::args::ArgReader::new(args);
                        $( let $arg: $ty = reader.next(); )*
                        $body($($arg),*)
                    }
                }
            )*
            match name {
                $( stringify!($name) => Some($name as EmulatedEntry), )*
                _ => None,
            }
        }
    };
}

kernels! {
    probe(out: *mut u32) => crate::probe::probe;
}

/// The spec of the kernel called `name`.
pub fn spec(name: &str) -> Option<&'static KernelSpec> {
    KERNELS.iter().find(|k| k.name == name)
}
