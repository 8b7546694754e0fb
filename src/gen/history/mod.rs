//! The backup-history model: which groups exist, when they were backed up, what prune kept,
//! and which chunk contents each index references — computed, never stored.
//!
//! This is pure: no I/O, no clock. The writer ([`super::writer`]) turns it into files, and a
//! simulator can stream the same references without materialising anything.
//!
//! # The model
//! * Every group backs up once a day at its own hour, from its start day to the last day of the
//!   history. `now` is 22:00 on the last day, so the newest backups are 2 to 22 hours old and the
//!   previous day's 26 to 46 hours: always at least 1h55m away from the default GC cutoff
//!   (24h 5m), whatever minute a GC runs soon after generation.
//! * Prune ran after every backup with the retention policy ([`Retention`], PBS's algorithm),
//!   so the snapshots present are those the policy keeps at `now`.
//! * GCs run every `now - prev_gc`, the last at `prev_gc`. It kept (and touched) what the
//!   snapshots present then referenced, kept what was younger than its cutoff (24 h 5 min) and
//!   removed everything else, so the store holds: chunks referenced now, chunks referenced at
//!   `prev_gc` but pruned since (garbage, atime `prev_gc`: old), chunks of snapshots made after
//!   `prev_gc` and pruned since, and chunks uploaded by a failed backup on the last day
//!   (garbage, atime hours ago: pending). When GCs run more often than the cutoff window (daily),
//!   the previous GC could not remove what the GC before it had touched: chunks referenced at
//!   `prev2_gc` and not since are garbage too, with atime `prev2_gc` (old).
//! * Content: archive slot `j` of a group changes at a given backup with probability `churn`;
//!   the change points are a hash-driven geometric sequence, so the version at any backup is
//!   found in `O(1 + churn·k)` without state. At version 0 a slot may be the all-zero chunk
//!   (sparse disks) or a chunk of the group's OS template (shared across groups). Catalogs
//!   change completely every backup.
//! * A chunk's atime is `max(creation, the last of prev_gc / prev2_gc that referenced it)`; its
//!   mtime is its creation time plus a sequence number in nanoseconds, strictly increasing in
//!   creation order.

use crate::rng::{hash, unit};

pub use super::retention::Retention;

/// The GC's default cutoff window, seconds: a GC removes no chunk touched more recently.
pub const GC_CUTOFF_SECS: i64 = crate::datastore::DEFAULT_ATIME_CUTOFF_MINUTES as i64 * 60;

/// A chunk content, identified by a 64-bit hash; the low bit says "dynamic chunk size".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentId(pub u64);

impl ContentId {
    /// The all-zero chunk of the fixed chunk size.
    pub const ZERO: ContentId = ContentId(0);

    /// Whether the chunk is of an archive with dynamic chunk sizes (`.didx`).
    pub fn is_dynamic(self) -> bool {
        self.0 & 1 == 1
    }

    pub(crate) fn new(h: u64, dynamic: bool) -> ContentId {
        // Never collide with ZERO: force bit 1 on for non-zero contents.
        ContentId((h & !1) | 2 | dynamic as u64)
    }
}

/// The three backup types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupType {
    /// A virtual machine (`vm/<id>`).
    Vm,
    /// A container (`ct/<id>`).
    Ct,
    /// A host's files (`host/<id>`).
    Host,
}

impl BackupType {
    /// The type's directory name (`vm`, `ct`, `host`).
    pub fn as_str(self) -> &'static str {
        match self {
            BackupType::Vm => "vm",
            BackupType::Ct => "ct",
            BackupType::Host => "host",
        }
    }
}

/// What an archive of a snapshot is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveKind {
    /// A VM disk: `.img.fidx`, fixed chunks, may hold zero chunks.
    Disk,
    /// A file archive: `.pxar.didx`, dynamic chunks.
    Pxar,
    /// The file catalog: `catalog.pcat1.didx`, new every backup.
    Catalog,
}

/// One archive of a group's snapshots.
#[derive(Clone, Debug)]
pub struct ArchiveSpec {
    /// Its file name in the snapshot (`drive-scsi0.img.fidx`, ...).
    pub name: String,
    /// What it is.
    pub kind: ArchiveKind,
    /// Its size in chunks (slots that change from backup to backup).
    pub slots: u32,
}

