//! Shared helpers for integration tests: run the binary, generate stores.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_chunkscope"))
}

/// A path through which a process of another user (the tests run some as `backup` or
/// `nobody`) can execute `exe`, even when a directory above it lets no one else through (a
/// checkout in a 0700 home directory, or under `mktemp -d`): `/proc/self/fd/N` of a
/// descriptor of `exe` this process keeps open, without close-on-exec, for its whole life.
/// Such a magic link reaches the file without walking its directories, as `fexecve` does;
/// the child inherits the descriptor, and its `/proc/self` is its own whatever its user.
pub fn exec_path_for_others(exe: &Path) -> PathBuf {
    use std::os::fd::{AsRawFd, OwnedFd};
    static OPEN: std::sync::Mutex<Vec<(PathBuf, OwnedFd)>> = std::sync::Mutex::new(Vec::new());
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    let fd = match open.iter().find(|(p, _)| p == exe) {
        Some((_, fd)) => fd.as_raw_fd(),
        None => {
            let f = std::fs::File::open(exe)
                .unwrap_or_else(|e| panic!("opening {}: {e}", exe.display()));
            let fd = OwnedFd::from(f);
            // SAFETY: F_SETFD on a descriptor this process owns; clearing FD_CLOEXEC only lets
            // children inherit it (read-only, to an executable).
            let rc = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, 0) };
            assert_eq!(rc, 0, "fcntl: {}", std::io::Error::last_os_error());
            let raw = fd.as_raw_fd();
            open.push((exe.to_path_buf(), fd));
            raw
        }
    };
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

/// The binary, runnable by another user wherever the checkout is
/// ([`exec_path_for_others`]).
pub fn bin_for_others() -> Command {
    Command::new(exec_path_for_others(Path::new(env!(
        "CARGO_BIN_EXE_chunkscope"
    ))))
}

/// This test binary, runnable by another user wherever the checkout is
/// ([`exec_path_for_others`]).
pub fn test_binary_for_others() -> Command {
    Command::new(exec_path_for_others(&std::env::current_exe().unwrap()))
}

/// One row of the README's requirements table (issue 61): which suite needs it, where it
/// comes from (`apt`, `cargo`, `pip`), the package as that installer takes it, and the
/// commands it brings (for `pip`, the Python modules).
#[derive(Clone, Debug)]
pub struct Requirement {
    pub suite: String,
    pub from: String,
    pub package: String,
    pub commands: Vec<String>,
}

/// The rows of the README's requirements table, the one list `.ci/run` installs.
pub fn requirements() -> Vec<Requirement> {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    let begin = text
        .find("<!-- requirements: begin")
        .expect("README.md has its requirements table");
    let end = text[begin..]
        .find("<!-- requirements: end")
        .expect("README.md's requirements table ends")
        + begin;
    text[begin..end]
        .lines()
        .filter(|l| l.starts_with("| default |") || l.starts_with("| long |"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            assert_eq!(cells.len(), 7, "README.md requirements row: {l}");
            Requirement {
                suite: cells[1].to_string(),
                from: cells[2].to_string(),
                package: cells[3].to_string(),
                commands: cells[4].split_whitespace().map(str::to_string).collect(),
            }
        })
        .collect()
}

