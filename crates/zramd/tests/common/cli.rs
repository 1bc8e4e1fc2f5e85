//! The real `zramd` binary against a served control socket, and the metrics endpoint.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use zramd::serve::{DeviceSpec, ServeOptions, Server};

use super::run::{Run, run, run_ok};

const ZRAMD: &str = env!("CARGO_BIN_EXE_zramd");

/// A server of `devices` with its NBD and control sockets in `dir` and metrics on a free
/// local port.
pub fn serve(dir: &Path, devices: Vec<DeviceSpec>) -> Server {
    Server::start(&ServeOptions {
        devices,
        unix: vec![dir.join("nbd.sock")],
        control: Some(dir.join("control.sock")),
        metrics: Some("127.0.0.1:0".into()),
        ..ServeOptions::default()
    })
    .unwrap()
}

/// Runs `zramd <args> --control <path>` (bounded: one minute).
pub fn cli(control: &Path, args: &[&str]) -> Run {
    run(
        Command::new(ZRAMD).args(args).arg("--control").arg(control),
        Duration::from_secs(60),
    )
}

/// Like [`cli`], and it must succeed; its standard output.
pub fn cli_ok(control: &Path, args: &[&str]) -> String {
    run_ok(
        Command::new(ZRAMD).args(args).arg("--control").arg(control),
        Duration::from_secs(60),
    )
    .stdout
}

/// The metrics endpoint's answer to `GET /metrics`.
pub fn scrape(addr: std::net::SocketAddr) -> String {
    let mut http = std::net::TcpStream::connect(addr).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    body
}
