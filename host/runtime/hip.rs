//! The HIP backend: not in this commit yet; every open reports it unavailable.
use super::{Backend, DeviceInfo, FunctionHandle, LaunchDims, PackedArgs, Stream};
use crate::error::{Error, Result};

pub(crate) struct HipBackend {
    info: DeviceInfo,
}

impl HipBackend {
    pub(crate) fn new(_ordinal: usize) -> Result<HipBackend> {
        Err(Error::BackendUnavailable { backend: "hip", reason: "the HIP backend is not in this build yet".into() })
    }
}

impl Backend for HipBackend {
    fn info(&self) -> &DeviceInfo { &self.info }
    fn function(&self, _: &str) -> std::result::Result<FunctionHandle, String> { Err("".into()) }
    fn alloc(&self, _: usize) -> Result<u64> { unreachable!() }
    unsafe fn free(&self, _: u64) {}
    unsafe fn copy_to_device(&self, _: u64, _: &[u8]) -> Result<()> { unreachable!() }
    unsafe fn copy_to_host(&self, _: &mut [u8], _: u64) -> Result<()> { unreachable!() }
    unsafe fn memset(&self, _: u64, _: u8, _: usize) -> Result<()> { unreachable!() }
    fn synchronize(&self) -> Result<()> { unreachable!() }
    unsafe fn launch(&self, _: FunctionHandle, _: LaunchDims, _: &PackedArgs, _: Stream) -> Result<()> { unreachable!() }
    fn time(&self, _: Stream, _: &mut dyn FnMut() -> Result<()>) -> Result<f64> { unreachable!() }
}
