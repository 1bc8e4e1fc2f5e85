//! zbud: at most two objects ("buddies") per page, the kernel's old zswap allocator
//! (`mm/zbud.c`), as a [`Backend`].
//!
//! # Representation
//!
//! Every page is a 1-page [`PageRun`] of the pool's [`PageSource`], held in a *frame* of one
//! frame table. A page holds a *first* buddy, which starts at the page's start, and a *last*
//! buddy, which ends at the page's end; either may be missing. Sizes are counted in 64-byte
//! chunks; the headers the kernel keeps in the page's first chunk live out of band here
//! (in the frame), so a page has 64 chunks and a 4096-byte object takes a page alone. Two
//! objects share a page when their chunks add up to at most 64 (2048 + 2048 do, 2100 + 2100
//! do not).
//!
//! A page with exactly one buddy and some free chunks is on the *unbuddied* list of its
//! free-chunk count (1..=63), a doubly linked list through the frames, newest first.
//! `malloc` of `n` chunks takes the first page of the first non-empty list of `n` or more
//! free chunks (the kernel's order: the smallest sufficient free count first) and fills its
//! empty buddy; failing that it takes a new page and fills its first buddy. A page whose
//! buddies are both freed goes back to the page source at once, and from there to the OS
//! (unless `page_cache_pages` keeps it resident for reuse). zbud never moves objects, so
//! there is no compaction.
//!
//! A [`Handle`] names a frame, a buddy and that buddy's generation:
//!
//! ```text
//!  63    56 55        32  31  30         0
//! [  magic  ][ generation ][bud][   frame   ]
//!    8 bits     24 bits   1 bit   31 bits
//! ```
//!
//! `magic` is [`HANDLE_MAGIC`] (no zsmalloc or malloc handle has it); freeing a buddy bumps
//! its generation, and free frames are reused oldest first, so a stale handle is refused
//! (it could only come back after 2^24 reuses of that very buddy).
//!
//! # Rules
//!
//! - A frame holds a page iff at least one of its buddies is live; its chunks add up to at
//!   most 64.
//! - A page is on an unbuddied list iff exactly one buddy is live and it has free chunks,
//!   and then on the list of its free-chunk count.
//! - Free frames (no page) are queued for reuse, each once.
//!
//! One lock (`Zbud::inner`) protects everything, as the kernel's pool lock does; the page
//! source's lock is taken under it (a leaf), also to give an emptied page back, so the
//! pages the frames hold always equal the page source's live pages. Object copies (at most
//! 4 KiB) happen under it.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::allocator::Allocator;
use crate::backend::Backend;
use crate::class::MAX_ALLOC_SIZE;
use crate::config::PoolConfig;
use crate::error::{Error, Result, reserve_one};
use crate::handle::Handle;
use crate::pool::check_size;
use crate::sync::Mutex;
use crate::sys::{PAGE_SIZE, PageRun, PageSource};

/// Bytes in a chunk.
pub const CHUNK_SIZE: usize = 64;
/// Chunks in a page (no header in the page).
const NCHUNKS: usize = PAGE_SIZE / CHUNK_SIZE;

const MAGIC_BITS: u32 = 8;
const GEN_BITS: u32 = 24;
const BUD_BITS: u32 = 1;
const FRAME_BITS: u32 = 31;
const _: () = assert!(MAGIC_BITS + GEN_BITS + BUD_BITS + FRAME_BITS == 64);
const FRAME_SHIFT: u32 = 0;
const BUD_SHIFT: u32 = FRAME_SHIFT + FRAME_BITS;
const GEN_SHIFT: u32 = BUD_SHIFT + BUD_BITS;
const MAGIC_SHIFT: u32 = GEN_SHIFT + GEN_BITS;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;
const FRAME_MASK: u64 = (1 << FRAME_BITS) - 1;
/// Top byte of every zbud handle ('Z').
const HANDLE_MAGIC: u64 = 0x5A;
/// "No frame": the end of a list.
const NONE: u32 = u32::MAX;

const FIRST: usize = 0;
const LAST: usize = 1;

