//! The phase-1 view of a datastore: which index files exist, and in which order PBS visits them.
//!
//! * Step A ([`list_index_files`]): every path ending in `.fidx`/`.didx` below the root, whatever
//!   it is (PBS's rule: a symbolic link, a FIFO or a directory of that name is an index that
//!   cannot be read, so the GC stops before its sweep), walking without following symlinks and
//!   pruning every entry whose name starts with `.` (so `.chunks` is never entered).
//! * Step B ([`phase1_order`]): namespaces (root first, then depth-first pre-order over
//!   `<ns>/ns/<child>` in readdir order, at most 7 levels), then type directories `vm`/`ct`/`host`
//!   in readdir order, groups in readdir order, snapshots **newest first**, files in readdir order.
//! * Step C: indexes found in step A but not visited in step B ("unexpected" leftovers). PBS
//!   visits them in hash-set order; here they are sorted by path, so runs are reproducible.
//!
//! Raw readdir order is used on purpose: it is what PBS sees, and on ext4 it follows the name
//! hash, not creation order. Nothing here reads chunks or touches atimes.
//!
//! Every listing goes through a [`Tree`]: [`Fs`] is the real filesystem; the simulator's
//! in-memory store is another, so a simulated GC walks its indexes with this very code.

use std::collections::BTreeSet;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::index::IndexKind;
use super::paths::{BACKUP_TYPES, MAX_NAMESPACE_DEPTH, NAMESPACE_DIR};
use crate::time::parse_rfc3339_utc;

/// `[A-Za-z0-9_][A-Za-z0-9._\-]*`: backup ids and namespace components (SAFE_ID).
pub fn is_safe_id(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(c) if c.is_ascii_alphanumeric() || c == b'_' => {}
        _ => return false,
    }
    bytes.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// What a directory entry is, from `d_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// Anything else (a symlink, a device, ...).
    Other,
}

impl EntryKind {
    fn is_dir(self) -> bool {
        self == EntryKind::Dir
    }
}

/// A directory tree that can be listed.
pub trait Tree {
    /// Entries of `dir` in raw readdir order ("." and ".." excluded, names that are not UTF-8
    /// left out: they match none of PBS's name patterns).
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<(String, EntryKind)>>;

    /// Where `path`, an entry listed as [`EntryKind::Other`], leads if it is a symbolic link
    /// to a directory. A tree without links (the simulator's) has none.
    fn link_to_dir(&self, path: &Path) -> io::Result<Option<PathBuf>> {
        let _ = path;
        Ok(None)
    }
}

/// The error for a symbolic link to a directory inside the snapshot tree (a namespace, type,
/// group or snapshot directory moved elsewhere and linked back, say). PBS's GC follows no link:
/// its scan (walkdir, links not followed) and its namespace, group and snapshot iterators
/// (directories only) both pass it by, so it removes the chunks that only the indexes below
/// the link reference. The walk stops instead, before any sweep.
pub fn linked_dir_error(path: &Path, target: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "{} is a symbolic link to a directory ({}): PBS's GC follows no link, so it would pass \
         by every index below it and remove the chunks only those reference; stopping before \
         the sweep, nothing removed. Put the directory itself in place of the link to go on",
        path.display(),
        target.display()
    )
}

/// Bytes of one `getdents64` call of a listing: glibc's `readdir` buffer, so a traced walk
/// makes the calls PBS's makes.
const LISTING_BUFFER: usize = 32 * 1024;

/// The real filesystem.
///
/// Listed with `getdents64` itself, not `readdir(3)`: glibc's `readdir` takes an `ENOENT` from
/// `getdents64` for the end of the directory, so a directory that fails midway (a flaky disk,
/// a FUSE daemon's error, an injected fault) would read as a short listing, and a GC would
/// never visit the indexes it left out. Here every error of the listing is the caller's.
pub struct Fs;

