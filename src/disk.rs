//! A disk under the files of a mount: how long each read and write would take on a spinning
//! disk, from where it is and where the head was.
//!
//! A fault rule's delay is independent of the request before it, so locality never shows; a
//! real disk's is not. This model (`mount --disk hdd-7200`) serves the reads and writes of a
//! mount's files in arrival order, one at a time, as one disk would:
//!
//! * **Position**: a file's byte offset is its position on the disk (one image file is one
//!   disk); a request to another file than the last one's seeks a full `span`.
//! * **Seek**: none within a track; else `track_to_track + (full_stroke - track_to_track) *
//!   sqrt(distance / span)` (short seeks are dominated by settling, long ones by the arm's
//!   travel: the square root is the classic fit of measured seek curves).
//! * **Rotation**: the platter turns at `rpm`; a track holds what passes under the head in
//!   one turn (`rate` times the revolution). After the seek the head waits for the request's
//!   first sector to come round, from where the platter is at that time: a read right after
//!   the one that ended where it starts waits for nothing.
//! * **Transfer**: the bytes at `rate`.
//! * **Queue**: a request arriving while the disk is busy waits for the ones before it (FIFO;
//!   the elevator above a loop device has already sorted and merged them).
//! * **Read cache**: the drive keeps the last `cache` bytes it read, in 64 KiB segments
//!   (least recently used out). After a read from the media it reads on at the media rate, up
//!   to `readahead` bytes beyond the last byte asked for, until the next media access; a read
//!   found in the cache or in that stream costs the `overhead` and the interface transfer
//!   (and waits for the stream to get there). Writes go to the media (the write cache off,
//!   as a pool that must not lose a txg runs them) and end the stream.
//! * **Overhead**: every command costs `overhead` (the controller and the bus), overlapping its
//!   positioning (what it adds beyond the seek and the turn is counted with the transfer); the
//!   platter's position is reckoned without it, so a stream of back-to-back sequential
//!   commands loses no turn (a drive streams them from its track buffer).
//!
//! Everything is computed on the disk's own clock from the requests' arrival times, so the
//! same arrivals give the same times; the overlay holds each reply until its request is done.

use std::fmt;

use anyhow::{anyhow, bail, Context, Result};
use hashbrown::HashMap;
use serde::{Deserialize, Serialize};

/// Bytes a cache segment holds.
const SEGMENT: u64 = 64 << 10;

/// What a disk is: its geometry, speeds and cache.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DiskParams {
    /// Revolutions per minute.
    pub rpm: u32,
    /// Seek between adjacent tracks, ns.
    pub track_to_track_ns: u64,
    /// Seek across the whole `span`, ns.
    pub full_stroke_ns: u64,
    /// Bytes a full stroke crosses: the disk's capacity, or the part of it the files lie in.
    pub span: u64,
    /// Media transfer rate, bytes a second.
    pub rate: u64,
    /// Interface transfer rate for reads served by the drive's cache, bytes a second.
    pub interface_rate: u64,
    /// The drive's read cache, bytes (0: none).
    pub cache: u64,
    /// Bytes read ahead from the media after each read (into the cache).
    pub readahead: u64,
    /// Each command's fixed cost, ns.
    pub overhead_ns: u64,
}

