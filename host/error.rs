//! The one error type of the library. Every message says what was wrong, with
//! which argument, and what the limit is.

use std::fmt;

/// Everything that can go wrong in this library.
#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    /// A launch argument is wrong: `argument` names it, `message` says why.
    InvalidArgument { argument: &'static str, message: String },
    /// The kernel cannot run on this device; nothing was launched.
    Unavailable { kernel: String, reason: String },
    /// A backend (HIP, CUDA) is not present or has no usable device.
    BackendUnavailable { backend: &'static str, reason: String },
    /// A call into a backend's runtime failed.
    Backend { backend: &'static str, call: &'static str, message: String },
    /// A code object or PTX module is missing, malformed or does not match the launchers.
    CodeObject(String),
    /// The CPU emulator found a defect in a kernel (divergence, a missed barrier).
    Emulator(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(argument: &'static str, message: impl Into<String>) -> Error {
        Error::InvalidArgument { argument, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument { argument, message } => write!(f, "invalid argument `{argument}`: {message}"),
            Error::Unavailable { kernel, reason } => write!(f, "kernel {kernel} is not available: {reason}"),
            Error::BackendUnavailable { backend, reason } => {
                write!(f, "the {backend} backend is not available: {reason}")
            }
            Error::Backend { backend, call, message } => write!(f, "{backend} call {call} failed: {message}"),
            Error::CodeObject(message) => write!(f, "code object: {message}"),
            Error::Emulator(message) => write!(f, "CPU emulator: {message}"),
        }
    }
}

impl std::error::Error for Error {}
