//! The testbed's guards: what it mounts, attaches and creates, each undone on drop (on an
//! error and a panic as well).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::command;
use crate::overlay::session::{is_mounted, unmount};

/// A `chunkscope mount` of the backing directory, unmounted (and its process reaped) on drop.
pub(super) struct DiskMount {
    child: Option<Child>,
    mnt: PathBuf,
}

impl DiskMount {
    pub(super) fn start(
        exe: &Path,
        backing: &Path,
        mnt: &Path,
        disk: Option<&str>,
        trace: Option<&Path>,
        direct_io: bool,
    ) -> Result<DiskMount> {
        let mut cmd = Command::new(exe);
        cmd.arg("mount")
            .arg("--store")
            .arg(backing)
            .arg("--mountpoint")
            .arg(mnt);
        if direct_io {
            cmd.arg("--direct-io");
        }
        if let Some(d) = disk {
            cmd.args(["--disk", d]);
        }
        if let Some(t) = trace {
            cmd.arg("--trace").arg(t);
        }
        let child = super::interrupt::detach_from_terminal(&mut cmd)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting chunkscope mount")?;
        let mut m = DiskMount {
            child: Some(child),
            mnt: mnt.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !is_mounted(mnt) {
            if let Some(st) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                m.child = None;
                bail!("chunkscope mount on {} exited: {st}", mnt.display());
            }
            if Instant::now() > deadline {
                bail!("chunkscope mount on {} did not come up", mnt.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        super::interrupt::set_disk(Some(crate::overlay::control::socket_for(mnt)));
        Ok(m)
    }

    /// Unmounts and waits for the process: its trace is then whole.
    pub(super) fn stop(mut self) -> Result<()> {
        self.unmount();
        match self.child.take() {
            Some(mut c) => {
                let st = c.wait()?;
                if !st.success() {
                    bail!("chunkscope mount on {} ended with {st}", self.mnt.display());
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn unmount(&self) {
        super::interrupt::set_disk(None);
        if is_mounted(&self.mnt) {
            let _ = unmount(&self.mnt);
        }
    }
}

impl Drop for DiskMount {
    fn drop(&mut self) {
        self.unmount();
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }
}

/// A loop device attached with direct I/O, detached on drop.
pub(super) struct Loop {
    pub(super) dev: String,
}

impl Loop {
    pub(super) fn attach(image: &Path) -> Result<Loop> {
        let o = Command::new("losetup")
            .args(["--direct-io=on", "--find", "--show"])
            .arg(image)
            .output()
            .context("running losetup")?;
        if !o.status.success() {
            bail!(
                "losetup --direct-io=on {}: {}",
                image.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        let lo = Loop {
            dev: String::from_utf8_lossy(&o.stdout).trim().to_string(),
        };
        let dio = Command::new("losetup")
            .args(["--list", "--noheadings", "--output", "DIO", &lo.dev])
            .output()?;
        if String::from_utf8_lossy(&dio.stdout).trim() != "1" {
            bail!(
                "{} did not get direct I/O: its reads would be cached above the disk model",
                lo.dev
            );
        }
        Ok(lo)
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup")
            .args(["-d", &self.dev])
            .stderr(Stdio::null())
            .status();
    }
}

/// A filesystem mounted on a directory, unmounted on drop.
pub(super) struct FsMount(PathBuf);

impl FsMount {
    pub(super) fn mount(dev: &str, on: &Path) -> Result<FsMount> {
        command(Command::new("mount").arg(dev).arg(on))?;
        Ok(FsMount(on.to_path_buf()))
    }

    /// A tmpfs of `bytes` on `on`.
    pub(super) fn tmpfs(on: &Path, bytes: u64) -> Result<FsMount> {
        command(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o"])
                .arg(format!("size={bytes}"))
                .arg("chunkscope-testbed")
                .arg(on),
        )?;
        Ok(FsMount(on.to_path_buf()))
    }
}

impl Drop for FsMount {
    fn drop(&mut self) {
        let _ = unmount(&self.0);
    }
}

/// A memory cgroup (v1 `memory` controller, else v2) with a limit, removed on drop.
pub(super) struct Cgroup {
    dir: PathBuf,
    procs: std::ffi::CString,
}

impl Cgroup {
    pub(super) fn create(name: &str, limit: u64) -> Result<Cgroup> {
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, file) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(name), "memory.limit_in_bytes")
        } else if std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
            .is_ok_and(|c| c.split_whitespace().any(|x| x == "memory"))
        {
            (Path::new("/sys/fs/cgroup").join(name), "memory.max")
        } else {
            bail!("no memory cgroup controller here: run with --memory 0 (no bound)");
        };
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let cg = Cgroup {
            procs: std::ffi::CString::new(dir.join("cgroup.procs").as_os_str().as_encoded_bytes())?,
            dir,
        };
        std::fs::write(cg.dir.join(file), limit.to_string())
            .with_context(|| format!("{}: setting {file}", cg.dir.display()))?;
        Ok(cg)
    }

    /// `cmd`'s process joins the cgroup before it executes.
    pub(super) fn enter_on_exec(&self, cmd: &mut Command) -> Result<()> {
        let procs = self.procs.clone();
        // SAFETY: only async-signal-safe calls (open, write, close) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let ok = libc::write(fd, b"0".as_ptr() as *const libc::c_void, 1) == 1;
                libc::close(fd);
                if ok {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        Ok(())
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `OUT/.testbed.lock`, held (`flock`) for the whole run: a second testbed on the same `--out`
/// would mount over the first one's directories and take its images. Released when the
/// process ends, however it ends.
pub(super) struct OutLock(#[allow(dead_code)] std::fs::File);

impl OutLock {
    pub(super) fn take(out: &Path) -> Result<OutLock> {
        use std::io::{Read, Seek, Write};
        use std::os::fd::AsRawFd;
        let path = out.join(".testbed.lock");
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: flock on a descriptor of ours.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut pid = String::new();
            let _ = f.read_to_string(&mut pid);
            bail!(
                "{} is in use by another testbed (pid {}): wait for it to end, or give \
                 another --out",
                out.display(),
                pid.trim()
            );
        }
        f.set_len(0)?;
        f.rewind()?;
        write!(f, "{}", std::process::id())?;
        Ok(OutLock(f))
    }
}
