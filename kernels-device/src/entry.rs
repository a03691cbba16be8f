//! The kernel families and their exported entry points: the one declaration of
//! every kernel's arguments.
//!
//! Each family is declared once, with its instances (one symbol per dtype, or
//! per specialization) and its parameters in signature order (two shorthands:
//! see [`families!`]). Every parameter says how it is passed and used:
//!
//! - `read T [dims]`, `write T [dims]`: a pointer to `T` elements, read only or
//!   written, through which the kernel touches `dims` elements (a product of
//!   expressions over the family's scalar parameters);
//! - `read_nullable`, `write_nullable`: the same, but null is allowed (the
//!   kernel then skips that buffer);
//! - `write_grid T`: a pointer whose extent depends on the launch grid (the
//!   diagnostic kernels); its launcher checks it;
//! - `value T`: a scalar;
//! - `= a | b`: the pointer may be exactly equal to `a` or `b` (an in-place
//!   launch the kernel supports); any other overlap with a written buffer is
//!   refused by the host.
//!
//! Beside its instances, each family declares the most workgroup memory its
//! launches ask for (`workgroup_mem`, from its module of [`crate::geometry`]):
//! a device that cannot give a workgroup that much does not offer the kernel.
//!
//! [`families!`] derives from it:
//! - on GPU targets, an `extern "gpu-kernel"` function per instance (raw
//!   pointers and scalars only: a struct by value would silently become a
//!   pointer on amdgpu);
//! - everywhere, [`KERNELS`]: each instance's parameters with their kind,
//!   access, element size, nullability and aliases, and its most workgroup
//!   memory, which the host packs launches with and checks the code objects
//!   and devices against;
//! - everywhere, one argument struct per family (for example [`XieluArgs`]),
//!   whose fields are the parameters by name (pointers as device addresses),
//!   with the packed values and the extent of every pointer, in signature
//!   order, derived from the declaration;
//! - everywhere, the family's typed launch struct (for example [`Xielu`]),
//!   generic over how its buffers are held ([`Buffers`]), which gives the
//!   argument struct and the bytes each buffer holds;
//! - on the host, [`emulated`], which maps a symbol to a function that reads a
//!   packed argument buffer and runs the same body in the emulator.

use crate::args::{
    Access, ArgKind, ArgValue, BufferExtent, Buffers, ElemName, KernelArg, KernelSpec, Param, ScalarArg,
};
use crate::geometry::moe::values_per_word;
use crate::geometry::{self, add3_layer_norm as add3};
use crate::num::{Bf16, f16};

/// The Rust type of a parameter in the entry point's signature.
macro_rules! param_type {
    (read, $t:ty) => { *const $t };
    (read_nullable, $t:ty) => { *const $t };
    (write, $t:ty) => { *mut $t };
    (write_nullable, $t:ty) => { *mut $t };
    (write_grid, $t:ty) => { *mut $t };
    (value, $t:ty) => { $t };
}

/// The type of a parameter's field in the family's argument struct.
macro_rules! field_type {
    (value, $t:ty) => {
        $t
    };
    ($access:ident, $t:ty) => {
        u64
    };
}

macro_rules! access_of {
    (value) => {
        Access::Value
    };
    (read) => {
        Access::Read
    };
    (read_nullable) => {
        Access::Read
    };
    ($write:ident) => {
        Access::Write
    };
}

macro_rules! nullable_of {
    (read_nullable) => {
        true
    };
    (write_nullable) => {
        true
    };
    ($other:ident) => {
        false
    };
}

macro_rules! kind_of {
    (value, $t:ty) => {
        <$t as KernelArg>::KIND
    };
    ($access:ident, $t:ty) => {
        ArgKind::Ptr
    };
}

macro_rules! value_of {
    (value, $v:expr) => {
        ScalarArg::value($v)
    };
    ($access:ident, $v:expr) => {
        ArgValue::Ptr($v)
    };
}

/// The extent of a pointer parameter (`None` for a value), from its dimensions.
macro_rules! extent_of {
    (value, $ptr:expr, ) => { None };
    (write_grid, $ptr:expr, ) => { None };
    ($access:ident, $ptr:expr, $($dim:expr),+) => {
        Some(BufferExtent { ptr: $ptr, elems: crate::args::extent(&[$(($dim) as u64),+]) })
    };
}

