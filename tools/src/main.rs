//! `seglog`: the command-line tool of the seglog storage engine.
//!
//! - `topics`: create, list, describe, grow and delete topics (Kafka's `kafka-topics`);
//! - `produce`: append lines from stdin to a topic, acknowledging each with its partition and offset
//!   (with `--durable`, once its batch is synced: group commit);
//! - `consume`: print a partition's records from an offset to the log end, or, with `--group`,
//!   every partition's records as a member of a consumer group that commits as it goes;
//! - `groups`: list consumer groups and describe their committed offsets and lag (Kafka's
//!   `kafka-consumer-groups`);
//! - `clean`: run retention and compaction once, now, and print what they did;
//! - `dump`: print `.log`, `.index` and `.timeindex` files the way Kafka's `DumpLogSegments` does;
//! - `verify`: check every batch and index entry of a data directory, read-only;
//! - `recover`: truncate a partition the engine does not open because of damage to its last
//!   valid batch, after showing what that discards and asking;
//! - `bench`: a load generator against an embedded engine (throughput, latency percentiles);
//! - `serve`: Kafka's wire protocol over a data directory (crate `seglog-kafka`), for Kafka's
//!   own clients.
//!
//! The commands that only read — `topics list|describe`, `consume --partition`, `groups
//! list|describe`, `verify` and `dump` — read files only, never through the engine (`dir_view`,
//! `read_only`): they take no lock and create, truncate, rename or adopt nothing, so they work on
//! a read-only file system and while another process has the directory open. The commands that
//! write — `produce`, `topics create|alter|delete`, `consume --group`, `clean`, `bench --dir` —
//! open it through the engine (`seglog::engine::Engine`), which takes the directory's lock and
//! recovers it if needed; `recover` takes the lock itself (`seglog::engine::repair`).
//!
//! Errors are printed as one line, each cause once (`error_line`). Every command refuses a directory that is not a seglog data directory
//! (`data_dir`), before it touches anything.
//!
//! Exit codes: 0 success, 1 an error or a finding (corruption, mismatched index entries), 2 a usage
//! error (reported by clap).

mod args;
mod bench;
mod clean;
mod cluster;
mod committed_offsets;
mod console_format;
mod consume;
mod data_dir;
mod dir_view;
mod dump;
mod engine_open;
mod error_line;
mod groups;
mod index_check;
mod kafka_text;
mod log_scan;
mod observability;
mod partition_view;
mod produce;
mod read_only;
mod record_view;
mod recover;
mod reset_offsets;
mod serve;
mod topic_config;
mod topics;
mod verify;

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};

/// What a subcommand found, when it ran to the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything checked out.
    Clean,
    /// The command ran but reported findings (corrupt bytes, index mismatches).
    Findings,
}

/// `seglog completions SHELL`: the script, generated from the clap definitions.
fn print_completions(shell: clap_complete::Shell) -> anyhow::Result<Outcome> {
    use clap_complete::Generator;
    let mut command = <Cli as clap::CommandFactory>::command();
    command.set_bin_name("seglog");
    command.build();
    let mut out = io::stdout().lock();
    shell.try_generate(&command, &mut out)?;
    out.flush()?;
    Ok(Outcome::Clean)
}

/// `seglog man`: the man page of `seglog`, its subcommands listed, generated from the clap
/// definitions (`seglog <command> --help` has each one's options).
fn print_man_page() -> anyhow::Result<Outcome> {
    let command = <Cli as clap::CommandFactory>::command();
    let mut out = io::stdout().lock();
    clap_mangen::Man::new(command).render(&mut out)?;
    out.flush()?;
    Ok(Outcome::Clean)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    observability::init_logging();
    let result = match cli.command {
        Command::Topics(args) => topics::run(&args),
        Command::Produce(args) => produce::run(&args),
        Command::Consume(args) => consume::run(&args),
        Command::Groups(args) => groups::run(&args),
        Command::Clean(args) => clean::run(&args),
        Command::Dump(args) => dump::run(&args),
        Command::Verify(args) => verify::run(&args),
        Command::Recover(args) => recover::run(&args),
        Command::Node(args) => cluster::run_node(&args),
        Command::Cluster(command) => cluster::run(&command),
        Command::Serve(args) => serve::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Completions(args) => print_completions(args.shell),
        Command::Man => print_man_page(),
        Command::BenchRestartChild(args) => bench::restart::run_child(&args),
    };
    match result {
        Ok(Outcome::Clean) => ExitCode::SUCCESS,
        Ok(Outcome::Findings) => ExitCode::FAILURE,
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            // Nothing useful can be done if stderr itself is gone.
            let _ = writeln!(
                io::stderr(),
                "seglog: error: {}",
                error_line::error_line(&error)
            );
            ExitCode::FAILURE
        }
    }
}

/// A reader that closed our stdout (`seglog consume ... | head`) is not an error.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<io::Error>()
            .is_some_and(|io_error| io_error.kind() == io::ErrorKind::BrokenPipe)
    })
}
