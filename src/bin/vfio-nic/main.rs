//! `vfio-nic`: the bring-up tool.
//!
//! Every subcommand takes ports as PCI addresses or in-memory names (`sim:0`, `null:0`), prints
//! human-readable text by default and JSON with `--json`, and fails with a one-line cause and
//! fix. Register dumps come from the same `regs/` tables the drivers are generated from, so what
//! the tool decodes is what the driver programs. The logic lives in the library (`selftest`,
//! `respond`, `capture`, `wire`); the files here parse options and print.

/// Prints a line on standard output, like `println!`, but returns an error instead of panicking
/// when the reader went away (`vfio-nic regs ... | head`): the command stops through `?`, its
/// ports are dropped as usual (their DMA stopped), and `main` exits quietly.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::write_line(format_args!($($arg)*))?
    };
}

mod bench;
mod bench_irq;
mod common;
mod fwd;
mod list;
mod live;
mod machine;
mod port_cmds;
mod regs;
mod respond;
mod traffic;

use std::fmt;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Parser, Subcommand};
use vfio_nic::devices::kinds;

#[derive(Parser)]
#[command(
    name = "vfio-nic",
    version,
    about = "User-space NIC drivers over VFIO: bring-up tool",
    after_help = kinds::ports_help()
)]
struct Cli {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Bytes of frame room per receive buffer, behind its 128-byte headroom, on every port (a
    /// multiple of 128; default 2048): longer frames become chains where the device has them,
    /// and a device that cannot use the size refuses with the range it takes.
    #[arg(long, global = true, value_name = "BYTES")]
    buf_size: Option<usize>,
    /// How PCI ports are opened: type1 (the VFIO container and IOMMU group), iommufd (the
    /// device's cdev over /dev/iommu) or noiommu (no IOMMU: DMA to physical addresses; needs
    /// --allow-noiommu); auto (the default) takes iommufd where the device has a cdev and
    /// /dev/iommu opens, else type1, else noiommu when allowed. `list` shows each device's.
    #[arg(
        long,
        global = true,
        value_name = "BACKEND",
        env = "VFIO_NIC_VFIO_BACKEND"
    )]
    vfio_backend: Option<String>,
    /// Allow VFIO's no-IOMMU mode for devices no IOMMU isolates (cloud VMs): the device can
    /// then read and write ALL memory of the machine. The kernel must allow it too
    /// (vfio.enable_unsafe_noiommu_mode=1).
    #[arg(long, global = true, env = "VFIO_NIC_ALLOW_NOIOMMU",
          value_parser = clap::builder::BoolishValueParser::new())]
    allow_noiommu: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every network device on the PCI bus: model, IOMMU group, driver, the DMA backend that would open it (and why the others cannot), and a warning where binding it cuts this machine's traffic.
    List,
    /// Model, PCI id, MAC, link, BARs, queues and rings, VLAN capabilities and configuration.
    Info {
        #[arg(help = kinds::port_arg_help())]
        port: String,
    },
    /// Device counters (by datasheet name) and software counters.
    Stats(port_cmds::StatsArgs),
    /// Register, MAC loopback and link tests, like `ethtool -t`; non-zero exit on failure.
    Selftest(port_cmds::SelftestArgs),
    /// Register dump from the register map, optionally with every field decoded (like `ethtool -d`).
    Regs {
        #[arg(help = kinds::register_port_help())]
        port: String,
        /// Registers to show (e.g. CTRL RDT[0]); all of them when none is given.
        names: Vec<String>,
        /// Decode every named field.
        #[arg(long)]
        decode: bool,
    },
    /// Read one register, or write it and read it back.
    Reg {
        #[arg(help = kinds::register_port_help())]
        port: String,
        /// Register name (CTRL, RDT[0]) or byte offset (0x5400).
        register: String,
        /// Value to write (decimal or 0x-hex).
        value: Option<String>,
    },
    /// Forward between two ports (or back out of one), like testpmd's io mode.
    Fwd(fwd::FwdArgs),
    /// What each VLAN placement costs, in ns per packet with intervals that know the noise: on the null device, the software 82599, the software queue manager and af_packet, and the interrupt row.
    Bench(bench::BenchArgs),
    /// Send numbered IPv4/UDP frames (valid checksums), optionally VLAN-tagged and rate-limited.
    Gen(traffic::GenArgs),
    /// Write received frames to a pcap file exactly as they were on the wire.
    Capture(traffic::CaptureArgs),
    /// Answer ARP and ping for an address (optionally on one VLAN), so any host can ping the port.
    Respond(respond::RespondArgs),
}