/// The type of a parameter's field in the family's typed launch struct.
macro_rules! typed_field {
    ($b:ident, $lt:lifetime, value, $t:ty) => { $t };
    ($b:ident, $lt:lifetime, read, $t:ty) => { $b::Read<$lt, $t> };
    ($b:ident, $lt:lifetime, read_nullable, $t:ty) => { Option<$b::Read<$lt, $t>> };
    ($b:ident, $lt:lifetime, write_nullable, $t:ty) => { Option<$b::Write<$lt, $t>> };
    ($b:ident, $lt:lifetime, $write:ident, $t:ty) => { $b::Write<$lt, $t> };
}

/// A typed field's raw value and, for a buffer, the bytes it holds.
macro_rules! raw_field {
    ($b:ident, value, $t:ty, $f:expr) => {
        (*$f, None)
    };
    ($b:ident, read, $t:ty, $f:expr) => {{
        let (ptr, bytes) = $b::read::<$t>($f);
        (ptr, Some(bytes))
    }};
    ($b:ident, read_nullable, $t:ty, $f:expr) => {
        match $f {
            Some(buffer) => {
                let (ptr, bytes) = $b::read::<$t>(buffer);
                (ptr, Some(bytes))
            }
            None => (0, None),
        }
    };
    ($b:ident, write_nullable, $t:ty, $f:expr) => {
        match $f {
            Some(buffer) => {
                let (ptr, bytes) = $b::write::<$t>(buffer);
                (ptr, Some(bytes))
            }
            None => (0, None),
        }
    };
    ($b:ident, $write:ident, $t:ty, $f:expr) => {{
        let (ptr, bytes) = $b::write::<$t>($f);
        (ptr, Some(bytes))
    }};
}

/// One instance of a family: its entry point, its emulated entry and its spec,
/// in a module named after the symbol (where `T` is the instance's dtype).
macro_rules! instance {
    ($sym:ident, $t:ty, $body:path, $wm:expr, {
        $( $pn:ident : $access:ident $pt:ty $( [ $($dim:expr),+ ] )? $( = $($alias:ident)|+ )? ),* $(,)?
    }) => {
        #[allow(non_snake_case, unused_imports, clippy::too_many_arguments)]
        pub mod $sym {
            use super::*;
            /// The element type of this instance.
            pub type T = $t;

            // The test-only object of planted races (feature `race-plants`)
            // carries none of the shipped entry points.
            #[cfg(all(any(target_arch = "amdgpu", target_arch = "nvptx64"), not(feature = "race-plants")))]
            #[unsafe(no_mangle)]
            #[allow(unused_unsafe)]
            pub unsafe extern "gpu-kernel" fn $sym($($pn: param_type!($access, $pt)),*) {
                unsafe { $body($($pn),*) }
            }

            /// The host version of the entry point: reads a packed argument
            /// buffer (see [`crate::args::ArgReader`]) and runs the kernel body
            /// for the calling emulator lane.
            ///
            /// # Safety
            /// `args` was packed for this kernel, and every pointer in it is
            /// valid for what the kernel does with it.
            #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
            #[allow(unused_mut, unused_variables, unused_unsafe)]
            pub unsafe fn emulated(args: *const u8) {
                unsafe {
                    let mut reader = crate::args::ArgReader::new(args);
                    $( let $pn: param_type!($access, $pt) = reader.next(); )*
                    $body($($pn),*)
                }
            }

            /// The instance's parameters, from the family's declaration.
            pub const SPEC: KernelSpec = KernelSpec {
                name: stringify!($sym),
                params: &[$( Param {
                    name: stringify!($pn),
                    kind: kind_of!($access, $pt),
                    access: access_of!($access),
                    elem_bytes: core::mem::size_of::<$pt>(),
                    elem: <$pt as ElemName>::NAME,
                    nullable: nullable_of!($access),
                    may_equal: &[$($(stringify!($alias)),+)?],
                } ),*],
                most_workgroup_mem_bytes: $wm,
            };
        }
    };
}

