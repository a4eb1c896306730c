//! The accept loop: one task per connection, at most `max.connections` at once, until shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::protocol::StrBytes;
use seglog::engine::Engine;
use tokio::net::TcpListener;
use tokio::sync::{OnceCell, Semaphore, watch};
use tokio::task::JoinSet;

use crate::broker::Broker;
use crate::config::ServeConfig;
use crate::connection;
use crate::error::ServeError;
use crate::groups::{self, Groups};

/// How long the loop pauses after a failed accept (out of file descriptors, for one), so that a
/// lasting failure does not spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Serves Kafka's protocol on `listener` over `engine` until `shutdown` completes.
///
/// This broker is the only one and leads every partition; Metadata gives clients
/// `config.advertised_listener`, or else the listener's own address. At shutdown it stops
/// accepting, lets each connection finish the request it is answering (a long-poll fetch
/// answers at once with what it has), closes them and returns. The engine stays open: the caller owns
/// it (keep a clone) and closes it afterwards.
///
/// Traffic is plaintext and unauthenticated: bind to loopback or a trusted network.
pub async fn serve(
    engine: Engine,
    listener: TcpListener,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let address = listener
        .local_addr()
        .map_err(|source| ServeError::ListenerAddress { source })?;
    let (host, port) = config
        .advertised_listener
        .clone()
        .unwrap_or_else(|| (address.ip().to_string(), address.port()));
    let connection_slots = Arc::new(Semaphore::new(config.max_connections));
    let (stop_sender, stop) = watch::channel(false);
    let broker = Arc::new(Broker {
        engine,
        config,
        host: StrBytes::from_string(host),
        port: i32::from(port),
        stop: stop.clone(),
        groups: Groups::default(),
        offsets_store: OnceCell::new(),
    });
    let ticking = tokio::spawn(tick_groups(Arc::clone(&broker)));
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = Arc::clone(&connection_slots).try_acquire_owned() else {
                        tracing::warn!("refused a connection from {peer}: max.connections reached");
                        continue;
                    };
                    let (broker, stop) = (Arc::clone(&broker), stop.clone());
                    connections.spawn(async move {
                        connection::run(broker, stream, stop).await;
                        drop(slot);
                    });
                }
                Err(error) => {
                    tracing::warn!("accepting a connection on {address} failed: {error}");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                }
            },
            Some(finished) = connections.join_next(), if !connections.is_empty() => {
                log_panic(finished);
            }
        }
    }
    drop(listener);
    // Sent to receivers that are still there; none left is fine.
    let _ = stop_sender.send(true);
    while let Some(finished) = connections.join_next().await {
        log_panic(finished);
    }
    log_panic(ticking.await);
    Ok(())
}

/// Expires group members' sessions and completes overdue rebalances until the server stops.
async fn tick_groups(broker: Arc<Broker>) {
    let mut interval = tokio::time::interval(groups::TICK_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => broker.groups.tick(),
            () = broker.stopping() => return,
        }
    }
}

/// A connection task that panicked took only its own connection down; it is logged.
fn log_panic(finished: Result<(), tokio::task::JoinError>) {
    if let Err(error) = finished {
        tracing::error!("a connection task failed: {error}");
    }
}
