//! A request that reads the backing file (a written-back slot) is run by a worker, not by
//! the connection's reader: while it waits on the file, the connection's other requests are
//! still read and answered.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    #[expect(
        dead_code,
        reason = "these tests use the raw client's requests, not the handshake checks nor real clients"
    )]
    pub mod nbd;
}

use std::sync::Arc;
use std::time::Duration;

use common::nbd::*;
use zram::backing::MemBacking;
use zram::{PAGE_SIZE, Zram, ZramConfig};
use zramd::device::Device;
use zramd::export::Export;
use zramd::nbd::proto::*;

/// Longest the client waits for a reply: without the hand-off, the answers it waits for
/// come only after the held read, and the test fails after this.
const PATIENCE: Duration = Duration::from_secs(5);

/// Lets the backing store's held reads go when dropped, also when the test fails, so that
/// the server ends.
struct Release(Arc<MemBacking>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.hold_reads(false);
    }
}

/// Bytes that differ from page to page.
fn page(seed: u8) -> Vec<u8> {
    (0..PAGE_SIZE)
        .map(|i| (i / 16) as u8 ^ seed.wrapping_mul(31))
        .collect()
}

#[test]
fn a_read_waiting_on_the_backing_file_holds_up_no_other_request() {
    let backing = Arc::new(MemBacking::new());
    let config = ZramConfig {
        disksize: 64 * PAGE_SIZE as u64,
        auto_compact: None,
        ..ZramConfig::default()
    };
    let zram = Zram::with_backing(config.clone(), Some(backing.clone())).unwrap();
    for p in 0..8u8 {
        zram.write(u64::from(p) * PAGE_SIZE as u64, &page(p))
            .unwrap();
    }
    zram.writeback(&"page_indexes=2-3".parse().unwrap())
        .unwrap();
    // Reads of the file wait from now on, until the test lets them go (at most
    // `zram::backing::MAX_READ_HOLD`).
    backing.hold_reads(true);
    let device = Arc::new(Device::with_zram("zram0", config, zram));
    let server = Server::with_exports(
        vec![Arc::new(Export::new("zram0", device, false))],
        test_config(),
        false,
    );
    let release = Release(Arc::clone(&backing));
    let mut c = server.connect();
    c.s.set_timeout(Some(PATIENCE)).unwrap();
    c.greet();
    c.go("zram0", false);
    let page_at = |p: u64| p * PAGE_SIZE as u64;
    let len = PAGE_SIZE as u32;
    // In flight at once: a read of a written-back page and a write to part of another
    // (which reads the rest of it from the file), then a read of a page in memory and a
    // write of a whole page.
    c.request(CMD_READ, 0, 1, page_at(2), len);
    c.request(CMD_WRITE, 0, 2, page_at(3) + 512, 512);
    c.send(&[0xAB; 512]);
    c.request(CMD_READ, 0, 3, 0, len);
    c.request(CMD_WRITE, 0, 4, page_at(5), len);
    c.send(&page(50));
    assert_eq!(c.simple_reply(3), 0, "the page in memory is answered first");
    assert_eq!(c.recv(PAGE_SIZE), page(0));
    assert_eq!(c.simple_reply(4), 0, "so is the whole-page write");
    drop(release);
    // The held two, in either order.
    let mut read_back = None;
    for _ in 0..2 {
        let (error, handle) = c.any_reply().expect_err("a simple reply");
        assert_eq!(error, 0, "request {handle}");
        match handle {
            1 => read_back = Some(c.recv(PAGE_SIZE)),
            2 => {}
            other => panic!("a reply to request {other}"),
        }
    }
    assert_eq!(read_back, Some(page(2)));
    let mut patched = page(3);
    patched[512..1024].fill(0xAB);
    for (handle, p, want) in [(5, 3, patched), (6, 5, page(50))] {
        c.request(CMD_READ, 0, handle, page_at(p), len);
        assert_eq!(c.simple_reply(handle), 0);
        assert_eq!(c.recv(PAGE_SIZE), want, "page {p}");
    }
    c.request(CMD_DISC, 0, 0, 0, 0);
    c.expect_eof();
    server.stop();
}
