//! The simulated device's global memory: live allocations, every access bounds-checked.

use std::collections::BTreeMap;

/// One live allocation.
#[derive(Debug)]
struct Alloc {
    data: Vec<u8>,
    what: String,
}

/// Device memory: a set of allocations at fixed device addresses, separated by
/// unmapped guard gaps so that an access past the end of one never lands in the next.
#[derive(Debug)]
pub struct Memory {
    allocs: BTreeMap<u64, Alloc>,
    next: u64,
}

/// The LDS (workgroup memory) aperture of the flat address space: flat addresses
/// whose high 32 bits equal this value are LDS addresses (`src_shared_base`).
pub const SHARED_APERTURE_HI: u32 = 0x0001_0000;
/// The scratch aperture (`src_private_base`); no shipped kernel uses scratch.
pub const PRIVATE_APERTURE_HI: u32 = 0x0002_0000;

const FIRST: u64 = 0x0000_7000_0000_0000;
const ALIGN: u64 = 4096;
const GUARD: u64 = 1 << 20;

impl Default for Memory {
    fn default() -> Self {
        Memory { allocs: BTreeMap::new(), next: FIRST }
    }
}

impl Memory {
    pub fn new() -> Memory {
        Memory::default()
    }

    /// A new zeroed allocation of `size` bytes; returns its device address.
    pub fn alloc(&mut self, size: usize, what: &str) -> u64 {
        let addr = self.next;
        let span = (size as u64).div_ceil(ALIGN).max(1) * ALIGN;
        self.next = addr + span + GUARD;
        self.allocs.insert(addr, Alloc { data: vec![0; size], what: what.to_string() });
        addr
    }

    /// Frees the allocation that starts at `addr`.
    pub fn free(&mut self, addr: u64) -> Result<(), String> {
        self.allocs
            .remove(&addr)
            .map(|_| ())
            .ok_or_else(|| format!("free of {addr:#x}, which is not a live allocation"))
    }

    /// The allocation containing `[addr, addr + len)`, or an error describing the access.
    fn find(&self, addr: u64, len: usize) -> Result<(u64, &Alloc), String> {
        if let Some((&base, a)) = self.allocs.range(..=addr).next_back() {
            let end = base + a.data.len() as u64;
            if addr >= base && addr.checked_add(len as u64).is_some_and(|e| e <= end) {
                return Ok((base, a));
            }
            if addr < end {
                return Err(format!(
                    "{len}-byte access at {addr:#x} runs past the end of {} ({} bytes at {base:#x})",
                    a.what,
                    a.data.len()
                ));
            }
            if addr < end + GUARD {
                return Err(format!(
                    "{len}-byte access at {addr:#x} is {} bytes past the end of {} ({} bytes at {base:#x})",
                    addr - end,
                    a.what,
                    a.data.len()
                ));
            }
        }
        Err(format!("{len}-byte access at {addr:#x} is outside every live allocation"))
    }

    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), String> {
        let (base, a) = self.find(addr, out.len())?;
        let o = (addr - base) as usize;
        out.copy_from_slice(&a.data[o..o + out.len()]);
        Ok(())
    }

    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), String> {
        let (base, _) = self.find(addr, data.len())?;
        let a = self.allocs.get_mut(&base).unwrap();
        let o = (addr - base) as usize;
        a.data[o..o + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Whether `[addr, addr + len)` lies in one live allocation.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        self.find(addr, len).is_ok()
    }

    /// The base address and size of the allocation holding `[addr, addr + len)`.
    pub fn allocation_of(&self, addr: u64, len: usize) -> Option<(u64, usize)> {
        self.find(addr, len).ok().map(|(base, a)| (base, a.data.len()))
    }

    /// The size of the allocation starting at `addr`.
    pub fn size_of(&self, addr: u64) -> Option<usize> {
        self.allocs.get(&addr).map(|a| a.data.len())
    }

    /// The name given to the allocation starting at `addr` (as in fault descriptions).
    pub fn name_of(&self, addr: u64) -> Option<&str> {
        self.allocs.get(&addr).map(|a| a.what.as_str())
    }

    pub fn live(&self) -> usize {
        self.allocs.len()
    }
}
