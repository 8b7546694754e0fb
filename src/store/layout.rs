//! Is every chunk directory the store's own? The layout check a GC runs before it touches or
//! removes anything.
//!
//! A chunk directory that is a symbolic link, or a mount of another filesystem, holds chunks
//! that are not this store's: a GC that follows it touches another store's chunks in phase 1
//! and removes them in phase 2 (this store's indexes do not reference them). [`odd_chunk_dirs`]
//! finds them with one listing of `.chunks` (the entries' types, no `stat` per directory) and
//! the process's mount table (`/proc/self/mountinfo`), so it costs a few hundred KiB of
//! directory reads even on a store of millions of chunks, and changes no atime.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::datastore::paths::CHUNK_DIR;

/// A chunk directory (or something under one) that is not a plain directory of the store's
/// own filesystem.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OddDir {
    /// The path, relative to the store's root (`.chunks/06d2`).
    pub path: String,
    /// What it is instead (`a symbolic link to /other/.chunks/06d2`, `the mount point of
    /// ext4 /dev/sdb1`).
    pub what: String,
}

impl std::fmt::Display for OddDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is {}", self.path, self.what)
    }
}

/// The error a GC stops with when [`odd_chunk_dirs`] found any: every one named (the first
/// 20), and what to do.
pub fn refusal(root: &Path, odd: &[OddDir]) -> anyhow::Error {
    let mut names: Vec<String> = odd.iter().take(20).map(|o| o.to_string()).collect();
    if odd.len() > 20 {
        names.push(format!("and {} more", odd.len() - 20));
    }
    anyhow::anyhow!(
        "{} chunk director{} of {} {} not the store's own: {}. A GC would touch and remove \
         chunks of another store there; nothing was touched or removed. Replace each by a \
         plain directory of the store's filesystem (with the chunks it should hold), then \
         run the GC again",
        odd.len(),
        if odd.len() == 1 { "y" } else { "ies" },
        root.display(),
        if odd.len() == 1 { "is" } else { "are" },
        names.join("; ")
    )
}

fn is_chunk_dir_name(name: &[u8]) -> bool {
    name.len() == 4 && name.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

/// What a directory entry of type `d_type` is, for messages; `None` for a directory.
fn d_type_name(d_type: u8) -> Option<&'static str> {
    match d_type {
        libc::DT_DIR => None,
        libc::DT_LNK => Some("a symbolic link"),
        libc::DT_REG => Some("a regular file"),
        libc::DT_FIFO => Some("a FIFO"),
        libc::DT_SOCK => Some("a socket"),
        libc::DT_CHR => Some("a character device"),
        libc::DT_BLK => Some("a block device"),
        _ => Some("not a directory"),
    }
}

/// Every chunk directory of the store at `root` that is not a plain directory of its
/// filesystem: a symbolic link (named with its target), any other non-directory, or a mount
/// point of another filesystem (and any mount below `.chunks`, a chunk file bind-mounted
/// over included). Reads `.chunks` with `O_NOFOLLOW`: a symbolically linked `.chunks` is an
/// error naming it, as any other failure to list it.
pub fn odd_chunk_dirs(root: &Path) -> io::Result<Vec<OddDir>> {
    let chunks = root.join(CHUNK_DIR);
    let named = |e: io::Error, what: &str| {
        io::Error::new(e.kind(), format!("{what} {}: {e}", chunks.display()))
    };
    let c = std::ffi::CString::new(chunks.as_os_str().as_bytes())?;
    // O_NOATIME where permitted: looking at the layout changes nothing of the store.
    let fd = match crate::fsutil::open_dir_noatime(libc::AT_FDCWD, &c) {
        Ok((fd, _)) => fd,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => {
            let to = std::fs::read_link(&chunks)
                .map(|t| format!(" (to {})", t.display()))
                .unwrap_or_default();
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is not a directory{to}: a datastore's chunks are its own, in a \
                     directory of the datastore",
                    chunks.display()
                ),
            ));
        }
        Err(e) => return Err(named(e, "opening")),
    };
    let mut odd = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut entries: Vec<(Vec<u8>, u8)> = Vec::new();
    loop {
        entries.clear();
        let more = crate::fsutil::getdents(fd.as_raw_fd(), &mut buf, &mut |name, _, d_type| {
            if is_chunk_dir_name(name) {
                entries.push((name.to_vec(), d_type));
            }
        })
        .map_err(|e| named(e, "listing"))?;
        if !more {
            break;
        }
        for (name, d_type) in &entries {
            let (name, d_type) = (name.as_slice(), *d_type);
            let what = match d_type {
                libc::DT_UNKNOWN => stat_kind(&fd, name)?,
                t => d_type_name(t).map(str::to_string),
            };
            if let Some(mut what) = what {
                let path = chunks.join(std::ffi::OsStr::from_bytes(name));
                if let Ok(target) = std::fs::read_link(&path) {
                    what = format!("{what} to {}", target.display());
                }
                odd.push(OddDir {
                    path: format!("{CHUNK_DIR}/{}", String::from_utf8_lossy(name)),
                    what,
                });
            }
        }
    }
    odd.extend(mounts_below(&std::fs::canonicalize(&chunks)?)?);
    odd.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(odd)
}

