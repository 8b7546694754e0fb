//! Metadata operations per second: directly on a store, through the mount without a trace,
//! and through the mount with a trace, measured side by side in one run.
//!
//!     cargo bench --bench overlay_ops            # generates a tiny store on /dev/shm
//!     CHUNKSCOPE_BENCH_ROUNDS=5 cargo bench --bench overlay_ops
//!     CHUNKSCOPE_BENCH_BASELINE=/tmp/chunkscope-old cargo bench --bench overlay_ops
//!
//! With `CHUNKSCOPE_BENCH_BASELINE` (another build's `chunkscope` binary), a mount of that
//! binary without a trace is measured in each round too, alternating with this build's, so a
//! change is compared side by side in one run.
//!
//! With `CHUNKSCOPE_BENCH_CALLER=UID`, the store is handed to that user and two more mounts
//! (`--allow-other`, no trace) are measured in each round: one with the client as root, one
//! with the client's threads acting as UID (its filesystem uid and gid), so what running a
//! request as an unprivileged caller costs is measured side by side (and the baseline's mount
//! with that caller too, when both are set).
//!
//! One "operation" is what a GC does per chunk: `stat` (lookups of each path component, then
//! getattr) and `utimensat(UTIME_NOW, UTIME_OMIT)` (lookups, then setattr). The client runs on
//! 2 threads, the mount with 2 worker threads, attribute and entry TTL 0 (every request seen).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Passes over the chunk list per measurement (about a second through the mount).
const PASSES: usize = 12;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_chunkscope"))
}

fn this_build() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_chunkscope"))
}

fn mounted(mnt: &Path) -> bool {
    let m = mnt.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(&m))
}

struct MountProc {
    mnt: PathBuf,
    child: Child,
}

impl MountProc {
    fn start(exe: &Path, store: &Path, mnt: &Path, trace: Option<&Path>) -> MountProc {
        Self::start_with(exe, store, mnt, trace, &[])
    }

    fn start_with(
        exe: &Path,
        store: &Path,
        mnt: &Path,
        trace: Option<&Path>,
        extra: &[&str],
    ) -> MountProc {
        std::fs::create_dir_all(mnt).unwrap();
        let mut c = Command::new(exe);
        c.args([
            "mount",
            "--store",
            store.to_str().unwrap(),
            "--mountpoint",
            mnt.to_str().unwrap(),
            "--threads",
            "2",
        ]);
        if let Some(t) = trace {
            c.args(["--trace", t.to_str().unwrap()]);
        }
        c.args(extra);
        let child = c.stderr(Stdio::null()).spawn().unwrap();
        let t0 = Instant::now();
        while !mounted(mnt) {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "mount did not come up"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        MountProc {
            mnt: mnt.to_path_buf(),
            child,
        }
    }
}

impl Drop for MountProc {
    fn drop(&mut self) {
        let c = CString::new(self.mnt.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid C string; unmounting has no memory effects here.
        if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
            // SAFETY: a valid C string; unmounting has no memory effects here.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = self.child.wait();
    }
}

fn chunk_paths(store: &Path, n: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    'dirs: for prefix in 0..65536u32 {
        let rel = format!(".chunks/{prefix:04x}");
        for e in std::fs::read_dir(store.join(&rel)).unwrap() {
            let e = e.unwrap();
            if e.file_name().len() == 64 {
                out.push(PathBuf::from(&rel).join(e.file_name()));
                if out.len() == n {
                    break 'dirs;
                }
            }
        }
    }
    out
}

/// Runs stat + utimensat over `paths` below `root` on 2 threads; returns operations per second.
fn workload(root: &Path, paths: &[PathBuf]) -> f64 {
    workload_as(root, paths, 0)
}

/// [`workload`] with the client threads acting as `uid` (and gid `uid`) when it is not 0.
fn workload_as(root: &Path, paths: &[PathBuf], uid: u32) -> f64 {
    let full: Vec<CString> = paths
        .iter()
        .map(|p| CString::new(root.join(p).as_os_str().as_bytes()).unwrap())
        .collect();
    let times = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
    ];
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for half in full.chunks(full.len().div_ceil(2)) {
            s.spawn(move || {
                if uid != 0 {
                    // SAFETY: raw syscalls change this thread's filesystem ids only.
                    unsafe {
                        libc::syscall(libc::SYS_setfsgid, uid);
                        libc::syscall(libc::SYS_setfsuid, uid);
                    }
                }
                for c in half.iter().cycle().take(half.len() * PASSES) {
                    // SAFETY: a plain C struct; all zeroes is a valid value of it.
                    let mut st: libc::stat = unsafe { std::mem::zeroed() };
                    // SAFETY: a valid C string and out pointer.
                    assert_eq!(unsafe { libc::lstat(c.as_ptr(), &mut st) }, 0);
                    assert_eq!(
                        // SAFETY: a valid C string and two timespecs.
                        unsafe {
                            libc::utimensat(
                                libc::AT_FDCWD,
                                c.as_ptr(),
                                times.as_ptr(),
                                libc::AT_SYMLINK_NOFOLLOW,
                            )
                        },
                        0
                    );
                }
            });
        }
    });
    (paths.len() * PASSES) as f64 / t0.elapsed().as_secs_f64()
}

