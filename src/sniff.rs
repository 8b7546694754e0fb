//! What a file is, from its first bytes: so that a reader handed a file meant for another
//! command (a survey to `analyze`, an strace log to `replay`, an index to `simulate
//! --survey`) says what the file is and which command takes it, not only that a magic
//! number is wrong. The magics of the files chunkscope writes live here, read by their
//! writers and readers.

use std::io::Read;
use std::path::Path;

use crate::datastore::blob::{
    COMPRESSED_BLOB_MAGIC_1_0, ENCRYPTED_BLOB_MAGIC_1_0, ENCR_COMPR_BLOB_MAGIC_1_0,
    UNCOMPRESSED_BLOB_MAGIC_1_0,
};
use crate::datastore::index::{DYNAMIC_SIZED_CHUNK_INDEX_1_0, FIXED_SIZED_CHUNK_INDEX_1_0};

/// A chunkscope trace's first 8 bytes (`docs/trace-format.md`).
pub const TRACE_MAGIC: [u8; 8] = *b"CSTRACE\x01";
/// A survey file's first 8 bytes (`survey::file`).
pub const SURVEY_MAGIC: [u8; 8] = *b"CSSURVEY";

/// What a file starting with `head` is and what reads it, for an error about a file that is
/// not what was asked for; `None` when it is nothing chunkscope knows.
pub fn describe(head: &[u8]) -> Option<&'static str> {
    let magic = |m: &[u8]| head.starts_with(m);
    let blob = [
        UNCOMPRESSED_BLOB_MAGIC_1_0,
        COMPRESSED_BLOB_MAGIC_1_0,
        ENCRYPTED_BLOB_MAGIC_1_0,
        ENCR_COMPR_BLOB_MAGIC_1_0,
    ];
    Some(if magic(&TRACE_MAGIC) {
        "a chunkscope trace (analyze, replay, trace stats/dump/export read it)"
    } else if magic(&SURVEY_MAGIC) {
        "a chunkscope survey file (`survey --out`; `simulate --survey FILE` reads it)"
    } else if magic(&FIXED_SIZED_CHUNK_INDEX_1_0) || magic(&DYNAMIC_SIZED_CHUNK_INDEX_1_0) {
        "a PBS index file (`inspect` reads it; survey, gc, check and simulate --store take \
         the datastore's directory)"
    } else if blob.iter().any(|m| magic(m)) {
        "a PBS chunk or blob (`inspect` reads it; survey, gc, check and simulate --store take \
         the datastore's directory)"
    } else if magic(b"PAR1") {
        "a Parquet file (analyze --parquet, trace export --format parquet: DuckDB and pandas \
         read it)"
    } else if magic(&[0x28, 0xb5, 0x2f, 0xfd]) {
        "zstd-compressed (unpack it first: zstd -d)"
    } else if magic(&[0x1f, 0x8b]) {
        "gzip-compressed (unpack it first: gunzip)"
    } else if magic(b"# chunkscope gc-syscalls") || magic(b"Attaching ") {
        "a log of mount-scripts/gc-syscalls.bt (import it first: chunkscope trace import \
         --format bpftrace LOG -o gc.trace)"
    } else if strace_line(head) {
        "an strace log (import it first: chunkscope trace import --format strace LOG -o \
         gc.trace)"
    } else if head.first().is_some_and(|&b| b == b'{' || b == b'[') {
        "JSON text (a --json report?)"
    } else {
        return None;
    })
}

/// [`describe`] of the file at `path` (its first 256 bytes, read without moving its atime),
/// as ": it is ..." to append to a message; empty when unknown, unreadable or not a regular
/// file (a pipe's bytes were the reader's, and are gone).
pub fn describe_file(path: &Path) -> String {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return String::new();
    }
    let mut head = Vec::with_capacity(256);
    let read =
        crate::fsutil::open_noatime(path).and_then(|(f, _)| f.take(256).read_to_end(&mut head));
    match read.ok().and_then(|_| describe(&head)) {
        Some(what) => format!(": it is {what}"),
        None => String::new(),
    }
}

/// An strace line begins with a time (`-tt`: `10:20:30.123456`; `-ttt`: `1733300000.123456`),
/// after a thread id with `-f` (`1234 ` or `[pid 1234] `).
fn strace_line(head: &[u8]) -> bool {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let Ok(line) = std::str::from_utf8(line) else {
        return false;
    };
    let mut words = line.trim_start_matches("[pid").split_whitespace();
    let first = words.next().unwrap_or_default();
    let time = |w: &str| {
        let (secs, frac) = w.split_once('.').unwrap_or((w, ""));
        !frac.is_empty()
            && frac.bytes().all(|b| b.is_ascii_digit())
            && !secs.is_empty()
            && secs.bytes().all(|b| b.is_ascii_digit() || b == b':')
    };
    let first = first.trim_end_matches(']');
    if time(first) {
        return true;
    }
    first.bytes().all(|b| b.is_ascii_digit()) && words.next().is_some_and(time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_what_each_command_reads() {
        let is = |head: &[u8], what: &str| {
            let got = describe(head).unwrap_or("nothing");
            assert!(got.contains(what), "{head:?}: {got}");
        };
        is(b"CSTRACE\x01\x02\x00\x00\x00", "a chunkscope trace");
        is(b"CSSURVEY\x01\x00\x00\x00", "simulate --survey");
        is(&FIXED_SIZED_CHUNK_INDEX_1_0, "PBS index");
        is(&DYNAMIC_SIZED_CHUNK_INDEX_1_0, "PBS index");
        is(&COMPRESSED_BLOB_MAGIC_1_0, "PBS chunk or blob");
        is(b"PAR1\x15\x04", "Parquet");
        is(&[0x28, 0xb5, 0x2f, 0xfd, 0], "zstd -d");
        is(
            b"# chunkscope gc-syscalls v1 pid 1 boot_ns 2 wall_s 3\n",
            "--format bpftrace",
        );
        is(b"Attaching 14 probes...\n", "--format bpftrace");
        is(
            b"4242  10:20:30.123456 utimensat(AT_FDCWD, \"/ds/.chunks/0000/00\", ...",
            "--format strace",
        );
        is(
            b"[pid  4242] 10:20:30.123456 newfstatat(5</ds/.chunks/0000>, ...",
            "--format strace",
        );
        is(b"1733300000.123456 getdents64(5, ...", "--format strace");
        is(b"{\"strategy\": \"lru\"}", "JSON");
        assert_eq!(describe(b"hello world\n"), None);
        assert_eq!(describe(b"12 apples\n"), None);
        assert_eq!(describe(b""), None);
    }
}