/// `cmd`, which a test needs: its path, or a failure naming the package that brings it, as
/// the README's requirements table lists it (a test never skips in silence). A command the
/// table does not list fails too: the table is the whole list.
pub fn require(cmd: &str) -> PathBuf {
    require_in(cmd, &std::env::var_os("PATH").unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"))
}

/// [`require`] on the directories of `path` (a PATH's value): the command's path, or what to
/// say.
pub fn require_in(cmd: &str, path: &std::ffi::OsStr) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let row = requirements()
        .into_iter()
        .find(|r| r.from != "pip" && r.commands.iter().any(|c| c == cmd))
        .ok_or_else(|| {
            format!(
                "`{cmd}` is not in README.md's requirements table: add the package that brings it"
            )
        })?;
    let found = std::env::split_paths(path).map(|d| d.join(cmd)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    });
    found.ok_or_else(|| {
        let install = match row.from.as_str() {
            "apt" => format!("apt-get install {}", row.package),
            "cargo" => format!("cargo install --locked {}", row.package),
            other => format!("{other} install {}", row.package),
        };
        format!(
            "this test needs `{cmd}`, which is not on the PATH: install {} ({install}; README.md, \
             Requirements, the {} suite's rows; `bash .ci/run` installs the whole table)",
            row.package, row.suite
        )
    })
}

pub fn run(args: &[&str]) -> Output {
    let o = bin().args(args).output().expect("run chunkscope");
    assert_no_secrets(&stdout(&o));
    assert_no_secrets(&stderr(&o));
    o
}

/// Issue 63, point 5: no output of chunkscope holds a secret: the value of a presigned
/// request's signature, credential or session token, the test S3 server's secret key, or a
/// URL's user and password. [`run`] and [`gc`] check every command's output with it.
pub fn assert_no_secrets(text: &str) {
    assert!(
        !text.contains(S3_SECRET_KEY),
        "the S3 secret key was shown:\n{text}"
    );
    let lower = text.to_ascii_lowercase();
    for param in [
        "x-amz-signature=",
        "x-amz-credential=",
        "x-amz-security-token=",
        "awsaccesskeyid=",
    ] {
        for (i, _) in lower.match_indices(param) {
            assert!(
                text[i + param.len()..].starts_with("***"),
                "a signed request's {param} was shown:\n{text}"
            );
        }
    }
    for (i, _) in text.match_indices("://") {
        let authority = text[i + 3..]
            .split(|c: char| c == '/' || c.is_whitespace() || c == '"')
            .next()
            .unwrap_or("");
        assert!(
            !authority.contains('@') || authority.starts_with("***@"),
            "a URL's user or password was shown:\n{text}"
        );
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// One store is generated at a time in a test binary: tmpfs numbers inodes from one counter
/// per filesystem, so two stores written at once would interleave their inode numbers, and
/// the tests that compare a store with its simulation rely on each store's numbers following
/// its own creation order.
static GENERATING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Generates a store into `dir/name` and returns (store path, ground truth JSON).
pub fn gen(dir: &Path, name: &str, extra: &[&str]) -> (PathBuf, serde_json::Value) {
    let store = dir.join(name);
    let mut args = vec!["gen", "--quiet", "--out", store.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = {
        let _one = GENERATING.lock().unwrap_or_else(|p| p.into_inner());
        run(&args)
    };
    assert!(o.status.success(), "gen failed: {}", stderr(&o));
    let truth_path = dir.join(format!("{name}.truth.json"));
    let truth =
        serde_json::from_slice(&std::fs::read(&truth_path).expect("truth beside the store"))
            .unwrap();
    (store, truth)
}

/// Runs `check --json` and returns (exit code, report).
pub fn check(store: &Path, deep: bool) -> (i32, serde_json::Value) {
    let mut args = vec!["check", "--json", store.to_str().unwrap()];
    if deep {
        args.insert(1, "--deep");
    }
    let o = run(&args);
    let report =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)));
    (o.status.code().unwrap(), report)
}

/// A temporary directory on tmpfs when there is one (inode numbers follow creation order there).
pub fn tmpfs_dir() -> Option<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let statfs = statfs_type(shm)?;
    (statfs == 0x0102_1994).then(|| tempfile::tempdir_in(shm).unwrap()) // TMPFS_MAGIC
}

/// The filesystem type (`f_type` of statfs) of the filesystem holding `p`: 0xEF53 is ext4,
/// 0x01021994 tmpfs.
pub fn statfs_type(p: &Path) -> Option<i64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: a plain C struct; all zeroes is a valid value of it.
    let mut s: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out pointer.
    (unsafe { libc::statfs(c.as_ptr(), &mut s) } == 0).then_some(s.f_type as i64)
}

