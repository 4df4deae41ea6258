//! `vfio-nic`: the bring-up tool.
//!
//! Every subcommand prints human-readable text by default and JSON with `--json`, and fails with
//! a one-line cause and fix. Register dumps come from the same `regs/` tables the drivers are
//! generated from, so what the tool decodes is what the driver programs.

mod fwd;
mod regs;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "vfio-nic",
    version,
    about = "User-space NIC drivers over VFIO: bring-up tool"
)]
struct Cli {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every network device on the PCI bus: model, driver, IOMMU group, and whether vfio-nic can open it.
    List,
    /// Register dump from the register map, optionally with every field decoded (like `ethtool -d`).
    Regs {
        /// PCI address of the port (e.g. 0000:01:00.0).
        port: String,
        /// Registers to show (e.g. CTRL RDT[0]); all of them when none is given.
        names: Vec<String>,
        /// Decode every named field.
        #[arg(long)]
        decode: bool,
    },
    /// Read one register, or write it and read it back.
    Reg {
        /// PCI address of the port.
        port: String,
        /// Register name (CTRL, RDT[0]) or byte offset (0x5400).
        register: String,
        /// Value to write (decimal or 0x-hex).
        value: Option<String>,
    },
    /// Forward between two ports (or back out of one), like testpmd's io mode.
    Fwd(fwd::FwdArgs),
}

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
    let result = match &cli.command {
        Command::List => regs::list(cli.json),
        Command::Regs {
            port,
            names,
            decode,
        } => regs::dump(port, names, *decode, cli.json),
        Command::Reg {
            port,
            register,
            value,
        } => regs::one(port, register, value.as_deref(), cli.json),
        Command::Fwd(args) => fwd::run(args, cli.json, stop),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vfio-nic: {e}");
            ExitCode::FAILURE
        }
    }
}