/// The argument struct of a family: one field per parameter, by name.
macro_rules! family_args {
    ($(#[$doc:meta])* $args:ident, [$($sym:ident),*], {
        $( $pn:ident : $access:ident $pt:ty $( [ $($dim:expr),+ ] )? $( = $($alias:ident)|+ )? ),* $(,)?
    }) => {
        $(#[$doc])*
        ///
        /// Pointer fields are device addresses (0 for null); the others are the
        /// kernel's scalars. The field order is the kernel's signature.
        #[derive(Clone, Copy, Debug, Default, PartialEq)]
        pub struct $args {
            $( pub $pn: field_type!($access, $pt), )*
        }

        impl $args {
            /// The symbols of the family's instances.
            pub const INSTANCES: &'static [&'static str] = &[$(stringify!($sym)),*];
            /// Parameters in signature order.
            pub const ARITY: usize = <[&str]>::len(&[$(stringify!($pn)),*]);

            /// The packed values, in signature order.
            pub fn values(&self) -> [ArgValue; Self::ARITY] {
                [$( value_of!($access, self.$pn) ),*]
            }

            /// The extent of every pointer parameter with declared dimensions
            /// (`None` for values and grid-sized pointers), computed from the
            /// scalars as the declaration says.
            #[allow(unused_variables, clippy::unnecessary_cast)]
            pub fn extents(&self) -> [Option<BufferExtent>; Self::ARITY] {
                let Self { $($pn),* } = *self;
                [$( extent_of!($access, self.$pn, $($($dim),+)?) ),*]
            }
        }
    };
}

/// The typed launch struct of a family, where the declaration names one: one
/// field per parameter, by name, each buffer a `B::Read` or `B::Write` of its
/// element type (`Option` where null is allowed), each scalar itself.
macro_rules! typed_struct {
    ((), $args:ident, $params:tt) => {};
    (($typed:ident $(<$tp:ident>)?), $args:ident, {
        $( $pn:ident : $access:ident $pt:ty $( [ $($dim:expr),+ ] )? $( = $($alias:ident)|+ )? ),* $(,)?
    }) => {
        #[doc = concat!("The typed launch form of [`", stringify!($args), "`], field for field: each buffer as `B` holds it ")]
        #[doc = "(see [`Buffers`]), each scalar itself. A parameter declared as an alias of another (an in-place"]
        #[doc = "launch) cannot be both a shared and an exclusive borrow: in-place launches use the raw form."]
        pub struct $typed<'a, $($tp: 'a,)? B: Buffers> {
            $( pub $pn: typed_field!(B, 'a, $access, $pt), )*
        }

        impl<'a, $($tp: 'a,)? B: Buffers> $typed<'a, $($tp,)? B> {
            /// The raw argument struct, and the bytes each buffer holds, in
            /// signature order (`None` for a scalar or an absent buffer).
            pub fn raw(&self) -> ($args, [Option<usize>; $args::ARITY]) {
                $( let $pn = raw_field!(B, $access, $pt, &self.$pn); )*
                ($args { $( $pn: $pn.0 ),* }, [$( $pn.1 ),*])
            }
        }
    };
}