impl Tree for Fs {
    fn link_to_dir(&self, path: &Path) -> io::Result<Option<PathBuf>> {
        crate::fsutil::link_to_dir(path)
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<(String, EntryKind)>> {
        let fd = crate::fsutil::open_dir_following(dir)?;
        // glibc's `opendir` stats the directory it opened (to size its buffer): PBS's walk
        // makes that request, so this one does too, and a traced walk matches a simulated one.
        // SAFETY: a plain C struct; all zeroes is a valid value of it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a descriptor of ours and an out pointer, both valid.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; LISTING_BUFFER];
        let mut out = Vec::new();
        let mut failed = None;
        loop {
            let more =
                crate::fsutil::getdents(fd.as_raw_fd(), &mut buf, &mut |name, _, d_type| {
                    if failed.is_some() || name == b"." || name == b".." {
                        return;
                    }
                    if let Err(e) = listed_entry(&fd, dir, name, d_type, &mut out) {
                        failed = Some(e);
                    }
                })?;
            if let Some(e) = failed {
                return Err(e);
            }
            if !more {
                return Ok(out);
            }
        }
    }
}

/// Adds the entry `name` (of type `d_type`) of the directory `fd` (at `dir`) to `out`; one
/// whose type the filesystem did not say (`DT_UNKNOWN`) is asked with `fstatat`.
fn listed_entry(
    fd: &OwnedFd,
    dir: &Path,
    name: &[u8],
    d_type: u8,
    out: &mut Vec<(String, EntryKind)>,
) -> io::Result<()> {
    let kind = match d_type {
        libc::DT_DIR => EntryKind::Dir,
        libc::DT_REG => EntryKind::File,
        libc::DT_UNKNOWN => match crate::fsutil::lstat_at(fd.as_raw_fd(), name)? {
            // Gone meanwhile: as if listed a moment later.
            None => return Ok(()),
            Some(st) => match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => EntryKind::Dir,
                libc::S_IFREG => EntryKind::File,
                _ => EntryKind::Other,
            },
        },
        _ => EntryKind::Other,
    };
    match std::str::from_utf8(name) {
        Ok(name) => out.push((name.to_owned(), kind)),
        Err(_) => non_utf8_entry(dir, name, kind.is_dir())?,
    }
    Ok(())
}

/// An entry of `dir` whose name is not UTF-8: `Ok` when a walk may leave it out (hidden, or
/// a plain file that is no index, as PBS leaves them), an error naming it otherwise. PBS's
/// scan (walkdir) reads indexes below any name; this walk cannot name such a path, and
/// skipping it could cost the chunks its indexes reference.
pub fn non_utf8_entry(dir: &Path, bytes: &[u8], is_dir: bool) -> io::Result<()> {
    let index_like = bytes.ends_with(b".fidx") || bytes.ends_with(b".didx");
    if bytes.starts_with(b".") || (!is_dir && !index_like) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} holds {} whose name is not UTF-8 ({}): chunkscope cannot read indexes there \
             (PBS would); rename it to go on",
            dir.display(),
            if is_dir {
                "a directory"
            } else {
                "an index file"
            },
            String::from_utf8_lossy(bytes)
        ),
    ))
}

/// A walk was told ENOENT for `path` (below `root`): accepts that only if the directory
/// holding it no longer lists it, going up while directories are gone too. A name that is
/// still listed means the ENOENT was not the truth (a flaky disk, an injected fault): an
/// error, because a GC that skipped the path could remove the chunks it references.
pub fn confirm_vanished(tree: &dyn Tree, root: &Path, path: &Path) -> Result<()> {
    let mut at = path;
    loop {
        let (Some(parent), Some(name)) = (at.parent(), at.file_name()) else {
            bail!(
                "{}: not found, and neither is the datastore root",
                path.display()
            );
        };
        if at == root || !parent.starts_with(root) {
            bail!(
                "{}: not found, and neither is the datastore root {}",
                path.display(),
                root.display()
            );
        }
        match tree.read_dir(parent) {
            Ok(entries) => {
                let name = name.to_string_lossy();
                if entries.iter().any(|(n, _)| *n == name) {
                    bail!(
                        "{}: opening it said 'not found', yet {} still lists {name}: \
                         refusing to go on (the store answers inconsistently: a flaky disk or \
                         an injected fault), nothing was removed",
                        path.display(),
                        parent.display()
                    );
                }
                return Ok(());
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => at = parent,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "{}: not found; listing {} to confirm it vanished",
                        path.display(),
                        parent.display()
                    )
                })
            }
        }
    }
}

fn missing_ok<T: Default>(r: io::Result<T>) -> io::Result<T> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(T::default()),
        other => other,
    }
}

