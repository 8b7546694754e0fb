//! A request's record (through [`crate::instrument`], which numbers it, charges the model and
//! writes its records, with the overlay's listing entries and names) and its reply, sent now or
//! from the timer thread when it is held.

use std::cell::RefCell;
use std::time::Duration;

use fuser::{FileAttr, Generation, INodeNo, ReplyAttr, ReplyEmpty, ReplyEntry, Request};

use super::convert::{attr, err};
use super::{read_dir, unless, Overlay};
use crate::faults::Decision;
use crate::trace::{Extra, ListingEntries, Op};

thread_local! {
    pub(super) static LISTING: RefCell<Listing> = RefCell::new(Listing::default());
    /// The calling thread of the request this worker recorded last ([`Overlay::emit`]).
    static CALLER: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The entries of the listing a worker is answering (thread local, reused).
#[derive(Default)]
pub(super) struct Listing {
    pub(super) inos: Vec<u64>,
    pub(super) names: Vec<u8>,
    pub(super) ends: Vec<u32>,
}

impl Listing {
    pub(super) fn clear(&mut self) {
        self.inos.clear();
        self.names.clear();
        self.ends.clear();
    }

    pub(super) fn push(&mut self, ino: u64, name: &[u8]) {
        if name == b"." || name == b".." {
            return;
        }
        self.inos.push(ino);
        self.names.extend_from_slice(name);
        self.ends.push(self.names.len() as u32);
    }
}

pub(super) use crate::instrument::Done;

impl Overlay {
    /// Records a request (numbered and charged under the model's lock, see
    /// [`crate::instrument`]) and returns how long its reply must be held: the injected
    /// delay plus `time_scale` times the modelled cost.
    ///
    /// The request's calling thread is noted for [`Overlay::answer`], which follows at once:
    /// a held reply is answered EINTR when that thread is interrupted.
    #[inline]
    pub(super) fn emit(&self, req: &Request, op: Op, t0: u64, d: Done<'_>, dec: Decision) -> u64 {
        CALLER.with(|c| c.set(req.pid()));
        self.inst
            .record(self.trace.as_ref(), op, req.pid(), t0, &d, dec)
            .hold_ns
    }

    /// Sends a reply now (`send(reply)`), or after `hold_ns` from the timer thread, which
    /// answers it EINTR instead if the caller is interrupted while it waits.
    #[inline]
    pub(super) fn answer<R: Interruptible>(
        &self,
        hold_ns: u64,
        reply: R,
        send: impl FnOnce(R) + Send + 'static,
    ) {
        match &self.timer {
            Some(t) if hold_ns > 0 => t.hold(
                Duration::from_nanos(hold_ns),
                CALLER.with(|c| c.get()),
                Box::new(HeldReply { reply, send }),
            ),
            _ => send(reply),
        }
    }

    pub(super) fn reply_entry(
        &self,
        hold: u64,
        reply: ReplyEntry,
        r: Result<(FileAttr, Generation), i32>,
    ) {
        let dir = matches!(&r, Ok((a, _)) if a.kind == fuser::FileType::Directory);
        let (attr_ttl, entry_ttl) = self.ttls(dir);
        self.answer(hold, reply, move |reply| match r {
            Ok((a, g)) => reply.entry_with_ttls(&attr_ttl, &entry_ttl, &a, g),
            Err(e) => reply.error(err(e)),
        })
    }

    /// How long the kernel may keep the attributes and the entry of a reply, (attr, entry):
    /// longer for a directory (`dir_ttl`).
    #[inline]
    pub(super) fn ttls(&self, dir: bool) -> (Duration, Duration) {
        let o = &self.opts;
        if dir {
            (o.attr_ttl.max(o.dir_ttl), o.entry_ttl.max(o.dir_ttl))
        } else {
            (o.attr_ttl, o.entry_ttl)
        }
    }

    /// Sends an attribute reply (after `hold`).
    pub(super) fn reply_attr(&self, hold: u64, reply: ReplyAttr, r: Result<libc::stat, i32>) {
        let dir = matches!(&r, Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR);
        let ttl = self.ttls(dir).0;
        self.answer(hold, reply, move |reply| match r {
            Ok(st) => reply.attr(&ttl, &attr(&st)),
            Err(e) => reply.error(err(e)),
        })
    }

    /// Sends an empty reply (after `hold`).
    pub(super) fn reply_empty(&self, hold: u64, reply: ReplyEmpty, r: Result<(), i32>) {
        self.reply_done(hold, reply, r)
    }

    /// A listing of the directory open as `fh` from `offset`: `add(reply, ino, next, type,
    /// name)` puts an entry in the reply and says whether the reply is full and which inode it
    /// listed; names removed in shadow mode are left out; the listed entries are kept for the
    /// record (and the model) when something reads them.
    #[allow(clippy::too_many_arguments)] // the request's fields, as fuser hands them over
    pub(super) fn list<R: Finish>(
        &self,
        req: &Request,
        op: Op,
        ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        mut reply: R,
        mut add: impl FnMut(&mut R, u64, u64, u8, &[u8]) -> (bool, u64),
    ) {
        let t0 = self.t0();
        self.caller(req);
        let parent = self.backing(ino);
        let dec = self.admit(op, ino, b"", false, false);
        let track = self.tracks_listings();
        LISTING.with(|l| l.borrow_mut().clear());
        let r = unless(dec, || {
            read_dir(super::convert::fd_of(fh), offset, |d_ino, next, t, name| {
                if self.hidden(parent, name) {
                    return None;
                }
                let (full, listed) = add(&mut reply, d_ino, next, t, name);
                if !full && track {
                    LISTING.with(|l| l.borrow_mut().push(listed, name));
                }
                Some(full)
            })
        });
        let hold = LISTING.with(|l| {
            let l = l.borrow();
            let entries = ListingEntries {
                inos: &l.inos,
                names: &l.names,
                name_ends: &l.ends,
            };
            let d = Done {
                arg: *r.as_ref().unwrap_or(&0),
                extra: Extra {
                    listing: track.then_some(entries),
                    ..Extra::default()
                },
                ..self.done(ino, &r)
            };
            self.emit(req, op, t0, d, dec)
        });
        self.reply_done(hold, reply, r);
    }

    /// Sends "done" or the errno (after `hold`), for the replies that carry nothing else.
    pub(super) fn reply_done<R: Finish, T: Send + 'static>(
        &self,
        hold: u64,
        reply: R,
        r: Result<T, i32>,
    ) {
        self.answer(hold, reply, move |reply| reply.done(r.map(|_| ())))
    }

    /// What a request about `ino` did, for its record: its errno and the backing inode.
    pub(super) fn done<T>(&self, ino: INodeNo, r: &Result<T, i32>) -> Done<'static> {
        Done {
            errno: r.as_ref().err().copied().unwrap_or(0),
            ino: self.backing(ino),
            ..Default::default()
        }
    }

    pub(super) fn done_entry<'a>(
        &self,
        parent: INodeNo,
        name: &'a [u8],
        r: &Result<(FileAttr, Generation), i32>,
    ) -> Done<'a> {
        Done {
            errno: r.as_ref().err().copied().unwrap_or(0),
            ino: r.as_ref().map_or(0, |(a, _)| a.ino.0),
            parent: self.backing(parent),
            name,
            ..Default::default()
        }
    }
}

