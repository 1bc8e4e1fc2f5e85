//! A `zramd serve` child process with its NBD and control sockets in a test's directory
//! (`nbd.sock`, `control.sock`) and its output in files there (`zramd-serve.out`,
//! `zramd-serve.err`); with `--fuse DIR` among its arguments, its FUSE tree mounted there.
//! Stopped with SIGTERM, then killed if it does not stop, when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::run::{Run, run};

const ZRAMD: &str = env!("CARGO_BIN_EXE_zramd");

/// How long the server may take to start or to stop, and a CLI call to answer.
const LIMIT: Duration = Duration::from_secs(20);

/// A running `zramd serve`.
#[derive(Debug)]
pub struct Served {
    child: Child,
    /// The NBD unix socket.
    pub socket: PathBuf,
    /// The control socket.
    pub control: PathBuf,
    out: PathBuf,
    err: PathBuf,
}

impl Served {
    /// Starts `zramd serve <args> --unix <dir>/nbd.sock --control <dir>/control.sock` and
    /// waits until both sockets exist and, with `--fuse DIR` in `args`, until DIR shows the
    /// tree (a folder per device).
    pub fn start(dir: &Path, args: &[&str]) -> Self {
        Self::start_with(dir, args, None)
    }

    /// [`Served::start`] after the shell command `prelude` when given (e.g. `"umask 000"`;
    /// the server is exec'd by that shell, so `$$` there is its process id).
    pub fn start_with(dir: &Path, args: &[&str], prelude: Option<&str>) -> Self {
        let socket = dir.join("nbd.sock");
        let control = dir.join("control.sock");
        let out = dir.join("zramd-serve.out");
        let err = dir.join("zramd-serve.err");
        let mut command = match prelude {
            Some(prelude) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("{prelude} && exec \"$0\" \"$@\""))
                    .arg(ZRAMD);
                sh
            }
            None => Command::new(ZRAMD),
        };
        let child = command
            .arg("serve")
            .args(args)
            .arg("--unix")
            .arg(&socket)
            .arg("--control")
            .arg(&control)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).expect("stdout file"))
            .stderr(std::fs::File::create(&err).expect("stderr file"))
            .spawn()
            .expect("start zramd serve");
        let mut served = Self {
            child,
            socket,
            control,
            out,
            err,
        };
        let fuse = args
            .iter()
            .position(|&a| a == "--fuse")
            .and_then(|i| args.get(i + 1))
            .map(Path::new);
        let tree_shown = |dir: &Path| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some());
        let start = Instant::now();
        while !(served.control.exists() && served.socket.exists() && fuse.is_none_or(tree_shown)) {
            if let Some(status) = served.child.try_wait().expect("wait") {
                panic!("zramd serve exited ({status}): {}", served.stderr());
            }
            assert!(
                start.elapsed() < LIMIT,
                "zramd serve did not start: {}",
                served.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        served
    }

    /// Kills the server (SIGKILL: it cleans nothing up, as after a crash) and waits for it.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The NBD URI of `export`.
    pub fn uri(&self, export: &str) -> String {
        format!("nbd+unix:///{export}?socket={}", self.socket.display())
    }

    /// Runs `zramd <args> --control <control socket>`.
    pub fn cli(&self, args: &[&str]) -> Run {
        run(
            Command::new(ZRAMD)
                .args(args)
                .arg("--control")
                .arg(&self.control),
            LIMIT,
        )
    }

    /// `zramd stat --json`, which must succeed.
    pub fn stat_json(&self) -> serde_json::Value {
        let r = self.cli(&["stat", "--json"]);
        assert!(r.ok, "zramd stat --json failed: {}", r.stderr);
        serde_json::from_str(&r.stdout).expect("stat JSON")
    }

    /// Stops the server with SIGTERM and requires a clean exit (status 0); returns what it
    /// printed on stdout.
    pub fn stop(mut self) -> String {
        let status = self.terminate();
        assert!(
            status.is_some_and(|s| s.success()),
            "zramd serve did not stop cleanly on SIGTERM: {status:?}\n{}",
            self.stderr()
        );
        std::fs::read_to_string(&self.out).expect("zramd serve's stdout")
    }

    /// Sends SIGTERM (unless the server has exited) and waits for the exit, at most
    /// `LIMIT`.
    fn terminate(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < LIMIT {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server wrote on stdout so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    /// What the server wrote on stderr (its log) so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if self.terminate().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
