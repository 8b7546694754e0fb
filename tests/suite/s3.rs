//! S3-backed datastores: the client against a real S3 server process (s3s-fs) on loopback.

use crate::common::*;

/// The requests the GC and the generator need, against the real server: a bucket made,
/// objects put and read back, a listing cut into pages by continuation tokens in key order,
/// a batch deleted with each key accounted for.
#[test]
fn the_client_lists_in_pages_and_deletes_in_batches_on_a_real_server() {
    let server = S3Server::start();
    let c = server.client("pbs-store");
    assert!(
        c.head_bucket().is_err(),
        "no bucket yet: HeadBucket must fail"
    );
    c.create_bucket().unwrap();
    c.create_bucket().expect("creating it again is no error");
    c.head_bucket().unwrap();
    let mut keys: Vec<String> = (0..23u32)
        .map(|i| format!(".chunks/{:04x}/{:064x}", i * 2741 % 65536, i))
        .collect();
    for (i, k) in keys.iter().enumerate() {
        c.put(k, &vec![b'x'; i]).unwrap();
    }
    c.put(".cnt/vm/100/owner", b"root@pam").unwrap();
    assert_eq!(c.get(&keys[5]).unwrap(), vec![b'x'; 5]);
    keys.sort();

    let mut pages = 0;
    let mut token: Option<String> = None;
    let mut listed = Vec::new();
    loop {
        let page = c.list_page(".chunks/", token.as_deref(), 7).unwrap();
        assert!(page.objects.len() <= 7);
        pages += 1;
        listed.extend(page.objects);
        match page.next {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!(pages, 4, "23 keys in pages of 7");
    let names: Vec<&str> = listed.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(
        names, keys,
        "every chunk key once, in key order, none of .cnt/"
    );
    let size_of = |k: &str| listed.iter().find(|o| o.key == k).unwrap().size;
    assert_eq!(size_of(&format!(".chunks/{:04x}/{:064x}", 2741 * 5, 5)), 5);

    let doomed: Vec<String> = keys[..10].to_vec();
    let out = c.delete_batch(&doomed).unwrap();
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let mut deleted = out.deleted.clone();
    deleted.sort();
    assert_eq!(deleted, doomed);
    let left: Vec<String> = c
        .list_all(".chunks/", 1000)
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(left, keys[10..].to_vec());
}

/// What goes wrong says which request, which bucket or key, and the server's own words.
#[test]
fn s3_errors_name_the_request_the_key_and_the_server_s_code() {
    let server = S3Server::start();
    let c = server.client("absent-bucket");
    let e = c.list_page(".chunks/", None, 1000).unwrap_err();
    assert_eq!(e.code, "NoSuchBucket", "{e}");
    assert!(
        e.to_string()
            .starts_with("ListObjectsV2 .chunks/: HTTP 404 NoSuchBucket"),
        "{e}"
    );

    let env = server.env();
    let target = chunkscope::s3::Target::resolve(
        &chunkscope::s3::TargetArgs {
            bucket: Some("absent-bucket".into()),
            ..Default::default()
        },
        |name| match name {
            "AWS_SECRET_ACCESS_KEY" => Some("a-wrong-secret".into()),
            _ => env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone()),
        },
    )
    .unwrap();
    let wrong = chunkscope::s3::Client::new(&target).unwrap();
    let e = wrong.create_bucket().unwrap_err();
    assert_eq!(
        (e.status, e.code.as_str()),
        (403, "SignatureDoesNotMatch"),
        "{e}"
    );

    let endpoint = server.endpoint.clone();
    drop(server);
    let gone = chunkscope::s3::Client::new(&chunkscope::s3::Target {
        endpoint: endpoint.clone(),
        ..target
    })
    .unwrap();
    let e = gone.head_bucket().unwrap_err();
    assert_eq!(e.status, 0, "{e}");
    assert!(
        e.to_string().contains("no response") && e.to_string().contains(&endpoint),
        "{e}"
    );
}

/// Generates an S3 datastore into `dir/name` on `server`'s bucket `bucket`, as `gen` with
/// `--backend s3` and `extra`, and returns (store, ground truth).
pub fn gen_s3(
    server: &S3Server,
    dir: &std::path::Path,
    name: &str,
    bucket: &str,
    extra: &[&str],
) -> (std::path::PathBuf, serde_json::Value) {
    let store = dir.join(name);
    let o = bin()
        .args(["gen", "--quiet", "--backend", "s3", "--s3-bucket", bucket])
        .args(["--out", store.to_str().unwrap()])
        .args(extra)
        .envs(server.env())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "gen --backend s3 failed: {}",
        stderr(&o)
    );
    let truth = std::fs::read(dir.join(format!("{name}.truth.json"))).unwrap();
    (store, serde_json::from_slice(&truth).unwrap())
}

