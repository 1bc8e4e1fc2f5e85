//! A server with one device, `zram0` of 16 MiB, and its FUSE tree mounted at `mnt`.

use std::path::Path;

use zram::ZramConfig;
use zramd::serve::{DeviceSpec, ServeOptions, Server};

/// The server, with `zram0` set up as `config` says and its control socket in `dir`.
pub fn serve_tree(dir: &Path, mnt: &Path, config: ZramConfig) -> Server {
    Server::start(&ServeOptions {
        devices: vec![DeviceSpec {
            name: "zram0".into(),
            size: "16M".parse().unwrap(),
            config,
            ..DeviceSpec::default()
        }],
        control: Some(dir.join("control.sock")),
        fuse: Some(mnt.to_owned()),
        ..ServeOptions::default()
    })
    .expect("start server with FUSE")
}