/// All namespace directories: the root first, then depth-first pre-order.
pub fn list_namespaces(tree: &dyn Tree, root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    fn visit(tree: &dyn Tree, ns: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<()> {
        out.push(ns.to_path_buf());
        if depth >= MAX_NAMESPACE_DEPTH {
            return Ok(());
        }
        let children_dir = ns.join(NAMESPACE_DIR);
        let entries = missing_ok(tree.read_dir(&children_dir))
            .with_context(|| format!("iterating namespaces failed: {}", children_dir.display()))?;
        for (name, ty) in entries {
            if !ty.is_dir() || name.starts_with('.') {
                continue;
            }
            if !is_safe_id(&name) {
                bail!(
                    "iterating namespaces failed: invalid namespace name {:?} in {}",
                    name,
                    children_dir.display()
                );
            }
            visit(tree, &children_dir.join(&name), depth + 1, out)?;
        }
        Ok(())
    }
    visit(tree, root, 0, &mut out)?;
    Ok(out)
}

/// Backup group directories of one namespace: types in readdir order, then groups.
pub fn list_groups(tree: &dyn Tree, ns: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let types = tree
        .read_dir(ns)
        .with_context(|| format!("listing groups of {}", ns.display()))?;
    for (ty_name, ty) in types {
        if !ty.is_dir() || !BACKUP_TYPES.contains(&ty_name.as_str()) {
            continue;
        }
        let type_dir = ns.join(&ty_name);
        let groups = missing_ok(tree.read_dir(&type_dir))
            .with_context(|| format!("listing groups in {}", type_dir.display()))?;
        for (id, ty) in groups {
            if ty.is_dir() && is_safe_id(&id) {
                out.push(type_dir.join(id));
            }
        }
    }
    Ok(out)
}

/// Snapshot directories of a group with their backup time, **newest first**.
pub fn list_snapshots(tree: &dyn Tree, group: &Path) -> io::Result<Vec<(i64, PathBuf)>> {
    let mut out: Vec<(i64, PathBuf)> = tree
        .read_dir(group)?
        .into_iter()
        .filter(|(_, ty)| ty.is_dir())
        .filter_map(|(name, _)| parse_rfc3339_utc(&name).map(|t| (t, group.join(name))))
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.0));
    Ok(out)
}

/// Index files of a snapshot in readdir order (blobs and `.protected` are listed by PBS but
/// skipped by GC, so they are not returned). A name of an index is one whatever it is: a
/// symbolic link or a FIFO of that name is returned, for opening it to refuse.
pub fn list_snapshot_indexes(tree: &dyn Tree, snapshot: &Path) -> io::Result<Vec<PathBuf>> {
    Ok(tree
        .read_dir(snapshot)?
        .into_iter()
        .filter(|(name, _)| IndexKind::from_path(Path::new(name)).is_some())
        .map(|(name, _)| snapshot.join(name))
        .collect())
}

/// A directory of a whole-tree walk, `depth` below `root`: `None` when the walk skips it (it
/// vanished, as its parent confirms, or it is a `lost+found` PBS may not read); denied
/// access elsewhere is an error (a GC that skipped it could remove what its indexes use).
fn read_walked_dir(
    tree: &dyn Tree,
    root: &Path,
    dir: &Path,
    depth: usize,
) -> Result<Option<Vec<(String, EntryKind)>>> {
    match tree.read_dir(dir) {
        Ok(e) => Ok(Some(e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound && depth > 0 => {
            confirm_vanished(tree, root, dir)?;
            Ok(None)
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            if depth <= 1 && dir.file_name().is_some_and(|n| n == "lost+found") {
                return Ok(None);
            }
            bail!(
                "cannot continue garbage-collection safely, permission denied on: {}",
                dir.display()
            );
        }
        Err(e) => Err(e).with_context(|| format!("walking {}", dir.display())),
    }
}

/// An entry of the walk that is neither a directory nor a file: an error if it is a symbolic
/// link to a directory ([`linked_dir_error`]). A link with an index's name is an index (its
/// open fails, as in PBS); a link to anything else, or to nothing, holds no index.
fn refuse_linked_dir(tree: &dyn Tree, path: &Path, kind: EntryKind) -> Result<()> {
    if kind != EntryKind::Other {
        return Ok(());
    }
    match tree.link_to_dir(path) {
        Ok(Some(target)) => Err(linked_dir_error(path, &target)),
        Ok(None) => Ok(()),
        // Gone meanwhile: as if listed a moment later.
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("looking at {}", path.display())),
    }
}

/// Step A: every path below `root` whose name is an index's (`*.fidx`, `*.didx`), whatever it
/// is (a link, a FIFO, a directory: opening it fails, and the GC with it, as in PBS), hidden
/// entries pruned, symlinks not followed. A directory that vanished meanwhile is skipped once
/// its parent confirms it ([`confirm_vanished`]).
pub fn list_index_files(tree: &dyn Tree, root: &Path) -> Result<BTreeSet<PathBuf>> {
    let mut found = BTreeSet::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let Some(entries) = read_walked_dir(tree, root, &dir, depth)? else {
            continue;
        };
        for (name, ty) in entries {
            if name.starts_with('.') {
                continue;
            }
            let path = dir.join(&name);
            if IndexKind::from_path(&path).is_some() {
                found.insert(path.clone());
            } else {
                refuse_linked_dir(tree, &path, ty)?;
            }
            if ty.is_dir() {
                stack.push((path, depth + 1));
            }
        }
    }
    Ok(found)
}