/// `gen --backend s3`: every chunk an object at its path, whole where the local cache keeps
/// it, the rest of the datastore under `.cnt/`, the `.in-use` marker; the local tree a cache
/// of whole chunks, zero-length markers with their times kept, files missing on either side
/// and stale `.using` markers, in the numbers the ground truth gives.
#[test]
fn gen_writes_an_s3_datastore_split_between_the_bucket_and_its_local_cache() {
    use std::os::unix::fs::MetadataExt;
    let server = S3Server::start();
    let dir = store_dir();
    let (store, truth) = gen_s3(
        &server,
        dir.path(),
        "s3tiny",
        "pbs-tiny",
        &[
            "--s3-cached",
            "0.3",
            "--s3-no-marker",
            "0.05",
            "--s3-no-object",
            "4",
        ],
    );
    let (_, plain) = crate::common::gen(dir.path(), "plain", &[]);
    let s3 = &truth["s3"];
    let n = |k: &str| s3[k].as_u64().unwrap_or_else(|| panic!("{k} in {s3}"));
    assert_eq!(
        truth["chunk_files"], plain["chunk_files"],
        "the same store, split"
    );

    let c = server.client("pbs-tiny");
    let objects = c.list_all(".chunks/", 1000).unwrap();
    assert_eq!(objects.len() as u64, n("chunk_objects"));
    assert_eq!(
        objects.iter().map(|o| o.size).sum::<u64>(),
        n("chunk_object_bytes")
    );
    assert_eq!(
        n("chunk_objects") + n("no_object_referenced") + n("no_object_garbage"),
        truth["chunk_files"].as_u64().unwrap(),
        "every chunk has an object but the ones the bucket lost"
    );
    let content = c.list_all(".cnt/", 1000).unwrap();
    assert_eq!(content.len() as u64, n("content_objects"));
    assert!(content
        .iter()
        .any(|o| o.key.ends_with(".fidx") || o.key.ends_with(".didx")));
    assert!(!content.iter().any(|o| o.key.contains(".lock")));
    let in_use = String::from_utf8(c.get(".in-use").unwrap()).unwrap();
    assert!(in_use.starts_with("{\"hostname\":"), "{in_use}");

    let (mut whole, mut markers, mut using, mut unbacked) = (0u64, 0u64, 0u64, 0u64);
    let keys: std::collections::HashSet<&str> = objects.iter().map(|o| o.key.as_str()).collect();
    for dir in std::fs::read_dir(store.join(".chunks")).unwrap() {
        for f in std::fs::read_dir(dir.unwrap().path()).unwrap() {
            let f = f.unwrap();
            let name = f.file_name().into_string().unwrap();
            let meta = f.metadata().unwrap();
            let key = format!(".chunks/{}/{name}", &name[..4]);
            if name.ends_with(".using") {
                using += 1;
                assert!(
                    keys.contains(&key[..key.len() - 6]),
                    "{key}: .using of an object"
                );
                continue;
            }
            if name.len() != 64 {
                continue;
            }
            if !keys.contains(key.as_str()) {
                unbacked += 1;
                assert_eq!(meta.len(), 0, "{key}: a lost object leaves a marker");
                continue;
            }
            if meta.len() == 0 {
                markers += 1;
                assert!(meta.mtime() < truth["generated_at"].as_i64().unwrap());
            } else {
                whole += 1;
                assert_eq!(c.get(&key).unwrap(), std::fs::read(f.path()).unwrap());
            }
        }
    }
    assert_eq!(whole, n("cached_whole"));
    assert_eq!(markers, n("markers"));
    assert_eq!(unbacked, 4);
    assert_eq!(using, n("stale_using"));
    let missing_locally = n("chunk_objects") - whole - markers;
    assert_eq!(
        missing_locally,
        n("no_marker_referenced") + n("no_marker_garbage") + n("stale_using")
    );
    assert!(
        n("no_marker_referenced") > 0 && n("no_marker_garbage") > 0,
        "{s3}"
    );

    // A bucket that holds objects already is not written into.
    let o = bin()
        .args([
            "gen",
            "--quiet",
            "--backend",
            "s3",
            "--s3-bucket",
            "pbs-tiny",
        ])
        .args(["--out", dir.path().join("again").to_str().unwrap()])
        .envs(server.env())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("is not empty"), "{}", stderr(&o));
    assert!(!dir.path().join("again").exists(), "nothing written");
    // S3 options without the S3 backend are a mistake, said.
    let o = run(&["gen", "--s3-bucket", "x", "--out", "/nonexistent/x"]);
    assert!(
        stderr(&o).contains("are for --backend s3"),
        "{}",
        stderr(&o)
    );
}