impl DiskParams {
    /// The presets, by name.
    pub const PRESETS: &'static [&'static str] = &["hdd-7200", "hdd-5400", "ssd"];

    /// A preset: `hdd-7200` (a 4 TB 7,200 rpm SATA disk: 8.3 ms a turn, 1 to 16 ms seeks,
    /// 180 MB/s, 64 MiB cache), `hdd-5400` (a slower 2 TB one), `ssd` (no seek, no rotation:
    /// 80 µs a command, 500 MB/s).
    pub fn preset(name: &str) -> Result<DiskParams> {
        let hdd = DiskParams {
            rpm: 7200,
            track_to_track_ns: 1_000_000,
            full_stroke_ns: 16_000_000,
            span: 4_000_000_000_000,
            rate: 180_000_000,
            interface_rate: 600_000_000,
            cache: 64 << 20,
            readahead: 256 << 10,
            overhead_ns: 50_000,
        };
        Ok(match name {
            "hdd-7200" => hdd,
            "hdd-5400" => DiskParams {
                rpm: 5400,
                track_to_track_ns: 1_500_000,
                full_stroke_ns: 22_000_000,
                span: 2_000_000_000_000,
                rate: 130_000_000,
                ..hdd
            },
            "ssd" => DiskParams {
                rpm: 0,
                track_to_track_ns: 0,
                full_stroke_ns: 0,
                rate: 500_000_000,
                interface_rate: 500_000_000,
                cache: 0,
                readahead: 0,
                overhead_ns: 80_000,
                ..hdd
            },
            other => bail!(
                "unknown disk '{other}': one of {} (then ,key=value to change one: rpm, \
                 seek-t2t, stroke, span, rate, cache, readahead, overhead)",
                Self::PRESETS.join(", ")
            ),
        })
    }

    /// A preset with changes: `hdd-7200`, `hdd-7200,span=64GiB,cache=0`.
    pub fn parse(spec: &str) -> Result<DiskParams> {
        let mut parts = spec.split(',');
        let mut p = DiskParams::preset(parts.next().unwrap_or("").trim())?;
        for kv in parts {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| anyhow!("--disk {spec}: '{kv}' is not key=value"))?;
            let (k, v) = (k.trim(), v.trim());
            let size =
                || parse_size::parse_size(v).with_context(|| format!("--disk {spec}: {k}={v}"));
            let time = || {
                crate::units::parse_duration(v).with_context(|| format!("--disk {spec}: {k}={v}"))
            };
            match k {
                "rpm" => {
                    p.rpm = v
                        .parse()
                        .with_context(|| format!("--disk {spec}: rpm={v} is not a number"))?
                }
                "seek-t2t" => p.track_to_track_ns = time()?,
                "stroke" => p.full_stroke_ns = time()?,
                "span" => p.span = size()?,
                "rate" => p.rate = size()?,
                "cache" => p.cache = size()?,
                "readahead" => p.readahead = size()?,
                "overhead" => p.overhead_ns = time()?,
                _ => bail!(
                    "--disk {spec}: unknown key '{k}' (rpm, seek-t2t, stroke, span, rate, \
                     cache, readahead, overhead)"
                ),
            }
        }
        if p.rate == 0 || p.span == 0 {
            bail!("--disk {spec}: rate and span must be above 0");
        }
        if p.full_stroke_ns < p.track_to_track_ns {
            bail!("--disk {spec}: the full stroke is shorter than a track-to-track seek");
        }
        Ok(p)
    }

    /// One revolution, ns (0: no platter).
    fn revolution_ns(&self) -> u64 {
        if self.rpm == 0 {
            0
        } else {
            60_000_000_000 / self.rpm as u64
        }
    }

    /// Bytes a track holds: what passes under the head in one revolution.
    fn track_bytes(&self) -> u64 {
        (self.rate as u128 * self.revolution_ns() as u128 / 1_000_000_000).max(1) as u64
    }
}

impl fmt::Display for DiskParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} rpm, seeks {}..{} over {}, {}/s, cache {}",
            self.rpm,
            crate::units::duration_ns(self.track_to_track_ns),
            crate::units::duration_ns(self.full_stroke_ns),
            crate::units::human_bytes(self.span),
            crate::units::human_bytes(self.rate),
            crate::units::human_bytes(self.cache)
        )
    }
}

/// How one request was served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    /// When it was done, on the disk's clock (ns).
    pub done_ns: u64,
    /// Time waiting for the requests before it, ns.
    pub queued_ns: u64,
    /// Seek, ns.
    pub seek_ns: u64,
    /// Rotational wait, ns.
    pub rotation_ns: u64,
    /// Transfer (and the command overhead), ns.
    pub transfer_ns: u64,
    /// Served from the drive's cache.
    pub cached: bool,
}

impl Served {
    /// From arrival to done, ns.
    pub fn latency_ns(&self) -> u64 {
        self.queued_ns + self.seek_ns + self.rotation_ns + self.transfer_ns
    }
}

/// Totals of a disk's work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiskTotals {
    /// Reads served.
    pub reads: u64,
    /// Of which from the cache.
    pub cache_hits: u64,
    /// Writes served.
    pub writes: u64,
    /// Bytes read and written.
    pub bytes: u64,
    /// Time the disk was busy, ns.
    pub busy_ns: u64,
    /// Of it seeking, ns.
    pub seek_ns: u64,
    /// Of it waiting for the platter, ns.
    pub rotation_ns: u64,
}

