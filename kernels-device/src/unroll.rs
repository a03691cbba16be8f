//! Hand unrolling. A per-lane array stays in registers only when every index
//! into it is a constant; LLVM declines to fully unroll loops with large bodies,
//! and then the array goes to scratch (AMD) or local memory (NVIDIA). These
//! macros run a block once per index with the index as a literal constant.

/// Runs `$body` with `$i` bound to 0, 1, 2, 3.
#[macro_export]
macro_rules! unroll4 {
    ($i:ident => $body:block) => {{
        {
            let $i: usize = 0;
            $body
        }
        {
            let $i: usize = 1;
            $body
        }
        {
            let $i: usize = 2;
            $body
        }
        {
            let $i: usize = 3;
            $body
        }
    }};
}

/// Runs `$body` with `$i` bound to 0 ..= 4.
#[macro_export]
macro_rules! unroll5 {
    ($i:ident => $body:block) => {{
        $crate::unroll4!($i => $body);
        { let $i: usize = 4; $body }
    }};
}

/// Runs `$body` with `$i` bound to 0 ..= 6.
#[macro_export]
macro_rules! unroll7 {
    ($i:ident => $body:block) => {{
        $crate::unroll5!($i => $body);
        { let $i: usize = 5; $body }
        { let $i: usize = 6; $body }
    }};
}

/// Runs `$body` with `$i` bound to 0 ..= 7.
#[macro_export]
macro_rules! unroll8 {
    ($i:ident => $body:block) => {{
        $crate::unroll7!($i => $body);
        { let $i: usize = 7; $body }
    }};
}