/// `lstat` of `name` in `dir`, for a filesystem whose listing has no entry types: what it is
/// if it is not a directory.
fn stat_kind(dir: &OwnedFd, name: &[u8]) -> io::Result<Option<String>> {
    // Removed since the listing (None): not a chunk directory any more, nothing to follow.
    Ok(crate::fsutil::lstat_at(dir.as_raw_fd(), name)?
        .filter(|st| st.st_mode & libc::S_IFMT != libc::S_IFDIR)
        .map(|st| crate::fsutil::file_type_name(st.st_mode).to_string()))
}

/// The mounts of this process's mount table below `chunks` (its canonical path).
fn mounts_below(chunks: &Path) -> io::Result<Vec<OddDir>> {
    Ok(below(&crate::fsutil::mounts()?, chunks))
}

/// The mounts of `mounts` strictly below `dir`, as odd directories.
fn below(mounts: &[crate::fsutil::MountEntry], dir: &Path) -> Vec<OddDir> {
    mounts
        .iter()
        .filter(|m| m.point.starts_with(dir) && m.point != dir)
        .map(|m| OddDir {
            path: Path::new(CHUNK_DIR)
                .join(m.point.strip_prefix(dir).expect("below"))
                .display()
                .to_string(),
            what: format!(
                "a mount point ({} {}): another filesystem, or a directory bound there from \
                 elsewhere",
                m.fstype, m.source
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for d in ["0000", "0001", "06d2", "ffff"] {
            std::fs::create_dir_all(dir.path().join(".chunks").join(d)).unwrap();
        }
        dir
    }

    #[test]
    fn a_plain_store_has_no_odd_directory() {
        let s = store();
        assert_eq!(odd_chunk_dirs(s.path()).unwrap(), vec![]);
    }

    #[test]
    fn a_symlinked_or_non_directory_chunk_directory_is_named() {
        let s = store();
        let other = store();
        let d = s.path().join(".chunks/06d2");
        std::fs::remove_dir(&d).unwrap();
        std::os::unix::fs::symlink(other.path().join(".chunks/06d2"), &d).unwrap();
        std::fs::remove_dir(s.path().join(".chunks/0001")).unwrap();
        std::fs::write(s.path().join(".chunks/0001"), b"").unwrap();
        // Names that are no chunk directory's are not the check's business.
        std::fs::write(s.path().join(".chunks/notes"), b"").unwrap();
        let odd = odd_chunk_dirs(s.path()).unwrap();
        assert_eq!(odd.len(), 2, "{odd:?}");
        assert_eq!(odd[0].path, ".chunks/0001");
        assert_eq!(odd[0].what, "a regular file");
        assert_eq!(odd[1].path, ".chunks/06d2");
        assert_eq!(
            odd[1].what,
            format!(
                "a symbolic link to {}",
                other.path().join(".chunks/06d2").display()
            )
        );
        let e = refusal(s.path(), &odd).to_string();
        assert!(
            e.contains("2 chunk directories") && e.contains(".chunks/06d2 is a symbolic link"),
            "{e}"
        );
    }

    #[test]
    fn a_symlinked_chunks_directory_is_an_error() {
        let s = store();
        let other = store();
        std::fs::rename(s.path().join(".chunks"), s.path().join("old")).unwrap();
        std::os::unix::fs::symlink(other.path().join(".chunks"), s.path().join(".chunks")).unwrap();
        let e = odd_chunk_dirs(s.path()).unwrap_err().to_string();
        assert!(
            e.contains("is not a directory (to ") && e.contains(".chunks"),
            "{e}"
        );
    }

    #[test]
    fn mounts_below_the_chunks_directory_are_found_with_escapes() {
        let info = "\
22 1 0:21 / / rw - ext4 /dev/sda1 rw
90 22 8:17 /y/.chunks/06d2 /srv/my\\040store/.chunks/06d2 rw - ext4 /dev/sdb1 rw
91 22 8:17 / /srv/my\\040store/.chunks rw - ext4 /dev/sdc1 rw
92 22 8:17 / /srv/my\\040storeX/.chunks/0000 rw - tmpfs none rw
";
        let mounts = crate::fsutil::parse_mountinfo(info);
        let found = below(&mounts, Path::new("/srv/my store/.chunks"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].path, ".chunks/06d2");
        assert!(found[0].what.starts_with("a mount point (ext4 /dev/sdb1)"));
        assert_eq!(mounts[1].dev, "8:17");
    }
}