/// The drive reading on from `from` (under the head at `from_ns`) at the media rate, up to
/// `cap`, into its cache.
#[derive(Clone, Copy, Debug)]
struct Stream {
    file: u64,
    from: u64,
    from_ns: u64,
    cap: u64,
}

/// One disk: where its head is, when it is free, what its cache holds.
pub struct Disk {
    p: DiskParams,
    /// When the disk is free, ns on its clock.
    free_ns: u64,
    /// The file and position the head is over after the last media access.
    head: (u64, u64),
    /// When the head was there, ns.
    head_at_ns: u64,
    /// The drive reading ahead after its last read from the media (none after a write).
    stream: Option<Stream>,
    /// Cached segments: (file, segment) → last use.
    cached: HashMap<(u64, u64), u64>,
    uses: u64,
    totals: DiskTotals,
}

impl Disk {
    /// An idle disk, its head at the start of no file, nothing cached.
    pub fn new(p: DiskParams) -> Disk {
        Disk {
            p,
            free_ns: 0,
            head: (u64::MAX, 0),
            head_at_ns: 0,
            stream: None,
            cached: HashMap::new(),
            uses: 0,
            totals: DiskTotals::default(),
        }
    }

    /// Its parameters.
    pub fn params(&self) -> &DiskParams {
        &self.p
    }

    /// When it is free of the requests served so far, ns on its clock.
    pub fn free_ns(&self) -> u64 {
        self.free_ns
    }

    /// What it has done so far.
    pub fn totals(&self) -> DiskTotals {
        self.totals
    }

    /// Serves a read (or a write) of `len` bytes at `offset` of `file`, arriving at `now_ns`.
    pub fn serve(&mut self, now_ns: u64, file: u64, offset: u64, len: u64, write: bool) -> Served {
        let start = now_ns.max(self.free_ns);
        let mut s = Served {
            queued_ns: start - now_ns,
            ..Served::default()
        };
        let end = offset + len;
        let segs = offset / SEGMENT..end.max(offset + 1).div_ceil(SEGMENT);
        let cache = !write && self.p.cache > 0;
        let streamed = self
            .stream
            .filter(|st| cache && st.file == file && offset >= st.from && end <= st.cap);
        if cache && segs.clone().all(|g| self.cached.contains_key(&(file, g))) {
            s.cached = true;
            s.transfer_ns = self.p.overhead_ns + ns_for(len, self.p.interface_rate);
        } else if let Some(st) = streamed {
            // Read ahead: under the head already, or on its way (the drive goes on reading
            // ahead while the window allows).
            let ready = st.from_ns + ns_for(end - st.from, self.p.rate);
            s.cached = true;
            s.transfer_ns = (start + self.p.overhead_ns).max(ready) - start
                + ns_for(len, self.p.interface_rate);
        } else {
            self.park_stream(start);
            s.seek_ns = self.seek_ns(file, offset);
            s.rotation_ns = self.rotation_ns(start + s.seek_ns, offset);
            // The command's overhead overlaps the positioning; what it adds beyond it is
            // counted with the transfer.
            let positioning = s.seek_ns + s.rotation_ns;
            s.transfer_ns =
                self.p.overhead_ns.saturating_sub(positioning) + ns_for(len, self.p.rate);
            self.head = (file, end);
            self.head_at_ns = start + positioning + s.transfer_ns;
            self.stream = cache.then_some(Stream {
                file,
                from: end,
                from_ns: self.head_at_ns,
                cap: end,
            });
        }
        if cache {
            for g in segs {
                self.touch(file, g);
            }
            // The read-ahead window slides with what is read from it (a read elsewhere that
            // the cache held does not move it: the drive reads on from where it is).
            if let Some(st) = &mut self.stream {
                if st.file == file && end >= st.from && offset <= st.cap {
                    st.cap = st.cap.max(end + self.p.readahead);
                }
            }
        }
        s.done_ns = start + s.seek_ns + s.rotation_ns + s.transfer_ns;
        self.free_ns = s.done_ns;
        let t = &mut self.totals;
        if write {
            t.writes += 1;
        } else {
            t.reads += 1;
            t.cache_hits += s.cached as u64;
        }
        t.bytes += len;
        t.busy_ns += s.done_ns - start;
        t.seek_ns += s.seek_ns;
        t.rotation_ns += s.rotation_ns;
        s
    }

