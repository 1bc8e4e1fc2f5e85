//! A named device slot with the kernel zram's life cycle: settings are chosen while it is
//! uninitialized (`comp_algorithm`, `algorithm_params`), writing a `disksize` initializes it,
//! `reset` frees everything and makes it uninitialized again, with the settings back at their
//! defaults ([`reset_settings`]) — refused with `EBUSY` while it is open, as the kernel
//! refuses it while the block device is open. `clear` (beyond the kernel) frees the data but
//! keeps the size and settings.
//!
//! Front ends *open* a device ([`Device::open`]) for as long as they serve it (an NBD
//! connection, an open FUSE `disk` file); the returned [`Opened`] keeps the device's data
//! alive and counts as an opener.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::{Mutex, RwLock};
use zram::{Policy, PolicyStats, Zram, ZramConfig};

/// What a refused change says, with the errno the kernel's sysfs gives.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The device is initialized (settings) or open (reset).
    #[error("device is busy")]
    Busy,
    /// The device is not initialized.
    #[error("device is not initialized")]
    NotInitialized,
    /// A value that does not parse for the attribute it was written to.
    #[error("invalid value {value:?} for {attr}")]
    Invalid {
        /// The attribute or setting.
        attr: &'static str,
        /// What was written.
        value: String,
    },
    /// A number too large for the attribute (the kernel's `kstrtou16` and kin: `ERANGE`).
    #[error("{value:?} is out of range for {attr}")]
    Range {
        /// The attribute.
        attr: &'static str,
        /// What was written.
        value: String,
    },
    /// A value longer than the attribute takes (an algorithm name of 128 bytes or more:
    /// the kernel's `E2BIG`).
    #[error("{attr}: a value of {len} bytes is too long")]
    TooLong {
        /// The attribute.
        attr: &'static str,
        /// The value's length.
        len: usize,
    },
    /// The device was removed (`hot_remove`, `zramd remove`).
    #[error("device was removed")]
    Removed,
    /// The device refused the settings or the size (a bad setting, or no memory).
    #[error(transparent)]
    Zram(#[from] zram::Error),
}

impl DeviceError {
    /// A value that does not parse for `attr`.
    pub fn invalid(attr: &'static str, value: impl Into<String>) -> Self {
        DeviceError::Invalid {
            attr,
            value: value.into(),
        }
    }

    /// The errno the kernel returns for this.
    pub fn errno(&self) -> i32 {
        match self {
            DeviceError::Busy => libc::EBUSY,
            DeviceError::NotInitialized | DeviceError::Invalid { .. } => libc::EINVAL,
            DeviceError::Range { .. } => libc::ERANGE,
            DeviceError::TooLong { .. } => libc::E2BIG,
            DeviceError::Removed => libc::ENODEV,
            DeviceError::Zram(e) => e.errno(),
        }
    }
}

/// One device slot.
#[derive(Debug)]
pub struct Device {
    name: String,
    /// The settings for the next initialization (the current ones while initialized);
    /// `disksize` is taken at initialization.
    settings: Mutex<ZramConfig>,
    zram: RwLock<Option<Arc<Zram>>>,
    /// Held while the data is built and while settings change: `init` builds without
    /// `zram`'s lock, which opening the backing file may need (a path in this server's own
    /// FUSE tree is answered by a lookup and an open that read it).
    init_lock: Mutex<()>,
    openers: Arc<AtomicUsize>,
    /// Removed from its server: never opened or initialized again.
    retired: AtomicBool,
}

