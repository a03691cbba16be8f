//! The device toolkit: the one aligned vector type and the one unroll macro
//! that every kernel uses.
//!
//! **Vectors.** A wide memory access is a read or write of a [`Vector`]: `N`
//! values of `T` in a struct aligned to `A` ([`Align16`] unless named), so that
//! the compiler emits one 16-byte (or 8-byte) load or store, or several for a
//! vector larger than 16 bytes. Casting a pointer to `*const Vector<..>` asserts
//! that alignment: test the address first (every kernel has a scalar path for
//! buffers that are not aligned). The aliases name the shapes used most.
//!
//! **Unrolling.** A per-lane array stays in registers only when every index into
//! it is a constant; LLVM declines to fully unroll loops with large bodies, and
//! then the array goes to scratch (AMD) or local memory (NVIDIA). [`unroll!`](crate::unroll!)
//! runs a block once per index with the index as a literal constant.

/// 16-byte alignment: one `global_load_b128` / `ld.global.v4` per 16 bytes.
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub struct Align16;

/// 8-byte alignment: one `global_load_b64` / `ld.global.v2` per 8 bytes.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct Align8;

/// `N` values of `T`, aligned to the alignment of `A` (a marker, [`Align16`] or
/// [`Align8`]): the unit of a vector access. The values are field `.0`; the
/// zero-length array only carries the alignment (it adds no bytes when the
/// values' size is a multiple of it, as for every alias below).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Vector<T, const N: usize, A = Align16>(pub [T; N], [A; 0]);

impl<T, const N: usize, A> Vector<T, N, A> {
    /// The vector of these values.
    #[inline(always)]
    pub const fn new(values: [T; N]) -> Self {
        Vector(values, [])
    }
}

/// Four words: one 16-byte access.
pub type U32x4 = Vector<u32, 4>;
/// Two words: one 8-byte access.
pub type U32x2 = Vector<u32, 2, Align8>;
/// Four floats: one 16-byte access.
pub type F32x4 = Vector<f32, 4>;

const _: () = {
    use core::mem::{align_of, size_of};
    assert!(size_of::<U32x4>() == 16 && align_of::<U32x4>() == 16);
    assert!(size_of::<U32x2>() == 8 && align_of::<U32x2>() == 8);
    assert!(size_of::<F32x4>() == 16 && align_of::<F32x4>() == 16);
    assert!(size_of::<Vector<u16, 8>>() == 16 && align_of::<Vector<u16, 8>>() == 16);
    assert!(size_of::<Vector<f32, 8>>() == 32 && align_of::<Vector<f32, 8>>() == 16);
};

/// Hand unrolling: runs `$body` once per index, the index bound to a literal
/// `usize`, so that every index into a per-lane array is a constant.
///
/// - `unroll!(i in 0..8 => { .. })`: `i` = 0, 1, .., 7 (the count a literal, 1 to 8).
/// - `unroll!(i in 0..COUNT => { .. })`: the count a constant expression (a
///   `const` item, a const generic, arithmetic on them) of at most 8, checked at
///   compile time: indices 0 to 7, each run only `if i < COUNT`, which the
///   compiler prunes, so the code is that of the literal count.
/// - `unroll!(i, const C in 0..8 => { .. })`: also binds `const C: u32` to the
///   same index (for const generic arguments such as a source lane).
/// - `unroll!(i in 0..n, at most 8 => { .. })`: for a count `n` known at compile
///   time (a constant or a const generic, at most the literal): indices 0 to 7,
///   each run only `if i < n`, which the compiler prunes.
#[macro_export]
macro_rules! unroll {
    ($i:ident in 0..$n:tt => $body:block) => {
        $crate::unroll!(@indices $n, @each $i, $body)
    };
    ($i:ident, const $c:ident in 0..$n:tt => $body:block) => {
        $crate::unroll!(@indices $n, @each_const $i, $c, $body)
    };
    ($i:ident in 0..$n:expr, at most $max:tt => $body:block) => {{
        const { assert!($n <= $max, "unroll!: the count exceeds its bound") };
        $crate::unroll!(@indices $max, @each_if $i, $n, $body)
    }};
    ($i:ident in 0..$n:expr => $body:block) => {
        $crate::unroll!(@indices ($n), @each $i, $body)
    };

    // The index lists: `$n` literal to `0 1 .. n-1`.
    (@indices 1, $($rest:tt)*) => { $crate::unroll!($($rest)* ; 0) };
    (@indices 2, $($rest:tt)*) => { $crate::unroll!($($rest)* ; 0 1) };
    (@indices 3, $($rest:tt)*) => { $crate::unroll!($($rest)* ; 0 1 2) };
    (@indices 4, $($rest:tt)*) => { $crate::unroll!($($rest)* ; 0 1 2 3) };
    (@indices 5, $($rest:tt)*) => { $crate::unroll!($($rest)* ; 0 1 2 3 4) };
    (@indices 6, $($rest:tt)*) => { $crate::unroll!($($rest)* ; 0 1 2 3 4 5) };
    (@indices 7, $($rest:tt)*) => { $crate::unroll!($($rest)* ; 0 1 2 3 4 5 6) };
    (@indices 8, $($rest:tt)*) => { $crate::unroll!($($rest)* ; 0 1 2 3 4 5 6 7) };
    // A count that is not a literal: a constant expression, at most 8.
    (@indices $n:tt, @each $i:ident, $body:block) => {{
        const { assert!($n <= 8, "unroll!: a constant count above 8") };
        $crate::unroll!(@indices 8, @each_if $i, $n, $body)
    }};

    // One block per index.
    (@each $i:ident, $body:block ; $($k:literal)*) => {{
        $( { let $i: usize = $k; $body } )*
    }};
    (@each_const $i:ident, $c:ident, $body:block ; $($k:literal)*) => {{
        $( { let $i: usize = $k; const $c: u32 = $k; $body } )*
    }};
    (@each_if $i:ident, $n:expr, $body:block ; $($k:literal)*) => {{
        $( { let $i: usize = $k; if $i < $n $body } )*
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unroll_visits_each_index_once_in_order() {
        let mut seen = [0usize; 8];
        let mut count = 0;
        crate::unroll!(i in 0..5 => {
            seen[count] = i;
            count += 1;
        });
        assert_eq!((count, &seen[..5]), (5, &[0, 1, 2, 3, 4][..]));

        let mut consts = [0u32; 8];
        crate::unroll!(i, const C in 0..8 => {
            consts[i] = C;
        });
        assert_eq!(consts, [0, 1, 2, 3, 4, 5, 6, 7]);

        const N: usize = 3;
        let mut guarded = 0;
        crate::unroll!(i in 0..N, at most 7 => {
            guarded += 1 << i;
        });
        assert_eq!(guarded, 0b111);

        const HALF: usize = 8 / 2;
        let mut by_const = [0usize; 8];
        let mut calls = 0;
        crate::unroll!(i in 0..HALF + 1 => {
            by_const[i] = 10 + i;
            calls += 1;
        });
        assert_eq!((calls, by_const), (5, [10, 11, 12, 13, 14, 0, 0, 0]));
    }

    #[test]
    fn vectors_have_the_layout_of_their_values() {
        let v = U32x2::new([1, 2]);
        assert_eq!(v.0, [1, 2]);
        let words = [7u32; 8];
        let p = words.as_ptr();
        if (p as usize).is_multiple_of(align_of::<U32x4>()) {
            assert_eq!(unsafe { (p as *const U32x4).read() }.0, [7; 4]);
        }
        assert_eq!(size_of::<Vector<u16, 8>>(), 16);
    }
}
