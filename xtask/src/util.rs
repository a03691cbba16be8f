//! Helpers shared by the tasks: the checkout's root and target directory, running commands and
//! reading cargo's JSON messages, files.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

use serde_json::Value;

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The repository's root: the parent of this crate's directory.
pub fn repo_root() -> Result<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    Ok(manifest.parent().ok_or("xtask has no parent directory")?.to_path_buf())
}

/// `cargo`, as the one that runs this task (`$CARGO`), in the repository's root.
pub fn cargo(root: &Path) -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root);
    cmd
}

/// Runs `cmd`, failing with its command line when it cannot start or exits unsuccessfully.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !status.success() {
        return Err(format!("{cmd:?} failed ({status})").into());
    }
    Ok(())
}

/// Runs `cmd` and returns its standard output (its standard error goes to ours).
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.stderr(Stdio::inherit()).output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed ({})", out.status).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The tracked files of the checkout at `root`, relative to it.
pub fn git_ls_files(root: &Path) -> Result<Vec<String>> {
    let list = output(Command::new("git").arg("-C").arg(root).args(["ls-files", "-z"]))?;
    Ok(list.split('\0').filter(|p| !p.is_empty()).map(str::to_string).collect())
}

/// The workspace's target directory, as cargo resolves it (`CARGO_TARGET_DIR`, configuration).
pub fn target_dir(root: &Path) -> Result<PathBuf> {
    let meta = output(cargo(root).args(["metadata", "--format-version", "1", "--no-deps"]))?;
    let meta: Value = serde_json::from_str(&meta)?;
    Ok(PathBuf::from(meta["target_directory"].as_str().ok_or("cargo metadata has no target_directory")?))
}

/// Runs a cargo command with `--message-format=json` added and returns its JSON messages.
pub fn cargo_messages(mut cmd: Command) -> Result<Vec<Value>> {
    cmd.arg("--message-format=json");
    let out = output(&mut cmd)?;
    Ok(out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}

/// A compiled executable that cargo reported: its target's first kind (`test`, `bench`, `bin`,
/// ...), its target's name, whether it is a test harness, and the file.
pub struct Executable {
    pub kind: String,
    pub name: String,
    pub test_harness: bool,
    pub path: PathBuf,
}

/// The executables among cargo's messages.
pub fn executables(messages: &[Value]) -> Vec<Executable> {
    messages
        .iter()
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter_map(|m| {
            Some(Executable {
                kind: m["target"]["kind"][0].as_str()?.to_string(),
                name: m["target"]["name"].as_str()?.to_string(),
                test_harness: m["profile"]["test"].as_bool().unwrap_or(false),
                path: PathBuf::from(m["executable"].as_str()?),
            })
        })
        .collect()
}

/// The root package's `OUT_DIR` among cargo's messages: where its build script left the code
/// objects and the PTX.
pub fn root_out_dir(messages: &[Value]) -> Result<PathBuf> {
    messages
        .iter()
        .filter(|m| m["reason"] == "build-script-executed")
        .filter(|m| {
            let id = m["package_id"].as_str().unwrap_or("");
            id.contains("#mlxcel-amdgpu@") || id.starts_with("mlxcel-amdgpu ")
        })
        .filter_map(|m| m["out_dir"].as_str())
        .next_back()
        .map(PathBuf::from)
        .ok_or_else(|| "cargo reported no build script run of mlxcel-amdgpu".into())
}

/// The newest `<target>/<profile>/build/mlxcel-amdgpu-*/out/<file>`: what the last build of the
/// root package in that profile wrote.
pub fn newest_build_output(target: &Path, profile: &str, file: &str) -> Result<PathBuf> {
    let build = target.join(profile).join("build");
    let mut best: Option<(SystemTime, PathBuf)> = None;
    for entry in fs::read_dir(&build).map_err(|e| format!("{}: {e}", build.display()))? {
        let entry = entry?;
        if !entry.file_name().to_string_lossy().starts_with("mlxcel-amdgpu-") {
            continue;
        }
        let path = entry.path().join("out").join(file);
        if let Ok(meta) = fs::metadata(&path) {
            let time = meta.modified()?;
            if best.as_ref().is_none_or(|(t, _)| time > *t) {
                best = Some((time, path));
            }
        }
    }
    best.map(|(_, p)| p).ok_or_else(|| format!("no {file} under {}/mlxcel-amdgpu-*/out", build.display()).into())
}

/// An empty directory `<target>/xtask/<name>`, for a task's temporary files.
pub fn scratch_dir(target: &Path, name: &str) -> Result<PathBuf> {
    let dir = target.join("xtask").join(name);
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Copies the tree `from` into `to` (created if absent), files and directories only.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let dest = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &dest)?;
        } else {
            fs::copy(entry.path(), &dest)?;
        }
    }
    Ok(())
}

/// Removes `path` if it exists, file or directory.
pub fn remove(path: &Path) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path)?,
        Ok(_) => fs::remove_file(path)?,
        Err(_) => {}
    }
    Ok(())
}

/// The host's target triple, as rustc says it.
pub fn host_triple() -> Result<String> {
    let version = output(Command::new("rustc").arg("-vV"))?;
    version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_string)
        .ok_or_else(|| "rustc -vV names no host".into())
}

/// Prints `usage` and returns true when `args` asks for help (`--help`, `-h`).
pub fn wants_help(args: &[String], usage: &str) -> bool {
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!("{usage}");
        return true;
    }
    false
}
