//! The one error type of the library. Every message says what was wrong, with
//! which argument, and what the limit is; a backend failure keeps the
//! runtime's own status code, and context is added by wrapping, not by
//! re-formatting.

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
    /// A call into a backend's runtime failed. `code` is the runtime's own
    /// status (`hipError_t`, `CUresult`), `message` its description.
    Backend { backend: &'static str, call: &'static str, code: i32, message: String },
    /// A code object or PTX module is missing, malformed or does not match the launchers.
    CodeObject(String),
    /// The CPU emulator found a defect in a kernel (divergence, a missed barrier).
    Emulator(String),
    /// A defect of this library itself (a launcher that disagrees with its
    /// kernel's declaration); never the caller's fault.
    Internal(String),
    /// `source`, with what was being done when it happened.
    Context { context: String, source: Box<Error> },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(argument: &'static str, message: impl Into<String>) -> Error {
        Error::InvalidArgument { argument, message: message.into() }
    }

    /// This error with `context` (what was being done) around it.
    pub fn context(self, context: impl Into<String>) -> Error {
        Error::Context { context: context.into(), source: Box::new(self) }
    }

    /// The error under every layer of context.
    pub fn root(&self) -> &Error {
        match self {
            Error::Context { source, .. } => source.root(),
            other => other,
        }
    }

    /// The backend runtime's status code, if a backend call failed.
    pub fn backend_code(&self) -> Option<i32> {
        match self.root() {
            Error::Backend { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// Adds context to the error of a [`Result`].
pub trait ResultExt<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> ResultExt<T> for Result<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| e.context(context()))
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
            Error::Backend { backend, call, code, message } => {
                write!(f, "{backend} call {call} failed with status {code}: {message}")
            }
            Error::CodeObject(message) => write!(f, "code object: {message}"),
            Error::Emulator(message) => write!(f, "CPU emulator: {message}"),
            Error::Internal(message) => write!(f, "internal defect of mlxcel-amdgpu: {message}"),
            Error::Context { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Context { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_wraps_and_keeps_the_backend_code() {
        let e = Error::Backend { backend: "hip", call: "hipMalloc", code: 2, message: "out of memory".into() };
        let wrapped = e.clone().context("allocating 64 bytes");
        assert_eq!(wrapped.backend_code(), Some(2));
        assert_eq!(wrapped.root(), &e);
        assert_eq!(wrapped.to_string(), "allocating 64 bytes: hip call hipMalloc failed with status 2: out of memory");
    }
}
