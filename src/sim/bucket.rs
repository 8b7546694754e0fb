//! A simulated S3 datastore's bucket: every chunk file of a [`SimStore`] an object at its
//! key (`.chunks/XXXX/<name>`), listed in key order a page at a time and deleted in batches,
//! in memory. With it `simulate` runs PBS 4's three-phase GC on a simulated store: the local
//! requests are the simulated store's (modelled as any), the bucket's requests are counted
//! (their time is the server's, which the model does not know).

use std::cell::RefCell;
use std::collections::BTreeSet;

use crate::bucket::{Bucket, DeleteOutcome, ListPage, Listed, S3Error, CHUNK_PREFIX};
use crate::datastore::paths::chunk_subdir_name;
use crate::store::{ChunkDir, ChunkStore};

/// What a simulated GC asked of its bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BucketCounts {
    /// `ListObjectsV2` pages.
    pub list_pages: u64,
    /// `DeleteObjects` requests.
    pub delete_requests: u64,
    /// Keys they deleted.
    pub keys_deleted: u64,
}

/// The bucket of a simulated S3 datastore.
pub struct SimBucket {
    /// The keys, sorted.
    keys: RefCell<BTreeSet<Box<str>>>,
    counts: RefCell<BucketCounts>,
}

impl SimBucket {
    /// A bucket holding an object for every chunk file of `store` now (`.using` markers
    /// are local only). Lists the store's chunk directories: build it before the run, whose
    /// reset forgets these requests.
    pub fn of(store: &impl ChunkStore) -> anyhow::Result<SimBucket> {
        let mut keys = BTreeSet::new();
        for prefix in (0..store.chunk_dirs()).map(|p| p as u16) {
            let Some(mut dir) = store.open_dir(prefix)? else {
                continue;
            };
            let sub = chunk_subdir_name(prefix);
            dir.list(&mut |name, _| {
                if !name.ends_with(b".using") {
                    let name = String::from_utf8_lossy(name);
                    keys.insert(format!("{CHUNK_PREFIX}{sub}/{name}").into_boxed_str());
                }
            })?;
        }
        Ok(SimBucket {
            keys: RefCell::new(keys),
            counts: Default::default(),
        })
    }

    /// Objects in it.
    pub fn len(&self) -> usize {
        self.keys.borrow().len()
    }

    /// True without objects.
    pub fn is_empty(&self) -> bool {
        self.keys.borrow().is_empty()
    }

    /// What was asked of it so far.
    pub fn counts(&self) -> BucketCounts {
        *self.counts.borrow()
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
        let after: &str = token.unwrap_or(prefix);
        let mut objects: Vec<Listed> = self
            .keys
            .borrow()
            .range::<str, _>((
                match token {
                    Some(_) => std::ops::Bound::Excluded(after),
                    None => std::ops::Bound::Included(after),
                },
                std::ops::Bound::Unbounded,
            ))
            .take_while(|k| k.starts_with(prefix))
            .take(max_keys + 1)
            .map(|k| Listed {
                key: k.to_string(),
                size: 0,
            })
            .collect();
        let next = (objects.len() > max_keys).then(|| {
            objects.truncate(max_keys);
            objects
                .last()
                .expect("a page of one key at least")
                .key
                .clone()
        });
        Ok(ListPage { objects, next })
    }

    fn delete(&self, keys: &[String]) -> Result<DeleteOutcome, S3Error> {
        let mut c = self.counts.borrow_mut();
        c.delete_requests += 1;
        c.keys_deleted += keys.len() as u64;
        let mut held = self.keys.borrow_mut();
        for k in keys {
            held.remove(k.as_str());
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
