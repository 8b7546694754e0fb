//! The survey's view of the snapshot tree for the phase-1 walk: directories listed with
//! `O_NOATIME` (a listing updates a directory's atime otherwise), each listing recorded in
//! the survey file for the simulator (its entries' kinds and inode numbers).

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::datastore::snapshots::{EntryKind, Tree};

use super::file::SurveyWriter;

pub(super) struct SurveyTree<'a> {
    root: PathBuf,
    writer: &'a RefCell<Option<SurveyWriter>>,
    noatime_refused: Cell<u64>,
    buf: RefCell<Vec<u8>>,
}

impl<'a> SurveyTree<'a> {
    pub(super) fn new(root: &Path, writer: &'a RefCell<Option<SurveyWriter>>) -> Self {
        SurveyTree {
            root: root.to_path_buf(),
            writer,
            noatime_refused: Cell::new(0),
            buf: RefCell::new(vec![0; 64 * 1024]),
        }
    }

    /// Directories listed without `O_NOATIME` (the kernel refused it).
    pub(super) fn noatime_refused(&self) -> u64 {
        self.noatime_refused.get()
    }
}

/// The kind of a `d_type`, `DT_UNKNOWN` resolved with a `stat` (no link followed).
fn kind_of(dir: &std::os::fd::OwnedFd, name: &[u8], d_type: u8) -> io::Result<EntryKind> {
    let mode = match d_type {
        libc::DT_DIR => return Ok(EntryKind::Dir),
        libc::DT_REG => return Ok(EntryKind::File),
        libc::DT_UNKNOWN => match crate::fsutil::lstat_at(dir.as_raw_fd(), name)? {
            Some(st) => st.st_mode & libc::S_IFMT,
            None => return Err(io::ErrorKind::NotFound.into()),
        },
        _ => return Ok(EntryKind::Other),
    };
    Ok(match mode {
        libc::S_IFDIR => EntryKind::Dir,
        libc::S_IFREG => EntryKind::File,
        _ => EntryKind::Other,
    })
}

impl Tree for SurveyTree<'_> {
    fn link_to_dir(&self, path: &Path) -> io::Result<Option<PathBuf>> {
        crate::fsutil::link_to_dir(path)
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<(String, EntryKind)>> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
        // As the GC's own walk (std's read_dir), the path itself may be a link; entries that
        // are links are never followed (their kind is Other).
        // O_NOFOLLOW | O_DIRECTORY on a link fails with ENOTDIR on Linux (ELOOP elsewhere).
        let (fd, noatime) = match crate::fsutil::open_dir_noatime(libc::AT_FDCWD, &c) {
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR))
                    && std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_symlink()) =>
            {
                let canonical = std::fs::canonicalize(dir)?;
                let c = std::ffi::CString::new(canonical.as_os_str().as_bytes())?;
                crate::fsutil::open_dir_noatime(libc::AT_FDCWD, &c)?
            }
            r => r?,
        };
        self.noatime_refused
            .set(self.noatime_refused.get() + u64::from(!noatime));
        let mut raw: Vec<(Vec<u8>, u8, u64)> = Vec::new();
        let mut buf = self.buf.borrow_mut();
        while crate::fsutil::getdents(fd.as_raw_fd(), &mut buf, &mut |name, ino, t| {
            if name != b"." && name != b".." {
                raw.push((name.to_vec(), t, ino));
            }
        })? {}
        let mut out = Vec::with_capacity(raw.len());
        let mut record = Vec::with_capacity(raw.len());
        for (name, d_type, ino) in raw {
            let kind = match kind_of(&fd, &name, d_type) {
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // removed meanwhile
                Err(e) => return Err(e),
            };
            match String::from_utf8(name) {
                Ok(s) => {
                    record.push((s.clone().into_bytes(), kind, ino));
                    out.push((s, kind));
                }
                Err(e) => {
                    let bytes = e.into_bytes();
                    crate::datastore::snapshots::non_utf8_entry(
                        dir,
                        &bytes,
                        kind == EntryKind::Dir,
                    )?;
                }
            }
        }
        if let Some(w) = self.writer.borrow_mut().as_mut() {
            // SAFETY: a plain C struct; zeroes are a valid value.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: a valid descriptor and out pointer.
            if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let rel = dir.strip_prefix(&self.root).unwrap_or(dir);
            w.dir(rel, st.st_ino, &record).map_err(io::Error::other)?;
        }
        Ok(out)
    }
}
