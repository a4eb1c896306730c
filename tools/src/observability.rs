//! What the CLI installs for the library's logs and metrics: a `tracing` subscriber writing to
//! stderr (stdout carries each command's output), and, with `--metrics-listen`, a Prometheus
//! exporter for the `metrics` facade.

use std::io::IsTerminal;
use std::net::ToSocketAddrs;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

/// The filter when `RUST_LOG` is unset or unreadable: the library's warnings and errors.
const DEFAULT_FILTER: &str = "warn";

/// Sends the library's events (and `log` records of dependencies) to stderr, filtered by
/// `RUST_LOG` (`EnvFilter` syntax), `warn` by default. A subscriber already installed stays.
pub fn init_logging() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(filter)
        .try_init();
}

/// Serves the engine's metrics in Prometheus' text format on `listen` (`HOST:PORT`, any path),
/// from a thread of its own. Call before the engine opens: handles registered earlier are not
/// exported.
pub fn serve_metrics(listen: &str) -> anyhow::Result<()> {
    let address = listen
        .to_socket_addrs()
        .with_context(|| format!("--metrics-listen {listen}: not an address"))?
        .next()
        .with_context(|| format!("--metrics-listen {listen}: no address"))?;
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(address)
        .install()
        .with_context(|| format!("cannot serve metrics on {listen}"))?;
    seglog::metrics::describe();
    Ok(())
}
