//! A simulated S3 datastore's bucket: its chunk objects (`.chunks/XXXX/<hex>[.N.bad]`) in key
//! order, listed a page at a time and deleted in batches, in memory. With it `simulate` runs
//! PBS 4's three-phase GC on a simulated store: the local requests are the simulated store's
//! (modelled as any), the bucket's requests are counted (their time is the server's, which
//! the model does not know).
//!
//! The objects are a survey's listing of the real bucket ([`BucketSource::Objects`]: with
//! their sizes, objects with no local file among them), or every chunk file of the simulated
//! store as the run starts ([`BucketSource::Store`]: a generated store, sizes 0). 49 bytes
//! an object: the digest, a bad copy's suffix, the size, a removed bit.

use std::cell::RefCell;
use std::sync::Arc;

use super::markers::{MarkerKind, MarkerName};
use crate::bucket::{Bucket, DeleteOutcome, ListPage, Listed, S3Error};
use crate::datastore::Digest;
use crate::store::{ChunkDir, ChunkStore};
use crate::survey::file::{SurveyObject, BAD_SUFFIX};

/// What a simulated GC asked of its bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BucketCounts {
    /// `ListObjectsV2` pages.
    pub list_pages: u64,
    /// `DeleteObjects` requests.
    pub delete_requests: u64,
    /// Keys they deleted.
    pub keys_deleted: u64,
    /// Bytes of the objects they deleted (0 for a bucket of a generated store's files).
    pub bytes_deleted: u64,
}

/// Where a simulated bucket's objects come from.
#[derive(Clone, Debug)]
pub enum BucketSource {
    /// Every chunk file of the simulated store as a run starts (`.using` markers are local
    /// only).
    Store,
    /// A survey's listing of the real bucket, in key order.
    Objects(Arc<[SurveyObject]>),
}

/// The bucket of an S3 datastore's simulated GC.
pub struct SimBucket {
    /// The objects, in key order.
    objects: Arc<[SurveyObject]>,
    /// A bit an object: deleted in this run.
    deleted: RefCell<Vec<u64>>,
    counts: RefCell<BucketCounts>,
}

/// An object's place in key order: its digest, then a chunk before its bad copies.
fn order(o: &SurveyObject) -> (Digest, Option<[u8; BAD_SUFFIX]>) {
    (o.digest, o.bad_suffix)
}

impl SimBucket {
    /// The bucket `source` gives for `store`: a [`BucketSource::Store`] is listed from the
    /// store's chunk directories (build it before the run, whose reset forgets these
    /// requests).
    pub fn new(source: &BucketSource, store: &impl ChunkStore) -> anyhow::Result<SimBucket> {
        let objects = match source {
            BucketSource::Objects(o) => Arc::clone(o),
            BucketSource::Store => {
                let mut objects = Vec::new();
                for prefix in (0..store.chunk_dirs()).map(|p| p as u16) {
                    let Some(mut dir) = store.open_dir(prefix)? else {
                        continue;
                    };
                    dir.list(&mut |name, _| {
                        let Some(m) = MarkerName::parse(name) else {
                            return; // temporary files: local only
                        };
                        let bad_suffix = match m.kind {
                            MarkerKind::Chunk => None,
                            MarkerKind::Bad(_) => Some(name[64..].try_into().expect("6 bytes")),
                            MarkerKind::Using => return, // local only
                        };
                        objects.push(SurveyObject {
                            digest: m.digest,
                            bad_suffix,
                            size: 0,
                        });
                    })?;
                }
                objects.sort_unstable_by_key(order);
                objects.into()
            }
        };
        if !objects.is_sorted_by_key(order) {
            anyhow::bail!("the bucket's objects are not in key order");
        }
        Ok(SimBucket {
            deleted: RefCell::new(vec![0; objects.len().div_ceil(64)]),
            objects,
            counts: Default::default(),
        })
    }

    /// Objects in it (deleted ones included).
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// True without objects.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// What was asked of it so far.
    pub fn counts(&self) -> BucketCounts {
        *self.counts.borrow()
    }

    fn is_deleted(deleted: &[u64], i: usize) -> bool {
        deleted[i / 64] & (1 << (i % 64)) != 0
    }
}

impl Bucket for SimBucket {
    fn describe(&self) -> String {
        "a simulated bucket".into()
    }

