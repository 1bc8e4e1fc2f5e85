//! `zramd-lab bench … | head` ends quietly once `head` is done, as other tools do: by
//! SIGPIPE, with no panic and no backtrace on stderr.

use std::process::Command;

// The check `zramd`'s own commands are held to.
#[path = "../../zramd/tests/common/pipe.rs"]
mod pipe;

#[test]
fn a_closed_pipe_ends_a_bench_quietly() {
    pipe::ends_quietly_on_a_closed_pipe(
        Command::new(env!("CARGO_BIN_EXE_zramd-lab"))
            .args(["bench", "pool", "--threads", "1", "--repeat", "1"])
            .args(["--ops", "1000", "--objects", "1000"]),
    );
}