/// Chunks an object of `size` bytes takes.
fn chunks(size: usize) -> usize {
    size.div_ceil(CHUNK_SIZE)
}

fn encode(frame: u32, bud: usize, generation: u32) -> Handle {
    Handle::from_raw(
        (HANDLE_MAGIC << MAGIC_SHIFT)
            | (u64::from(generation) << GEN_SHIFT)
            | ((bud as u64) << BUD_SHIFT)
            | (u64::from(frame) << FRAME_SHIFT),
    )
}

/// `(frame, bud, generation)`, or `None` when the magic is wrong.
fn decode(handle: Handle) -> Option<(usize, usize, u32)> {
    let raw = handle.to_raw();
    if raw >> MAGIC_SHIFT != HANDLE_MAGIC {
        return None;
    }
    let frame = (raw & FRAME_MASK) as usize;
    let bud = ((raw >> BUD_SHIFT) & 1) as usize;
    let generation = ((raw >> GEN_SHIFT) as u32) & GEN_MASK;
    Some((frame, bud, generation))
}

/// A page and its two buddies (or a free frame, without a page).
#[derive(Debug)]
struct Frame {
    page: Option<PageRun>,
    /// Each buddy's size in bytes; 0 = no object.
    size: [u16; 2],
    /// Each buddy's generation: what the next handle to it carries (bumped on free).
    generation: [u32; 2],
    /// Unbuddied-list links (`NONE` when not on a list, or at an end).
    prev: u32,
    next: u32,
}

// What the docs count as a frame's bookkeeping (on 64-bit targets).
const _: () = assert!(std::mem::size_of::<Frame>() <= 48);

impl Frame {
    fn used_chunks(&self) -> usize {
        chunks(usize::from(self.size[FIRST])) + chunks(usize::from(self.size[LAST]))
    }

    fn free_chunks(&self) -> usize {
        NCHUNKS - self.used_chunks()
    }

    fn live_buddies(&self) -> usize {
        self.size.iter().filter(|&&s| s != 0).count()
    }

    /// Which unbuddied list the page belongs on, if any.
    fn list(&self) -> Option<usize> {
        let free = self.free_chunks();
        (self.page.is_some() && self.live_buddies() == 1 && free > 0).then_some(free)
    }

    /// The byte range of buddy `bud` in the page.
    fn range(&self, bud: usize) -> std::ops::Range<usize> {
        let size = usize::from(self.size[bud]);
        let start = if bud == FIRST {
            0
        } else {
            PAGE_SIZE - chunks(size) * CHUNK_SIZE
        };
        start..start + size
    }
}

#[derive(Debug)]
struct Inner {
    frames: Vec<Frame>,
    /// Frames without a page, oldest first.
    free_frames: VecDeque<u32>,
    /// Heads of the unbuddied lists, by free chunks (index 0 unused).
    unbuddied: [u32; NCHUNKS],
    objects: usize,
}

impl Inner {
    fn unlink(&mut self, frame: usize, list: usize) {
        let (prev, next) = (self.frames[frame].prev, self.frames[frame].next);
        if prev == NONE {
            self.unbuddied[list] = next;
        } else {
            self.frames[prev as usize].next = next;
        }
        if next != NONE {
            self.frames[next as usize].prev = prev;
        }
        self.frames[frame].prev = NONE;
        self.frames[frame].next = NONE;
    }

    /// Puts the page at the head of the list it belongs on (if any).
    fn relist(&mut self, frame: usize) {
        if let Some(list) = self.frames[frame].list() {
            let head = self.unbuddied[list];
            self.frames[frame].prev = NONE;
            self.frames[frame].next = head;
            if head != NONE {
                self.frames[head as usize].prev = frame as u32;
            }
            self.unbuddied[list] = frame as u32;
        }
    }

    /// The live frame and buddy `handle` names.
    fn resolve(&self, handle: Handle) -> Result<(usize, usize)> {
        let (frame, bud, generation) = decode(handle).ok_or(Error::StaleHandle(handle))?;
        match self.frames.get(frame) {
            Some(s) if s.size[bud] != 0 && s.generation[bud] == generation => Ok((frame, bud)),
            _ => Err(Error::StaleHandle(handle)),
        }
    }
}

