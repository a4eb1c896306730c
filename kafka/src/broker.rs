//! What every connection shares: the engine, the settings, and the address clients are given.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::BrokerId;
use kafka_protocol::protocol::StrBytes;
use seglog::engine::Engine;
use seglog::group::GroupCoordinator;
use tokio::sync::{OnceCell, watch};

use crate::config::ServeConfig;
use crate::groups::Groups;

/// The broker as the request handlers see it.
#[derive(Debug)]
pub(crate) struct Broker {
    pub(crate) engine: Engine,
    pub(crate) config: ServeConfig,
    /// The host Metadata names for this broker.
    pub(crate) host: StrBytes,
    /// The port Metadata names for this broker.
    pub(crate) port: i32,
    /// Becomes `true` when the server stops.
    pub(crate) stop: watch::Receiver<bool>,
    /// The groups' membership (Kafka's classic group protocol).
    pub(crate) groups: Groups,
    /// seglog's store of committed offsets, opened by the first group request that needs it.
    pub(crate) offsets_store: OnceCell<GroupCoordinator>,
}

impl Broker {
    /// Completes when the server stops (at once if it has).
    pub(crate) async fn stopping(&self) {
        let mut stop = self.stop.clone();
        // An error means the server is gone: stopped all the same.
        let _ = stop.wait_for(|stopped| *stopped).await;
    }

    pub(crate) fn is_stopping(&self) -> bool {
        *self.stop.borrow()
    }

    pub(crate) fn broker_id(&self) -> BrokerId {
        BrokerId(self.config.broker_id)
    }

    /// Runs a blocking engine call (topic administration) on tokio's blocking pool, so that it
    /// never holds up a connection's thread. A call that panicked is logged here and answered
    /// `UNKNOWN_SERVER_ERROR`.
    pub(crate) async fn blocking<T, F>(&self, call: F) -> Result<T, ResponseError>
    where
        T: Send + 'static,
        F: FnOnce(&Engine) -> T + Send + 'static,
    {
        let engine = self.engine.clone();
        tokio::task::spawn_blocking(move || call(&engine))
            .await
            .map_err(|error| {
                tracing::error!("an engine call panicked: {error}");
                ResponseError::UnknownServerError
            })
    }
}

/// The partition count of `topic`, if it exists (from the engine's registry, without a shard
/// round trip).
pub(crate) fn partition_count(engine: &Engine, topic: &str) -> Option<u32> {
    engine
        .list_topics()
        .into_iter()
        .find(|(known, _)| known.as_str() == topic)
        .map(|(_, metadata)| metadata.partition_count)
}
