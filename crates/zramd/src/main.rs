//! `zramd`: compressed memory in userspace.
//!
//! `serve` runs compressed RAM disks over NBD; `stat`, `compact`, `fold`, `reset`, `clear`,
//! `add`, `remove`, `set`, `idle`, `writeback`, `recompress` and `policy` talk to a running
//! server through its control socket; `classes` prints the zsmalloc class table;
//! `bench` runs the lab's measurements (the `zramd-lab` binary beside this one);
//! `run` runs a program with its large mappings served by uswap regions; `completions` and
//! `man` print shell completions and man pages.

mod classes;
mod forward;
mod manual;
mod run;
mod stat;
mod top;

use std::path::PathBuf;

use anyhow::Context as _;
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use zramd::control::{self, Request};
use zramd::serve::{ConfigFile, DeviceSpec, ServeOptions, ServerSettings};

#[derive(Debug, Parser)]
#[command(name = "zramd", version, about = "Compressed memory in userspace")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve compressed RAM disks over NBD (default: zram0, 1 GiB, lz4, on 127.0.0.1:10809).
    Serve(Box<ServeArgs>),
    /// Show the devices of a running server (like zramctl).
    Stat(StatArgs),
    /// Compact a device's memory (all devices without DEV).
    Compact {
        /// Device name.
        device: Option<String>,
        /// Also move written-back objects out of the backing file's sparse segments, so that
        /// their space comes back (beyond the kernel; devices without a backing file are
        /// left out).
        #[arg(long)]
        backing: bool,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Fold identical stored objects into one (seed 004's `fold`) on a device (all devices
    /// without DEV) and print what the pass did.
    Fold {
        /// Device name.
        device: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        control: ControlArg,
    },
    /// The kernel's reset: free all data and make the device uninitialized, its algorithm
    /// and other settings back at the defaults (refused while a client has it open); its
    /// settings and size can then be set again (FUSE attribute files). `clear` keeps them.
    Reset {
        /// Device name.
        device: String,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Free all data of a device and zero its counters, keeping its size and settings
    /// (beyond the kernel, unlike `reset`; refused while a client has it open).
    Clear {
        /// Device name.
        device: String,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Add an uninitialized device zramN with the default settings (the kernel's hot_add)
    /// and print its name.
    Add {
        #[command(flatten)]
        control: ControlArg,
    },
    /// Remove a device (the kernel's hot_remove; refused while a client has it open).
    Remove {
        /// Device name.
        device: String,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Change an attribute at run time: mem_limit SIZE, or mem_used_max 0.
    Set {
        /// Device name.
        device: String,
        /// Attribute: mem_limit or mem_used_max.
        attr: String,
        /// New value.
        value: String,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Mark a device's slots idle (the kernel's `idle`): `all`, or those not accessed for
    /// SECS seconds.
    Idle {
        /// Device name.
        device: String,
        /// `all` or seconds.
        age: String,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Write slots back to the backing file (the kernel's `writeback`: idle, huge,
    /// huge_idle, incompressible, page_index=N, type=MODE page_indexes=A-B ...).
    Writeback {
        /// Device name.
        device: String,
        /// The kernel's words.
        #[arg(required = true, num_args = 1..)]
        args: Vec<String>,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Recompress slots with a secondary algorithm (the kernel's `recompress`:
    /// type=idle|huge|huge_idle threshold=N max_pages=N algo=NAME priority=N; none: all).
    Recompress {
        /// Device name.
        device: String,
        /// The kernel's words.
        args: Vec<String>,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Show a device's automatic post-processing policy and what it did, or change it with
    /// key=value words (on, off, interval=SECS, recompress_age=SECS, writeback_age=SECS,
    /// writeback_watermark=SIZE, ...); `run` runs one round now.
    Policy {
        /// Device name.
        device: String,
        /// Words to apply; none: show.
        words: Vec<String>,
        #[command(flatten)]
        control: ControlArg,
    },
    /// Print the zsmalloc size-class table of an empty pool, in the kernel's format.
    Classes(classes::Args),
    /// Run a measurement and print its figures (`--input FILE`: the device; `pool`: the
    /// allocator). Runs `zramd-lab bench` with the same arguments.
    Bench(forward::Args),
    /// Run every seed's scenario side by side with the kernel and write one report
    /// (`--out DIR`, `--quick`). Runs `zramd-lab report` with the same arguments.
    Lab(forward::LabArgs),
    /// A refreshing table of every device of a running server: data, compressed, total,
    /// ratio, I/O rates and policy activity.
    Top(top::Args),
    /// Run a program with its large anonymous mappings served by uswap regions (compressed
    /// beyond --budget each, with seed 002's readahead) through an LD_PRELOAD shim; print
    /// their figures at exit (`zramd stat --control PATH` shows them while it runs).
    Run(run::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(manual::CompletionsArgs),
    /// Print the man page, or write one page per command into --dir.
    Man(manual::ManArgs),
}

#[derive(Debug, clap::Args)]
struct ControlArg {
    /// The server's control socket.
    #[arg(long)]
    control: Option<PathBuf>,
}

impl ControlArg {
    fn path(&self) -> PathBuf {
        self.control.clone().unwrap_or_else(control::default_path)
    }
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The device (one; a config file can have several).
    #[command(flatten)]
    device: DeviceSpec,
    /// The device's allocator: zsmalloc (default), afmalloc, zbud or malloc (seed 003; a
    /// config file's `allocator` key).
    #[arg(long, value_parser = parse_allocator)]
    allocator: Option<zram::Allocator>,
    /// NBD on HOST:PORT (repeatable; replaces the default 127.0.0.1:10809).
    #[arg(long)]
    listen: Vec<String>,
    /// NBD on a unix socket (repeatable; replaces the default address).
    #[arg(long)]
    unix: Vec<PathBuf>,
    /// Control socket path.
    #[arg(long)]
    control: Option<PathBuf>,
    /// Prometheus metrics on HOST:PORT.
    #[arg(long)]
    metrics: Option<String>,
    /// The NBD server's limits and the NBD unix sockets' permissions (a config file's
    /// top-level keys of the same names; given here, they win over the file's).
    #[command(flatten)]
    settings: ServerSettings,
    /// Mount a FUSE export here: DIR/<device>/disk plus the kernel's attribute files
    /// (alone, or with --listen/--unix for NBD too).
    #[arg(long)]
    fuse: Option<PathBuf>,
    /// TOML file with several devices (`[[device]]` tables with the device options above as
    /// keys: name, size, algorithm, level, mem_limit, unit_size, allocator, chain_size, geometry,
    /// object_header, shards, locking, read_only, backing_dev, writeback_batch_size,
    /// readback_readahead, dedup, recomp_algorithm = [{ priority = 1, algorithm = "zstd" }], and a
    /// [device.policy] table), the addresses, and the server options above as
    /// top-level keys (max_connections, idle_timeout, socket_mode, …).
    #[arg(long, conflicts_with_all = DEVICE_ARGS)]
    config: Option<PathBuf>,
    /// Serve the `[zramN]` devices of a zram-generator.conf (zram-size, compression-algorithm,
    /// writeback-device, zram-resident-limit; swap and mount keys are ignored).
    #[arg(long, value_name = "FILE", conflicts_with_all = DEVICE_ARGS, conflicts_with = "config")]
    zram_generator: Option<PathBuf>,
}

/// `--allocator NAME`.
fn parse_allocator(s: &str) -> Result<zram::Allocator, String> {
    s.parse()
}

/// The ids of the device options, which a config file replaces.
const DEVICE_ARGS: [&str; 20] = [
    "allocator",
    "fault_ahead",
    "name",
    "size",
    "read_only",
    "image",
    "algorithm",
    "level",
    "mem_limit",
    "unit_size",
    "chain_size",
    "geometry",
    "header",
    "shards",
    "locking",
    "recomp_algorithm",
    "backing_dev",
    "writeback_batch_size",
    "readback_readahead",
    "dedup",
];

#[derive(Debug, clap::Args)]
struct StatArgs {
    #[command(flatten)]
    options: stat::Options,
    #[command(flatten)]
    control: ControlArg,
}

/// The server settings of a config file, with those given on the command line put over
/// them (`given` says which were; keys and option ids are the same names).
fn merged(
    cli: &ServerSettings,
    file: &ServerSettings,
    given: impl Fn(&str) -> bool,
) -> anyhow::Result<ServerSettings> {
    let mut table = toml::Table::try_from(file)?;
    for (key, value) in toml::Table::try_from(cli)? {
        if given(&key) {
            table.insert(key, value);
        }
    }
    Ok(table.try_into()?)
}

fn serve_options(a: &ServeArgs, matches: &ArgMatches) -> anyhow::Result<ServeOptions> {
    let mut options = ServeOptions {
        listen: a.listen.clone(),
        unix: a.unix.clone(),
        control: a.control.clone(),
        metrics: a.metrics.clone(),
        settings: a.settings.clone(),
        fuse: a.fuse.clone(),
        status_line: true,
        ..ServeOptions::default()
    };
    match &a.config {
        Some(path) => {
            let file = ConfigFile::load(path)?;
            if options.listen.is_empty() && options.unix.is_empty() {
                options.listen = file.listen;
                options.unix = file.unix;
            }
            options.control = options.control.or(file.control);
            options.metrics = options.metrics.or(file.metrics);
            options.settings = merged(&a.settings, &file.settings, |id| {
                matches.value_source(id) == Some(ValueSource::CommandLine)
            })?;
            options.devices = file.device;
        }
        None => {
            let mut device = a.device.clone();
            if let Some(allocator) = a.allocator {
                device.config.pool.allocator = allocator;
            }
            options.devices = vec![device];
        }
    }
    if let Some(path) = &a.zram_generator {
        options.devices = zramd::generator::load(path)?;
    }
    Ok(options)
}

/// What `zramd fold` prints: a line per device folded.
fn print_folded(folded: &[control::Folded], json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(folded)?);
        return Ok(());
    }
    for f in folded {
        let r = &f.report;
        println!(
            "{}: {} objects scanned, {} folded ({} bytes), {} pages freed",
            f.device, r.objects_scanned, r.objects_folded, r.bytes_folded, r.pages_freed
        );
    }
    Ok(())
}

/// What `zramd policy` prints: the policy, its figures and its last round.
fn print_policy(figures: &zramd::figures::PolicyFigures) {
    println!("policy: {}", figures.policy);
    let p = &figures.stats;
    println!(
        "rounds {}  recompressed {} ({} bytes saved)  written back {} pages ({} bytes, {} today)  errors {}",
        p.rounds,
        p.recompressed,
        p.recompress_saved_bytes,
        p.written_back_pages,
        p.written_back_bytes,
        p.day_pages,
        p.errors
    );
    if !p.last_round.is_empty() {
        println!("last round: {}", p.last_round);
    }
}

fn main() -> std::process::ExitCode {
    zramd::logging::init();
    zramd::logging::exit_status("zramd", cli_main())
}

fn cli_main() -> anyhow::Result<()> {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if !matches!(cli.command, Command::Serve(_) | Command::Run(_)) {
        zramd::sys::die_on_sigpipe();
    }
    match cli.command {
        Command::Serve(a) => {
            zramd::sys::ignore_sigxfsz();
            let serve = matches
                .subcommand_matches("serve")
                .context("serve's options")?;
            zramd::serve::run(&serve_options(&a, serve)?)
        }
        Command::Stat(a) => stat::stat(&a.control.path(), &a.options),
        Command::Compact {
            device,
            backing,
            control,
        } => {
            let r = control::call(&control.path(), &Request::Compact { device, backing })?;
            for c in &r.cleaned {
                if let Some(error) = &c.error {
                    println!("{}: backing file not cleaned: {error}", c.device);
                    continue;
                }
                let (r, size) = (&c.report, zramd::human::size);
                println!(
                    "{}: backing file: {} objects ({}, {} slots) moved out of {} sparse segments ({} of them changed from outside, still reading EIO), {} unreadable left ({} segments kept whole)",
                    c.device,
                    r.objects,
                    size(r.bytes),
                    r.slots,
                    r.segments,
                    r.mismatched,
                    r.unreadable,
                    r.segments_left
                );
            }
            println!("{} pages freed", r.pages_freed.unwrap_or(0));
            Ok(())
        }
        Command::Fold {
            device,
            json,
            control,
        } => {
            let r = control::call(&control.path(), &Request::Fold { device })?;
            print_folded(&r.folded, json)
        }
        Command::Reset { device, control } => {
            control::call(&control.path(), &Request::Reset { device })?;
            Ok(())
        }
        Command::Clear { device, control } => {
            control::call(&control.path(), &Request::Clear { device })?;
            Ok(())
        }
        Command::Add { control } => {
            let r = control::call(&control.path(), &Request::Add)?;
            println!("{}", r.added.unwrap_or_default());
            Ok(())
        }
        Command::Remove { device, control } => {
            control::call(&control.path(), &Request::Remove { device })?;
            Ok(())
        }
        Command::Set {
            device,
            attr,
            value,
            control,
        } => {
            control::call(
                &control.path(),
                &Request::Set {
                    device,
                    attr,
                    value,
                },
            )?;
            Ok(())
        }
        Command::Idle {
            device,
            age,
            control,
        } => {
            let r = control::call(&control.path(), &Request::Idle { device, age })?;
            println!("{} slots marked idle", r.idle_marked.unwrap_or(0));
            Ok(())
        }
        Command::Writeback {
            device,
            args,
            control,
        } => {
            let args = args.join(" ");
            let r = control::call(&control.path(), &Request::Writeback { device, args })?;
            let w = r.written_back.unwrap_or_default();
            println!(
                "{} slots written back ({} pages, {} bytes; {} slots shared a copy)",
                w.slots, w.pages, w.bytes, w.shared
            );
            Ok(())
        }
        Command::Recompress {
            device,
            args,
            control,
        } => {
            let args = args.join(" ");
            let r = control::call(&control.path(), &Request::Recompress { device, args })?;
            let c = r.recompressed.unwrap_or_default();
            println!(
                "{} of {} slots recompressed ({} bytes saved), {} incompressible; \
                 {} encodings run, {} slots shared one",
                c.recompressed, c.attempts, c.saved_bytes, c.incompressible, c.codec_runs, c.shared
            );
            Ok(())
        }
        Command::Policy {
            device,
            words,
            control,
        } => {
            let words = words.join(" ");
            let r = control::call(&control.path(), &Request::Policy { device, words })?;
            print_policy(&r.policy.unwrap_or_default());
            Ok(())
        }
        Command::Classes(args) => classes::run(&args),
        Command::Bench(args) => forward::run(&args),
        Command::Lab(args) => forward::lab(&args),
        Command::Run(args) => run::run(&args),
        Command::Completions(a) => manual::completions(&a, Cli::command()),
        Command::Man(a) => manual::man(&a, Cli::command()),
        Command::Top(args) => top::run(&args),
    }
}
