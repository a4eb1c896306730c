//! # seglog-kafka
//!
//! Kafka's wire protocol over a seglog [`Engine`]: a single-node broker that existing Kafka
//! clients (kcat, librdkafka, kafka-python, the Java clients) produce to and fetch from. The
//! engine already stores Kafka's bytes, so a produced batch is appended as it arrives and a
//! fetched batch is sent as it is stored; this crate only speaks the protocol.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use seglog::engine::{Engine, EngineConfig};
//! use seglog_kafka::{ServeConfig, serve};
//!
//! let engine = Engine::open("/var/lib/myservice/log", EngineConfig::default())?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9092").await?;
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! // ... `stop.send(())` when the service stops.
//! # drop(stop);
//! let shutdown = async { stopped.await.ok(); };
//! serve(engine.clone(), listener, ServeConfig::default(), shutdown).await?;
//! engine.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! How a request travels (`connection.rs`): a frame (a 4-byte big-endian size, then the request)
//! is read whole, bounded by `socket.request.max.bytes`; its header says the API and version,
//! which pick the request header's own version; the `kafka-protocol` crate decodes the request
//! and encodes the answer, after `shape_check.rs` refused any array count that runs past the
//! frame (the codec would reserve memory for it). Each connection answers its requests one at a
//! time, in order, as Kafka does. A frame that does not decode, an API or version not in
//! [`SUPPORTED_APIS`] (other than ApiVersions, which answers `UNSUPPORTED_VERSION`), an oversized
//! frame or a failed `acks=0` produce closes the connection; every other failure is a Kafka error
//! code in the answer.
//!
//! The APIs ([`SUPPORTED_APIS`] lists their versions): ApiVersions, Metadata, Produce, Fetch,
//! ListOffsets, CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeConfigs,
//! IncrementalAlterConfigs (topics' settings, applied to their live logs), InitProducerId
//! (idempotent producers: the engine checks their sequences), and Kafka's classic consumer-group
//! protocol: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
//! OffsetFetch, ListGroups, DescribeGroups, DeleteGroups.
//! Membership lives in memory (`group_coordinator.rs`, a pure state machine; members rejoin
//! after a restart); committed offsets are durable in seglog's `__consumer_offsets` through
//! [`seglog::group::GroupCoordinator`], which the server opens at the first group request (it
//! takes the engine's coordinator lock). This node is the only broker and the leader of every
//! partition; there are no transactions or static group members yet, no authentication and no
//! TLS.

mod alter_configs;
mod api_versions;
mod broker;
mod config;
mod connection;
mod delete_records;
mod describe_configs;
mod error;
mod error_code;
mod fetch;
mod fetch_frame;
mod frame;
mod group_coordinator;
mod groups;
mod init_producer_id;
mod list_offsets;
mod metadata;
mod offsets;
mod produce;
mod server;
mod shape_check;
mod topics;

pub use api_versions::{SUPPORTED_APIS, SupportedApi};
pub use config::{ConfigError, ServeConfig};
pub use error::ServeError;
pub use server::serve;

#[doc(no_inline)]
pub use seglog::engine::Engine;
