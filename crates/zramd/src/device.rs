//! A named device slot with the kernel zram's life cycle: settings are chosen while it is
//! uninitialized (`comp_algorithm`, `algorithm_params`), writing a `disksize` initializes it,
//! `reset` frees everything and makes it uninitialized again — refused with `EBUSY` while it
//! is open, as the kernel refuses it while the block device is open.
//!
//! Front ends *open* a device ([`Device::open`]) for as long as they serve it (an NBD
//! connection, an open FUSE `disk` file); the returned [`Opened`] keeps the device's data
//! alive and counts as an opener.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};
use zram::{Algorithm, AlgorithmParams, Zram, ZramConfig};

/// What a refused change says, with the errno the kernel's sysfs gives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// The device is initialized (settings) or open (reset).
    #[error("device is busy")]
    Busy,
    /// The device is not initialized.
    #[error("device is not initialized")]
    NotInitialized,
    /// A bad value.
    #[error("invalid value: {0}")]
    Invalid(String),
    /// The allocator or compressor could not be set up.
    #[error("out of memory: {0}")]
    NoMemory(String),
}

impl DeviceError {
    /// The errno the kernel returns for this.
    pub fn errno(&self) -> i32 {
        match self {
            DeviceError::Busy => libc::EBUSY,
            DeviceError::NotInitialized | DeviceError::Invalid(_) => libc::EINVAL,
            DeviceError::NoMemory(_) => libc::ENOMEM,
        }
    }
}

/// Settings used at the next initialization.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Compression algorithm.
    pub algorithm: Algorithm,
    /// Its parameters.
    pub params: AlgorithmParams,
    /// zsmalloc chain size.
    pub chain_size: usize,
    /// Memory limit in bytes (0 = none).
    pub mem_limit: u64,
    /// zsmalloc shards per size class (0 = one per CPU).
    pub shards: usize,
    /// Where zsmalloc objects keep their handle (default: omitted, 8 bytes less per object).
    pub header: zsmalloc::class::Header,
    /// Bytes compressed as one stream (4096: the kernel's page at a time; up to 128 KiB).
    pub unit_size: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::Lz4,
            params: AlgorithmParams::default(),
            chain_size: zsmalloc::class::DEFAULT_CHAIN_SIZE,
            mem_limit: 0,
            shards: 0,
            header: zsmalloc::class::Header::Omitted,
            unit_size: zram::PAGE_SIZE,
        }
    }
}

/// One device slot.
#[derive(Debug)]
pub struct Device {
    name: String,
    settings: Mutex<Settings>,
    zram: RwLock<Option<Arc<Zram>>>,
    openers: Arc<AtomicUsize>,
}

/// A device held open by a front end.
#[derive(Debug)]
pub struct Opened {
    zram: Arc<Zram>,
    openers: Arc<AtomicUsize>,
}

impl Opened {
    /// The device itself, for a request that may outlive this opener's table entry.
    pub fn arc(&self) -> Arc<Zram> {
        Arc::clone(&self.zram)
    }
}