/// A failed backup on the last day: it uploaded new chunks, then died before its manifest.
#[derive(Clone, Copy, Debug)]
pub struct FailedBackup {
    /// When it started (epoch seconds).
    pub time: i64,
    /// Fraction of each archive it got through.
    pub fraction: f64,
}

/// A backup group and its history.
#[derive(Clone, Debug)]
pub struct GroupSpec {
    /// Index into [`History::namespaces`].
    pub ns: usize,
    /// Its backup type.
    pub ty: BackupType,
    /// Its backup id (the group directory's name under the type's).
    pub id: String,
    /// The OS template its first disk starts from (groups that share one share chunks).
    pub template: u32,
    /// The archives of each of its snapshots.
    pub archives: Vec<ArchiveSpec>,
    /// Backup times, oldest first (one per day).
    pub backups: Vec<i64>,
    /// Kept by prune at `now`.
    pub retained: Vec<bool>,
    /// Kept by prune at the previous GC (false for backups made after it).
    pub retained_prev: Vec<bool>,
    /// Kept by prune at the GC before the previous one, when its touches still count
    /// ([`History::prev2_gc`]); empty otherwise.
    pub retained_prev2: Vec<bool>,
    /// A backup on the last day that failed, if any.
    pub failed: Option<FailedBackup>,
}

/// Knobs of the content model.
#[derive(Clone, Copy, Debug)]
pub struct ContentModel {
    /// The generator's seed.
    pub seed: u64,
    /// Probability that a slot changes at a backup (set it with [`ContentModel::set_churn`]).
    churn: f64,
    /// ln(1 - churn), which every version lookup needs.
    ln_keep: f64,
    /// Fraction of disk slots that are all-zero until they change.
    pub zero_fraction: f64,
    /// Fraction of the first archive's slots that come from the group's template.
    pub template_fraction: f64,
}

impl ContentModel {
    /// A model with these knobs (`churn` the probability that a slot changes at a backup).
    pub fn new(seed: u64, churn: f64, zero_fraction: f64, template_fraction: f64) -> Self {
        let mut m = ContentModel {
            seed,
            churn: 0.0,
            ln_keep: 0.0,
            zero_fraction,
            template_fraction,
        };
        m.set_churn(churn);
        m
    }

    /// The probability that a slot changes at a backup.
    pub fn churn(&self) -> f64 {
        self.churn
    }

    /// Sets that probability.
    pub fn set_churn(&mut self, churn: f64) {
        self.churn = churn;
        self.ln_keep = (1.0 - churn).ln();
    }

    /// The content of slot `slot` of archive `ai` of group `gi` at backup `k`.
    pub fn content(&self, gi: u32, g: &GroupSpec, ai: u32, slot: u32, k: u32) -> ContentId {
        if g.archives[ai as usize].kind == ArchiveKind::Catalog {
            return self.content_at(gi, g, ai, slot, k, 0);
        }
        self.content_at(gi, g, ai, slot, k, self.version(gi, ai, slot, k))
    }

    /// [`ContentModel::content`] with the slot's version (the backup number of its last
    /// change at or before `k`) known.
    #[inline]
    fn content_at(
        &self,
        gi: u32,
        g: &GroupSpec,
        ai: u32,
        slot: u32,
        k: u32,
        version: u32,
    ) -> ContentId {
        let a = &g.archives[ai as usize];
        let dynamic = a.kind != ArchiveKind::Disk;
        if a.kind == ArchiveKind::Catalog {
            return ContentId::new(
                hash(&[self.seed, 3, gi as u64, ai as u64, slot as u64, k as u64]),
                true,
            );
        }
        if version > 0 {
            return ContentId::new(
                hash(&[
                    self.seed,
                    2,
                    gi as u64,
                    ai as u64,
                    slot as u64,
                    version as u64,
                ]),
                dynamic,
            );
        }
        let h0 = hash(&[self.seed, 1, gi as u64, ai as u64, slot as u64]);
        if a.kind == ArchiveKind::Disk && unit(h0) < self.zero_fraction {
            return ContentId::ZERO;
        }
        if ai == 0 && (slot as f64) < self.template_fraction * a.slots as f64 {
            return ContentId::new(
                hash(&[self.seed, 4, g.ty as u64, g.template as u64, slot as u64]),
                dynamic,
            );
        }
        ContentId::new(
            hash(&[self.seed, 2, gi as u64, ai as u64, slot as u64, 0]),
            dynamic,
        )
    }