/// The settings a device has after `reset`, as the kernel's reset brings back its
/// compiled-in defaults: every setting an attribute file sets (`comp_algorithm`,
/// `algorithm_params`, `recomp_algorithm`, `mem_limit`, `backing_dev`,
/// `writeback_batch_size`, `unit_size`, `allocator`, `dedup`, `policy`) goes back to
/// [`ZramConfig::default`]'s; the allocator's layout (chain size, geometry, header,
/// shards), read-back readahead and background compaction, which no attribute sets, are
/// kept from `kept`.
pub fn reset_settings(kept: &ZramConfig) -> ZramConfig {
    let defaults = ZramConfig::default();
    ZramConfig {
        disksize: kept.disksize,
        readback_readahead: kept.readback_readahead,
        auto_compact: kept.auto_compact,
        pool: zram::PoolConfig {
            allocator: defaults.pool.allocator,
            ..kept.pool
        },
        ..defaults
    }
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
    pub fn new(name: impl Into<String>, settings: ZramConfig) -> Self {
        Self {
            name: name.into(),
            settings: Mutex::new(settings),
            zram: RwLock::new(None),
            init_lock: Mutex::new(()),
            openers: Arc::new(AtomicUsize::new(0)),
            retired: AtomicBool::new(false),
        }
    }

    /// An initialized device of `disksize` bytes.
    pub fn with_size(
        name: impl Into<String>,
        settings: ZramConfig,
        disksize: u64,
    ) -> Result<Self, DeviceError> {
        let dev = Self::new(name, settings);
        dev.init(disksize)?;
        Ok(dev)
    }

    /// An initialized device serving `zram` as the caller made it (on a backing store of
    /// its own, say: [`Zram::with_backing`]; no cgroup cap is applied to its memory limit).
    /// `settings` are what [`Device::settings`] reports until a reset, which starts from
    /// them as from any device's ([`reset_settings`]): the caller keeps them in line with
    /// `zram`.
    pub fn with_zram(name: impl Into<String>, settings: ZramConfig, zram: Zram) -> Self {
        let dev = Self::new(name, settings);
        *dev.zram.write() = Some(Arc::new(zram));
        dev
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The data, if initialized (for figures; front ends serving I/O use [`open`](Self::open)).
    pub fn zram(&self) -> Option<Arc<Zram>> {
        self.zram.read().clone()
    }

    /// The data, or [`DeviceError::NotInitialized`] (`EINVAL`, the kernel's answer to the
    /// passes and triggers on an uninitialized device).
    pub fn initialized_zram(&self) -> Result<Arc<Zram>, DeviceError> {
        self.zram().ok_or(DeviceError::NotInitialized)
    }

    /// Is it initialized?
    pub fn initialized(&self) -> bool {
        self.zram.read().is_some()
    }

    /// Opens the device for I/O; `None` when uninitialized.
    pub fn open(&self) -> Option<Opened> {
        let guard = self.zram.read();
        if self.retired.load(Ordering::Acquire) {
            return None;
        }
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
    pub fn settings(&self) -> ZramConfig {
        self.settings.lock().clone()
    }

    /// Changes settings; only while uninitialized (`EBUSY` otherwise), except `mem_limit`.
    pub fn update_settings(
        &self,
        f: impl FnOnce(&mut ZramConfig) -> Result<(), DeviceError>,
    ) -> Result<(), DeviceError> {
        let _init = self.init_lock.lock();
        let zram = self.zram.write();
        if zram.is_some() {
            return Err(DeviceError::Busy);
        }
        f(&mut self.settings.lock())
    }

    /// Sets the memory limit (any time; applies at once when initialized). In a memory
    /// cgroup with a limit, the device applies at most the pools' budget
    /// ([`crate::cgroup`]), with or without one.
    pub fn set_mem_limit(&self, bytes: u64) {
        self.settings.lock().mem_limit = zram::Size(bytes);
        let applied = crate::cgroup::capped_mem_limit(bytes);
        if applied != bytes {
            tracing::warn!(
                "{}: mem_limit {bytes} applied as {applied}, the memory cgroup's pool budget",
                self.name
            );
        }
        if let Some(z) = self.zram.read().as_ref() {
            z.set_mem_limit(applied);
        }
    }

    /// Sets `writeback_batch_size` (any time; applies at once when initialized).
    pub fn set_writeback_batch_size(&self, n: u32) {
        let zram = self.zram.read();
        self.settings.lock().writeback_batch_size = n;
        if let Some(z) = zram.as_ref() {
            z.set_writeback_batch_size(n as usize);
        }
    }

    /// The post-processing policy: the device's while initialized, else the settings'.
    pub fn policy(&self) -> Policy {
        match self.zram.read().as_ref() {
            Some(z) => z.policy(),
            None => self.settings.lock().policy.clone(),
        }
    }

    /// Applies policy words (`zram::Policy::apply`) over the current policy: the settings'
    /// while uninitialized, the device's (and the settings', for the next initialization)
    /// while initialized. The word `run` runs one round now and returns the figures after
    /// it (`EINVAL` while uninitialized). A refused change changes nothing.
    pub fn update_policy(&self, words: &str) -> Result<Option<PolicyStats>, DeviceError> {
        let run = words.split_whitespace().any(|w| w == "run");
        let rest: Vec<&str> = words.split_whitespace().filter(|&w| w != "run").collect();
        let zram = {
            let zram = self.zram.read();
            match zram.as_ref() {
                None if run => return Err(DeviceError::NotInitialized),
                None => {
                    let mut settings = self.settings.lock();
                    let mut policy = settings.policy.clone();
                    policy.apply(&rest.join(" "))?;
                    settings.policy = policy;
                    return Ok(None);
                }
                Some(z) => {
                    if !rest.is_empty() {
                        let mut policy = z.policy();
                        policy.apply(&rest.join(" "))?;
                        z.set_policy(policy.clone())?;
                        self.settings.lock().policy = policy;
                    }
                    Arc::clone(z)
                }
            }
        };
        // The round runs without the device's lock: it may take long, and reset waits.
        Ok(run.then(|| zram.run_policy_round()))
    }

    /// Initializes the device with `disksize` bytes (`EBUSY` when already initialized).
    pub fn init(&self, disksize: u64) -> Result<(), DeviceError> {
        if disksize == 0 {
            return Err(DeviceError::invalid("disksize", "0"));
        }
        let _init = self.init_lock.lock();
        if self.retired.load(Ordering::Acquire) {
            return Err(DeviceError::Removed);
        }
        if self.initialized() {
            return Err(DeviceError::Busy);
        }
        let settings = self.settings.lock().clone();
        // Built without `zram`'s lock (see `init_lock`): a backing file in this server's
        // own tree is then this device's `disk`, which is not open yet (ENXIO), instead of
        // a request that waits for the lock this thread holds, forever.
        let dev = Zram::new(ZramConfig {
            disksize,
            mem_limit: zram::Size(crate::cgroup::capped_mem_limit(settings.mem_limit.0)),
            ..settings
        })?;
        if let Some(group) = crate::cgroup::shared_limit() {
            dev.share_limit(&group)?;
        }
        let mut zram = self.zram.write();
        if self.retired.load(Ordering::Acquire) {
            return Err(DeviceError::Removed);
        }
        *zram = Some(Arc::new(dev));
        Ok(())
    }

    /// The kernel's reset: frees all data and makes the device uninitialized (`EBUSY` while
    /// open), with its settings back at their defaults ([`reset_settings`]), as the
    /// kernel's algorithm, parameters, memory limit and backing device go back to theirs.
    pub fn reset(&self) -> Result<(), DeviceError> {
        let _init = self.init_lock.lock();
        let mut zram = self.zram.write();
        if self.openers() > 0 {
            return Err(DeviceError::Busy);
        }
        let old = zram.take();
        {
            let mut settings = self.settings.lock();
            *settings = reset_settings(&settings);
        }
        drop(zram);
        // Freeing the data (and waiting out a policy round, or a pass that still holds the
        // device) happens outside the lock, so other clients are not held up by it.
        drop(old);
        Ok(())
    }

    /// Marks the device removed and hands back its data for the caller to free (`EBUSY`
    /// while open): from then on it is never opened or initialized again.
    pub fn retire(&self) -> Result<Option<Arc<Zram>>, DeviceError> {
        let mut zram = self.zram.write();
        if self.openers() > 0 {
            return Err(DeviceError::Busy);
        }
        self.retired.store(true, Ordering::Release);
        Ok(zram.take())
    }

    /// Frees all data but keeps the device initialized with the same size and settings
    /// (`EBUSY` while open): `zramd clear`, beyond the kernel.
    pub fn clear(&self) -> Result<(), DeviceError> {
        let zram = self.zram.write();
        if self.openers() > 0 {
            return Err(DeviceError::Busy);
        }
        match zram.as_ref() {
            Some(z) => {
                z.clear();
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
    fn a_size_no_memory_can_hold_is_enomem_and_the_device_stays_usable() {
        let d = Device::new("zram0", ZramConfig::default());
        // 8 EiB: its slot table (32 PiB) is larger than any address space, whatever the
        // machine's overcommit setting; the allocation fails and nothing aborts.
        let e = d.init(8 << 60).unwrap_err();
        assert_eq!(e.errno(), libc::ENOMEM, "{e}");
        assert!(e.to_string().contains("slot table"), "{e}");
        assert!(!d.initialized());
        d.init(1 << 20).unwrap();
        d.open().unwrap().write(0, &[5u8; 4096]).unwrap();
    }

    #[test]
    fn life_cycle_follows_the_kernel() {
        let d = Device::new("zram0", ZramConfig::default());
        assert!(!d.initialized());
        assert!(d.open().is_none());
        d.update_settings(|s| {
            s.algorithm = zram::Algorithm::Zstd;
            Ok(())
        })
        .unwrap();
        assert_eq!(d.init(0).unwrap_err().errno(), libc::EINVAL);
        d.init(1 << 20).unwrap();
        assert!(matches!(d.init(1 << 20), Err(DeviceError::Busy)));
        assert!(matches!(
            d.update_settings(|_| Ok(())),
            Err(DeviceError::Busy)
        ));
        assert_eq!(d.zram().unwrap().algorithm(), zram::Algorithm::Zstd);
        let opened = d.open().unwrap();
        opened.write(0, &[7u8; 4096]).unwrap();
        assert!(matches!(d.reset(), Err(DeviceError::Busy)));
        assert!(matches!(d.clear(), Err(DeviceError::Busy)));
        drop(opened);
        d.set_mem_limit(1 << 20);
        assert_eq!(d.zram().unwrap().mm_stat().mem_limit, 1 << 20);
        d.clear().unwrap();
        assert_eq!(d.zram().unwrap().mm_stat().orig_data_size, 0);
        d.reset().unwrap();
        assert!(!d.initialized());
        assert_eq!(d.settings().mem_limit, zram::Size(0));
        assert_eq!(DeviceError::Busy.errno(), libc::EBUSY);
        // Reset brings back the default algorithm, as the kernel's.
        assert_eq!(d.settings().algorithm, ZramConfig::default().algorithm);
        assert_ne!(d.settings().algorithm, zram::Algorithm::Zstd);
    }

    #[test]
    fn reset_keeps_only_what_no_attribute_sets() {
        let mut s = ZramConfig {
            algorithm: zram::Algorithm::Zstd,
            mem_limit: zram::Size(1 << 20),
            unit_size: zram::Size(32 << 10),
            dedup: true,
            backing_dev: Some("/nowhere".into()),
            readback_readahead: false,
            auto_compact: None,
            ..ZramConfig::default()
        };
        s.params.level = Some(9);
        s.pool.chain_size = 4;
        s.pool.allocator = zram::Allocator::Zbud;
        let r = reset_settings(&s);
        let d = ZramConfig::default();
        assert_eq!(
            (
                r.algorithm,
                r.params,
                r.mem_limit,
                r.unit_size,
                r.dedup,
                r.backing_dev
            ),
            (
                d.algorithm,
                d.params,
                d.mem_limit,
                d.unit_size,
                d.dedup,
                d.backing_dev
            )
        );
        assert_eq!(r.pool.allocator, d.pool.allocator);
        assert_eq!((r.pool.chain_size, r.readback_readahead), (4, false));
        assert!(r.auto_compact.is_none());
    }

    #[test]
    fn a_removed_device_is_never_opened_again() {
        let d = Device::with_size("zram0", ZramConfig::default(), 1 << 20).unwrap();
        let opened = d.open().unwrap();
        assert!(matches!(d.retire(), Err(DeviceError::Busy)));
        drop(opened);
        assert!(d.retire().unwrap().is_some());
        assert!(d.open().is_none());
        assert_eq!(d.init(1 << 20).unwrap_err().errno(), libc::ENODEV);
    }

    /// A chain size outside 1..=16 is a bad setting (EINVAL, said as a chain size), not a
    /// device the machine has no memory for.
    #[test]
    fn a_bad_chain_size_is_an_invalid_setting() {
        for chain_size in [0, 17] {
            let mut settings = ZramConfig::default();
            settings.pool.chain_size = chain_size;
            let d = Device::new("zram0", settings);
            let err = d.init(1 << 20).unwrap_err();
            assert_eq!(err.errno(), libc::EINVAL, "{err}");
            let text = err.to_string();
            assert!(
                text.contains(&format!("chain size {chain_size}")) && !text.contains("memory"),
                "{text}"
            );
            // The attribute files say the same: writing disksize is EINVAL.
            assert_eq!(
                crate::sysfs::write(&d, "disksize", b"1M\n"),
                Err(libc::EINVAL)
            );
            assert!(!d.initialized());
        }
    }
}