/// A zbud pool (see the module docs).
#[derive(Debug)]
pub struct Zbud {
    inner: Mutex<Inner>,
    source: Arc<PageSource>,
    huge_class_size: usize,
}

impl Zbud {
    /// A zbud pool with the settings of `config` that apply to it (`populate`,
    /// `page_cache_pages`; the zsmalloc settings fix only the huge-class watermark).
    pub fn with_config(config: PoolConfig) -> Result<Self> {
        Ok(Self {
            inner: Mutex::new(Inner {
                frames: Vec::new(),
                free_frames: VecDeque::new(),
                unbuddied: [NONE; NCHUNKS],
                objects: 0,
            }),
            source: PageSource::new(config.populate, config.page_cache_pages, config.fault_ahead),
            huge_class_size: config.huge_class_size()?,
        })
    }

    /// A new page in a frame (a reused one, oldest free first); returns the frame.
    fn new_page(&self, inner: &mut Inner) -> Result<usize> {
        let page = self.source.alloc(1)?;
        if let Some(frame) = inner.free_frames.pop_front() {
            inner.frames[frame as usize].page = Some(page);
            return Ok(frame as usize);
        }
        let frame = inner.frames.len();
        if frame as u64 > FRAME_MASK {
            return Err(Error::TooManyObjects);
        }
        reserve_one(&mut inner.frames)?;
        // Room to queue every frame as free, so that `free` never allocates.
        let queued = inner.free_frames.len();
        inner.free_frames.try_reserve(frame + 1 - queued)?;
        inner.frames.push(Frame {
            page: Some(page),
            size: [0; 2],
            generation: [0; 2],
            prev: NONE,
            next: NONE,
        });
        Ok(frame)
    }
}

impl Backend for Zbud {
    fn allocator(&self) -> Allocator {
        Allocator::Zbud
    }

    fn malloc(&self, size: usize) -> Result<Handle> {
        check_size(size)?;
        let need = chunks(size);
        let mut inner = self.inner.lock();
        let found = (need..NCHUNKS).find(|&free| inner.unbuddied[free] != NONE);
        let (frame, bud) = match found {
            Some(list) => {
                let frame = inner.unbuddied[list] as usize;
                inner.unlink(frame, list);
                let bud = if inner.frames[frame].size[FIRST] == 0 {
                    FIRST
                } else {
                    LAST
                };
                (frame, bud)
            }
            None => (self.new_page(&mut inner)?, FIRST),
        };
        let s = &mut inner.frames[frame];
        s.size[bud] = size as u16;
        let generation = s.generation[bud];
        let range = s.range(bud);
        if let Some(page) = s.page.as_mut() {
            // A reused page (or half) holds old bytes: objects start zeroed.
            page.bytes_mut()[range].fill(0);
        }
        inner.relist(frame);
        inner.objects += 1;
        Ok(encode(frame as u32, bud, generation))
    }