    /// A media access at `at_ns` ends the read-ahead: the head is where it had got to.
    fn park_stream(&mut self, at_ns: u64) {
        let Some(st) = self.stream.take() else {
            return;
        };
        let read =
            (at_ns.saturating_sub(st.from_ns) as u128 * self.p.rate as u128 / 1_000_000_000) as u64;
        let pos = (st.from + read).min(st.cap);
        self.head = (st.file, pos);
        self.head_at_ns = if pos == st.cap {
            st.from_ns + ns_for(st.cap - st.from, self.p.rate)
        } else {
            at_ns
        };
    }

    fn seek_ns(&self, file: u64, offset: u64) -> u64 {
        let p = &self.p;
        let distance = if file == self.head.0 {
            offset.abs_diff(self.head.1)
        } else {
            p.span
        };
        if distance < p.track_bytes() {
            return 0;
        }
        let fraction = (distance as f64 / p.span as f64).min(1.0);
        p.track_to_track_ns
            + ((p.full_stroke_ns - p.track_to_track_ns) as f64 * fraction.sqrt()) as u64
    }

    /// The wait, from `at_ns`, for the sector at `offset` to come under the head.
    fn rotation_ns(&self, at_ns: u64, offset: u64) -> u64 {
        let rev = self.p.revolution_ns();
        if rev == 0 {
            return 0;
        }
        let track = self.p.track_bytes();
        // Angles as fractions of a turn, in ns of rotation: the head was over the end of the
        // last access at `head_at_ns`, and the platter has turned since.
        let angle = |pos: u64| ((pos % track) as u128 * rev as u128 / track as u128) as u64;
        let head = (angle(self.head.1) + at_ns.saturating_sub(self.head_at_ns)) % rev;
        (angle(offset) + rev - head) % rev
    }

    fn touch(&mut self, file: u64, segment: u64) {
        self.uses += 1;
        self.cached.insert((file, segment), self.uses);
        let capacity = (self.p.cache / SEGMENT) as usize;
        if self.cached.len() > capacity {
            // Evict the least recently used eighth at once (amortised: one scan per
            // capacity/8 insertions).
            let mut ages: Vec<u64> = self.cached.values().copied().collect();
            let cut = (ages.len() - capacity + capacity / 8).min(ages.len() - 1);
            let (_, &mut oldest_kept, _) = ages.select_nth_unstable(cut);
            self.cached.retain(|_, &mut used| used >= oldest_kept);
        }
    }
}

