//! Materialises a [`History`] as a datastore on disk.
//!
//! Files are created in backup order, oldest backup first, and within a backup in index order,
//! as a PBS client uploads them: on filesystems that number inodes by creation (tmpfs, ZFS)
//! inode numbers therefore follow the history, as on a real store. Chunk mtimes are set to the
//! creation time, strictly increasing, so creation order can be recovered on any filesystem.
//!
//! History times name the snapshots (deterministic for a seed); atimes and mtimes are the
//! same times shifted so that the history's `now` is the real time of generation, because the
//! GC cutoff is relative to the real clock.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::progress::Bar;
use anyhow::{Context, Result};
use hashbrown::{HashMap, HashSet};

use super::history::{BackupType, ChunkSets, ContentId, Event, History};
use super::payload::PayloadModel;
use super::truth::{GarbageCounts, GroundTruth};
use super::GenConfig;
use crate::datastore::create::create_datastore;
use crate::datastore::index::{
    dynamic_index_bytes, fixed_index_bytes, write_index_file, IndexKind,
};
use crate::datastore::manifest::{Manifest, ManifestFile};
use crate::datastore::paths::{chunk_rel_path, GROUP_OWNER_FILE, MANIFEST_BLOB_NAME};
use crate::datastore::{blob, Digest};
use crate::fsutil::{set_file_times, Timestamp};
use crate::rng::hash;

use crate::datastore::DEFAULT_ATIME_CUTOFF_MINUTES as DEFAULT_CUTOFF_MINUTES;

/// How to write.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// chown everything to this uid/gid (PBS wants backup:backup).
    pub owner: Option<(u32, u32)>,
    /// Draw progress bars on a terminal.
    pub progress: bool,
    /// The real time the history's `now` maps to, epoch seconds.
    pub now: i64,
}

#[derive(Clone, Copy)]
struct Written {
    digest: Digest,
    data_len: u32,
    blob_len: u32,
    atime: i64,
    missing: bool,
}

struct Writer<'a> {
    root: &'a Path,
    history: &'a History,
    payload: PayloadModel,
    opts: &'a WriteOptions,
    shift: i64,
    last_mtime_ns: i128,
    data: Vec<u8>,
    path: PathBuf,
}

fn ts_from_ns(ns: i128) -> Timestamp {
    Timestamp::new(
        ns.div_euclid(1_000_000_000) as i64,
        ns.rem_euclid(1_000_000_000) as u32,
    )
}

impl Writer<'_> {
    fn chown(&self, p: &Path) -> Result<()> {
        if let Some((uid, gid)) = self.opts.owner {
            std::os::unix::fs::chown(p, Some(uid), Some(gid))
                .with_context(|| format!("chown {}", p.display()))?;
        }
        Ok(())
    }

    /// The next creation time: the event's time, strictly after the previous file's.
    fn next_mtime(&mut self, event_time: i64) -> Timestamp {
        let ns = ((event_time + self.shift) as i128 * 1_000_000_000).max(self.last_mtime_ns + 1);
        self.last_mtime_ns = ns;
        ts_from_ns(ns)
    }

    fn create_file(
        &mut self,
        rel: &Path,
        bytes: &[u8],
        atime: Timestamp,
        mtime: Timestamp,
    ) -> Result<()> {
        self.path.clear();
        self.path.push(self.root);
        self.path.push(rel);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&self.path)
            .with_context(|| format!("creating {}", self.path.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("writing {}", self.path.display()))?;
        set_file_times(&f, atime, mtime)
            .with_context(|| format!("setting times of {}", self.path.display()))?;
        self.chown(&self.path)?;
        Ok(())
    }

    /// Creates (unless `missing`) the chunk file for an encoded content of event `e`.
    fn create_chunk(
        &mut self,
        enc: &Encoded,
        e: &Event,
        atime: i64,
        missing: bool,
    ) -> Result<Written> {
        let mtime = self.next_mtime(e.time);
        if !missing {
            self.create_file(
                &chunk_rel_path(&enc.digest),
                &enc.raw,
                Timestamp::new(atime + self.shift, 0),
                mtime,
            )?;
        }
        Ok(Written {
            digest: enc.digest,
            data_len: enc.data_len,
            blob_len: enc.raw.len() as u32,
            atime,
            missing,
        })
    }
}

/// What the snapshots written so far add up to.
#[derive(Default)]
struct IndexTotals {
    snapshots: usize,
    fixed: usize,
    dynamic: usize,
    references: u64,
    index_data_bytes: u64,
}

