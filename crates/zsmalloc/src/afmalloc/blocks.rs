//! A growable array kept in fixed blocks, for the heap's tables: growing never copies or
//! frees a block, and the spare room is at most one block (a `Vec` doubles, leaving up to
//! half its memory spare, and frees its old buffer to the process's heap at each growth).
//! Shrinking ([`Blocks::truncate`], by compaction) drops the blocks past the new end.

/// Bytes per block (a page's worth).
const BLOCK_BYTES: usize = 4096;

/// An array of `T` in blocks of `BLOCK_BYTES / size_of::<T>()` elements.
#[derive(Debug)]
pub(super) struct Blocks<T> {
    blocks: Vec<Box<[T]>>,
    len: usize,
}

impl<T: Default> Blocks<T> {
    const BLOCK: usize = BLOCK_BYTES / std::mem::size_of::<T>();

    pub fn new() -> Self {
        Self {
            blocks: Vec::new(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Blocks an array of `len` elements takes.
    pub fn blocks_for(len: usize) -> usize {
        len.div_ceil(Self::BLOCK)
    }

    /// Whether the array holds exactly the blocks its length needs (no spare block, none
    /// missing).
    pub fn is_tight(&self) -> bool {
        self.blocks.len() == Self::blocks_for(self.len)
    }

    /// Blocks held.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Shortens the array to `len` elements (no-op if longer), dropping the blocks past
    /// it (their elements are dropped) and the spare room of the list of blocks; the
    /// blocks dropped.
    pub fn truncate(&mut self, len: usize) -> usize {
        if len >= self.len {
            return 0;
        }
        let keep = Self::blocks_for(len);
        let dropped = self.blocks.len() - keep;
        self.len = len;
        self.blocks.truncate(keep);
        self.blocks.shrink_to_fit();
        dropped
    }

    /// Appends `value`.
    pub fn push(&mut self, value: T) {
        if self.len == self.blocks.len() * Self::BLOCK {
            self.blocks
                .push((0..Self::BLOCK).map(|_| T::default()).collect::<Box<[T]>>());
        }
        let i = self.len;
        self.len += 1;
        *self.get_mut(i) = value;
    }

    pub fn get(&self, i: usize) -> &T {
        debug_assert!(i < self.len);
        &self.blocks[i / Self::BLOCK][i % Self::BLOCK]
    }

    pub fn get_mut(&mut self, i: usize) -> &mut T {
        debug_assert!(i < self.len);
        &mut self.blocks[i / Self::BLOCK][i % Self::BLOCK]
    }

    /// Bytes held: the blocks and the list of them.
    pub fn metadata_bytes(&self) -> usize {
        self.blocks.len() * Self::BLOCK * std::mem::size_of::<T>()
            + self.blocks.capacity() * std::mem::size_of::<Box<[T]>>()
    }
}
