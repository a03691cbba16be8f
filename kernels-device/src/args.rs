//! Kernel argument kinds: how each argument of an entry point is laid out in the
//! kernel argument buffer. The host packs arguments with the same rules, and
//! checks them against the code object's metadata before a launch.

/// The kind of one kernel argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgKind {
    /// A device pointer to global memory (8 bytes).
    Ptr,
    U32,
    U64,
    F32,
}

impl ArgKind {
    /// Size in bytes; arguments are aligned to their size.
    pub const fn size(self) -> usize {
        match self {
            ArgKind::Ptr | ArgKind::U64 => 8,
            ArgKind::U32 | ArgKind::F32 => 4,
        }
    }
}

/// One named argument of a kernel entry point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: &'static str,
    pub kind: ArgKind,
}

/// An exported kernel: its symbol and its explicit arguments, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSpec {
    pub name: &'static str,
    pub params: &'static [Param],
}

impl KernelSpec {
    /// Byte offset of each argument in the packed buffer (C layout: each argument
    /// aligned to its size), and the buffer's total size.
    pub fn layout(&self) -> (impl Iterator<Item = usize> + '_, usize) {
        let mut offsets = [0usize; 32];
        let mut end = 0usize;
        for (i, p) in self.params.iter().enumerate() {
            let size = p.kind.size();
            let offset = end.next_multiple_of(size);
            offsets[i] = offset;
            end = offset + size;
        }
        (offsets.into_iter().take(self.params.len()), end)
    }
}

/// A Rust type that may be a kernel argument.
pub trait KernelArg: Copy {
    const KIND: ArgKind;
}

impl<T> KernelArg for *const T {
    const KIND: ArgKind = ArgKind::Ptr;
}
impl<T> KernelArg for *mut T {
    const KIND: ArgKind = ArgKind::Ptr;
}
impl KernelArg for u32 {
    const KIND: ArgKind = ArgKind::U32;
}
impl KernelArg for u64 {
    const KIND: ArgKind = ArgKind::U64;
}
impl KernelArg for f32 {
    const KIND: ArgKind = ArgKind::F32;
}

/// Reads arguments, in order, from a buffer packed with [`KernelSpec::layout`]'s
/// rules. Used by the emulator's entry points.
pub struct ArgReader {
    base: *const u8,
    offset: usize,
}

impl ArgReader {
    /// # Safety
    /// `base` points to a buffer packed for the kernel whose arguments are read.
    pub unsafe fn new(base: *const u8) -> Self {
        ArgReader { base, offset: 0 }
    }

    /// # Safety
    /// The next argument in the buffer has type `T`.
    pub unsafe fn next<T: KernelArg>(&mut self) -> T {
        let size = T::KIND.size();
        let offset = self.offset.next_multiple_of(size);
        self.offset = offset + size;
        unsafe { (self.base.add(offset) as *const T).read_unaligned() }
    }
}