/// CPU time (clock ticks, user + system) of each thread of process `pid`, by thread name.
fn thread_cpu(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        // "tid (comm) state ppid ...": utime and stime are fields 14 and 15.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let f: Vec<&str> = stat[close + 2..].split(' ').collect();
        let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        out.push((comm, ticks(11) + ticks(12)));
    }
    out
}

/// CPU time, ns, of every thread of process `pid` alive now (`/proc/PID/task/*/schedstat`:
/// time on the CPU, which leaves out time the hypervisor took: the machine's swings).
fn process_cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// CPU time, ns, this process has used so far, its ended threads included (user + system).
fn own_cpu_ns() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out pointer to a rusage struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    ns(u.ru_utime) + ns(u.ru_stime)
}

/// Runs the workload through mount `m`: operations per second, and CPU time per operation
/// (ns; the client's and the daemon's, the kernel's work for them included).
fn measured(m: &MountProc, paths: &[PathBuf]) -> (f64, f64) {
    let (daemon, client) = (process_cpu_ns(m.child.id()), own_cpu_ns());
    let ops_per_s = workload(&m.mnt, paths);
    let ops = (paths.len() * PASSES) as f64;
    let cpu = (process_cpu_ns(m.child.id()) - daemon) + (own_cpu_ns() - client);
    (ops_per_s, cpu as f64 / ops)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo test --all-targets` runs bench binaries too, without `--bench`: measure only
    // when asked to.
    if !std::env::args().any(|a| a == "--bench") {
        println!("overlay_ops: run with `cargo bench --bench overlay_ops` to measure");
        return;
    }
    let rounds: usize = std::env::var("CHUNKSCOPE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let base = Path::new("/dev/shm").join(format!("chunkscope-bench-{}", std::process::id()));
    let store = base.join("store");
    std::fs::create_dir_all(&base).unwrap();
    let ok = bin()
        .args([
            "gen",
            "--quiet",
            "--preset",
            "tiny",
            "--out",
            store.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(ok.success());
    let paths = chunk_paths(&store, 2000);
    let baseline = std::env::var_os("CHUNKSCOPE_BENCH_BASELINE").map(PathBuf::from);
    let (mut direct, mut plain, mut traced, mut base_plain) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let caller: Option<u32> = std::env::var("CHUNKSCOPE_BENCH_CALLER")
        .ok()
        .map(|v| v.parse().expect("CHUNKSCOPE_BENCH_CALLER: a uid"));
    if let Some(uid) = caller {
        let ok = Command::new("chown")
            .args(["-R", &format!("{uid}:{uid}"), store.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let (mut other_root, mut other_user, mut base_user) = (Vec::new(), Vec::new(), Vec::new());
    let mut writer_share = Vec::new();
    let (mut plain_cpu, mut traced_cpu) = (Vec::new(), Vec::new());
    let mnt = base.join("mnt");
    for round in 0..rounds {
        direct.push(workload(&store, &paths));
        // Rotate which mount goes first, so none always runs on a warmer machine.
        let mut order = vec![0, 1];
        if baseline.is_some() {
            order.push(2);
        }
        if caller.is_some() {
            order.extend([3, 4]);
            if baseline.is_some() {
                order.push(5);
            }
        }
        let len = order.len();
        order.rotate_left(round % len);
        for config in order {
            match config {
                0 => {
                    let m = MountProc::start(&this_build(), &store, &mnt, None);
                    let (ops, cpu) = measured(&m, &paths);
                    plain.push(ops);
                    plain_cpu.push(cpu);
                }
                1 => {
                    let t = base.join("bench.trace");
                    let m = MountProc::start(&this_build(), &store, &mnt, Some(&t));
                    let (ops, cpu) = measured(&m, &paths);
                    traced.push(ops);
                    traced_cpu.push(cpu);
                    // The writer thread's share of the daemon's CPU: what tracing costs
                    // besides the record on the request path, free of the rounds' swings.
                    let cpu = thread_cpu(m.child.id());
                    let all: u64 = cpu.iter().map(|c| c.1).sum();
                    let writer: u64 = cpu
                        .iter()
                        .filter(|c| c.0 == "trace-writer")
                        .map(|c| c.1)
                        .sum();
                    writer_share.push(writer as f64 / all.max(1) as f64);
                }
                2 => {
                    let exe = baseline.as_ref().expect("configured");
                    let m = MountProc::start(exe, &store, &mnt, None);
                    base_plain.push(workload(&m.mnt, &paths));
                }
                5 => {
                    let exe = baseline.as_ref().expect("configured");
                    let m = MountProc::start_with(exe, &store, &mnt, None, &["--allow-other"]);
                    base_user.push(workload_as(&m.mnt, &paths, caller.expect("configured")));
                }
                3 | 4 => {
                    let m = MountProc::start_with(
                        &this_build(),
                        &store,
                        &mnt,
                        None,
                        &["--allow-other"],
                    );
                    if config == 3 {
                        other_root.push(workload(&m.mnt, &paths));
                    } else {
                        let uid = caller.expect("configured");
                        other_user.push(workload_as(&m.mnt, &paths, uid));
                    }
                }
                _ => unreachable!(),
            }
        }
    }
    let show = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("rounds, mount no trace: {}", show(&plain));
    println!("rounds, mount trace:    {}", show(&traced));
    let (d, p, t) = (
        median(direct),
        median(plain.clone()),
        median(traced.clone()),
    );
    println!(
        "stat + utimensat per chunk, {} chunks x {PASSES} passes, 2 client threads, median of {rounds} rounds",
        paths.len()
    );
    println!("{:<28} {:>12}", "configuration", "ops/s");
    println!("{:<28} {:>12.0}", "direct on the store", d);
    println!("{:<28} {:>12.0}", "mount, no trace", p);
    println!("{:<28} {:>12.0}", "mount, trace", t);
    println!(
        "tracing cost: {:.1}% of the mount's throughput",
        (1.0 - t / p) * 100.0
    );
    // Each round runs both mounts one after the other: the ratio within a round is spared the
    // machine's swings from round to round.
    let paired: Vec<f64> = plain
        .iter()
        .zip(&traced)
        .map(|(p, t)| 1.0 - t / p)
        .collect();
    println!(
        "tracing cost, median of the rounds' own ratios: {:.1}% (rounds: {})",
        median(paired.clone()) * 100.0,
        paired
            .iter()
            .map(|c| format!("{:.1}%", c * 100.0))
            .collect::<Vec<_>>()
            .join(" ")
    );
    // CPU time per operation, client and daemon (everything runs on one CPU when pinned):
    // what throughput would be with the CPU to themselves, free of the time the hypervisor
    // takes, which makes the rounds' throughput swing.
    let (pc, tc) = (median(plain_cpu.clone()), median(traced_cpu.clone()));
    println!(
        "CPU per operation (client + daemon), median: no trace {:.2} us, trace {:.2} us: tracing cost {:.1}% (rounds: {})",
        pc / 1e3,
        tc / 1e3,
        (tc / pc - 1.0) * 100.0,
        plain_cpu
            .iter()
            .zip(&traced_cpu)
            .map(|(p, t)| format!("{:.1}%", (t / p - 1.0) * 100.0))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "trace writer thread: {:.1}% of the traced daemon's CPU (median of the rounds)",
        median(writer_share.clone()) * 100.0
    );
    if let Some(exe) = &baseline {
        let b = median(base_plain.clone());
        println!("rounds, baseline mount:  {}", show(&base_plain));
        println!(
            "{:<28} {:>12.0}  ({})",
            "baseline mount, no trace",
            b,
            exe.display()
        );
        println!(
            "this build against the baseline: {:+.1}% (mount, no trace)",
            (p / b - 1.0) * 100.0
        );
    }
    if let Some(uid) = caller {
        let (r, u) = (median(other_root.clone()), median(other_user.clone()));
        println!("rounds, allow-other, root: {}", show(&other_root));
        println!("rounds, allow-other, {uid}: {}", show(&other_user));
        println!("{:<28} {:>12.0}", "allow-other, root caller", r);
        println!("{:<28} {:>12.0}", format!("allow-other, uid {uid}"), u);
        println!(
            "an unprivileged caller against root: {:+.1}%",
            (u / r - 1.0) * 100.0
        );
        if !base_user.is_empty() {
            let b = median(base_user.clone());
            println!("rounds, baseline allow-other, {uid}: {}", show(&base_user));
            println!("{:<28} {:>12.0}", format!("baseline, uid {uid}"), b);
            println!(
                "this build against the baseline, uid {uid}: {:+.1}%",
                (u / b - 1.0) * 100.0
            );
        }
    }
    std::fs::remove_dir_all(&base).unwrap();
}