/// A chunk ready to be written: its name, data length and blob bytes.
struct Encoded {
    digest: Digest,
    data_len: u32,
    raw: Vec<u8>,
}

fn encode_one(payload: &PayloadModel, c: ContentId, data: &mut Vec<u8>) -> Encoded {
    payload.fill(c, data);
    Encoded {
        digest: Digest::of(data),
        data_len: data.len() as u32,
        raw: blob::encode(data, true),
    }
}

/// Hashes and compresses `contents` (SHA-256 and zstd are the CPU cost of generation), on two
/// threads when there are enough of them; the result is in input order, so files are still
/// created in history order by the caller.
fn encode_all(payload: &PayloadModel, contents: &[ContentId]) -> Vec<Encoded> {
    let run = |part: &[ContentId]| {
        let mut data = Vec::new();
        part.iter()
            .map(|&c| encode_one(payload, c, &mut data))
            .collect::<Vec<_>>()
    };
    if contents.len() < 256 {
        return run(contents);
    }
    let (a, b) = contents.split_at(contents.len() / 2);
    std::thread::scope(|s| {
        let second = s.spawn(|| run(b));
        let mut out = run(a);
        out.extend(second.join().expect("encoder thread panicked"));
        out
    })
}

/// The group's directory, relative to the datastore root.
pub(crate) fn group_dir(history: &History, gi: usize) -> PathBuf {
    let g = &history.groups[gi];
    let ns = &history.namespaces[g.ns].rel;
    Path::new(ns).join(g.ty.as_str()).join(&g.id)
}

/// The bytes of archive `ai`'s index for event `e` from its `(digest, data length)`
/// references, and the content size it describes: a `.fidx` of fixed-size chunks or a
/// `.didx` with cumulative ends. The writer and the simulator build indexes with this.
pub(crate) fn archive_index_bytes(
    cfg: &GenConfig,
    e: &Event,
    ai: usize,
    name: &str,
    refs: &[(Digest, u32)],
) -> (Vec<u8>, u64) {
    let id = uuid(cfg.seed, e, ai);
    if name.ends_with(".fidx") {
        let digests: Vec<Digest> = refs.iter().map(|d| d.0).collect();
        let size = digests.len() as u64 * cfg.chunk_size as u64;
        let bytes = fixed_index_bytes(id, e.time, size, cfg.chunk_size as u64, &digests);
        (bytes, size)
    } else {
        let mut end = 0u64;
        let entries: Vec<(u64, Digest)> = refs
            .iter()
            .map(|&(d, len)| {
                end += len as u64;
                (end, d)
            })
            .collect();
        (dynamic_index_bytes(id, e.time, &entries), end)
    }
}

fn uuid(seed: u64, e: &Event, ai: usize) -> [u8; 16] {
    let a = hash(&[seed, 50, e.group as u64, e.k as u64, ai as u64]);
    let b = hash(&[seed, 51, e.group as u64, e.k as u64, ai as u64]);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&a.to_le_bytes());
    out[8..].copy_from_slice(&b.to_le_bytes());
    out[6] = (out[6] & 0x0f) | 0x40; // version 4
    out[8] = (out[8] & 0x3f) | 0x80; // RFC 4122 variant
    out
}

fn progress_bar(enabled: bool, len: u64, what: &str) -> Bar {
    let template = format!(
        "{{spinner}} {what} [{{wide_bar}}] {{human_pos}}/{{human_len}} ({{rate}}, eta {{eta}})"
    );
    Bar::new(enabled, len, &template)
}

