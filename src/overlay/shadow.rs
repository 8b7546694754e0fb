//! Shadow mode: effects held in memory, so a production datastore can be traced safely.
//!
//! atime/mtime changes and unlinks are recorded here and shown through the mount (a stat shows
//! the new atime; a removed name is gone from lookups and listings), while the backing store
//! stays byte for byte and timestamp for timestamp unchanged: the overlay then also opens
//! files and directories with `O_NOATIME`. Every other modification fails with `EROFS`.

use std::sync::Mutex;

use fuser::TimeOrNow;
use hashbrown::{HashMap, HashSet};

type Time = (i64, i64);
/// Shadowed (atime, mtime); `None` keeps the backing value.
type Times = (Option<Time>, Option<Time>);

/// Shadow mode's changes, in memory: times set and names removed.
#[derive(Default)]
pub struct Shadow {
    times: Mutex<HashMap<u64, Times>>,
    removed: Mutex<HashMap<u64, HashSet<Box<[u8]>>>>,
}

/// The time asked for, as the kernel's `(sec, nsec)`: before 1970 too (issue 40, point 2).
fn resolve(t: TimeOrNow) -> Time {
    super::convert::from_time(match t {
        TimeOrNow::Now => std::time::SystemTime::now(),
        TimeOrNow::SpecificTime(t) => t,
    })
}

impl Shadow {
    /// Records new times for `ino` (None leaves a time as it is).
    pub fn set_times(&self, ino: u64, atime: Option<TimeOrNow>, mtime: Option<TimeOrNow>) {
        let mut times = self.times.lock().unwrap_or_else(|p| p.into_inner());
        let e = times.entry(ino).or_default();
        if let Some(a) = atime {
            e.0 = Some(resolve(a));
        }
        if let Some(m) = mtime {
            e.1 = Some(resolve(m));
        }
    }

    /// Shows the shadowed times in a stat of the backing inode.
    pub fn apply(&self, st: &mut libc::stat) {
        let times = self.times.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((a, m)) = times.get(&st.st_ino) {
            if let Some((s, ns)) = a {
                st.st_atime = *s;
                st.st_atime_nsec = *ns;
            }
            if let Some((s, ns)) = m {
                st.st_mtime = *s;
                st.st_mtime_nsec = *ns;
            }
        }
    }

    /// Whether `name` in directory `parent` was removed through the mount.
    pub fn is_removed(&self, parent: u64, name: &[u8]) -> bool {
        let removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
        removed
            .get(&parent)
            .is_some_and(|names| names.contains(name))
    }

    /// Removes `name` in directory `parent` (through the mount only).
    pub fn remove(&self, parent: u64, name: &[u8]) {
        let mut removed = self.removed.lock().unwrap_or_else(|p| p.into_inner());
        removed.entry(parent).or_default().insert(name.into());
    }

    /// Names removed so far (for the control channel's stats).
    pub fn removed_count(&self) -> usize {
        self.removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(HashSet::len)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_removals_are_remembered() {
        let s = Shadow::default();
        // SAFETY: a plain C struct; all zeroes is a valid value of it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        st.st_ino = 7;
        st.st_mtime = 100;
        s.set_times(
            7,
            Some(TimeOrNow::SpecificTime(
                std::time::UNIX_EPOCH + std::time::Duration::new(5, 6),
            )),
            None,
        );
        s.apply(&mut st);
        assert_eq!((st.st_atime, st.st_atime_nsec, st.st_mtime), (5, 6, 100));
        assert!(!s.is_removed(1, b"x"));
        s.remove(1, b"x");
        assert!(s.is_removed(1, b"x") && !s.is_removed(2, b"x"));
        assert_eq!(s.removed_count(), 1);
    }
}