    fn write(&self, handle: Handle, data: &[u8]) -> Result<()> {
        let mut inner = self.inner.lock();
        let (frame, bud) = inner.resolve(handle)?;
        let s = &mut inner.frames[frame];
        let range = s.range(bud);
        if data.len() > range.len() {
            return Err(Error::TooLarge {
                len: data.len(),
                capacity: range.len(),
            });
        }
        let page = s.page.as_mut().ok_or(Error::StaleHandle(handle))?;
        page.bytes_mut()[range.start..range.start + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn read_with(&self, handle: Handle, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        let inner = self.inner.lock();
        let (frame, bud) = inner.resolve(handle)?;
        let s = &inner.frames[frame];
        let range = s.range(bud);
        if len > range.len() {
            return Err(Error::TooLarge {
                len,
                capacity: range.len(),
            });
        }
        let page = s.page.as_ref().ok_or(Error::StaleHandle(handle))?;
        f(&page.bytes()[range.start..range.start + len]);
        Ok(())
    }

    fn free(&self, handle: Handle) -> Result<()> {
        let mut inner = self.inner.lock();
        {
            let (frame, bud) = inner.resolve(handle)?;
            if let Some(list) = inner.frames[frame].list() {
                inner.unlink(frame, list);
            }
            let s = &mut inner.frames[frame];
            s.size[bud] = 0;
            s.generation[bud] = (s.generation[bud] + 1) & GEN_MASK;
            inner.objects -= 1;
            if inner.frames[frame].live_buddies() == 0 {
                // Reserved in `new_page`: the queue holds every frame at most once.
                inner.free_frames.push_back(frame as u32);
                // The emptied page goes back to the page source (a leaf lock) under the
                // pool lock, so that `total_pages` and the frames always agree.
                drop(inner.frames[frame].page.take());
            } else {
                inner.relist(frame);
            }
        }
        Ok(())
    }

    /// zbud never moves objects: nothing to compact.
    fn compact(&self) -> usize {
        0
    }

    fn total_pages(&self) -> usize {
        self.source.pages_live()
    }

    /// zbud cannot compact, so no page is freeable.
    fn freeable_pages(&self) -> usize {
        0
    }

    fn huge_class_size(&self) -> usize {
        self.huge_class_size
    }

    fn metadata_bytes(&self) -> usize {
        let inner = self.inner.lock();
        std::mem::size_of::<Self>()
            + inner.frames.capacity() * std::mem::size_of::<Frame>()
            + inner.free_frames.capacity() * std::mem::size_of::<u32>()
    }

    fn pages_compacted(&self) -> u64 {
        0
    }

    fn objects(&self) -> usize {
        self.inner.lock().objects
    }

    fn footprint(&self, size: usize) -> Result<usize> {
        check_size(size)?;
        Ok(chunks(size) * CHUNK_SIZE)
    }

    fn cached_pages(&self) -> usize {
        self.source.cached_pages()
    }

    fn trim(&self) -> usize {
        self.source.trim()
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        let inner = self.inner.lock();
        let mut pages = 0;
        let mut objects = 0;
        let mut free = vec![false; inner.frames.len()];
        for &frame in &inner.free_frames {
            let seen = free
                .get_mut(frame as usize)
                .ok_or(format!("free frame {frame} out of range"))?;
            if std::mem::replace(seen, true) {
                return Err(format!("frame {frame} queued free twice"));
            }
        }
        for (i, s) in inner.frames.iter().enumerate() {
            let live = s.live_buddies();
            if s.size.iter().any(|&b| usize::from(b) > MAX_ALLOC_SIZE) {
                return Err(format!("frame {i}: a buddy over a page"));
            }
            if s.used_chunks() > NCHUNKS {
                return Err(format!("frame {i}: {} chunks in a page", s.used_chunks()));
            }
            if s.page.is_some() != (live > 0) {
                return Err(format!(
                    "frame {i}: page held {} with {live} buddies",
                    s.page.is_some()
                ));
            }
            if free[i] == (live > 0) {
                return Err(format!(
                    "frame {i}: free-queued {} with {live} buddies",
                    free[i]
                ));
            }
            pages += usize::from(s.page.is_some());
            objects += live;
        }
        let mut listed = 0;
        for (list, &head) in inner.unbuddied.iter().enumerate() {
            let (mut prev, mut at) = (NONE, head);
            while at != NONE {
                let s = inner
                    .frames
                    .get(at as usize)
                    .ok_or(format!("list {list}: frame {at} out of range"))?;
                if s.list() != Some(list) || s.prev != prev {
                    return Err(format!("list {list}: frame {at} misplaced or mislinked"));
                }
                listed += 1;
                if listed > inner.frames.len() {
                    return Err(format!("list {list} loops"));
                }
                (prev, at) = (at, s.next);
            }
        }
        let should = inner.frames.iter().filter(|s| s.list().is_some()).count();
        if listed != should {
            return Err(format!(
                "{listed} pages listed unbuddied, {should} should be"
            ));
        }
        if objects != inner.objects {
            return Err(format!("{objects} buddies live, {} counted", inner.objects));
        }
        if pages != self.source.pages_live() {
            return Err(format!(
                "{pages} pages held, page source counts {}",
                self.source.pages_live()
            ));
        }
        Ok(())
    }
}