/// Writes the store for `history` into `root` (absent or empty) and returns its ground truth.
pub fn write_store(
    cfg: &GenConfig,
    history: &History,
    root: &Path,
    opts: &WriteOptions,
) -> Result<GroundTruth> {
    let started = Instant::now();
    let seed = cfg.seed;
    let events = history.events();

    // Which contents exist, and which were referenced now and at the previous GC.
    let sets = history.chunk_sets();
    let mut contents = Vec::new();

    let missing = missing_contents(cfg, &sets);

    create_empty_store(root, opts)?;

    let mut w = Writer {
        root,
        history,
        payload: PayloadModel {
            seed,
            chunk_size: cfg.chunk_size,
            entropy: cfg.entropy,
            incompressible: cfg.incompressible,
        },
        opts,
        shift: opts.now - history.now,
        last_mtime_ns: i128::MIN,
        data: Vec::new(),
        path: PathBuf::new(),
    };
    let mut written: HashMap<ContentId, Written> = HashMap::with_capacity(sets.present_len());
    let mut totals = IndexTotals::default();
    let mut groups_created: HashSet<u32> = HashSet::new();
    let bar = progress_bar(opts.progress, sets.present_len() as u64, "chunks");
    let mut archive_digests: Vec<(Digest, u32)> = Vec::new();
    let (mut fresh, mut fresh_seen) = (Vec::new(), HashSet::new());
    let mut snapshot_indexes: Vec<(String, Vec<u8>, u64)> = Vec::new();

    for e in &events {
        let retained = history.is_retained(e);
        let g = &history.groups[e.group as usize];
        snapshot_indexes.clear();
        for ai in 0..g.archives.len() {
            contents.clear();
            history.for_each_content(e, ai, |c| contents.push(c));
            archive_digests.clear();
            fresh.clear();
            fresh_seen.clear();
            for &c in &contents {
                if !written.contains_key(&c) && sets.is_present(c) && fresh_seen.insert(c) {
                    fresh.push(c);
                }
            }
            let mut encoded = encode_all(&w.payload, &fresh).into_iter();
            for &c in &contents {
                let entry = match written.get(&c) {
                    Some(entry) => *entry,
                    None if sets.is_present(c) => {
                        let atime = history.initial_atime(&sets, c, e.time);
                        let enc = encoded.next().expect("one encoding per fresh content");
                        let entry = w.create_chunk(&enc, e, atime, missing.contains(&c))?;
                        written.insert(c, entry);
                        bar.inc(1);
                        entry
                    }
                    None => continue, // collected by an earlier GC, never needed again
                };
                if retained {
                    archive_digests.push((entry.digest, entry.data_len));
                }
            }
            if !retained {
                continue;
            }
            let a = &g.archives[ai];
            let (bytes, index_bytes) = archive_index_bytes(cfg, e, ai, &a.name, &archive_digests);
            if a.name.ends_with(".fidx") {
                totals.fixed += 1;
            } else {
                totals.dynamic += 1;
            }
            totals.references += archive_digests.len() as u64;
            totals.index_data_bytes += index_bytes;
            snapshot_indexes.push((a.name.clone(), bytes, index_bytes));
        }
        if retained {
            totals.snapshots += 1;
            write_snapshot(&mut w, e, &snapshot_indexes, groups_created.insert(e.group))?;
        }
    }
    bar.finish_and_clear();

    let mut missing_sorted: Vec<&Written> = missing.iter().map(|c| &written[c]).collect();
    missing_sorted.sort_by_key(|w| w.digest);
    let (bad_files, bad_for_missing) = write_damage(&mut w, cfg, &missing_sorted)?;
    let shift = w.shift;
    Ok(ground_truth(
        cfg,
        history,
        root,
        opts,
        &StoreWritten {
            sets: &sets,
            written: &written,
            missing: &missing_sorted,
            totals,
            shift,
            bad: (bad_files, bad_for_missing),
        },
        started,
    ))
}

/// The referenced contents left out on purpose (`damage.missing` of them), chosen by hash
/// so that the choice does not depend on iteration order.
fn missing_contents(cfg: &GenConfig, sets: &ChunkSets) -> HashSet<ContentId> {
    let seed = cfg.seed;
    let mut candidates: Vec<ContentId> = sets
        .iter()
        .filter(|&(c, f)| f & ChunkSets::NOW != 0 && c != ContentId::ZERO)
        .map(|(c, _)| c)
        .collect();
    candidates.sort_by_key(|c| (hash(&[seed, 40, c.0]), c.0));
    candidates
        .iter()
        .take(cfg.damage.missing)
        .copied()
        .collect()
}

/// The datastore's directories (65,536 chunk directories) and its lock file, whose times are
/// the generation time.
fn create_empty_store(root: &Path, opts: &WriteOptions) -> Result<()> {
    let bar = progress_bar(opts.progress, 65_536, "chunk dirs");
    create_datastore(root, opts.owner, |n| bar.set_position(n as u64))?;
    bar.finish_and_clear();
    // The lock file's times are the generation time, as every other file's follow the
    // history shifted by it: two stores of one seed then differ by that shift alone (a
    // second boundary passing between the start and its creation made them differ by one).
    let lock = root.join(crate::datastore::paths::LOCK_FILE);
    let t = Timestamp::new(opts.now, 0);
    set_file_times(&fs::File::options().write(true).open(&lock)?, t, t)
        .with_context(|| format!("setting the times of {}", lock.display()))?;
    Ok(())
}

