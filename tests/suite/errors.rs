//! Issue 49, point 5: an error names the real cause. A store this user may not read is
//! "permission denied" (whose, and who may), not "not a datastore"; a failed GC says its
//! error once where one reader sees both streams.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;

use common::*;

/// The uid and gid of `nobody` on Debian.
const NOBODY: u32 = 65534;

#[test]
fn a_user_who_may_not_read_the_store_hears_permission_denied_not_that_it_is_no_datastore() {
    let dir = store_dir();
    // Everyone may pass the test's directory; the store's `.chunks` is root's, 0750, as
    // PBS's is backup's.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (store, _) = gen(dir.path(), "store", &["--preset", "tiny"]);
    let chunks = store.join(".chunks");
    assert_eq!(
        std::fs::metadata(&chunks).unwrap().permissions().mode() & 0o777,
        0o750
    );
    let as_nobody = |args: &[&str]| {
        bin_for_others()
            .args(args)
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap()
    };
    let s = store.to_str().unwrap();
    for args in [
        &["gc", "--strategy", "naive", s][..],
        &["check", s],
        &["survey", s],
    ] {
        let o = as_nobody(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains(&format!("permission denied on {}", chunks.display()))
                && e.contains("owned by root:root, mode 0750")
                && e.contains("run as root or as the datastore's owner"),
            "{args:?}: {e}"
        );
        assert!(!e.contains("not a datastore"), "{args:?}: {e}");
    }
    // A directory above the store that this user may not pass is the one named.
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = as_nobody(&["check", s]);
    assert!(
        stderr(&o).contains(&format!("permission denied on {} (", store.display())),
        "{}",
        stderr(&o)
    );
    // And a directory that is no datastore is still said to be that.
    let o = run(&["check", dir.path().to_str().unwrap()]);
    assert!(
        stderr(&o).contains("is not a datastore: it has no .chunks directory"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_failed_gc_says_its_error_once_to_a_reader_of_both_streams() {
    let dir = store_dir();
    let (store, _) = gen(dir.path(), "store", &["--preset", "tiny"]);
    // An index that is not one: phase 1 stops, before anything is removed.
    let index = index_files(&store).into_iter().next().unwrap();
    std::fs::write(
        &index,
        b"not an index at all, but long enough to have a header......",
    )
    .unwrap();
    let gc = || {
        let mut c = bin();
        c.args(["gc", "--strategy", "naive", store.to_str().unwrap()]);
        c
    };
    // Both streams into one file, as a terminal or `2>&1` shows them.
    let both = dir.path().join("both.log");
    let f = std::fs::File::create(&both).unwrap();
    let status = gc()
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
    let text = std::fs::read_to_string(&both).unwrap();
    assert_eq!(
        text.matches("garbage collection aborted").count(),
        1,
        "the error once, as the task line: {text}"
    );
    assert!(text.contains("TASK ERROR: "), "{text}");
    // Apart, each stream has it: a script that keeps only standard error still sees why.
    let o = gc().output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stdout(&o).contains("TASK ERROR: "), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("chunkscope: error: garbage collection aborted"),
        "{}",
        stderr(&o)
    );
}
