//! `seglog serve`: Kafka's wire protocol over a data directory (crate `seglog-kafka`), in the
//! foreground until SIGTERM or SIGINT, then the engine is closed cleanly (checkpoints and the
//! clean-shutdown marker written).

use std::io::{self, Write};
use std::net::SocketAddr;

use anyhow::Context;
use seglog::engine::Engine;
use seglog_kafka::ServeConfig;
use tokio::signal::unix::{SignalKind, signal};

use crate::Outcome;
use crate::args::ServeArgs;
use crate::cluster::runtime;
use crate::engine_open::{open_engine, with_engine};

pub fn run(args: &ServeArgs) -> anyhow::Result<Outcome> {
    let config = serve_config(&args.configs)?;
    if let Some(listen) = &args.metrics_listen {
        crate::observability::serve_metrics(listen)?;
    }
    let engine = open_engine(&args.dir)?;
    with_engine(engine, |engine| {
        runtime()?.block_on(serve_until_signal(engine.clone(), &args.listen, config))
    })?;
    Ok(Outcome::Clean)
}

/// Kafka's defaults with each `KEY=VALUE` applied in order.
fn serve_config(settings: &[String]) -> anyhow::Result<ServeConfig> {
    let mut config = ServeConfig::default();
    crate::topic_config::apply_settings(settings, |key, value| config.set(key, value))?;
    Ok(config)
}

async fn serve_until_signal(
    engine: Engine,
    listen: &str,
    config: ServeConfig,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let address = listener
        .local_addr()
        .with_context(|| format!("cannot read the address of {listen}"))?;
    // The handlers are in place before the ready line: a SIGTERM right after it stops cleanly.
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    warn_unless_loopback(address);
    if address.ip().is_unspecified() && config.advertised_listener.is_none() {
        eprintln!(
            "seglog: warning: clients are told to connect to {address}; set --config advertised.listeners=PLAINTEXT://HOST:PORT to a name they can reach"
        );
    }
    println!("serving Kafka protocol on {address}");
    io::stdout().flush()?;
    let shutdown = async {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
    };
    seglog_kafka::serve(engine, listener, config, shutdown).await?;
    Ok(())
}

fn warn_unless_loopback(address: SocketAddr) {
    if !address.ip().is_loopback() {
        eprintln!(
            "seglog: warning: {address} is not a loopback address; Kafka traffic is plaintext and unauthenticated (no TLS, no SASL)"
        );
    }
}