/// The declaration's grammar: `family Args (Typed<T>) { instances { ... }
/// workgroup_mem(bytes) params { ... } }` per family, where `Typed` names the
/// typed launch struct (`<T>` where a parameter is of the activation type; `()`
/// for none) and `bytes` is the most dynamic workgroup memory the host's
/// launches of an instance ask for, from the family's geometry (an expression
/// in the instance's `T`). Two shorthands are read first (`@read`) and written
/// out in full before anything is derived (`@expand`):
/// - an instance line `a_f32, a_f16, a_bf16 => body;` is one instance per
///   activation dtype, `a_f32: f32 => body;` and so on, in that order;
/// - `params { ... } moe_shape_params(n_experts, k, din, dff, bits, group_size,
///   status)`: the parameters every routed-expert GEMV (`moe_fc1_relu2`,
///   `moe_down`) ends with, appended after the listed ones under these names
///   (given here, so that the dimensions can name them): the layer's shape (the
///   host's `MoeShape`), six `value u32`, and the status word, `write_nullable
///   u32 [1]`.
macro_rules! families {
    // A family whose parameters end with the MoE shape: appended, then that
    // family is read again.
    (@read [$($done:tt)*]
        $(#[$doc:meta])*
        family $args:ident $typed:tt {
            instances $inst:tt
            workgroup_mem($wm:expr)
            params { $($p:tt)* }
            moe_shape_params($e:ident, $k:ident, $din:ident, $dff:ident, $bits:ident, $gs:ident, $status:ident)
        }
        $($rest:tt)*
    ) => {
        families!(@read [$($done)*]
            $(#[$doc])*
            family $args $typed {
                instances $inst
                workgroup_mem($wm)
                params {
                    $($p)*
                    $e: value u32,
                    $k: value u32,
                    $din: value u32,
                    $dff: value u32,
                    $bits: value u32,
                    $gs: value u32,
                    $status: write_nullable u32 [1],
                }
            }
            $($rest)*
        );
    };
    // `a_f32, a_f16, a_bf16 => body;`: one instance per activation dtype, in
    // that order.
    (@read [$($done:tt)*]
        $(#[$doc:meta])*
        family $args:ident $typed:tt {
            instances { $( $f32:ident, $f16:ident, $bf16:ident => $body:path; )+ }
            workgroup_mem($wm:expr)
            params $params:tt
        }
        $($rest:tt)*
    ) => {
        families!(@read [$($done)*
            $(#[$doc])*
            family $args $typed {
                instances { $( $f32: f32 => $body; $f16: f16 => $body; $bf16: Bf16 => $body; )+ }
                workgroup_mem($wm)
                params $params
            }
        ] $($rest)*);
    };
    (@read [$($done:tt)*]
        $(#[$doc:meta])*
        family $args:ident $typed:tt { instances $inst:tt workgroup_mem($wm:expr) params $params:tt }
        $($rest:tt)*
    ) => {
        families!(@read [$($done)* $(#[$doc])* family $args $typed { instances $inst workgroup_mem($wm) params $params }] $($rest)*);
    };
    (@read [$($done:tt)*]) => {
        families!(@expand $($done)*);
    };
    (@expand $(
        $(#[$doc:meta])*
        family $args:ident $typed:tt {
            instances { $( $sym:ident : $t:ty => $body:path; )+ }
            workgroup_mem($wm:expr)
            params $params:tt
        }
    )*) => {
        $(
            $( instance!($sym, $t, $body, $wm, $params); )+
            family_args!($(#[$doc])* $args, [$($sym),+], $params);
            typed_struct!($typed, $args, $params);
        )*

        /// Every exported kernel, with its explicit arguments in order.
        pub const KERNELS: &[KernelSpec] = &[$($($sym::SPEC,)+)*];

        // The host packs a launch in arrays of MAX_PARAMS entries.
        const _: () = {
            let mut i = 0;
            while i < KERNELS.len() {
                assert!(KERNELS[i].params.len() <= crate::args::MAX_PARAMS, "a kernel takes more than MAX_PARAMS arguments");
                i += 1;
            }
        };

        /// The host version of an entry point: reads a packed argument buffer
        /// and runs the kernel body for the calling emulator lane.
        #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
        pub type EmulatedEntry = unsafe fn(*const u8);

        /// The host version of the entry point called `name`, if there is one.
        #[cfg(not(any(target_arch = "amdgpu", target_arch = "nvptx64")))]
        pub fn emulated(name: &str) -> Option<EmulatedEntry> {
            match name {
                $($( stringify!($sym) => Some($sym::emulated as EmulatedEntry), )+)*
                _ => None,
            }
        }
    };
    ($($families:tt)*) => {
        families!(@read [] $($families)*);
    };
}

families! {
    /// `probe`: each thread writes what it sees of the wave primitives.
    family ProbeArgs (Probe) {
        instances { probe: u32 => crate::probe::probe; }
        workgroup_mem(geometry::probe::WORKGROUP_MEM_BYTES)
        params { out: write_grid u32 }
    }

    /// `empty`: the launch floor.
    family EmptyArgs () {
        instances { empty: u32 => crate::probe::empty; }
        workgroup_mem(0)
        params {}
    }

    /// `read_stream`: the read-bandwidth yardstick (one fold word per thread).
    family ReadStreamArgs (ReadStream) {
        instances { read_stream: u32 => crate::probe::read_stream; }
        workgroup_mem(0)
        params { src: read u32 [quads, 4], quads: value u64, out: write_grid u32 }
    }

    /// `xielu`: `out[i] = xielu(x[i])` for `i < n`.
    family XieluArgs (Xielu<T>) {
        instances { xielu_f32, xielu_f16, xielu_bf16 => crate::xielu::xielu::<T>; }
        workgroup_mem(geometry::xielu::most_workgroup_mem_bytes::<T>())
        params {
            x: read T [n],
            out: write T [n] = x,
            n: value u64,
            alpha_p: value f32,
            alpha_n: value f32,
            beta: value f32,
            eps: value f32,
        }
    }

    /// `add3_layer_norm`: `x_new = a + b + x`, `h = LayerNorm(x_new; w, bias, eps)`,
    /// one row per workgroup. Each thread reads `a`, `b`, `x` at the positions it
    /// later writes, and keeps `x_new` in registers, so either output may be
    /// exactly one of the three row inputs; `w` and `bias` are read by every row.
    family Add3LayerNormArgs (Add3LayerNorm<T>) {
        instances {
            add3_layer_norm_f32, add3_layer_norm_f16, add3_layer_norm_bf16
                => crate::add3_layer_norm::add3_layer_norm::<T, { add3::CHUNKS }, { add3::CHUNKS_AHEAD }>;
            add3_layer_norm_d4096_f32, add3_layer_norm_d4096_f16, add3_layer_norm_d4096_bf16
                => crate::add3_layer_norm::add3_layer_norm::<T, { add3::SHORT_CHUNKS }, { add3::SHORT_CHUNKS_AHEAD }>;
        }
        workgroup_mem(add3::WORKGROUP_MEM_BYTES)
        params {
            a: read T [rows, d],
            b: read T [rows, d],
            x: read T [rows, d],
            w: read T [d],
            bias: read_nullable T [d],
            x_new: write T [rows, d] = a | b | x,
            h: write T [rows, d] = a | b | x,
            rows: value u32,
            d: value u32,
            eps: value f32,
        }
    }

    /// `moe_fc1_relu2`: `act[k, f] = relu(x . w1[idx[k], f])^2` for every slot k.
    family MoeFc1Relu2Args (MoeFc1Relu2<T>) {
        instances { moe_fc1_relu2_f32, moe_fc1_relu2_f16, moe_fc1_relu2_bf16 => crate::moe::moe_fc1_relu2::<T, { crate::moe::TENSOR_CORES }>; }
        workgroup_mem(geometry::moe::MOST_WORKGROUP_MEM_BYTES)
        params {
            x: read T [din],
            idx: read u32 [k],
            w1: read u32 [n_experts, dff, din / values_per_word(bits)],
            s1: read T [n_experts, dff, din / group_size],
            b1: read T [n_experts, dff, din / group_size],
            act: write f32 [k, dff],
        } moe_shape_params(n_experts, k, din, dff, bits, group_size, status)
    }

    /// `moe_gateup`: `act[k, f] = a(x . wg[idx[k], f]) * (x . wu[idx[k], f])` for
    /// every slot k, `a` SiLU or GELU's tanh form (`activation`, see `moe::gated`).
    family MoeGateUpArgs (MoeGateUp<T>) {
        instances { moe_gateup_f32, moe_gateup_f16, moe_gateup_bf16 => crate::moe::moe_gateup::<T>; }
        workgroup_mem(geometry::moe::MOST_WORKGROUP_MEM_BYTES)
        params {
            x: read T [din],
            idx: read u32 [k],
            wg: read u32 [n_experts, dff, din / values_per_word(bits)],
            sg: read T [n_experts, dff, din / group_size],
            bg: read T [n_experts, dff, din / group_size],
            wu: read u32 [n_experts, dff, din / values_per_word(bits)],
            su: read T [n_experts, dff, din / group_size],
            bu: read T [n_experts, dff, din / group_size],
            act: write f32 [k, dff],
            activation: value u32,
        } moe_shape_params(n_experts, k, din, dff, bits, group_size, status)
    }

    /// `moe_down`: `part[k, h] = scores[k] * (act[k] . w2[idx[k], h])` for every
    /// slot k; `moe_down6_*` for 6-bit codes, `moe_down_*` for 4 and 8 bits.
    family MoeDownArgs (MoeDown<T>) {
        instances {
            moe_down_f32, moe_down_f16, moe_down_bf16 => crate::moe::moe_down::<T, { crate::moe::TENSOR_CORES }>;
            moe_down6_f32, moe_down6_f16, moe_down6_bf16 => crate::moe::moe_down6::<T>;
        }
        workgroup_mem(geometry::moe::MOST_WORKGROUP_MEM_BYTES)
        params {
            idx: read u32 [k],
            w2: read u32 [n_experts, din, dff as u64 * bits as u64 / 32],
            s2: read T [n_experts, din, dff / group_size],
            b2: read T [n_experts, din, dff / group_size],
            act: read f32 [k, dff],
            scores: read f32 [k],
            part: write f32 [k, din],
        } moe_shape_params(n_experts, k, din, dff, bits, group_size, status)
    }

    /// `moe_combine`: `out[h] = T(sum_k part[k, h])`.
    family MoeCombineArgs (MoeCombine<T>) {
        instances { moe_combine_f32, moe_combine_f16, moe_combine_bf16 => crate::moe::moe_combine::<T>; }
        workgroup_mem(0)
        params {
            part: read f32 [k, din],
            out: write T [din],
            k: value u32,
            din: value u32,
        }
    }

    /// `moe_gateup_batch`: `moe_gateup` for `m` tokens of `k` slots each, one
    /// slot a workgroup; id `n_experts` names the shared expert (`wgs` to
    /// `bus`) where the launch has one.
    family MoeGateUpBatchArgs (MoeGateUpBatch<T>) {
        instances { moe_gateup_batch_f32, moe_gateup_batch_f16, moe_gateup_batch_bf16 => crate::moe::batch::moe_gateup_batch::<T>; }
        workgroup_mem(geometry::moe::MOST_WORKGROUP_MEM_BYTES)
        params {
            x: read T [m, din],
            idx: read u32 [m, k],
            wg: read u32 [n_experts, dff, din / values_per_word(bits)],
            sg: read T [n_experts, dff, din / group_size],
            bg: read T [n_experts, dff, din / group_size],
            wu: read u32 [n_experts, dff, din / values_per_word(bits)],
            su: read T [n_experts, dff, din / group_size],
            bu: read T [n_experts, dff, din / group_size],
            wgs: read_nullable u32 [dff, din / values_per_word(bits)],
            sgs: read_nullable T [dff, din / group_size],
            bgs: read_nullable T [dff, din / group_size],
            wus: read_nullable u32 [dff, din / values_per_word(bits)],
            sus: read_nullable T [dff, din / group_size],
            bus: read_nullable T [dff, din / group_size],
            act: write f32 [m, k, dff],
            activation: value u32,
            m: value u32,
        } moe_shape_params(n_experts, k, din, dff, bits, group_size, status)
    }

    /// `moe_gateup_routed`: `moe_topk` and `moe_gateup_batch` in one launch,
    /// for the block: each slot's workgroups select its token's experts from
    /// the logits, and its first stores the slot's id and score. One instance
    /// per most experts (`_e128` to `_e1024`: 1, 2, 4 or 8 register groups a
    /// lane in the selection), so that the selection's registers for many
    /// experts do not cost the gate/up of few their occupancy.
    family MoeGateUpRoutedArgs (MoeGateUpRouted<T>) {
        instances {
            moe_gateup_routed_e128_f32, moe_gateup_routed_e128_f16, moe_gateup_routed_e128_bf16
                => crate::moe::batch::moe_gateup_routed::<T, 1>;
            moe_gateup_routed_e256_f32, moe_gateup_routed_e256_f16, moe_gateup_routed_e256_bf16
                => crate::moe::batch::moe_gateup_routed::<T, 2>;
            moe_gateup_routed_e512_f32, moe_gateup_routed_e512_f16, moe_gateup_routed_e512_bf16
                => crate::moe::batch::moe_gateup_routed::<T, 4>;
            moe_gateup_routed_e1024_f32, moe_gateup_routed_e1024_f16, moe_gateup_routed_e1024_bf16
                => crate::moe::batch::moe_gateup_routed::<T, 8>;
        }
        workgroup_mem(geometry::moe::MOST_WORKGROUP_MEM_BYTES)
        params {
            x: read T [m, din],
            logits: read f32 [m, n_experts],
            gate_logits: read_nullable f32 [m],
            ids: write u32 [m, k + shared],
            scores: write f32 [m, k + shared],
            wg: read u32 [n_experts, dff, din / values_per_word(bits)],
            sg: read T [n_experts, dff, din / group_size],
            bg: read T [n_experts, dff, din / group_size],
            wu: read u32 [n_experts, dff, din / values_per_word(bits)],
            su: read T [n_experts, dff, din / group_size],
            bu: read T [n_experts, dff, din / group_size],
            wgs: read_nullable u32 [dff, din / values_per_word(bits)],
            sgs: read_nullable T [dff, din / group_size],
            bgs: read_nullable T [dff, din / group_size],
            wus: read_nullable u32 [dff, din / values_per_word(bits)],
            sus: read_nullable T [dff, din / group_size],
            bus: read_nullable T [dff, din / group_size],
            act: write f32 [m, k + shared, dff],
            activation: value u32,
            m: value u32,
            renorm: value u32,
            shared: value u32,
            n_experts: value u32,
            k: value u32,
            din: value u32,
            dff: value u32,
            bits: value u32,
            group_size: value u32,
        }
    }

    /// `moe_down_batch`: `moe_down` (4 and 8 bits) for `m` tokens of `k` slots
    /// each, one slot a workgroup; id `n_experts` names the shared expert
    /// (`w2s` to `b2s`) where the launch has one.
    family MoeDownBatchArgs (MoeDownBatch<T>) {
        instances { moe_down_batch_f32, moe_down_batch_f16, moe_down_batch_bf16 => crate::moe::batch::moe_down_batch::<T, { crate::moe::TENSOR_CORES }>; }
        workgroup_mem(geometry::moe::MOST_WORKGROUP_MEM_BYTES)
        params {
            idx: read u32 [m, k],
            w2: read u32 [n_experts, din, dff / values_per_word(bits)],
            s2: read T [n_experts, din, dff / group_size],
            b2: read T [n_experts, din, dff / group_size],
            w2s: read_nullable u32 [din, dff / values_per_word(bits)],
            s2s: read_nullable T [din, dff / group_size],
            b2s: read_nullable T [din, dff / group_size],
            act: read f32 [m, k, dff],
            scores: read f32 [m, k],
            part: write f32 [m, k, din],
            m: value u32,
        } moe_shape_params(n_experts, k, din, dff, bits, group_size, status)
    }

    /// `moe_down_combine`: `moe_down_batch`, and in the same launch the last
    /// of a token's workgroups in each row block to finish sums the token's
    /// rows of the block into `out` as `moe_combine_batch` does; `arrivals`
    /// (zero before the launch) counts them.
    family MoeDownCombineArgs (MoeDownCombine<T>) {
        instances { moe_down_combine_f32, moe_down_combine_f16, moe_down_combine_bf16 => crate::moe::batch::moe_down_combine::<T, { crate::moe::TENSOR_CORES }>; }
        workgroup_mem(geometry::moe::MOST_WORKGROUP_MEM_BYTES)
        params {
            idx: read u32 [m, k],
            w2: read u32 [n_experts, din, dff / values_per_word(bits)],
            s2: read T [n_experts, din, dff / group_size],
            b2: read T [n_experts, din, dff / group_size],
            w2s: read_nullable u32 [din, dff / values_per_word(bits)],
            s2s: read_nullable T [din, dff / group_size],
            b2s: read_nullable T [din, dff / group_size],
            act: read f32 [m, k, dff],
            scores: read f32 [m, k],
            part: write f32 [m, k, din],
            out: write T [m, din],
            arrivals: write u32 [m, geometry::moe::workgroups(din)],
            m: value u32,
        } moe_shape_params(n_experts, k, din, dff, bits, group_size, status)
    }

    /// `moe_combine_batch`: `out[t, h] = T(sum_k part[t, k, h])` for `m` tokens.
    family MoeCombineBatchArgs (MoeCombineBatch<T>) {
        instances { moe_combine_batch_f32, moe_combine_batch_f16, moe_combine_batch_bf16 => crate::moe::batch::moe_combine_batch::<T>; }
        workgroup_mem(0)
        params {
            part: read f32 [m, k, din],
            out: write T [m, din],
            m: value u32,
            k: value u32,
            din: value u32,
        }
    }

    /// `moe_router_logits`: `logits[t, e] = x[t] . wr[e]` (f32) for `m` tokens,
    /// and the shared expert's gate `gate_logits[t] = x[t] . ws` where the
    /// launch has one. Workgroup 0 zeroes `arrivals` (null with 0) for the
    /// block's `moe_down_combine`.
    family MoeRouterLogitsArgs (MoeRouterLogits<T>) {
        instances { moe_router_logits_f32, moe_router_logits_f16, moe_router_logits_bf16 => crate::moe::router::moe_router_logits::<T>; }
        workgroup_mem(geometry::moe_router::LOGITS_WORKGROUP_MEM_BYTES)
        params {
            x: read T [m, din],
            wr: read T [n_experts, din],
            ws: read_nullable T [din],
            logits: write f32 [m, n_experts],
            gate_logits: write_nullable f32 [m],
            m: value u32,
            n_experts: value u32,
            din: value u32,
            arrivals: write_nullable u32 [n_arrivals],
            n_arrivals: value u32,
        }
    }

    /// `moe_router_logits_q`: `logits[t, e] = x[t] . dequantize(wq, sq, bq)[e]`
    /// (f32) for `m` tokens, the router quantized as MLX quantizes a linear
    /// layer; the shared expert's gate (quantized the same way) as
    /// `moe_router_logits`'s.
    family MoeRouterLogitsQArgs (MoeRouterLogitsQ<T>) {
        instances { moe_router_logits_q_f32, moe_router_logits_q_f16, moe_router_logits_q_bf16 => crate::moe::router::moe_router_logits_q::<T>; }
        workgroup_mem(geometry::moe_router::LOGITS_WORKGROUP_MEM_BYTES)
        params {
            x: read T [m, din],
            wq: read u32 [n_experts, din / values_per_word(bits)],
            sq: read T [n_experts, din / group_size],
            bq: read T [n_experts, din / group_size],
            wsq: read_nullable u32 [din / values_per_word(bits)],
            ssq: read_nullable T [din / group_size],
            bsq: read_nullable T [din / group_size],
            logits: write f32 [m, n_experts],
            gate_logits: write_nullable f32 [m],
            m: value u32,
            n_experts: value u32,
            din: value u32,
            bits: value u32,
            group_size: value u32,
            arrivals: write_nullable u32 [n_arrivals],
            n_arrivals: value u32,
        }
    }

    /// `moe_topk`: per token, the softmax of its logits and the `k` most
    /// probable experts with their (optionally renormalized) probabilities,
    /// then, with `shared` 1, the shared expert's slot (id `n_experts`, score
    /// `sigmoid(gate_logits[t])`).
    family MoeTopKArgs (MoeTopK) {
        instances { moe_topk: f32 => crate::moe::router::moe_topk; }
        workgroup_mem(geometry::moe_router::TOPK_WORKGROUP_MEM_BYTES)
        params {
            logits: read f32 [m, n_experts],
            gate_logits: read_nullable f32 [m],
            ids: write u32 [m, k + shared],
            scores: write f32 [m, k + shared],
            m: value u32,
            n_experts: value u32,
            k: value u32,
            renorm: value u32,
            shared: value u32,
        }
    }

    /// `mamba1_scan`: the selective scan. Each state element is read once, by
    /// the lane that owns it, before that lane writes it, so `state_out` may be
    /// exactly `state_in` (an in-place update).
    family Mamba1ScanArgs (Mamba1Scan<T>) {
        instances { mamba1_scan_f32, mamba1_scan_f16, mamba1_scan_bf16 => crate::mamba1_scan::mamba1_scan::<T>; }
        workgroup_mem(geometry::mamba1_scan::MOST_WORKGROUP_MEM_BYTES)
        params {
            x: read T [batch, len, dm],
            dt: read T [batch, len, dm],
            bm: read T [batch, len, n],
            cm: read T [batch, len, n],
            a: read f32 [dm, n],
            dskip: read T [dm],
            state_in: read f32 [batch, dm, n],
            y: write T [batch, len, dm],
            state_out: write f32 [batch, dm, n] = state_in,
            batch: value u32,
            len: value u32,
            dm: value u32,
            n: value u32,
        }
    }
}

/// The [`KernelSpec`] of the kernel called `name`.
pub fn spec(name: &str) -> Option<&'static KernelSpec> {
    KERNELS.iter().find(|k| k.name == name)
}