    fn head(&self) -> Result<(), S3Error> {
        Ok(())
    }

    fn list_page(
        &self,
        prefix: &str,
        token: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, S3Error> {
        self.counts.borrow_mut().list_pages += 1;
        // Keys in key order: after the token, or from the first at or past the prefix.
        let start = match token {
            Some(after) => self.objects.partition_point(|o| o.key().as_str() <= after),
            None => self.objects.partition_point(|o| o.key().as_str() < prefix),
        };
        let deleted = self.deleted.borrow();
        let mut objects: Vec<Listed> = Vec::with_capacity(max_keys.min(self.objects.len()));
        let mut next = None;
        for (i, o) in self.objects.iter().enumerate().skip(start) {
            if Self::is_deleted(&deleted, i) {
                continue;
            }
            let key = o.key();
            if !key.starts_with(prefix) {
                break;
            }
            if objects.len() == max_keys {
                next = objects.last().map(|l: &Listed| l.key.clone());
                break;
            }
            objects.push(Listed { key, size: o.size });
        }
        Ok(ListPage { objects, next })
    }

    fn delete(&self, keys: &[String]) -> Result<DeleteOutcome, S3Error> {
        let mut c = self.counts.borrow_mut();
        c.delete_requests += 1;
        let mut deleted = self.deleted.borrow_mut();
        for k in keys {
            // S3 answers a key that is not there as deleted.
            c.keys_deleted += 1;
            // Found by its key, as a listing finds keys.
            if let Ok(i) = self.objects.binary_search_by(|o| o.key().as_str().cmp(k)) {
                if !Self::is_deleted(&deleted, i) {
                    deleted[i / 64] |= 1 << (i % 64);
                    c.bytes_deleted += self.objects[i].size;
                }
            }
        }
        Ok(DeleteOutcome {
            deleted: keys.to_vec(),
            errors: Vec::new(),
        })
    }

    fn put(&self, _key: &str, _body: &[u8]) -> Result<(), S3Error> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::CHUNK_PREFIX;

    fn bucket(objects: Vec<SurveyObject>) -> SimBucket {
        SimBucket {
            deleted: RefCell::new(vec![0; objects.len().div_ceil(64)]),
            objects: objects.into(),
            counts: Default::default(),
        }
    }

    /// Pages follow key order (a chunk before its bad copies), continue after their token,
    /// skip what was deleted; a delete counts the keys and the bytes it removed.
    #[test]
    fn a_simulated_bucket_lists_in_key_order_and_deletes() {
        let o = |b: u8, bad: Option<&[u8; 6]>, size| SurveyObject {
            digest: Digest([b; 32]),
            bad_suffix: bad.copied(),
            size,
        };
        let b = bucket(vec![
            o(1, None, 10),
            o(1, Some(b".0.bad"), 11),
            o(2, None, 20),
            o(0xff, None, 30),
        ]);
        let keys = |p: &ListPage| p.objects.iter().map(|l| l.key.clone()).collect::<Vec<_>>();
        let first = b.list_page(CHUNK_PREFIX, None, 2).unwrap();
        assert_eq!(
            keys(&first),
            [o(1, None, 0).key(), o(1, Some(b".0.bad"), 0).key()]
        );
        assert!(first.objects[1].key.ends_with(".0.bad"));
        assert_eq!(first.objects[1].size, 11);
        let second = b.list_page(CHUNK_PREFIX, first.next.as_deref(), 2).unwrap();
        assert_eq!(keys(&second), [o(2, None, 0).key(), o(0xff, None, 0).key()]);
        assert_eq!(second.next, None);
        let r = b
            .delete(&[o(2, None, 0).key(), o(9, None, 0).key()])
            .unwrap();
        assert_eq!(r.deleted.len(), 2);
        let all = b.list_page(CHUNK_PREFIX, None, 10).unwrap();
        assert_eq!(all.objects.len(), 3);
        let dir = format!("{CHUNK_PREFIX}ffff/");
        assert_eq!(
            keys(&b.list_page(&dir, None, 10).unwrap()),
            [o(0xff, None, 0).key()]
        );
        assert_eq!(
            b.counts(),
            BucketCounts {
                list_pages: 4,
                delete_requests: 1,
                keys_deleted: 2,
                bytes_deleted: 20,
            }
        );
    }
}
