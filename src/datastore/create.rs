//! Creating an empty datastore as `ChunkStore::create` does (format document 1.1, 1.2): the
//! root (0755), `.chunks` (0750) with all 65536 subdirectories `0000`..`ffff` (0750), and an
//! empty `.lock` (0644). Subdirectories are created in numeric order, so on filesystems that
//! number inodes by creation they get consecutive inode numbers, as on a real PBS store.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{bail, Context, Result};

use super::paths::{chunk_subdir_name, CHUNK_DIR, CHUNK_SUBDIRS, LOCK_FILE};

/// Creates a datastore at `root`, which must not exist or be an empty directory.
///
/// `owner` chowns everything (PBS wants `backup:backup`); `progress` is called with the number
/// of chunk directories created so far.
pub fn create_datastore(
    root: &Path,
    owner: Option<(u32, u32)>,
    mut progress: impl FnMut(usize),
) -> Result<()> {
    if root.exists() {
        let mut entries =
            fs::read_dir(root).with_context(|| format!("reading {}", root.display()))?;
        if entries.next().is_some() {
            bail!(
                "refusing to create a datastore in {}: directory is not empty",
                root.display()
            );
        }
    } else {
        fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    }
    fs::set_permissions(root, fs::Permissions::from_mode(0o755))?;
    let chown = |p: &Path| -> Result<()> {
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(p, Some(uid), Some(gid))
                .with_context(|| format!("chown {}", p.display()))?;
        }
        Ok(())
    };
    chown(root)?;
    let chunks = root.join(CHUNK_DIR);
    let mut builder = fs::DirBuilder::new();
    builder.mode(0o750);
    builder
        .create(&chunks)
        .with_context(|| format!("creating {}", chunks.display()))?;
    fs::set_permissions(&chunks, fs::Permissions::from_mode(0o750))?;
    chown(&chunks)?;
    let lock = root.join(LOCK_FILE);
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&lock)
        .with_context(|| format!("creating {}", lock.display()))?;
    fs::set_permissions(&lock, fs::Permissions::from_mode(0o644))?;
    chown(&lock)?;
    for i in 0..CHUNK_SUBDIRS {
        let dir = chunks.join(chunk_subdir_name(i as u16));
        builder
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        chown(&dir)?;
        if i % 4096 == 4095 {
            progress(i + 1);
        }
    }
    Ok(())
}
