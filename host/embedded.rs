//! The GPU code built by `build.rs` and embedded in this library.

/// An AMD GPU code object for one target processor.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedCodeObject {
    /// The processor it was built for: `gfx1151`, `gfx11-generic`, ...
    pub processor: &'static str,
    pub bytes: &'static [u8],
}

/// PTX text for NVIDIA GPUs.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedPtx {
    /// The virtual architecture it targets (`sm_80`: it runs on sm_80 and newer).
    pub arch: &'static str,
    pub text: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));
