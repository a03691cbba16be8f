//! Helpers shared by the tasks: the checkout's root, running commands, reading their output.

use std::path::{Path, PathBuf};
use std::process::Command;

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The repository's root: the parent of this crate's directory.
pub fn repo_root() -> Result<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    Ok(manifest.parent().ok_or("xtask has no parent directory")?.to_path_buf())
}

/// Runs `cmd` and returns its standard output.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The tracked files of the checkout at `root`, relative to it.
pub fn git_ls_files(root: &Path) -> Result<Vec<String>> {
    let list = output(Command::new("git").arg("-C").arg(root).args(["ls-files", "-z"]))?;
    Ok(list.split('\0').filter(|p| !p.is_empty()).map(str::to_string).collect())
}