    /// The backup after `at` at which the slot changes next.
    #[inline]
    fn next_change(&self, gi: u32, ai: u32, slot: u32, at: u32) -> u64 {
        let u = 1.0
            - unit(hash(&[
                self.seed,
                5,
                gi as u64,
                ai as u64,
                slot as u64,
                at as u64,
            ]));
        at as u64 + ((u.ln() / self.ln_keep).ceil() as u64).max(1)
    }

    /// The backup number of the last change of a slot at or before backup `k` (0: never).
    fn version(&self, gi: u32, ai: u32, slot: u32, k: u32) -> u32 {
        if self.churn <= 0.0 {
            return 0;
        }
        if self.churn >= 1.0 {
            return k;
        }
        let mut at = 0u32;
        loop {
            let next = self.next_change(gi, ai, slot, at);
            if next > k as u64 {
                return at;
            }
            at = next as u32;
        }
    }
}

/// Where each slot of one archive stands in its history of changes, so that walking the
/// backups of a group in order costs a step per change instead of a replay from backup 0 per
/// slot and backup (see [`History::for_each_content_cached`]). 12 bytes a slot, one archive at
/// a time.
#[derive(Clone, Debug, Default)]
pub struct VersionCursor {
    /// (group, archive, backup) the state is at.
    at: Option<(u32, u32, u32)>,
    /// Per slot: its last change at or before that backup, and its next change.
    slots: Vec<(u32, u64)>,
}

/// A namespace directory, relative to the datastore root ("" is the root namespace).
#[derive(Clone, Debug)]
pub struct NamespaceSpec {
    /// Its path relative to the datastore root (`ns/a/ns/b`).
    pub rel: String,
    /// Its depth (0: the root namespace).
    pub depth: usize,
}

/// The whole history of a store.
#[derive(Clone, Debug)]
pub struct History {
    /// The namespaces, root first.
    pub namespaces: Vec<NamespaceSpec>,
    /// Every backup group.
    pub groups: Vec<GroupSpec>,
    /// How contents change.
    pub model: ContentModel,
    /// The history's "now" (22:00 on its last day), epoch seconds.
    pub now: i64,
    /// When the previous GC ran.
    pub prev_gc: i64,
    /// When the GC before it ran, if GCs run more often than the cutoff window (24 h 5 min):
    /// the chunks it touched were then too young for the previous GC to remove, so they are
    /// still in the store, old now (datastore B's daily GC removes what the day before
    /// pruned). `None` when the interval is longer: the previous GC removed them.
    pub prev2_gc: Option<i64>,
}

/// See [`History::chunk_sets`]: each content whose chunk is in the store now, with bits that
/// say which snapshots reference it. One map entry a chunk: a set per question (present,
/// referenced now, at the previous GC, at the one before) took 49 bytes a chunk at datastore
/// A's size, this 31.
#[derive(Clone, Debug, Default)]
pub struct ChunkSets {
    flags: hashbrown::HashMap<ContentId, u8>,
    referenced: usize,
    referenced_prev2: usize,
}

impl ChunkSets {
    /// Referenced by the snapshots present now.
    pub const NOW: u8 = 1;
    /// Referenced by the snapshots present at the previous GC.
    pub const PREV: u8 = 2;
    /// Referenced at the GC before the previous one (never unless [`History::prev2_gc`]).
    pub const PREV2: u8 = 4;
    /// Not set by [`History::chunk_sets`]: the caller's own mark ([`ChunkSets::mark`]).
    pub const MARK: u8 = 0x80;

    fn add(&mut self, c: ContentId, bits: u8) {
        let f = self.flags.entry(c).or_insert(0);
        self.referenced += (bits & !*f & Self::NOW != 0) as usize;
        self.referenced_prev2 += (bits & !*f & Self::PREV2 != 0) as usize;
        *f |= bits;
    }

    /// Whether `c`'s chunk is in the store now.
    #[inline]
    pub fn is_present(&self, c: ContentId) -> bool {
        self.flags.contains_key(&c)
    }

