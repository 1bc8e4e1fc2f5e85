//! `zramd completions SHELL` and `zramd man [--dir DIR]`: shell completion scripts and man
//! pages, generated from the command line's definition (so they list every subcommand and
//! option of this build).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// `zramd completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    shell: clap_complete::Shell,
}

/// `zramd man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write one page per command into DIR (zramd.1, zramd-serve.1, ...) instead of printing
    /// the main page.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints the completion script for `a.shell`.
pub fn completions(a: &CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "zramd", &mut script);
    std::io::stdout()
        .write_all(&script)
        .context("write the script")
}

/// Prints the main man page, or writes every page into `a.dir`.
pub fn man(a: &ManArgs, cmd: clap::Command) -> anyhow::Result<()> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    match &a.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("make {}", dir.display()))?;
            write_pages(cmd, dir)
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut page)?;
            std::io::stdout().write_all(&page).context("write the page")
        }
    }
}

/// Writes the page of `cmd` and those of its subcommands into `dir`, printing their paths.
fn write_pages(cmd: clap::Command, dir: &Path) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub.clone(), dir)?;
    }
    let path = clap_mangen::Man::new(cmd)
        .generate_to(dir)
        .with_context(|| format!("write a page into {}", dir.display()))?;
    println!("{}", path.display());
    Ok(())
}
