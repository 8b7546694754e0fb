//! The kernel's cache of directories on a mount with a directory TTL (`mount --dir-ttl`):
//! what it answers itself never reaches the overlay, so the simulator emits no request for
//! it.
//!
//! As the kernel's FUSE client does: a successful lookup of a directory makes its entry and
//! attributes valid for the TTL, a getattr its attributes; a listing invalidates the
//! attributes (the atime changed), and so does a change of an entry in it (an unlink). A
//! failed lookup caches nothing (the overlay answers ENOENT, not a negative entry). Files
//! (chunks, index files) are never cached here: they keep TTL 0. The clock is the model's:
//! the time a real run through the mount would have taken.

/// Until when (model ns) each directory node's entry and attributes are cached.
#[derive(Clone, Debug, Default)]
pub(super) struct Dentries {
    ttl_ns: u64,
    /// By node index; empty when the TTL is 0.
    entry_until: Vec<u64>,
    attr_until: Vec<u64>,
}

impl Dentries {
    /// Nothing cached, for `nodes` nodes; a TTL of 0 caches nothing ever.
    pub(super) fn new(ttl_ns: u64, nodes: usize) -> Dentries {
        let n = if ttl_ns > 0 { nodes } else { 0 };
        Dentries {
            ttl_ns,
            entry_until: vec![0; n],
            attr_until: vec![0; n],
        }
    }

    /// The TTL, ns.
    pub(super) fn ttl_ns(&self) -> u64 {
        self.ttl_ns
    }

    /// A new mount: nothing cached.
    pub(super) fn clear(&mut self) {
        self.entry_until.fill(0);
        self.attr_until.fill(0);
    }

    /// Whether the kernel would answer a lookup of directory `node` itself at `now`.
    #[inline]
    pub(super) fn entry_cached(&self, node: u32, now: u64) -> bool {
        self.entry_until
            .get(node as usize)
            .is_some_and(|&t| now < t)
    }

    /// Whether it would answer a stat of directory `node` itself at `now`.
    #[inline]
    pub(super) fn attr_cached(&self, node: u32, now: u64) -> bool {
        self.attr_until.get(node as usize).is_some_and(|&t| now < t)
    }

    /// A lookup of directory `node` answered at `now`: entry and attributes cached.
    #[inline]
    pub(super) fn entered(&mut self, node: u32, now: u64) {
        if let Some(t) = self.entry_until.get_mut(node as usize) {
            *t = now + self.ttl_ns;
            self.attr_until[node as usize] = now + self.ttl_ns;
        }
    }

    /// A getattr of directory `node` answered at `now`: attributes cached.
    #[inline]
    pub(super) fn attr_read(&mut self, node: u32, now: u64) {
        if let Some(t) = self.attr_until.get_mut(node as usize) {
            *t = now + self.ttl_ns;
        }
    }

    /// Directory `node` was listed or changed: its attributes are asked for again.
    #[inline]
    pub(super) fn attr_changed(&mut self, node: u32) {
        if let Some(t) = self.attr_until.get_mut(node as usize) {
            *t = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_last_the_ttl_and_listings_invalidate_attributes() {
        let mut d = Dentries::new(100, 4);
        assert!(!d.entry_cached(1, 0));
        d.entered(1, 10);
        assert!(d.entry_cached(1, 109) && d.attr_cached(1, 109));
        assert!(!d.entry_cached(1, 110), "expired at the TTL");
        d.attr_changed(1);
        assert!(d.entry_cached(1, 50) && !d.attr_cached(1, 50));
        d.attr_read(1, 60);
        assert!(d.attr_cached(1, 159));
        d.clear();
        assert!(!d.entry_cached(1, 50));
        let mut off = Dentries::new(0, 4);
        off.entered(1, 10);
        assert!(!off.entry_cached(1, 11), "TTL 0 caches nothing");
    }
}