    /// Whether the snapshots present now reference `c`.
    #[inline]
    pub fn is_referenced(&self, c: ContentId) -> bool {
        self.has(c, Self::NOW)
    }

    /// Whether `c` is present with any of `bits`.
    #[inline]
    pub fn has(&self, c: ContentId, bits: u8) -> bool {
        self.flags.get(&c).is_some_and(|&f| f & bits != 0)
    }

    /// Marks `c` ([`ChunkSets::MARK`]); true if it is present and was not marked yet (the
    /// first time a build meets a content whose chunk it must make).
    #[inline]
    pub fn mark(&mut self, c: ContentId) -> bool {
        match self.flags.get_mut(&c) {
            Some(f) if *f & Self::MARK == 0 => {
                *f |= Self::MARK;
                true
            }
            _ => false,
        }
    }

    /// Contents whose chunk is in the store now.
    pub fn present_len(&self) -> usize {
        self.flags.len()
    }

    /// Contents the snapshots present now reference.
    pub fn referenced_len(&self) -> usize {
        self.referenced
    }

    /// Contents referenced at the GC before the previous one.
    pub fn referenced_prev2_len(&self) -> usize {
        self.referenced_prev2
    }

    /// Every present content with its bits, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (ContentId, u8)> + '_ {
        self.flags.iter().map(|(&c, &f)| (c, f))
    }

    /// Bytes of its map (for the simulator's memory accounting).
    pub fn heap_bytes(&self) -> u64 {
        hash_table_bytes(
            self.flags.capacity(),
            std::mem::size_of::<(ContentId, u8)>(),
        )
    }
}

/// Bytes of a hashbrown table that can hold `capacity` entries of `entry` bytes: its buckets
/// (capacity is 7/8 of them, a power of two) and a control byte each.
pub fn hash_table_bytes(capacity: usize, entry: usize) -> u64 {
    if capacity == 0 {
        return 0;
    }
    let buckets = (capacity * 8 / 7).next_power_of_two();
    (buckets * (entry + 1)) as u64
}

/// One backup event (successful or failed) of the history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// When it ran (epoch seconds).
    pub time: i64,
    /// Its group (an index into [`History::groups`]).
    pub group: u32,
    /// Backup number within the group; for a failed backup, the number it would have had.
    pub k: u32,
    /// Whether it failed (uploaded chunks, wrote no manifest).
    pub failed: bool,
}

impl History {
    /// Every backup event, oldest first (ties by group).
    pub fn events(&self) -> Vec<Event> {
        let mut out = Vec::new();
        for (gi, g) in self.groups.iter().enumerate() {
            for (k, &time) in g.backups.iter().enumerate() {
                out.push(Event {
                    time,
                    group: gi as u32,
                    k: k as u32,
                    failed: false,
                });
            }
            if let Some(f) = g.failed {
                out.push(Event {
                    time: f.time,
                    group: gi as u32,
                    k: g.backups.len() as u32,
                    failed: true,
                });
            }
        }
        out.sort_by_key(|e| (e.time, e.group, e.failed));
        out
    }

    /// Calls `f` with each content an event's archive `ai` references, in index order.
    /// A failed backup yields only what it uploaded: changed slots in its first `fraction`.
    pub fn for_each_content(&self, e: &Event, ai: usize, mut f: impl FnMut(ContentId)) {
        let g = &self.groups[e.group as usize];
        let a = &g.archives[ai];
        if e.failed {
            let fraction = g.failed.map_or(0.0, |f| f.fraction);
            let upto = (a.slots as f64 * fraction) as u32;
            for slot in 0..upto {
                let c = self.model.content(e.group, g, ai as u32, slot, e.k);
                if c != self.model.content(e.group, g, ai as u32, slot, e.k - 1) {
                    f(c);
                }
            }
            return;
        }
        for slot in 0..a.slots {
            f(self.model.content(e.group, g, ai as u32, slot, e.k));
        }
    }

    /// [`History::for_each_content`], faster when consecutive calls walk one archive's
    /// backups in order (as the GC's index walk does): `cursor` keeps every slot's place in
    /// its history of changes. Same contents, same order.
    pub fn for_each_content_cached(
        &self,
        cursor: &mut VersionCursor,
        e: &Event,
        ai: usize,
        f: impl FnMut(ContentId),
    ) {
        self.walk_contents_cached(cursor, e, ai, false, f)
    }