/// Why a command failed: a library error, or a test or probe that ran and failed.
#[derive(Debug)]
pub enum CliError {
    /// From the library (its message says what to do).
    Lib(vfio_nic::Error),
    /// A check that ran and failed.
    Failed(String),
}

impl From<vfio_nic::Error> for CliError {
    fn from(e: vfio_nic::Error) -> Self {
        CliError::Lib(e)
    }
}

impl From<vfio_nic::device::QueueError> for CliError {
    fn from(e: vfio_nic::device::QueueError) -> Self {
        CliError::Lib(e.into())
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Lib(e) => write!(f, "{e}"),
            CliError::Failed(m) => f.write_str(m),
        }
    }
}

/// Writes one line to standard output (see `outln!`).
pub fn write_line(args: fmt::Arguments<'_>) -> vfio_nic::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .map_err(|e| vfio_nic::Error::io("writing to standard output", e))
}

/// Whether `e` is standard output's reader having gone away, which ends a command quietly.
fn is_broken_pipe(e: &CliError) -> bool {
    matches!(
        e,
        CliError::Lib(vfio_nic::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::BrokenPipe
    )
}

/// What a subcommand returns.
pub type CliResult = Result<(), CliError>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = ["warn", "info", "debug", "trace"][usize::from(cli.verbose.min(3))];
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .init();
    // Ctrl-C asks long-running commands to stop and print their summary.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        if let Err(e) = ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed)) {
            tracing::warn!("cannot install the Ctrl-C handler: {e}");
        }
    }
    if let Err(e) = common::set_buf_size(cli.buf_size)
        .and_then(|()| common::set_vfio(cli.vfio_backend.as_deref(), cli.allow_noiommu))
    {
        eprintln!("vfio-nic: {e}");
        return ExitCode::FAILURE;
    }
    let json = cli.json;
    let result: CliResult = match &cli.command {
        Command::List => list::run(json).map_err(Into::into),
        Command::Info { port } => port_cmds::info(port, json).map_err(Into::into),
        Command::Stats(args) => port_cmds::stats(args, json, stop).map_err(Into::into),
        Command::Selftest(args) => port_cmds::selftest(args, json),
        Command::Regs {
            port,
            names,
            decode,
        } => regs::dump(port, names, *decode, json).map_err(Into::into),
        Command::Reg {
            port,
            register,
            value,
        } => regs::one(port, register, value.as_deref(), json).map_err(Into::into),
        Command::Fwd(args) => fwd::run(args, json, stop).map_err(Into::into),
        Command::Bench(args) if args.device == bench::DeviceSel::Irq => {
            bench_irq::run(args, json, &stop).map_err(Into::into)
        }
        Command::Bench(args) => bench::run(args, json, stop).map_err(Into::into),
        Command::Gen(args) => traffic::gen(args, json, stop).map_err(Into::into),
        Command::Capture(args) => traffic::capture(args, json, stop).map_err(Into::into),
        Command::Respond(args) => respond::run(args, json, stop),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of our output went away (`| head`): it has what it wanted.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, whatever the message holds.
            let msg = e.to_string().replace('\n', "; ");
            eprintln!("vfio-nic: {msg}");
            ExitCode::FAILURE
        }
    }
}