/// A tmpfs mounted on `dir` with mount `flags` (`MS_NODEV`, ...), detached on drop (and on
/// panic). Needs root.
pub struct TmpfsMount(std::ffi::CString);

impl TmpfsMount {
    pub fn on(dir: &Path, flags: libc::c_ulong) -> TmpfsMount {
        TmpfsMount::sized(dir, flags, None)
    }

    /// A tmpfs of `size` bytes at most (`None`: the default, half the memory).
    pub fn sized(dir: &Path, flags: libc::c_ulong, size: Option<u64>) -> TmpfsMount {
        TmpfsMount::try_sized(dir, flags, size)
            .unwrap_or_else(|e| panic!("mounting a tmpfs on {}: {e}", dir.display()))
    }

    /// [`TmpfsMount::sized`], or why the kernel refused it (not root, say).
    pub fn try_sized(
        dir: &Path,
        flags: libc::c_ulong,
        size: Option<u64>,
    ) -> std::io::Result<TmpfsMount> {
        TmpfsMount::try_mount(dir, c"tmpfs", flags, size)
    }

    fn try_mount(
        dir: &Path,
        fstype: &std::ffi::CStr,
        flags: libc::c_ulong,
        size: Option<u64>,
    ) -> std::io::Result<TmpfsMount> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        let data = size.map(|n| std::ffi::CString::new(format!("size={n}")).unwrap());
        // SAFETY: valid C strings; the guard unmounts it.
        let rc = unsafe {
            libc::mount(
                c"chunkscope-test".as_ptr(),
                c.as_ptr(),
                fstype.as_ptr(),
                flags,
                data.as_ref()
                    .map_or(std::ptr::null(), |d| d.as_ptr().cast()),
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(TmpfsMount(c))
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        // SAFETY: valid C string; detach so that nothing stays behind even if a file is open.
        unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A filesystem image mounted on `on` through a loop device (`mount -o loop`, `options`
/// added), detached on drop (and on panic); the loop device goes with it (autoclear).
pub struct LoopMount(std::ffi::CString);

impl LoopMount {
    /// `fstype` as `mount -t` takes it (`None`: what the image holds).
    pub fn image(image: &Path, on: &Path, fstype: Option<&str>, options: &str) -> LoopMount {
        let mut cmd = std::process::Command::new("mount");
        if let Some(t) = fstype {
            cmd.args(["-t", t]);
        }
        let o = cmd
            .arg("-o")
            .arg(format!("loop{options}"))
            .arg(image)
            .arg(on)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        LoopMount(std::ffi::CString::new(on.as_os_str().as_encoded_bytes()).unwrap())
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        // SAFETY: valid C string; detached, so that nothing stays behind even if a file is open.
        unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A tmpfs of its own on a temporary directory, unmounted on drop: for a test whose results
/// depend on inode numbers. tmpfs numbers inodes from one counter per mount, so on the shared
/// `/dev/shm` every process that creates files there (another test running at the same time)
/// shifts them. [`PrivateTmpfs::new`] always mounts one; [`store_dir`] falls back to a plain
/// directory (no mount) where the kernel refuses.
pub struct PrivateTmpfs {
    // Declared first: unmounted before the directory is removed.
    _mount: Option<TmpfsMount>,
    dir: tempfile::TempDir,
}

impl PrivateTmpfs {
    pub fn new() -> PrivateTmpfs {
        let dir = tempfile::tempdir().unwrap();
        PrivateTmpfs {
            _mount: Some(TmpfsMount::on(dir.path(), 0)),
            dir,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// A temporary directory for a store: a tmpfs of its own (fast to create 65536 directories
/// in, and to remove them: its unmount frees a store's in 0.17 s where deleting them took
/// 1.3 s, once for each of the suite's ~100 stores), else `/dev/shm` (not root), else the
/// default temporary directory. Inode numbers follow creation order on the first two; tests
/// that depend on them say so.
pub fn store_dir() -> PrivateTmpfs {
    let dir = tempfile::tempdir().unwrap();
    match TmpfsMount::try_sized(dir.path(), 0, None) {
        Ok(m) => PrivateTmpfs {
            _mount: Some(m),
            dir,
        },
        Err(_) => PrivateTmpfs {
            _mount: None,
            dir: tmpfs_dir().unwrap_or(dir),
        },
    }
}

/// A running `chunkscope mount`, unmounted (and its process reaped) on drop, even on panic.
pub struct Mount {
    pub mnt: PathBuf,
    pub trace: Option<PathBuf>,
    child: Option<std::process::Child>,
    log: PathBuf,
}

fn is_mounted(mnt: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let m = mnt.display().to_string();
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(m.as_str()))
}

impl Mount {
    /// Mounts `store` on a new directory inside `dir`, with `extra` arguments.
    /// A traced shadow mount with the `zfs-hdd` model accounting only (`--time-scale 0`):
    /// how the simulation tests and the analysis tests watch a GC.
    pub fn shadow_zfs_hdd(store: &Path, dir: &Path) -> Mount {
        Mount::start(
            store,
            dir,
            true,
            &["--shadow", "--model", "zfs-hdd", "--time-scale", "0"],
        )
    }

    pub fn start(store: &Path, dir: &Path, trace: bool, extra: &[&str]) -> Mount {
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let mnt = mnt.canonicalize().unwrap();
        let log = dir.join("mount.log");
        let trace_path = trace.then(|| dir.join("overlay.trace"));
        let mut cmd = bin();
        cmd.args([
            "mount",
            "--store",
            store.to_str().unwrap(),
            "--mountpoint",
            mnt.to_str().unwrap(),
        ]);
        if let Some(t) = &trace_path {
            cmd.args(["--trace", t.to_str().unwrap()]);
        }
        cmd.args(extra);
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = cmd.spawn().expect("spawn chunkscope mount");
        let mut m = Mount {
            mnt,
            trace: trace_path,
            child: Some(child),
            log,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !is_mounted(&m.mnt) {
            if let Some(status) = m.child.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "mount exited with {status}: {}",
                    std::fs::read_to_string(&m.log).unwrap_or_default()
                );
            }
            assert!(
                std::time::Instant::now() < deadline,
                "mount did not come up"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        m
    }

    /// Watches a mount started elsewhere (the caller owns its process): waits until it is live;
    /// on drop, unmounts it if it still is.
    pub fn adopt(mnt: &Path) -> Mount {
        let mnt = mnt.canonicalize().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !is_mounted(&mnt) {
            assert!(
                std::time::Instant::now() < deadline,
                "mount did not come up"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Mount {
            log: mnt.with_extension("log"),
            mnt,
            trace: None,
            child: None,
        }
    }

    /// Kills the mount process (SIGKILL to the pid this test started) and reaps it; the mount
    /// stays behind, dead (requests fail with ENOTCONN), until drop detaches it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The mount process's pid (a mount this test started).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn is_live(&self) -> bool {
        is_mounted(&self.mnt)
    }

    /// Unmounts, waits for the process, returns what it printed on standard error.
    pub fn stop(&mut self) -> String {
        self.stop_with_status().1
    }

    /// [`Mount::stop`], with the mount process's exit code (`None`: killed, or stopped
    /// before).
    pub fn stop_with_status(&mut self) -> (Option<i32>, String) {
        let mut code = None;
        if let Some(mut child) = self.child.take() {
            let c = std::ffi::CString::new(self.mnt.to_str().unwrap()).unwrap();
            // SAFETY: valid C string.
            if is_mounted(&self.mnt) && unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
                // Busy (a test failed with a file still open): detach so nothing stays behind.
                // SAFETY: a valid C string; unmounting has no memory effects here.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    code = status.code();
                    break;
                }
                if std::time::Instant::now() > deadline {
                    let _ = child.kill(); // only the pid this test started
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        (code, std::fs::read_to_string(&self.log).unwrap_or_default())
    }

    /// The mount's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `mnt/rel`
    pub fn path(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.stop();
        if is_mounted(&self.mnt) {
            let c = std::ffi::CString::new(self.mnt.to_str().unwrap()).unwrap();
            // SAFETY: valid C string.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        // A killed mount could not remove its control socket: nothing of a test stays behind.
        let socket = chunkscope::overlay::control::socket_for(&self.mnt);
        if chunkscope::overlay::control::daemon_pid(&socket).is_none() {
            let _ = std::fs::remove_file(socket);
        }
    }
}

/// Runs `chunkscope gc --json` on `store` (a directory or a mount) and returns (exit code,
/// report, output). Adds `--no-atime-check` (the check sleeps a second and adds the zero
/// chunk) unless `args` holds `--with-atime-check`.
pub fn gc(store: &Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("gc.json");
    let json_arg = format!("--json={}", json.display());
    let mut a = vec!["gc", json_arg.as_str()];
    if !args.contains(&"--with-atime-check") {
        a.push("--no-atime-check");
    }
    let args: Vec<&str> = args
        .iter()
        .copied()
        .filter(|&x| x != "--with-atime-check")
        .collect();
    let args = &args[..];
    a.extend_from_slice(args);
    a.push(store.to_str().unwrap());
    let o = run(&a);
    let report = std::fs::read(&json)
        .ok()
        .inspect(|b| assert_no_secrets(&String::from_utf8_lossy(b)))
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap_or(serde_json::Value::Null);
    (o.status.code().unwrap(), report, stdout(&o) + &stderr(&o))
}

/// Modelled totals of a trace (`replay --json`), after the last transaction group.
pub fn replayed_totals(trace: &Path) -> serde_json::Value {
    let o = run(&["replay", "--json", trace.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["totals"].clone()
}

/// `simulate --json` of `preset`/`seed` with the store's root inode as the first inode;
/// returns the runs.
pub fn simulate(store: &Path, preset: &str, seed: &str, args: &[&str]) -> Vec<serde_json::Value> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(store).unwrap().ino().to_string();
    let mut a = vec![
        "simulate",
        "--json",
        "--preset",
        preset,
        "--seed",
        seed,
        "--first-ino",
        &ino,
    ];
    a.extend_from_slice(args);
    let o = run(&a);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v.as_array().unwrap().clone()
}

/// Asserts a simulated run matches a real one: the same touches, listings and stats, and
/// modelled time within `tolerance` (a fraction).
pub fn assert_sim_matches(
    strategy: &str,
    real_counters: &serde_json::Value,
    real_totals: &serde_json::Value,
    sim: &serde_json::Value,
    tolerance: f64,
) {
    let sc = &sim["counters"];
    for key in [
        "utimensat_calls",
        "touched",
        "listings",
        "sweep_listings",
        "stat_calls",
        "unlinks",
        "removed_chunks",
    ] {
        assert_eq!(
            sc[key], real_counters[key],
            "{strategy}: {key} simulated {} real {}",
            sc[key], real_counters[key]
        );
    }
    let (s, r) = (
        sim["model"]["ns"].as_f64().unwrap(),
        real_totals["ns"].as_f64().unwrap(),
    );
    assert!(
        (s - r).abs() <= tolerance * r,
        "{strategy}: modelled {s} ns simulated vs {r} ns through the mount"
    );
    let (sm, rm) = (
        sim["model"]["misses"].as_f64().unwrap(),
        real_totals["misses"].as_f64().unwrap(),
    );
    assert!(
        (sm - rm).abs() <= tolerance * rm,
        "{strategy}: {sm} misses simulated vs {rm}"
    );
}

/// Requests of operation `op` in a phase of `analyze --json`.
pub fn op_count(phase: &serde_json::Value, op: &str) -> u64 {
    phase["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["op"] == op)
        .map(|o| o["count"].as_u64().unwrap())
        .sum()
}

/// A CSV file's header and rows, its quoted fields unquoted.
pub fn csv_table(path: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let mut r = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header = r.headers().unwrap().iter().map(String::from).collect();
    let rows = r
        .records()
        .map(|row| row.unwrap().iter().map(String::from).collect())
        .collect();
    (header, rows)
}

/// A Parquet file (its bytes): the field names, the key-value metadata, the number of row
/// groups and the rows, each cell written as the CSV export writes it (null as empty), so
/// that the two can be compared cell by cell.
pub struct ParquetTable {
    pub header: Vec<String>,
    pub metadata: Vec<(String, String)>,
    pub row_groups: usize,
    pub rows: Vec<Vec<String>>,
}

pub fn parquet_table(bytes: Vec<u8>) -> ParquetTable {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    let r = SerializedFileReader::new(bytes::Bytes::from(bytes)).expect("a Parquet file");
    let meta = r.metadata();
    let header = meta
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    let metadata = meta
        .file_metadata()
        .key_value_metadata()
        .map(|kv| {
            kv.iter()
                .map(|kv| (kv.key.clone(), kv.value.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let row_groups = meta.num_row_groups();
    let rows = r
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            row.unwrap()
                .get_column_iter()
                .map(|(name, f)| match f {
                    Field::Null => String::new(),
                    Field::ULong(v) => v.to_string(),
                    Field::UInt(v) => v.to_string(),
                    Field::Long(v) => v.to_string(),
                    Field::Double(v) => v.to_string(),
                    Field::Str(s) => s.clone(),
                    other => panic!("{name}: a cell of an unexpected type: {other:?}"),
                })
                .collect()
        })
        .collect();
    ParquetTable {
        header,
        metadata,
        row_groups,
        rows,
    }
}

/// Every file under `dir` with its size, atime and mtime (ns), read with `lstat` (no atime
/// changes, no link followed): equal before and after means nothing there was touched,
/// written or removed. A symbolic link's atime is left out: reading the link (to name its
/// target in a message) sets it, and it is nobody's GC state.
pub fn fingerprint(dir: &Path) -> Vec<(PathBuf, u64, i128, i128)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.path().symlink_metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
                let atime = if m.is_symlink() {
                    0
                } else {
                    ns(m.atime(), m.atime_nsec())
                };
                out.push((e.path(), m.size(), atime, ns(m.mtime(), m.mtime_nsec())));
            }
        }
    }
    out.sort();
    out
}

/// Asserts two [`fingerprint`]s are equal, naming the first file that differs (a whole
/// store's listing is too long to print).
#[track_caller]
pub fn assert_same_files(
    before: &[(PathBuf, u64, i128, i128)],
    after: &[(PathBuf, u64, i128, i128)],
    what: &str,
) {
    let first = before.iter().zip(after).find(|(a, b)| a != b);
    assert!(
        first.is_none() && before.len() == after.len(),
        "{what}: {} files before, {} after; first difference: {first:?}",
        before.len(),
        after.len()
    );
}

/// The chunk directory of `other` with the most chunks among those `store` has chunks in too
/// (a GC of `store` touches and sweeps there), as `XXXX`.
pub fn shared_chunk_dir(store: &Path, other: &Path) -> String {
    let count = |s: &Path, p: &str| {
        std::fs::read_dir(s.join(".chunks").join(p))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    (0..=0xffffu32)
        .map(|p| format!("{p:04x}"))
        .filter(|p| count(store, p) > 0)
        .max_by_key(|p| count(other, p))
        .expect("a store with chunks")
}

/// A bind mount of `src` on `dst`, detached on drop (and on panic).
pub struct Bind(PathBuf);

impl Bind {
    pub fn new(src: &Path, dst: &Path) -> Bind {
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let (s, d) = (c(src), c(dst));
        // SAFETY: valid C strings; a bind mount takes no type or data.
        let rc = unsafe {
            libc::mount(
                s.as_ptr(),
                d.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        };
        assert_eq!(
            rc,
            0,
            "bind {src:?} on {dst:?}: {}",
            std::io::Error::last_os_error()
        );
        Bind(dst.to_path_buf())
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        let d = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid C string.
        unsafe { libc::umount2(d.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A FIFO or device node at `p` (`mode` with its type bits), as root.
pub fn mknod(p: &Path, mode: libc::mode_t, dev: libc::dev_t) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string; a FIFO or a device node, as root.
    let rc = unsafe { libc::mknod(c.as_ptr(), mode, dev) };
    assert_eq!(rc, 0, "mknod {p:?}: {}", std::io::Error::last_os_error());
}

/// The index files of `store` (`*.fidx`, `*.didx` outside `.chunks`), sorted.
pub fn index_files(store: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![store.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().is_some_and(|n| n == ".chunks") {
                continue;
            } else if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "fidx" || e == "didx") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The S3 server the tests run (`s3s-fs`, the README's requirements table says how to
/// install it): `$CHUNKSCOPE_S3S_FS`, else `s3s-fs` on the PATH.
pub fn s3_server_exe() -> PathBuf {
    match std::env::var_os("CHUNKSCOPE_S3S_FS") {
        Some(p) => PathBuf::from(p),
        None => require("s3s-fs"),
    }
}

/// A real S3 server on loopback, its objects in a directory of its own; killed (by the pid
/// it was started with) and its directory removed on drop, and on panic.
pub struct S3Server {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Where it keeps buckets (`ROOT/BUCKET/KEY`).
    pub root: PrivateTmpfs,
}

pub const S3_ACCESS_KEY: &str = "chunkscope-test";
pub const S3_SECRET_KEY: &str = "chunkscope-test-secret";

impl S3Server {
    /// Starts one on a port the kernel picks and waits until it says where it listens.
    pub fn start() -> S3Server {
        use std::io::BufRead;
        let root = store_dir();
        let mut child = Command::new(s3_server_exe())
            .args(["--host", "127.0.0.1", "--port", "0"])
            .args(["--access-key", S3_ACCESS_KEY, "--secret-key", S3_SECRET_KEY])
            .arg(root.path())
            .env("RUST_LOG", "s3s_fs=info")
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", s3_server_exe().display()));
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = String::new();
        let endpoint = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some((_, addr)) = line.split_once("server is running at ") {
                        break addr.trim().to_string();
                    }
                    seen.push_str(&line);
                    seen.push('\n');
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("s3s-fs ended before it listened:\n{seen}");
                }
            }
        };
        // Its further log lines go nowhere, but they must be read: a full pipe would stop it.
        std::thread::spawn(move || for _ in lines {});
        S3Server {
            child,
            endpoint,
            root,
        }
    }

    /// The environment an S3 tool needs to reach it (`AWS_ENDPOINT_URL` and the keys).
    pub fn env(&self) -> [(&'static str, String); 3] {
        [
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", S3_SECRET_KEY.to_string()),
        ]
    }

    /// A client of `bucket` on it, through the library.
    pub fn client(&self, bucket: &str) -> chunkscope::s3::Client {
        let env = self.env();
        let args = chunkscope::s3::TargetArgs {
            bucket: Some(bucket.to_string()),
            ..Default::default()
        };
        let target = chunkscope::s3::Target::resolve(&args, |name| {
            env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
        })
        .unwrap();
        chunkscope::s3::Client::new(&target).unwrap()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