    /// The contents of [`History::for_each_content_cached`] that the cursor's previous place
    /// in the same archive did not have (all of them when the cursor starts here): a walk
    /// over every backup in order that needs each content once (the order in which chunks
    /// are created) sees every content, with a call per change instead of a call per slot
    /// and backup. A content may still come again (another archive has it, or a slot goes
    /// back to it).
    pub fn for_each_new_content_cached(
        &self,
        cursor: &mut VersionCursor,
        e: &Event,
        ai: usize,
        f: impl FnMut(ContentId),
    ) {
        self.walk_contents_cached(cursor, e, ai, true, f)
    }

    fn walk_contents_cached(
        &self,
        cursor: &mut VersionCursor,
        e: &Event,
        ai: usize,
        only_new: bool,
        mut f: impl FnMut(ContentId),
    ) {
        let m = &self.model;
        let g = &self.groups[e.group as usize];
        let a = &g.archives[ai];
        if e.failed || m.churn <= 0.0 || m.churn >= 1.0 || a.kind == ArchiveKind::Catalog {
            return self.for_each_content(e, ai, f);
        }
        let (gi, ai32, k) = (e.group, ai as u32, e.k);
        let resume = matches!(cursor.at, Some((cg, ca, ck)) if cg == gi && ca == ai32 && ck <= k)
            && cursor.slots.len() == a.slots as usize;
        if !resume {
            cursor.slots.clear();
            cursor
                .slots
                .extend((0..a.slots).map(|slot| (0, m.next_change(gi, ai32, slot, 0))));
        }
        cursor.at = Some((gi, ai32, k));
        for (slot, state) in cursor.slots.iter_mut().enumerate() {
            let slot = slot as u32;
            let changed = state.1 <= k as u64;
            while state.1 <= k as u64 {
                state.0 = state.1 as u32;
                state.1 = m.next_change(gi, ai32, slot, state.0);
            }
            // Outside catalogs (above) a slot's content is a function of its version.
            if changed || !resume || !only_new {
                f(m.content_at(gi, g, ai32, slot, k, state.0));
            }
        }
    }

    /// A cursor for every archive of every group (empty until used), for walks in time order
    /// that interleave the groups: each archive's backups still come in order.
    pub fn cursors(&self) -> Vec<Vec<VersionCursor>> {
        self.groups
            .iter()
            .map(|g| vec![VersionCursor::default(); g.archives.len()])
            .collect()
    }

    /// True if the event's snapshot exists at `now`.
    pub fn is_retained(&self, e: &Event) -> bool {
        !e.failed && self.groups[e.group as usize].retained[e.k as usize]
    }

    /// True if the event's chunks were referenced when the previous GC ran.
    pub fn was_retained_at_prev_gc(&self, e: &Event) -> bool {
        !e.failed && self.groups[e.group as usize].retained_prev[e.k as usize]
    }

    /// True if the event's chunks were referenced when the GC before the previous one ran
    /// and its touches still count ([`History::prev2_gc`]).
    pub fn was_retained_at_prev2_gc(&self, e: &Event) -> bool {
        let r = &self.groups[e.group as usize].retained_prev2;
        !e.failed && !r.is_empty() && r[e.k as usize]
    }

    /// The atime of a chunk created at `created` with content `c`: the last GC that found
    /// it referenced touched it (the previous one, or the one before), else its creation.
    pub fn initial_atime(&self, sets: &ChunkSets, c: ContentId, created: i64) -> i64 {
        if sets.has(c, ChunkSets::PREV) {
            created.max(self.prev_gc)
        } else if let (Some(t), true) = (self.prev2_gc, sets.has(c, ChunkSets::PREV2)) {
            created.max(t)
        } else {
            created
        }
    }

