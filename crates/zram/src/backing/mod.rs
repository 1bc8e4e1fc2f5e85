//! PLACEHOLDER until the backing store lands: the interface only.

/// Figures of a backing store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackingStats {
    /// Bytes of objects stored.
    pub live_bytes: u64,
    /// Bytes of file in use.
    pub file_bytes: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Bytes read from the file.
    pub bytes_read: u64,
    /// Reads.
    pub reads: u64,
    /// Reads served from the read-back cache.
    pub cache_hits: u64,
    /// Failed reads.
    pub read_errors: u64,
    /// Failed appends.
    pub write_errors: u64,
    /// Segments punched.
    pub segments_punched: u64,
}

/// Where written-back data goes.
pub trait Backing: Send + Sync + std::fmt::Debug {
    /// Stores `objects`, returns their offsets.
    fn append(&self, objects: &[&[u8]]) -> std::io::Result<Vec<u64>>;
    /// Reads an object.
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()>;
    /// Frees an object.
    fn free(&self, offset: u64, len: usize);
    /// Syncs.
    fn sync(&self) -> std::io::Result<()>;
    /// Figures.
    fn stats(&self) -> BackingStats;
}

/// Placeholder.
#[derive(Debug)]
pub struct FileBacking;
/// Placeholder.
#[derive(Debug, Default)]
pub struct FileOptions {
    /// Readahead.
    pub readahead: bool,
}
impl FileBacking {
    /// Placeholder.
    pub fn open(_p: &std::path::Path, _o: FileOptions) -> std::io::Result<Self> {
        Err(std::io::Error::other("not yet"))
    }
}
impl Backing for FileBacking {
    fn append(&self, _o: &[&[u8]]) -> std::io::Result<Vec<u64>> {
        unimplemented!()
    }
    fn read(&self, _o: u64, _b: &mut [u8]) -> std::io::Result<()> {
        unimplemented!()
    }
    fn free(&self, _o: u64, _l: usize) {}
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn stats(&self) -> BackingStats {
        BackingStats::default()
    }
}

/// Placeholder in-memory store.
#[derive(Debug, Default)]
pub struct MemBacking {
    inner: std::sync::Mutex<(std::collections::HashMap<u64, Vec<u8>>, u64, bool, bool)>,
}
impl MemBacking {
    /// New.
    pub fn new() -> Self {
        Self::default()
    }
    /// Fail appends.
    pub fn fail_appends(&self, on: bool) {
        self.inner.lock().unwrap().2 = on;
    }
    /// Fail reads.
    pub fn fail_reads(&self, on: bool) {
        self.inner.lock().unwrap().3 = on;
    }
}
impl Backing for MemBacking {
    fn append(&self, o: &[&[u8]]) -> std::io::Result<Vec<u64>> {
        let mut g = self.inner.lock().unwrap();
        if g.2 {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let mut v = Vec::new();
        for obj in o {
            let off = g.1;
            g.1 += obj.len() as u64;
            g.0.insert(off, obj.to_vec());
            v.push(off);
        }
        Ok(v)
    }
    fn read(&self, off: u64, b: &mut [u8]) -> std::io::Result<()> {
        let g = self.inner.lock().unwrap();
        if g.3 {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        let o =
            g.0.get(&off)
                .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EIO))?;
        if o.len() != b.len() {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        b.copy_from_slice(o);
        Ok(())
    }
    fn free(&self, off: u64, _l: usize) {
        self.inner.lock().unwrap().0.remove(&off);
    }
    fn sync(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn stats(&self) -> BackingStats {
        BackingStats {
            live_bytes: self
                .inner
                .lock()
                .unwrap()
                .0
                .values()
                .map(|v| v.len() as u64)
                .sum(),
            ..Default::default()
        }
    }
}