/// A reply that can be answered EINTR (a held reply whose caller was interrupted).
pub(super) trait Interruptible: Send + 'static {
    fn eintr(self);
}

/// A reply held by the timer with what sends it.
struct HeldReply<R, F> {
    reply: R,
    send: F,
}

impl<R: Interruptible, F: FnOnce(R) + Send> super::timer::Held for HeldReply<R, F> {
    fn send(self: Box<Self>) {
        (self.send)(self.reply)
    }
    fn interrupt(self: Box<Self>) {
        self.reply.eintr()
    }
}

macro_rules! interruptible {
    ($($t:ty),*) => {$(
        impl Interruptible for $t {
            fn eintr(self) {
                self.error(fuser::Errno::EINTR)
            }
        }
    )*};
}

interruptible!(
    ReplyEmpty,
    ReplyEntry,
    ReplyAttr,
    fuser::ReplyData,
    fuser::ReplyOpen,
    fuser::ReplyWrite,
    fuser::ReplyStatfs,
    fuser::ReplyCreate,
    fuser::ReplyDirectory,
    fuser::ReplyDirectoryPlus,
    fuser::ReplyXattr,
    fuser::ReplyLock
);

/// A reply that says only "done" or an errno.
pub(super) trait Finish: Interruptible {
    fn done(self, r: Result<(), i32>);
}

macro_rules! finish {
    ($($t:ty),*) => {$(
        impl Finish for $t {
            fn done(self, r: Result<(), i32>) {
                match r {
                    Ok(()) => self.ok(),
                    Err(e) => self.error(err(e)),
                }
            }
        }
    )*};
}

finish!(ReplyEmpty, fuser::ReplyDirectory, fuser::ReplyDirectoryPlus);