    /// The contents whose chunks exist in the store at `now` (`present`), and which of them
    /// the snapshots present now and at the previous GC reference. Everything pruned and
    /// collected before the previous GC is absent.
    pub fn chunk_sets(&self) -> ChunkSets {
        let mut sets = ChunkSets::default();
        let mut contents = Vec::new();
        let mut cursors = self.cursors();
        for e in &self.events() {
            let (now, prev) = (self.is_retained(e), self.was_retained_at_prev_gc(e));
            let prev2 = self.was_retained_at_prev2_gc(e);
            // The previous GC kept what was referenced and what was younger than its cutoff:
            // created in its window, or touched by the GC before it.
            if !self.leaves_chunks(e) {
                continue; // pruned and collected by the previous GC or earlier
            }
            for (ai, cursor) in cursors[e.group as usize].iter_mut().enumerate() {
                contents.clear();
                self.for_each_content_cached(cursor, e, ai, |c| contents.push(c));
                let bits = (now as u8 * ChunkSets::NOW)
                    | (prev as u8 * ChunkSets::PREV)
                    | (prev2 as u8 * ChunkSets::PREV2);
                for &c in &contents {
                    sets.add(c, bits);
                }
            }
        }
        sets
    }

    /// Whether an event's chunks are still in the store at `now` (see [`History::chunk_sets`]):
    /// referenced now or at one of the last two GCs, or younger than the previous GC's cutoff.
    fn leaves_chunks(&self, e: &Event) -> bool {
        self.is_retained(e)
            || self.was_retained_at_prev_gc(e)
            || self.was_retained_at_prev2_gc(e)
            || e.time > self.prev_gc - GC_CUTOFF_SECS
    }

    /// About how many chunk files the store holds at `now` (`chunk_sets().present_len()`),
    /// from about `samples` content lookups instead of every one: the contents of every
    /// `stride`-th slot of each archive over the events whose chunks are still there (the same
    /// slots in every group, so shared contents stay shared), times `stride`. Failed backups'
    /// partial uploads are left out. Cheap where the exact count needs the whole store's sets.
    pub fn present_chunks_estimate(&self, samples: u64) -> u64 {
        let events: Vec<Event> = self
            .events()
            .into_iter()
            .filter(|e| !e.failed && self.leaves_chunks(e))
            .collect();
        let slots: u64 = events
            .iter()
            .flat_map(|e| self.groups[e.group as usize].archives.iter())
            .map(|a| a.slots as u64)
            .sum();
        let stride = slots.div_ceil(samples.max(1)).max(1);
        let mut seen = hashbrown::HashSet::new();
        for e in &events {
            let g = &self.groups[e.group as usize];
            for (ai, a) in g.archives.iter().enumerate() {
                for slot in (0..a.slots).step_by(stride as usize) {
                    seen.insert(self.model.content(e.group, g, ai as u32, slot, e.k));
                }
            }
        }
        seen.len() as u64 * stride
    }

    /// Number of references and distinct contents over the snapshots present at `now`.
    pub fn dedup_counts(&self) -> (u64, u64) {
        self.dedup_counts_sampled(1)
    }

    /// References of the snapshots present at `now`, without computing any content.
    pub fn reference_count(&self) -> u64 {
        let mut refs = 0u64;
        for (gi, g) in self.groups.iter().enumerate() {
            for k in 0..g.backups.len() {
                let e = Event {
                    time: g.backups[k],
                    group: gi as u32,
                    k: k as u32,
                    failed: false,
                };
                if self.is_retained(&e) {
                    refs += g.archives.iter().map(|a| a.slots as u64).sum::<u64>();
                }
            }
        }
        refs
    }

    /// [`Self::dedup_counts`] over the slots whose number is a multiple of `stride`: the
    /// same slots in every group, so contents shared between groups (templates, the zero
    /// chunk) stay shared in the sample, and the ratio estimates the whole store's.
    pub fn dedup_counts_sampled(&self, stride: u32) -> (u64, u64) {
        let stride = stride.max(1);
        let mut seen = hashbrown::HashSet::new();
        let mut refs = 0u64;
        for e in self.events() {
            if !self.is_retained(&e) {
                continue;
            }
            let g = &self.groups[e.group as usize];
            for (ai, a) in g.archives.iter().enumerate() {
                for slot in (0..a.slots).step_by(stride as usize) {
                    refs += 1;
                    seen.insert(self.model.content(e.group, g, ai as u32, slot, e.k));
                }
            }
        }
        (refs, seen.len() as u64)
    }
}

#[cfg(test)]
mod tests;
