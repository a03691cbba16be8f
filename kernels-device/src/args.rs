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

/// How a kernel uses the memory a pointer argument points to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Not a pointer: a value passed in the argument buffer.
    Value,
    /// Read only.
    Read,
    /// Written (and possibly read).
    Write,
}

/// One named argument of a kernel entry point, as its family declares it
/// (see [`crate::entry`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: &'static str,
    pub kind: ArgKind,
    /// For pointers, what the kernel does with the memory; [`Access::Value`] otherwise.
    pub access: Access,
    /// For pointers, the size of one element, which is also the alignment the
    /// pointer needs; the size of the value otherwise.
    pub elem_bytes: usize,
    /// The element type's name (`f32`, `bf16`, `u32`), for messages.
    pub elem: &'static str,
    /// A null pointer is allowed (the kernel then skips that buffer).
    pub nullable: bool,
    /// The other arguments this pointer may be exactly equal to (the same
    /// address and extent: an in-place launch the kernel supports). Any other
    /// overlap with a written buffer is refused.
    pub may_equal: &'static [&'static str],
}

impl Param {
    /// Whether this argument is a pointer.
    pub const fn is_pointer(&self) -> bool {
        !matches!(self.access, Access::Value)
    }
}

/// One argument value, as the host packs it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgValue {
    /// A device pointer.
    Ptr(u64),
    U32(u32),
    U64(u64),
    F32(f32),
}

impl ArgValue {
    pub const fn kind(self) -> ArgKind {
        match self {
            ArgValue::Ptr(_) => ArgKind::Ptr,
            ArgValue::U32(_) => ArgKind::U32,
            ArgValue::U64(_) => ArgKind::U64,
            ArgValue::F32(_) => ArgKind::F32,
        }
    }
}

/// The value of one pointer argument of a launch and the elements the launch
/// touches through it (`None`: the count overflows 64 bits), as a family's
/// argument struct computes them from its declaration. Extents are positional:
/// the `i`th is the `i`th parameter's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferExtent {
    pub ptr: u64,
    pub elems: Option<u64>,
}

/// How a family's typed launch struct (see [`crate::entry`]) holds its
/// buffers: `Read<'a, E>` for a buffer of `E` the kernel only reads,
/// `Write<'a, E>` for one it writes. The host implements it for its typed
/// device buffers (a shared borrow to read, an exclusive one to write), so
/// that the borrow checker refuses a written buffer passed twice; the struct
/// then gives the raw argument struct and each buffer's size.
pub trait Buffers {
    type Read<'a, E: 'a>;
    type Write<'a, E: 'a>;
    /// The device address of a read buffer and the bytes it holds.
    fn read<E>(buffer: &Self::Read<'_, E>) -> (u64, usize);
    /// The device address of a written buffer and the bytes it holds.
    fn write<E>(buffer: &Self::Write<'_, E>) -> (u64, usize);
}

/// The product of a buffer's dimensions in 64 bits, `None` if it overflows.
pub fn extent(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// The most explicit arguments a kernel may take (every spec in
/// [`crate::entry::KERNELS`] is checked against it at compile time): the host
/// packs a launch in fixed arrays of this size, with no allocation.
pub const MAX_PARAMS: usize = 32;

/// An exported kernel: its symbol and its explicit arguments, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSpec {
    pub name: &'static str,
    pub params: &'static [Param],
    /// The most dynamic workgroup memory the host's launches of this kernel
    /// ask for, in bytes, as its family declares it from its geometry: a
    /// device that cannot give a workgroup that much does not offer the
    /// kernel, so that no launch after a true availability predicate is
    /// refused for it.
    pub most_workgroup_mem_bytes: u32,
}

impl KernelSpec {
    /// Byte offset of each argument in the packed buffer (C layout: each argument
    /// aligned to its size), and the buffer's total size.
    pub fn layout(&self) -> (impl Iterator<Item = usize> + '_, usize) {
        let mut offsets = [0usize; MAX_PARAMS];
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

/// A scalar argument type: how a value of it is packed.
pub trait ScalarArg: KernelArg {
    fn value(self) -> ArgValue;
}
impl ScalarArg for u32 {
    fn value(self) -> ArgValue {
        ArgValue::U32(self)
    }
}
impl ScalarArg for u64 {
    fn value(self) -> ArgValue {
        ArgValue::U64(self)
    }
}
impl ScalarArg for f32 {
    fn value(self) -> ArgValue {
        ArgValue::F32(self)
    }
}

/// The name of an element type, for messages and specs.
pub trait ElemName {
    const NAME: &'static str;
}
impl ElemName for f32 {
    const NAME: &'static str = "f32";
}
impl ElemName for crate::num::f16 {
    const NAME: &'static str = "f16";
}
impl ElemName for crate::num::Bf16 {
    const NAME: &'static str = "bf16";
}
impl ElemName for u32 {
    const NAME: &'static str = "u32";
}
impl ElemName for u64 {
    const NAME: &'static str = "u64";
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