/// Every index file below `root` in the order PBS 3.3.4's `list_images` found them: a walk
/// (walkdir) depth first, each directory's entries in readdir order, a subdirectory walked
/// when it is reached, hidden entries pruned, symlinks not followed. Errors as
/// [`list_index_files`].
pub fn walk_index_files(tree: &dyn Tree, root: &Path) -> Result<Vec<PathBuf>> {
    fn walk(
        tree: &dyn Tree,
        root: &Path,
        dir: &Path,
        depth: usize,
        found: &mut Vec<PathBuf>,
    ) -> Result<()> {
        let Some(entries) = read_walked_dir(tree, root, dir, depth)? else {
            return Ok(());
        };
        for (name, ty) in entries {
            if name.starts_with('.') {
                continue;
            }
            let path = dir.join(&name);
            if IndexKind::from_path(&path).is_some() {
                found.push(path.clone());
            } else {
                refuse_linked_dir(tree, &path, ty)?;
            }
            if ty.is_dir() {
                walk(tree, root, &path, depth + 1, found)?;
            }
        }
        Ok(())
    }
    let mut found = Vec::new();
    walk(tree, root, root, 0, &mut found)?;
    Ok(found)
}

/// The index files of a datastore in the order PBS phase 1 visits them.
#[derive(Debug, Default)]
pub struct Phase1Order {
    /// Step B: namespace, group, snapshot (newest first), file.
    pub expected: Vec<PathBuf>,
    /// Step C: found by the scan but outside the namespace/group/snapshot scheme, sorted.
    pub unexpected: Vec<PathBuf>,
}

impl Phase1Order {
    /// Index files in both steps.
    pub fn len(&self) -> usize {
        self.expected.len() + self.unexpected.len()
    }

    /// True without index files.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// All indexes, expected first.
    pub fn iter(&self) -> impl Iterator<Item = &PathBuf> {
        self.expected.iter().chain(&self.unexpected)
    }
}