/// Damage files: `.0.bad` copies for the missing chunks first (`missing`, by digest), then
/// for garbage; temporary files a crashed writer left. Returns (bad files, those for missing
/// chunks).
fn write_damage(w: &mut Writer, cfg: &GenConfig, missing: &[&Written]) -> Result<(u64, u64)> {
    let seed = cfg.seed;
    let old = w.history.prev_gc;
    let mut bad_files = 0u64;
    let mut bad_for_missing = 0u64;
    for i in 0..cfg.damage.bad {
        let (digest, raw) = if let Some(m) = missing.get(i) {
            bad_for_missing += 1;
            (m.digest, vec![0u8; m.blob_len as usize]) // verify found it corrupt
        } else {
            let c = ContentId::new(hash(&[seed, 41, i as u64]), false);
            w.payload.fill(c, &mut w.data);
            (Digest::of(&w.data), blob::encode(&w.data, true))
        };
        let rel = crate::datastore::paths::bad_chunk_rel_path(&digest, 0);
        let t = Timestamp::new(old + w.shift, 0);
        w.create_file(&rel, &raw, t, t)?;
        bad_files += 1;
    }
    for i in 0..cfg.damage.tmp {
        let c = ContentId::new(hash(&[seed, 42, i as u64]), false);
        w.payload.fill(c, &mut w.data);
        let digest = Digest::of(&w.data);
        let suffix: String = (0..6)
            .map(|j| {
                b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                    [(hash(&[seed, 43, i as u64, j]) % 62) as usize] as char
            })
            .collect();
        let mut rel = chunk_rel_path(&digest);
        rel.set_file_name(format!("{}.tmp_{suffix}", digest.to_hex()));
        let half = w.data.len() / 2;
        let raw = blob::encode(&w.data[..half], false);
        let t = Timestamp::new(old + w.shift, 0);
        w.create_file(&rel, &raw, t, t)?;
    }

    Ok((bad_files, bad_for_missing))
}

/// What the store written holds, for [`ground_truth`].
struct StoreWritten<'a> {
    sets: &'a ChunkSets,
    written: &'a HashMap<ContentId, Written>,
    /// The chunks left out on purpose, by digest.
    missing: &'a [&'a Written],
    totals: IndexTotals,
    /// Seconds the history was shifted by to end now.
    shift: i64,
    /// (bad files, those for missing chunks).
    bad: (u64, u64),
}

/// The store's ground truth: what a check and a GC must find in it.
fn ground_truth(
    cfg: &GenConfig,
    history: &History,
    root: &Path,
    opts: &WriteOptions,
    d: &StoreWritten,
    started: Instant,
) -> GroundTruth {
    let seed = cfg.seed;
    let cutoff = opts.now - DEFAULT_CUTOFF_MINUTES as i64 * 60;
    let mut garbage = GarbageCounts::default();
    let (mut chunk_files, mut chunk_bytes, mut referenced_bytes) = (0u64, 0u64, 0u64);
    let mut dirs = HashSet::new();
    for (c, entry) in d.written {
        if entry.missing {
            continue;
        }
        chunk_files += 1;
        chunk_bytes += entry.blob_len as u64;
        if d.sets.is_referenced(*c) {
            referenced_bytes += entry.blob_len as u64;
            dirs.insert(entry.digest.prefix());
        } else {
            garbage.chunks += 1;
            garbage.bytes += entry.blob_len as u64;
            if entry.atime + d.shift < cutoff {
                garbage.removable += 1;
            } else {
                garbage.pending += 1;
            }
        }
    }
    let mut missing_chunks: Vec<String> = d.missing.iter().map(|w| w.digest.to_hex()).collect();
    missing_chunks.sort();
    let elapsed = started.elapsed().as_secs_f64();
    let IndexTotals {
        snapshots,
        fixed,
        dynamic,
        references,
        index_data_bytes,
    } = d.totals;
    GroundTruth {
        preset: cfg.preset.clone(),
        seed,
        scale: cfg.scale,
        store: root.display().to_string(),
        generated_at: opts.now,
        prev_gc_at: history.prev_gc + d.shift,
        cutoff_minutes: DEFAULT_CUTOFF_MINUTES,
        namespaces: history.namespaces.len(),
        groups: history.groups.len(),
        snapshots,
        index_files: fixed + dynamic,
        fixed_indexes: fixed,
        dynamic_indexes: dynamic,
        references,
        referenced_chunks: d.sets.referenced_len() as u64,
        missing_chunks,
        chunk_files,
        chunk_bytes,
        garbage,
        bad_files: d.bad.0,
        bad_for_missing: d.bad.1,
        tmp_files: cfg.damage.tmp as u64,
        chunk_dirs_with_referenced: dirs.len() as u64,
        dedup_factor: references as f64 / d.sets.referenced_len().max(1) as f64,
        requested_dedup: cfg.dedup,
        churn: history.model.churn(),
        index_data_bytes,
        referenced_chunk_bytes: referenced_bytes,
        pbs_dedup_factor: index_data_bytes as f64 / referenced_bytes.max(1) as f64,
        elapsed_seconds: elapsed,
        chunks_per_second: chunk_files as f64 / elapsed.max(1e-9),
        s3: None,
    }
}

