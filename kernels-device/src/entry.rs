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
use crate::geometry::add3_layer_norm as add3;

macro_rules! kernels {
    ($( $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) => $body:path; )*) => {
        $(
            #[cfg(any(target_arch = "amdgpu", target_arch = "nvptx64"))]
            #[unsafe(no_mangle)]
            #[allow(unused_unsafe)]
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
                #[allow(non_snake_case, unused_mut, unused_variables, unused_unsafe)]
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

use crate::num::Bf16;

kernels! {
    probe(out: *mut u32) => crate::probe::probe;
    empty() => crate::probe::empty;
    read_stream(src: *const u32, quads: u64, out: *mut u32) => crate::probe::read_stream;

    xielu_f32(x: *const f32, out: *mut f32, n: u64, alpha_p: f32, alpha_n: f32, beta: f32, eps: f32) => crate::xielu::xielu::<f32>;
    xielu_f16(x: *const f16, out: *mut f16, n: u64, alpha_p: f32, alpha_n: f32, beta: f32, eps: f32) => crate::xielu::xielu::<f16>;
    xielu_bf16(x: *const Bf16, out: *mut Bf16, n: u64, alpha_p: f32, alpha_n: f32, beta: f32, eps: f32) => crate::xielu::xielu::<Bf16>;

    add3_layer_norm_f32(a: *const f32, b: *const f32, x: *const f32, w: *const f32, bias: *const f32, x_new: *mut f32, h: *mut f32, rows: u32, d: u32, eps: f32)
        => crate::add3_layer_norm::add3_layer_norm::<f32, { add3::CHUNKS }>;
    add3_layer_norm_f16(a: *const f16, b: *const f16, x: *const f16, w: *const f16, bias: *const f16, x_new: *mut f16, h: *mut f16, rows: u32, d: u32, eps: f32)
        => crate::add3_layer_norm::add3_layer_norm::<f16, { add3::CHUNKS }>;
    add3_layer_norm_bf16(a: *const Bf16, b: *const Bf16, x: *const Bf16, w: *const Bf16, bias: *const Bf16, x_new: *mut Bf16, h: *mut Bf16, rows: u32, d: u32, eps: f32)
        => crate::add3_layer_norm::add3_layer_norm::<Bf16, { add3::CHUNKS }>;
    add3_layer_norm_d4096_f32(a: *const f32, b: *const f32, x: *const f32, w: *const f32, bias: *const f32, x_new: *mut f32, h: *mut f32, rows: u32, d: u32, eps: f32)
        => crate::add3_layer_norm::add3_layer_norm::<f32, { add3::SHORT_CHUNKS }>;
    add3_layer_norm_d4096_f16(a: *const f16, b: *const f16, x: *const f16, w: *const f16, bias: *const f16, x_new: *mut f16, h: *mut f16, rows: u32, d: u32, eps: f32)
        => crate::add3_layer_norm::add3_layer_norm::<f16, { add3::SHORT_CHUNKS }>;
    add3_layer_norm_d4096_bf16(a: *const Bf16, b: *const Bf16, x: *const Bf16, w: *const Bf16, bias: *const Bf16, x_new: *mut Bf16, h: *mut Bf16, rows: u32, d: u32, eps: f32)
        => crate::add3_layer_norm::add3_layer_norm::<Bf16, { add3::SHORT_CHUNKS }>;

    moe_fc1_relu2_f32(x: *const f32, idx: *const u32, w1: *const u32, s1: *const f32, b1: *const f32, act: *mut f32, n_experts: u32, k: u32, din: u32, dff: u32, bits: u32, group_size: u32, status: *mut u32)
        => crate::moe::moe_fc1_relu2::<f32>;
    moe_fc1_relu2_f16(x: *const f16, idx: *const u32, w1: *const u32, s1: *const f16, b1: *const f16, act: *mut f32, n_experts: u32, k: u32, din: u32, dff: u32, bits: u32, group_size: u32, status: *mut u32)
        => crate::moe::moe_fc1_relu2::<f16>;
    moe_fc1_relu2_bf16(x: *const Bf16, idx: *const u32, w1: *const u32, s1: *const Bf16, b1: *const Bf16, act: *mut f32, n_experts: u32, k: u32, din: u32, dff: u32, bits: u32, group_size: u32, status: *mut u32)
        => crate::moe::moe_fc1_relu2::<Bf16>;
    moe_down_f32(idx: *const u32, w2: *const u32, s2: *const f32, b2: *const f32, act: *const f32, scores: *const f32, part: *mut f32, n_experts: u32, k: u32, din: u32, dff: u32, bits: u32, group_size: u32, status: *mut u32)
        => crate::moe::moe_down::<f32>;
    moe_down_f16(idx: *const u32, w2: *const u32, s2: *const f16, b2: *const f16, act: *const f32, scores: *const f32, part: *mut f32, n_experts: u32, k: u32, din: u32, dff: u32, bits: u32, group_size: u32, status: *mut u32)
        => crate::moe::moe_down::<f16>;
    moe_down_bf16(idx: *const u32, w2: *const u32, s2: *const Bf16, b2: *const Bf16, act: *const f32, scores: *const f32, part: *mut f32, n_experts: u32, k: u32, din: u32, dff: u32, bits: u32, group_size: u32, status: *mut u32)
        => crate::moe::moe_down::<Bf16>;
    moe_combine_f32(part: *const f32, out: *mut f32, k: u32, din: u32) => crate::moe::moe_combine::<f32>;
    moe_combine_f16(part: *const f32, out: *mut f16, k: u32, din: u32) => crate::moe::moe_combine::<f16>;
    moe_combine_bf16(part: *const f32, out: *mut Bf16, k: u32, din: u32) => crate::moe::moe_combine::<Bf16>;

    mamba1_scan_f32(x: *const f32, dt: *const f32, bm: *const f32, cm: *const f32, a: *const f32, dskip: *const f32, state_in: *const f32, y: *mut f32, state_out: *mut f32, batch: u32, len: u32, dm: u32, n: u32)
        => crate::mamba1_scan::mamba1_scan::<f32>;
    mamba1_scan_f16(x: *const f16, dt: *const f16, bm: *const f16, cm: *const f16, a: *const f32, dskip: *const f16, state_in: *const f32, y: *mut f16, state_out: *mut f32, batch: u32, len: u32, dm: u32, n: u32)
        => crate::mamba1_scan::mamba1_scan::<f16>;
    mamba1_scan_bf16(x: *const Bf16, dt: *const Bf16, bm: *const Bf16, cm: *const Bf16, a: *const f32, dskip: *const Bf16, state_in: *const f32, y: *mut Bf16, state_out: *mut f32, batch: u32, len: u32, dm: u32, n: u32)
        => crate::mamba1_scan::mamba1_scan::<Bf16>;
}

/// The spec of the kernel called `name`.
pub fn spec(name: &str) -> Option<&'static KernelSpec> {
    KERNELS.iter().find(|k| k.name == name)
}