/// ns to move `bytes` at `rate` bytes a second.
fn ns_for(bytes: u64, rate: u64) -> u64 {
    (bytes as u128 * 1_000_000_000 / rate.max(1) as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hdd() -> Disk {
        Disk::new(DiskParams::parse("hdd-7200,cache=0").unwrap())
    }

    #[test]
    fn a_sequential_stream_waits_for_no_seek_and_no_turn() {
        let mut d = hdd();
        let first = d.serve(0, 1, 0, 65536, false);
        let mut t = first.done_ns;
        for i in 1..16u64 {
            let s = d.serve(t, 1, i * 65536, 65536, false);
            assert_eq!(
                (s.seek_ns, s.rotation_ns, s.queued_ns),
                (0, 0, 0),
                "read {i}"
            );
            t = s.done_ns;
        }
    }

    #[test]
    fn a_client_reading_on_is_served_from_the_read_ahead() {
        // 64 KiB at a time, 100 us between a reply and the next read: without the read
        // ahead each read would wait most of a turn (8.3 ms).
        let mut d = Disk::new(DiskParams::preset("hdd-7200").unwrap());
        let mut t = d.serve(0, 1, 0, 65536, false).done_ns + 100_000;
        let begin = t;
        for i in 1..200u64 {
            let s = d.serve(t, 1, i * 65536, 65536, false);
            assert!(s.cached, "read {i}");
            t = s.done_ns + 100_000;
        }
        // Bounded by the media rate: 64 KiB at 180 MB/s is 364 us.
        let each = (t - begin) / 199;
        assert!((364_000..600_000).contains(&each), "{each} ns a read");
        // A read elsewhere goes to the media, and so does one far past the window.
        assert!(!d.serve(t, 1, 1 << 34, 4096, false).cached);
    }

    #[test]
    fn seeks_grow_with_distance_and_random_reads_cost_milliseconds() {
        let mut d = hdd();
        let span = d.params().span;
        let mut last = 0;
        for distance in [10 << 20, 1 << 30, span / 10, span - 4096] {
            d.serve(0, 1, 0, 4096, false);
            let s = d.serve(1_000_000_000, 1, distance, 4096, false);
            assert!(s.seek_ns > last, "{distance}: {} after {last}", s.seek_ns);
            assert!(s.seek_ns <= d.params().full_stroke_ns);
            last = s.seek_ns;
        }
        // 1,000 random 4 KiB reads over the whole disk: 8 to 20 ms each on average (seek
        // plus half a turn), as a 7,200 rpm disk does (75-120 IOPS).
        let mut t = 0;
        let mut x = 12345u64;
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let s = d.serve(t, 1, (x >> 20) % span / 4096 * 4096, 4096, false);
            t = s.done_ns;
        }
        let mean = t / 1000;
        assert!((8_000_000..20_000_000).contains(&mean), "{mean} ns a read");
    }

    #[test]
    fn requests_arriving_together_queue() {
        let mut d = hdd();
        let a = d.serve(0, 1, 1 << 30, 4096, false);
        let b = d.serve(0, 1, 2 << 30, 4096, false);
        assert_eq!(a.queued_ns, 0);
        assert_eq!(b.queued_ns, a.done_ns);
        assert_eq!(
            b.done_ns,
            a.done_ns + b.seek_ns + b.rotation_ns + b.transfer_ns
        );
    }

    #[test]
    fn the_drive_cache_serves_what_it_read_and_read_ahead() {
        let mut d = Disk::new(DiskParams::preset("hdd-7200").unwrap());
        let miss = d.serve(0, 1, 1 << 30, 4096, false);
        assert!(!miss.cached && miss.seek_ns > 0);
        let again = d.serve(miss.done_ns, 1, 1 << 30, 4096, false);
        assert!(again.cached && again.seek_ns == 0 && again.rotation_ns == 0);
        // Within the 256 KiB read ahead.
        let ahead = d.serve(again.done_ns, 1, (1 << 30) + (128 << 10), 4096, false);
        assert!(ahead.cached);
        assert_eq!(d.totals().cache_hits, 2);
        // Writes go to the media.
        let w = d.serve(ahead.done_ns, 1, 1 << 30, 4096, true);
        assert!(!w.cached);
        // The cache holds 64 MiB: a read 200 MiB later has pushed the first out.
        let mut t = w.done_ns;
        for i in 0..3200u64 {
            t = d.serve(t, 1, (2 << 30) + i * 65536, 65536, false).done_ns;
        }
        assert!(!d.serve(t, 1, 1 << 30, 4096, false).cached);
    }

    #[test]
    fn a_cached_read_elsewhere_does_not_stretch_the_read_ahead() {
        // The drive streams on from 1 GiB; a read 300 MiB further on that its cache holds must
        // not move the window there: a later read next to it goes to the media, it does not
        // wait for the stream to cover 300 MiB (1.7 s at the media rate).
        let mut d = Disk::new(DiskParams::preset("hdd-7200").unwrap());
        let far = (1 << 30) + (300 << 20);
        let mut t = d.serve(0, 1, far, 4096, false).done_ns;
        t = d.serve(t, 1, 1 << 30, 4096, false).done_ns;
        t = d.serve(t, 1, far, 4096, false).done_ns;
        let next = d.serve(t, 1, far + (512 << 10), 4096, false);
        assert!(!next.cached);
        assert!(next.latency_ns() < 30_000_000, "{next:?}");
    }

    #[test]
    fn the_same_arrivals_give_the_same_times() {
        let run = || {
            let mut d = Disk::new(DiskParams::preset("hdd-7200").unwrap());
            (0..200u64)
                .map(|i| d.serve(i * 3_000_000, 1 + i % 3, (i * 7919) << 16, 8192, i % 5 == 0))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn specs_are_checked() {
        assert_eq!(
            DiskParams::parse("hdd-7200,span=64GiB").unwrap().span,
            64 << 30
        );
        for bad in [
            "floppy",
            "hdd-7200,rpm",
            "hdd-7200,speed=1",
            "hdd-7200,rate=0",
        ] {
            assert!(DiskParams::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            DiskParams::parse("ssd").unwrap().revolution_ns(),
            0,
            "an ssd has no platter"
        );
    }
}