pub(crate) fn config_blob(e: &Event, ty: BackupType, id: &str) -> Option<(&'static str, Vec<u8>)> {
    let text = match ty {
        BackupType::Vm => format!(
            "boot: order=scsi0\ncores: 2\nmemory: 4096\nname: vm{id}\nostype: l26\n\
             scsi0: local-zfs:vm-{id}-disk-0,size=32G\nsmbios1: uuid={:016x}\n",
            e.k
        ),
        BackupType::Ct => format!(
            "arch: amd64\ncores: 1\nhostname: ct{id}\nmemory: 1024\nostype: debian\n\
             rootfs: local-zfs:subvol-{id}-disk-0,size=8G\n"
        ),
        BackupType::Host => return None,
    };
    let name = config_blob_name(ty)?;
    Some((name, blob::encode(text.as_bytes(), true)))
}

/// The name of a snapshot's guest configuration blob (host backups have none).
pub(crate) fn config_blob_name(ty: BackupType) -> Option<&'static str> {
    match ty {
        BackupType::Vm => Some("qemu-server.conf.blob"),
        BackupType::Ct => Some("pct.conf.blob"),
        BackupType::Host => None,
    }
}

fn write_snapshot(
    w: &mut Writer<'_>,
    e: &Event,
    indexes: &[(String, Vec<u8>, u64)],
    first: bool,
) -> Result<()> {
    let history = w.history;
    let g = &history.groups[e.group as usize];
    let group_rel = group_dir(history, e.group as usize);
    let group_abs = w.root.join(&group_rel);
    if first {
        fs::create_dir_all(&group_abs)
            .with_context(|| format!("creating {}", group_abs.display()))?;
        fs::write(group_abs.join(GROUP_OWNER_FILE), b"root@pam\n")?;
        let mut p = group_abs.clone();
        for _ in 0..group_rel.components().count() {
            w.chown(&p)?;
            p.pop();
        }
        w.chown(&group_abs.join(GROUP_OWNER_FILE))?;
    }
    let snap_rel = group_rel.join(crate::time::rfc3339_utc(e.time));
    let snap_abs = w.root.join(&snap_rel);
    fs::create_dir(&snap_abs).with_context(|| format!("creating {}", snap_abs.display()))?;
    w.chown(&snap_abs)?;
    let mut files = Vec::new();
    if let Some((name, raw)) = config_blob(e, g.ty, &g.id) {
        let t = w.next_mtime(e.time);
        w.create_file(&snap_rel.join(name), &raw, t, t)?;
        files.push(ManifestFile {
            filename: name.into(),
            crypt_mode: "none".into(),
            size: raw.len() as u64,
            csum: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&raw)),
        });
    }
    for (name, bytes, index_bytes) in indexes {
        let path = snap_abs.join(name);
        write_index_file(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        let t = w.next_mtime(e.time);
        let f = fs::File::options().write(true).open(&path)?;
        set_file_times(&f, t, t)?;
        w.chown(&path)?;
        debug_assert!(IndexKind::from_path(&path).is_some());
        files.push(ManifestFile {
            filename: name.clone(),
            crypt_mode: "none".into(),
            size: *index_bytes,
            csum: hex::encode(&bytes[32..64]),
        });
    }
    let manifest = Manifest {
        backup_type: g.ty.as_str().into(),
        backup_id: g.id.clone(),
        backup_time: e.time,
        files,
        unprotected: serde_json::json!({}),
        signature: None,
    };
    let t = w.next_mtime(e.time);
    w.create_file(
        &snap_rel.join(MANIFEST_BLOB_NAME),
        &manifest.to_blob(),
        t,
        t,
    )?;
    Ok(())
}
