//! Consumer groups, in process: members of a named group share the partitions of the topics they
//! subscribe to, each partition owned by exactly one member at a time, and the group's committed
//! offsets are kept durable in the compacted topic `__consumer_offsets`, as Kafka keeps them.
//!
//! - [`GroupCoordinator`]: opened once per [`Engine`](crate::engine::Engine); loads committed
//!   offsets, runs the groups (membership, generations, rebalances, fencing) and makes consumers.
//! - [`Consumer`]: one member; `subscribe`, `poll`, `position`, `seek`, `pause`/`resume`,
//!   `commit_sync`/`commit_async`, `committed`, auto-commit and `auto.offset.reset`, configured
//!   with Kafka's names ([`ConsumerConfig`]).
//! - [`assignor`]: the assignment strategies, pure functions: range, round-robin and a
//!   cooperative sticky one.
//! - [`offset_record`]: the byte layout of the offsets topic's records (Kafka's).
//! - [`describe_committed`] and [`GroupCoordinator::describe_group`]: committed offsets, log end
//!   offsets and lag per partition (`kafka-consumer-groups --describe`).
//!
//! ```
//! use std::time::Duration;
//! use seglog::config::LogConfig;
//! use seglog::engine::{Durability, Engine, EngineConfig};
//! use seglog::format::{BatchBuilder, NewRecord};
//! use seglog::group::{ConsumerConfig, GroupCoordinator};
//!
//! let dir = tempfile::tempdir()?;
//! let engine = Engine::open(dir.path(), EngineConfig::default())?;
//! let topic = engine.create_topic("orders", 2, LogConfig::default())?;
//! let mut batch = BatchBuilder::new(0);
//! batch.push(&NewRecord { timestamp_ms: 1, key: None, value: Some(b"v"), headers: &[] });
//! engine.append(&topic, 0, batch.build().unwrap(), Durability::Written).wait()?;
//!
//! let coordinator = GroupCoordinator::open(&engine)?;
//! let mut config = ConsumerConfig::new("billing");
//! config.set("auto.offset.reset", "earliest")?;
//! let mut consumer = coordinator.consumer(config);
//! consumer.subscribe(&["orders"])?;
//! let records = consumer.poll(Duration::from_secs(5))?;
//! assert_eq!(records[0].value.as_deref(), Some(&b"v"[..]));
//! consumer.commit_sync()?;
//! consumer.close()?;
//! drop(coordinator);
//! engine.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod assignor;
mod async_consumer;
mod commit;
mod config;
mod consumer;
mod coordinator;
mod describe;
mod error;
pub mod offset_record;
pub(crate) mod records;
mod store;

pub use crate::engine::{ConsumerRecord, OFFSETS_TOPIC};
pub use assignor::{Assignment, AssignmentStrategy, MemberId, MemberSubscription};
pub use async_consumer::AsyncConsumer;
pub use commit::CommitHandle;
pub use config::{AutoOffsetReset, ConsumerConfig};
pub use consumer::{Consumer, GROUP_ID_LENGTH_MAX, PollOptions, RebalanceListener};
pub use coordinator::{COORDINATOR_LOCK_FILE, CoordinatorConfig, Generation, GroupCoordinator};
pub use describe::{
    GroupDescription, GroupListing, GroupState, MemberDescription, PartitionLag, describe_committed,
};
pub use error::{
    CloseError, CommitError, CoordinatorError, DeleteGroupError, DescribeError, JoinError,
    OffsetRecordError, PollError, PositionError,
};
pub use store::{
    CommitRecord, CommittedOffsets, OffsetAndMetadata, decode_commit_record, partition_for_group,
};
