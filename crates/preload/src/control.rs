//! The control socket while the program runs, in zramd's control protocol (one request per
//! connection: a line of JSON in, a line of JSON out): `{"cmd":"stat"}` answers the
//! figures the shim writes at exit, with `"ok":true`.
//!
//! Bounded: a request is at most [`MAX_REQUEST`] bytes and must arrive within
//! [`DEADLINE`]; at most [`MAX_CONNECTIONS`] are served at once, and one more is told to
//! try again. The threads here run with every signal blocked (see `sys`), so the program's
//! signals go to its own threads.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use uswap::ProgramFigures as Report;

/// Longest request accepted, in bytes.
pub const MAX_REQUEST: usize = 64 * 1024;
/// Time allowed for a whole request.
pub const DEADLINE: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 4;

/// Binds the control socket at `path`, mode 0600 before anyone can connect, and listens.
/// A socket already there is replaced, live or not: a program the served one started
/// (its children load the shim too) takes the socket over, the newest process answering.
/// Anything else at `path` is left alone, and an error.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket; not replacing it",
            ));
        }
        Err(_) => {}
    }
    let addr = rustix::net::SocketAddrUnix::new(path)?;
    let fd = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::bind(&fd, &addr)?;
    // Bound, not listening: nobody can connect until the mode is right.
    let ready = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| Ok(rustix::net::listen(&fd, 16)?));
    if let Err(e) = ready {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(UnixListener::from(fd))
}

/// Serves connections on `listener` until accepting fails; `report` gives the figures.
pub fn serve(listener: &UnixListener, report: impl Fn() -> Report + Send + Sync + 'static) {
    let report = Arc::new(report);
    let open = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => match e.raw_os_error() {
                // The program closed or reused the descriptor: stop serving.
                Some(libc::EBADF | libc::ENOTSOCK | libc::EINVAL) => return,
                Some(libc::EINTR | libc::ECONNABORTED) => continue,
                // Out of descriptors or memory: wait, rather than spin.
                _ => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            },
        };
        if open.fetch_add(1, Relaxed) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Relaxed);
            let _ = stream.set_write_timeout(Some(DEADLINE));
            let _ = (&stream).write_all(&error_line(&format!(
                "too many control connections (at most {MAX_CONNECTIONS} at once); try again"
            )));
            continue;
        }
        let (report, open2) = (Arc::clone(&report), Arc::clone(&open));
        let spawned = std::thread::Builder::new()
            .name("uswap-control".into())
            .spawn(move || {
                connection(&stream, &*report);
                open2.fetch_sub(1, Relaxed);
            });
        if spawned.is_err() {
            open.fetch_sub(1, Relaxed);
        }
    }
}

fn error_line(why: &str) -> Vec<u8> {
    let mut out = json!({ "ok": false, "error": why })
        .to_string()
        .into_bytes();
    out.push(b'\n');
    out
}

/// Reads one request (bounded in size and time) and answers it.
fn connection(stream: &UnixStream, report: &dyn Fn() -> Report) {
    let start = Instant::now();
    let _ = stream.set_write_timeout(Some(DEADLINE));
    let mut reader = BufReader::new(stream.take(MAX_REQUEST as u64 + 1));
    let mut line = Vec::new();
    let answer = loop {
        let left = DEADLINE.saturating_sub(start.elapsed());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break error_line(&format!(
                "request not received within {}s",
                DEADLINE.as_secs()
            ));
        }
        match reader.read_until(b'\n', &mut line) {
            Ok(_) if line.len() > MAX_REQUEST => {
                break error_line(&format!(
                    "request longer than {} KiB (one line of JSON per connection)",
                    MAX_REQUEST / 1024
                ));
            }
            Ok(0) => break error_line("no request"),
            Ok(_) if line.ends_with(b"\n") => break answer(&line, report),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return,
        }
    };
    let _ = (&*stream).write_all(&answer);
}

/// The answer to one request line.
fn answer(line: &[u8], report: &dyn Fn() -> Report) -> Vec<u8> {
    let request: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return error_line(&format!("bad request: {e}")),
    };
    match request.get("cmd").and_then(Value::as_str) {
        Some("stat") => {
            let mut value = match serde_json::to_value(report()) {
                Ok(v) => v,
                Err(e) => return error_line(&format!("cannot write the figures: {e}")),
            };
            if let Some(map) = value.as_object_mut() {
                map.insert("ok".into(), Value::Bool(true));
            }
            let mut out = value.to_string().into_bytes();
            out.push(b'\n');
            out
        }
        Some(cmd) => error_line(&format!(
            "{cmd:?}: a program run by `zramd run` answers only \"stat\""
        )),
        None => error_line("bad request: no \"cmd\""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures() -> Report {
        Report {
            pid: 7,
            served: 2,
            passed_through: 3,
            ..Report::default()
        }
    }

    #[test]
    fn stat_answers_the_figures() {
        let v: Value = serde_json::from_slice(&answer(b"{\"cmd\":\"stat\"}\n", &figures)).unwrap();
        assert_eq!(v["ok"], true);
        assert_eq!(v["served"], 2);
        assert_eq!(v["passed_through"], 3);
        assert_eq!(v["pid"], 7);
    }

    #[test]
    fn other_requests_are_errors() {
        for req in [&b"{\"cmd\":\"compact\"}\n"[..], b"nonsense\n", b"{}\n"] {
            let v: Value = serde_json::from_slice(&answer(req, &figures)).unwrap();
            assert_eq!(v["ok"], false, "{req:?}");
        }
    }

    #[test]
    fn a_socket_serves_requests_and_refuses_long_ones() {
        let dir = std::env::temp_dir().join(format!("uswap-control-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let _ = std::fs::remove_file(&path);
        let listener = bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::thread::spawn(move || serve(&listener, figures));
        let ask = |req: &[u8]| {
            let mut s = UnixStream::connect(&path).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let _ = s.write_all(req);
            let mut out = String::new();
            BufReader::new(&s).read_line(&mut out).unwrap();
            serde_json::from_str::<Value>(&out).unwrap()
        };
        assert_eq!(ask(b"{\"cmd\":\"stat\"}\n")["served"], 2);
        let long = vec![b' '; MAX_REQUEST + 10];
        assert_eq!(ask(&long)["ok"], false);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
