//! Whether this process may use a directory as a datastore, and if not, the real cause.
//!
//! A datastore that is not one (no `.chunks`) and one this user may not list (PBS's belong to
//! `backup:backup`, mode 0750) fail the same `open` with different remedies; every command that
//! reads a store asks here first, so a non-root user hears "permission denied", not "not a
//! datastore".

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use super::paths::CHUNK_DIR;

/// The chunk directory of the datastore at `root`, refused with the cause: `root` or its
/// `.chunks` missing or not a directory (not a datastore), or not listable by this process
/// (whose they are, and who may).
pub fn chunk_dir(root: &Path) -> Result<PathBuf> {
    let root = &std::path::absolute(root)?;
    let chunks = root.join(CHUNK_DIR);
    match std::fs::metadata(&chunks) {
        Ok(m) if m.is_dir() => {}
        Ok(m) => bail!(
            "{} is not a datastore: {} is a {}, not a directory",
            root.display(),
            chunks.display(),
            crate::fsutil::file_type_name(m.mode())
        ),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            // Not even its attributes: a directory on the way cannot be searched.
            let blocked = first_unsearchable(&chunks).unwrap_or_else(|| root.to_path_buf());
            bail!("{}", denied(&blocked))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if root.is_dir() {
                bail!(
                    "{} is not a datastore: it has no {CHUNK_DIR} directory",
                    root.display()
                )
            }
            bail!("{} is not a datastore: no such directory", root.display())
        }
        Err(e) => bail!("{}: {e}", chunks.display()),
    }
    if !may(&chunks, libc::R_OK | libc::X_OK) {
        bail!("{}", denied(&chunks));
    }
    Ok(chunks)
}

/// Whether this process (its effective ids) may access `path` as `mode` says.
fn may(path: &Path, mode: libc::c_int) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: valid C string; AT_EACCESS checks the effective ids, as an open would.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), mode, libc::AT_EACCESS) == 0 }
}

/// The first directory on the way to `path` this process may not search.
fn first_unsearchable(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .find(|a| !may(a, libc::X_OK))
        .map(Path::to_path_buf)
}

/// "permission denied on DIR (owner, mode; this process's user): run as root or as the
/// datastore's owner".
fn denied(dir: &Path) -> String {
    // SAFETY: no preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let owner = match std::fs::metadata(dir) {
        Ok(m) => format!(
            "owned by {}:{}, mode {:04o}",
            crate::fsutil::user_name(m.uid()).unwrap_or_else(|| m.uid().to_string()),
            crate::fsutil::group_name(m.gid()).unwrap_or_else(|| m.gid().to_string()),
            m.mode() & 0o7777
        ),
        Err(_) => "its owner unknown".into(),
    };
    format!(
        "permission denied on {} ({owner}; this process runs as {}:{}): run as root or as \
         the datastore's owner (on a PBS host: backup)",
        dir.display(),
        crate::fsutil::user_name(uid).unwrap_or_else(|| uid.to_string()),
        crate::fsutil::group_name(gid).unwrap_or_else(|| gid.to_string()),
    )
}