impl std::ops::Deref for Opened {
    type Target = Zram;
    fn deref(&self) -> &Zram {
        &self.zram
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        self.openers.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Device {
    /// An uninitialized device.
    pub fn new(name: impl Into<String>, settings: Settings) -> Self {
        Self {
            name: name.into(),
            settings: Mutex::new(settings),
            zram: RwLock::new(None),
            openers: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// An initialized device of `disksize` bytes.
    pub fn with_size(
        name: impl Into<String>,
        settings: Settings,
        disksize: u64,
    ) -> Result<Self, DeviceError> {
        let dev = Self::new(name, settings);
        dev.init(disksize)?;
        Ok(dev)
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The data, if initialized (for figures; front ends serving I/O use [`open`](Self::open)).
    pub fn zram(&self) -> Option<Arc<Zram>> {
        self.zram.read().clone()
    }

    /// Is it initialized?
    pub fn initialized(&self) -> bool {
        self.zram.read().is_some()
    }

    /// Opens the device for I/O; `None` when uninitialized.
    pub fn open(&self) -> Option<Opened> {
        let guard = self.zram.read();
        let zram = guard.clone()?;
        self.openers.fetch_add(1, Ordering::AcqRel);
        Some(Opened {
            zram,
            openers: Arc::clone(&self.openers),
        })
    }

    /// Front ends holding the device open.
    pub fn openers(&self) -> usize {
        self.openers.load(Ordering::Acquire)
    }

    /// A copy of the settings for the next initialization (the current ones when
    /// initialized).
    pub fn settings(&self) -> Settings {
        self.settings.lock().clone()
    }

    /// Changes settings; only while uninitialized (`EBUSY` otherwise), except `mem_limit`.
    pub fn update_settings(
        &self,
        f: impl FnOnce(&mut Settings) -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let zram = self.zram.write();
        if zram.is_some() {
            return Err(DeviceError::Busy);
        }
        f(&mut self.settings.lock())
    }

    /// Sets the memory limit (any time; applies at once when initialized).
    pub fn set_mem_limit(&self, bytes: u64) {
        self.settings.lock().mem_limit = bytes;
        if let Some(z) = self.zram.read().as_ref() {
            z.set_mem_limit(bytes);
        }
    }

    /// Initializes the device with `disksize` bytes (`EBUSY` when already initialized).
    pub fn init(&self, disksize: u64) -> Result<(), DeviceError> {
        if disksize == 0 {
            return Err(DeviceError::Invalid("disksize must be more than 0".into()));
        }
        let mut zram = self.zram.write();
        if zram.is_some() {
            return Err(DeviceError::Busy);
        }
        let s = self.settings.lock().clone();
        let dev = Zram::new(ZramConfig {
            disksize,
            algorithm: s.algorithm,
            params: s.params,
            chain_size: s.chain_size,
            mem_limit: s.mem_limit,
            shards: s.shards,
            header: s.header,
            unit_size: s.unit_size,
            ..ZramConfig::default()
        })
        .map_err(|e| match e {
            zram::Error::InvalidParam(m) | zram::Error::InvalidSize(m) => DeviceError::Invalid(m),
            other => DeviceError::NoMemory(other.to_string()),
        })?;
        *zram = Some(Arc::new(dev));
        Ok(())
    }

    /// Frees all data and makes the device uninitialized (`EBUSY` while open). The memory
    /// limit is cleared, as the kernel clears it.
    pub fn reset(&self) -> Result<(), DeviceError> {
        let mut zram = self.zram.write();
        if self.openers() > 0 {
            return Err(DeviceError::Busy);
        }
        *zram = None;
        self.settings.lock().mem_limit = 0;
        Ok(())
    }

    /// Frees all data but keeps the device initialized with the same size and settings
    /// (`EBUSY` while open): what `zramd reset` does to a served device.
    pub fn clear(&self) -> Result<(), DeviceError> {
        let zram = self.zram.write();
        if self.openers() > 0 {
            return Err(DeviceError::Busy);
        }
        match zram.as_ref() {
            Some(z) => {
                z.reset();
                Ok(())
            }
            None => Err(DeviceError::NotInitialized),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn life_cycle_follows_the_kernel() {
        let d = Device::new("zram0", Settings::default());
        assert!(!d.initialized());
        assert!(d.open().is_none());
        d.update_settings(|s| {
            s.algorithm = Algorithm::Zstd;
            Ok(())
        })
        .unwrap();
        assert_eq!(
            d.init(0),
            Err(DeviceError::Invalid("disksize must be more than 0".into()))
        );
        d.init(1 << 20).unwrap();
        assert_eq!(d.init(1 << 20), Err(DeviceError::Busy));
        assert_eq!(d.update_settings(|_| Ok(())), Err(DeviceError::Busy));
        assert_eq!(d.zram().unwrap().algorithm(), Algorithm::Zstd);
        let opened = d.open().unwrap();
        opened.write(0, &[7u8; 4096]).unwrap();
        assert_eq!(d.reset(), Err(DeviceError::Busy));
        assert_eq!(d.clear(), Err(DeviceError::Busy));
        drop(opened);
        d.set_mem_limit(1 << 20);
        assert_eq!(d.zram().unwrap().mm_stat().mem_limit, 1 << 20);
        d.clear().unwrap();
        assert_eq!(d.zram().unwrap().mm_stat().orig_data_size, 0);
        d.reset().unwrap();
        assert!(!d.initialized());
        assert_eq!(d.settings().mem_limit, 0);
        assert_eq!(DeviceError::Busy.errno(), libc::EBUSY);
    }
}
