//! Building index files ahead of the GC's walk, on a second thread (hashed digests only).

use std::io;
use std::path::Path;

use crate::datastore::snapshots::{EntryKind, Tree};
use crate::datastore::IndexFile;
use crate::store::Phase1Visitor;

use super::store::{NodeKind, SimStore};

impl SimStore {
    /// The index walk of hashed stores: a second thread runs the same walk over the same
    /// tree without requests, building each index file's bytes ahead of the GC (up to
    /// [`AHEAD`] files), so that building them (half of an LRU run's time at thread 000's
    /// scale) overlaps the GC's touches. Exact stores read their digests from the chunk
    /// records under the state's lock, which the GC's touches hold: they build on the GC's
    /// thread.
    pub(super) fn walk_indexes_ahead(&self, visitor: &mut dyn Phase1Visitor) -> anyhow::Result<()> {
        use crate::datastore::error::FormatError;
        let walk = |mut ahead: Option<Ahead>, visitor: &mut dyn Phase1Visitor| {
            crate::store::walk_indexes(
                self,
                &self.root,
                &mut |p| self.open_index(p, ahead.as_mut()).map(Some),
                visitor,
            )
        };
        if !self.indexes.builds_ahead() {
            return walk(None, visitor);
        }
        // Both walks visit the indexes in the same order.
        let order = visitor.order();
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel(AHEAD);
            scope.spawn(move || {
                let quiet = Quiet(self);
                let mut build = |p: &Path| {
                    let node = self.node_at(p);
                    if let Some(n) = node {
                        if let NodeKind::Index(id) = self.nodes[n as usize].kind {
                            let bytes = self.index_bytes(id);
                            if tx.send((n, bytes)).is_err() {
                                // The GC's walk ended (an error): stop.
                                return Err(FormatError::io(p, io::ErrorKind::Interrupted.into()));
                            }
                        }
                    }
                    // Nothing to visit here: the walk goes on to the next.
                    Ok(None)
                };
                let _ = crate::store::walk_indexes(
                    &quiet,
                    &self.root,
                    &mut build,
                    &mut Unvisited(order),
                );
            });
            walk(Some(Ahead { rx, next: None }), visitor)
        })
    }
}

/// Index files the generating thread may build ahead of the GC's walk.
const AHEAD: usize = 8;

/// The GC's end of the index files built ahead.
pub(super) struct Ahead {
    rx: std::sync::mpsc::Receiver<(u32, Vec<u8>)>,
    /// Received but not yet asked for.
    next: Option<(u32, Vec<u8>)>,
}

impl Ahead {
    /// The bytes of index node `node`, if they are the next ones built. Both walks list the
    /// same tree in the same order, so they are; if not, the caller builds them itself.
    pub(super) fn take(&mut self, node: u32) -> Option<Vec<u8>> {
        if self.next.is_none() {
            self.next = self.rx.recv().ok();
        }
        match self.next.take() {
            Some((n, bytes)) if n == node => Some(bytes),
            other => {
                debug_assert!(other.is_none(), "the walks went apart at index node {node}");
                self.next = other;
                None
            }
        }
    }
}

/// The simulated store's tree, listed without requests (for the walk that builds ahead).
struct Quiet<'a>(&'a SimStore);

impl Tree for Quiet<'_> {
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<(String, EntryKind)>> {
        let n = self.0.node_at(dir).ok_or(io::ErrorKind::NotFound)?;
        if !matches!(self.0.nodes[n as usize].kind, NodeKind::Dir) {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        Ok(self.0.entries(n))
    }
}

/// A visitor for a walk that visits nothing, in the GC's order.
struct Unvisited(crate::store::IndexOrder);

impl Phase1Visitor for Unvisited {
    fn order(&self) -> crate::store::IndexOrder {
        self.0
    }
    fn start(&mut self, _: usize) {}
    fn index(
        &mut self,
        _: &Path,
        _: IndexFile,
        _: crate::store::IndexOrigin,
    ) -> anyhow::Result<()> {
        Ok(())
    }
}