/// Steps A, B and C over a datastore that is not changing underneath.
pub fn phase1_order(root: &Path) -> Result<Phase1Order> {
    let mut unprocessed = list_index_files(&Fs, root)?;
    let mut expected = Vec::new();
    for ns in list_namespaces(&Fs, root)? {
        for group in list_groups(&Fs, &ns)? {
            let snapshots = missing_ok(list_snapshots(&Fs, &group))
                .with_context(|| format!("listing snapshots of {}", group.display()))?;
            for (_, snapshot) in snapshots {
                let files = missing_ok(list_snapshot_indexes(&Fs, &snapshot))
                    .with_context(|| format!("listing files of {}", snapshot.display()))?;
                for path in files {
                    unprocessed.remove(&path);
                    expected.push(path);
                }
            }
        }
    }
    Ok(Phase1Order {
        expected,
        unexpected: unprocessed.into_iter().collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn safe_ids() {
        for ok in ["100", "host-01", "a.b_c-d", "_x"] {
            assert!(is_safe_id(ok), "{ok}");
        }
        for bad in ["", ".hidden", "-x", "a b", "ä"] {
            assert!(!is_safe_id(bad), "{bad}");
        }
    }

    fn touch(p: &Path) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, b"").unwrap();
    }

    #[test]
    fn phase1_order_is_pbs_order() {
        let tmp = tempfile::tempdir().unwrap();
        let r = tmp.path();
        let snap = |ns: &str, g: &str, t: &str| r.join(ns).join(g).join(t);
        touch(&snap("", "vm/100", "2025-01-01T00:00:00Z").join("drive-scsi0.img.fidx"));
        touch(&snap("", "vm/100", "2025-03-01T00:00:00Z").join("drive-scsi0.img.fidx"));
        touch(&snap("", "vm/100", "2025-02-01T00:00:00Z").join("drive-scsi0.img.fidx"));
        touch(&snap("", "vm/100", "2025-02-01T00:00:00Z").join("qemu-server.conf.blob"));
        touch(&snap("ns/a", "ct/200", "2025-01-05T00:00:00Z").join("root.pxar.didx"));
        touch(&snap("ns/a/ns/b", "host/h1", "2025-01-05T00:00:00Z").join("catalog.pcat1.didx"));
        // Outside the scheme: found by the scan, visited as leftovers.
        touch(&r.join("vm/100/not-a-time/x.fidx"));
        touch(&r.join("stray.didx"));
        // Hidden: never seen.
        touch(&r.join(".trash/vm/1/2025-01-01T00:00:00Z/y.fidx"));
        touch(&r.join(".chunks/0000/z.fidx"));
        touch(&r.join("unknown/1/2025-01-01T00:00:00Z/w.fidx"));

        let order = phase1_order(r).unwrap();
        let rel: Vec<String> = order
            .iter()
            .map(|p| p.strip_prefix(r).unwrap().display().to_string())
            .collect();
        assert_eq!(
            rel,
            [
                "vm/100/2025-03-01T00:00:00Z/drive-scsi0.img.fidx",
                "vm/100/2025-02-01T00:00:00Z/drive-scsi0.img.fidx",
                "vm/100/2025-01-01T00:00:00Z/drive-scsi0.img.fidx",
                "ns/a/ct/200/2025-01-05T00:00:00Z/root.pxar.didx",
                "ns/a/ns/b/host/h1/2025-01-05T00:00:00Z/catalog.pcat1.didx",
                "stray.didx",
                "unknown/1/2025-01-01T00:00:00Z/w.fidx",
                "vm/100/not-a-time/x.fidx",
            ]
        );
        assert_eq!(order.expected.len(), 5);
    }

    /// A tree answering from a fixed map; a directory not in it is "not found".
    struct Fake(Vec<(&'static str, Vec<&'static str>)>);

    impl Tree for Fake {
        fn read_dir(&self, dir: &Path) -> io::Result<Vec<(String, EntryKind)>> {
            self.0
                .iter()
                .find(|(d, _)| Path::new(d) == dir)
                .map(|(_, names)| {
                    names
                        .iter()
                        .map(|n| (n.to_string(), EntryKind::Dir))
                        .collect()
                })
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
    }

    #[test]
    fn a_vanished_path_is_accepted_only_when_its_parent_no_longer_lists_it() {
        let root = Path::new("/s");
        let snap = Path::new("/s/vm/100/2025-01-01T00:00:00Z");
        let index = snap.join("drive-scsi0.img.fidx");
        // Pruned: the group no longer lists the snapshot (its directory is gone too).
        let pruned = Fake(vec![
            ("/s", vec!["vm"]),
            ("/s/vm", vec!["100"]),
            ("/s/vm/100", vec![]),
        ]);
        confirm_vanished(&pruned, root, &index).unwrap();
        confirm_vanished(&pruned, root, snap).unwrap();
        // The group still lists the snapshot, yet listing it said ENOENT: refuse.
        let lying = Fake(vec![
            ("/s", vec!["vm"]),
            ("/s/vm", vec!["100"]),
            ("/s/vm/100", vec!["2025-01-01T00:00:00Z"]),
        ]);
        let e = confirm_vanished(&lying, root, &index)
            .unwrap_err()
            .to_string();
        assert!(e.contains("still lists 2025-01-01T00:00:00Z"), "{e}");
        // Everything gone up to the root: the root itself must answer.
        let e = confirm_vanished(&Fake(vec![]), root, &index)
            .unwrap_err()
            .to_string();
        assert!(e.contains("neither is the datastore root"), "{e}");
    }

    #[test]
    fn a_directory_whose_name_is_not_utf8_stops_the_scan_instead_of_hiding_its_indexes() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let odd = tmp.path().join(std::ffi::OsStr::from_bytes(b"vm\xff"));
        touch(&odd.join("100/2025-01-01T00:00:00Z/drive-scsi0.img.fidx"));
        let e = list_index_files(&Fs, tmp.path()).unwrap_err();
        let e = format!("{e:#}");
        assert!(e.contains("not UTF-8") && e.contains("a directory"), "{e}");
        // A plain file or a hidden entry with such a name is left out, as PBS does.
        fs::remove_dir_all(&odd).unwrap();
        fs::write(
            tmp.path().join(std::ffi::OsStr::from_bytes(b"notes\xff")),
            b"",
        )
        .unwrap();
        fs::create_dir(tmp.path().join(std::ffi::OsStr::from_bytes(b".hidden\xff"))).unwrap();
        assert!(list_index_files(&Fs, tmp.path()).unwrap().is_empty());
    }

    #[test]
    fn invalid_namespace_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("ns/bad name")).unwrap();
        let e = list_namespaces(&Fs, tmp.path()).unwrap_err().to_string();
        assert!(
            e.contains("invalid namespace name") && e.contains("bad name"),
            "{e}"
        );
    }
}
