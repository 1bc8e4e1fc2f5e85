//! The `dedup` attribute (inline deduplication, beyond the kernel): `0`/`1`, a setting
//! taken while the device is uninitialized and `EBUSY` once it is (as `comp_algorithm`),
//! the value checked first; the setting reaches the device at `disksize` and goes back to
//! its default at `reset`, as the other settings do.

mod common {
    pub mod prose;
}

use common::prose::prose;
use zram::ZramConfig;
use zramd::device::Device;
use zramd::sysfs::{attr, read, write};

#[test]
fn dedup_is_a_setting_taken_before_disksize() {
    assert_eq!(attr("dedup").map(|a| a.mode), Some(0o644));
    let d = Device::new("zram0", ZramConfig::default());
    assert_eq!(read(&d, "dedup").unwrap(), "0\n");
    for bad in ["", "\n", "yes", "-1", "1 ", " 1", "0x1"] {
        assert_eq!(
            write(&d, "dedup", bad.as_bytes()),
            Err(libc::EINVAL),
            "{bad:?}"
        );
    }
    assert_eq!(read(&d, "dedup").unwrap(), "0\n", "nothing was kept");
    write(&d, "dedup", b"1\n").unwrap();
    assert_eq!(read(&d, "dedup").unwrap(), "1\n");
    assert!(d.settings().dedup);
    write(&d, "dedup", b"0").unwrap();
    assert_eq!(read(&d, "dedup").unwrap(), "0\n");
    write(&d, "dedup", b"1").unwrap();

    // disksize: the setting is the device's now, and fixed.
    write(&d, "disksize", b"1M").unwrap();
    let z = d.zram().unwrap();
    assert!(z.dedup(), "the setting reached the device's ZramConfig");
    assert!(z.fold_stats().dedup);
    assert_eq!(read(&d, "dedup").unwrap(), "1\n");
    assert_eq!(write(&d, "dedup", b"0\n"), Err(libc::EBUSY));
    assert_eq!(write(&d, "dedup", b"1\n"), Err(libc::EBUSY));
    assert_eq!(
        write(&d, "dedup", b"yes"),
        Err(libc::EINVAL),
        "the value is checked first"
    );
    assert_eq!(read(&d, "dedup").unwrap(), "1\n");

    // The device deduplicates: the same page twice is stored once.
    let page = prose(7);
    z.write(0, &page).unwrap();
    z.write(4096, &page).unwrap();
    assert!(z.fold_stats().dedup_pages >= 1, "{:?}", z.fold_stats());
    let mut back = vec![0u8; 4096];
    z.read(4096, &mut back).unwrap();
    assert!(back == page);
    drop(z);

    // reset brings back the default (off), as the kernel's brings back its default
    // algorithm; it can be changed again.
    write(&d, "reset", b"1").unwrap();
    assert_eq!(read(&d, "dedup").unwrap(), "0\n");
    write(&d, "dedup", b"1\n").unwrap();
    write(&d, "dedup", b"0\n").unwrap();
    write(&d, "disksize", b"1M").unwrap();
    assert!(!d.zram().unwrap().dedup());
    assert_eq!(read(&d, "dedup").unwrap(), "0\n");
}
