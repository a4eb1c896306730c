//! A walk over a request body, before `kafka-protocol` decodes it, that refuses an array whose
//! element count exceeds the bytes left in the frame.
//!
//! Why: `kafka-protocol` 0.18 reserves `count × size_of::<element>()` bytes for an array as soon
//! as it reads the count, before decoding an element. A 16-byte Metadata frame claiming 2^31
//! topics asks for 150 GB, and a failed allocation aborts the process (no panic to catch). Every
//! element takes at least one byte on the wire, so a count above the bytes left cannot be a real
//! request. The walk knows where each array sits from the same schemas the crate is generated
//! from (Kafka's `clients/src/main/resources/common/message/*Request.json`), for the versions in
//! [`SUPPORTED_APIS`](crate::SUPPORTED_APIS) only; `shape_check_matches_the_codec` proves it
//! consumes exactly what the crate encodes, at every listed version. It decodes no value: the
//! crate does. Delete this module once the crate bounds its reservations (its pull requests
//! #152, #161 and #200 do).

use kafka_protocol::messages::ApiKey;
use thiserror::Error;

/// A wire type, as far as the walk needs to know it.
#[derive(Debug, Clone, Copy)]
enum Field {
    Int8,
    Int16,
    Int32,
    Int64,
    Uuid,
    /// A string; nullable or not, the walk reads its length the same way.
    Str,
    /// Bytes (a produce's records).
    Bytes,
    /// An array of structs, each of these fields (then tagged fields, in flexible versions).
    Array(&'static [Slot]),
    /// An array of a fixed-size type: `Int32` or `Str`.
    ArrayOf(&'static Field),
}

/// A field and the versions that carry it.
#[derive(Debug, Clone, Copy)]
struct Slot {
    field: Field,
    min_version: i16,
    max_version: i16,
}

const fn at(field: Field, min_version: i16, max_version: i16) -> Slot {
    Slot {
        field,
        min_version,
        max_version,
    }
}

/// Every version (the API's own range bounds it).
const fn always(field: Field) -> Slot {
    at(field, 0, i16::MAX)
}

/// A request's top-level fields and the first version that encodes compactly, with tagged
/// fields (Kafka's `flexibleVersions`).
struct Schema {
    flexible_from: i16,
    fields: &'static [Slot],
}

use Field::{Array, ArrayOf, Bytes, Int8, Int16, Int32, Int64, Str, Uuid};

const API_VERSIONS: Schema = Schema {
    flexible_from: 3,
    fields: &[at(Str, 3, i16::MAX), at(Str, 3, i16::MAX)],
};

const METADATA: Schema = Schema {
    flexible_from: 9,
    fields: &[
        always(Array(&[at(Uuid, 10, i16::MAX), always(Str)])),
        at(Int8, 4, i16::MAX),
        at(Int8, 8, 10),
        at(Int8, 8, i16::MAX),
    ],
};

const PRODUCE: Schema = Schema {
    flexible_from: 9,
    fields: &[
        at(Str, 3, i16::MAX),
        always(Int16),
        always(Int32),
        always(Array(&[
            always(Str),
            always(Array(&[always(Int32), always(Bytes)])),
        ])),
    ],
};

const FETCH_PARTITION: &[Slot] = &[
    always(Int32),
    at(Int32, 9, i16::MAX),
    always(Int64),
    at(Int32, 12, i16::MAX),
    at(Int64, 5, i16::MAX),
    always(Int32),
];

const FETCH: Schema = Schema {
    flexible_from: 12,
    fields: &[
        at(Int32, 0, 14),
        always(Int32),
        always(Int32),
        at(Int32, 3, i16::MAX),
        at(Int8, 4, i16::MAX),
        at(Int32, 7, i16::MAX),
        at(Int32, 7, i16::MAX),
        always(Array(&[
            at(Str, 0, 12),
            at(Uuid, 13, i16::MAX),
            always(Array(FETCH_PARTITION)),
        ])),
        at(
            Array(&[
                at(Str, 7, 12),
                at(Uuid, 13, i16::MAX),
                always(ArrayOf(&Int32)),
            ]),
            7,
            i16::MAX,
        ),
        at(Str, 11, i16::MAX),
    ],
};

const LIST_OFFSETS: Schema = Schema {
    flexible_from: 6,
    fields: &[
        always(Int32),
        at(Int8, 2, i16::MAX),
        always(Array(&[
            always(Str),
            always(Array(&[
                always(Int32),
                at(Int32, 4, i16::MAX),
                always(Int64),
                at(Int32, 0, 0),
            ])),
        ])),
        at(Int32, 10, i16::MAX),
    ],
};

const CREATE_TOPICS: Schema = Schema {
    flexible_from: 5,
    fields: &[
        always(Array(&[
            always(Str),
            always(Int32),
            always(Int16),
            always(Array(&[always(Int32), always(ArrayOf(&Int32))])),
            always(Array(&[always(Str), always(Str)])),
        ])),
        always(Int32),
        at(Int8, 1, i16::MAX),
    ],
};

const DELETE_TOPICS: Schema = Schema {
    flexible_from: 4,
    fields: &[
        at(Array(&[always(Str), always(Uuid)]), 6, i16::MAX),
        at(ArrayOf(&Str), 0, 5),
        always(Int32),
    ],
};

const CREATE_PARTITIONS: Schema = Schema {
    flexible_from: 2,
    fields: &[
        always(Array(&[
            always(Str),
            always(Int32),
            always(Array(&[always(ArrayOf(&Int32))])),
        ])),
        always(Int32),
        always(Int8),
    ],
};

const DELETE_RECORDS: Schema = Schema {
    flexible_from: 2,
    fields: &[
        always(Array(&[
            always(Str),
            always(Array(&[always(Int32), always(Int64)])),
        ])),
        always(Int32),
    ],
};

const DESCRIBE_CONFIGS: Schema = Schema {
    flexible_from: 4,
    fields: &[
        always(Array(&[always(Int8), always(Str), always(ArrayOf(&Str))])),
        at(Int8, 1, i16::MAX),
        at(Int8, 3, i16::MAX),
    ],
};

const INCREMENTAL_ALTER_CONFIGS: Schema = Schema {
    flexible_from: 1,
    fields: &[
        always(Array(&[
            always(Int8),
            always(Str),
            always(Array(&[always(Str), always(Int8), always(Str)])),
        ])),
        always(Int8),
    ],
};

const FIND_COORDINATOR: Schema = Schema {
    flexible_from: 3,
    fields: &[
        at(Str, 0, 3),
        at(Int8, 1, i16::MAX),
        at(ArrayOf(&Str), 4, i16::MAX),
    ],
};

const JOIN_GROUP: Schema = Schema {
    flexible_from: 6,
    fields: &[
        always(Str),
        always(Int32),
        at(Int32, 1, i16::MAX),
        always(Str),
        at(Str, 5, i16::MAX),
        always(Str),
        always(Array(&[always(Str), always(Bytes)])),
        at(Str, 8, i16::MAX),
    ],
};

const SYNC_GROUP: Schema = Schema {
    flexible_from: 4,
    fields: &[
        always(Str),
        always(Int32),
        always(Str),
        at(Str, 3, i16::MAX),
        at(Str, 5, i16::MAX),
        at(Str, 5, i16::MAX),
        always(Array(&[always(Str), always(Bytes)])),
    ],
};

const HEARTBEAT: Schema = Schema {
    flexible_from: 4,
    fields: &[
        always(Str),
        always(Int32),
        always(Str),
        at(Str, 3, i16::MAX),
    ],
};

const LEAVE_GROUP: Schema = Schema {
    flexible_from: 4,
    fields: &[
        always(Str),
        at(Str, 0, 2),
        at(
            Array(&[always(Str), always(Str), at(Str, 5, i16::MAX)]),
            3,
            i16::MAX,
        ),
    ],
};

const OFFSET_COMMIT: Schema = Schema {
    flexible_from: 8,
    fields: &[
        always(Str),
        at(Int32, 1, i16::MAX),
        at(Str, 1, i16::MAX),
        at(Str, 7, i16::MAX),
        at(Int64, 2, 4),
        always(Array(&[
            always(Str),
            always(Array(&[
                always(Int32),
                always(Int64),
                at(Int32, 6, i16::MAX),
                at(Int64, 1, 1),
                always(Str),
            ])),
        ])),
    ],
};

const OFFSET_FETCH: Schema = Schema {
    flexible_from: 6,
    fields: &[
        at(Str, 0, 7),
        at(Array(&[always(Str), always(ArrayOf(&Int32))]), 0, 7),
        at(Int8, 7, i16::MAX),
    ],
};

const LIST_GROUPS: Schema = Schema {
    flexible_from: 3,
    fields: &[
        at(ArrayOf(&Str), 4, i16::MAX),
        at(ArrayOf(&Str), 5, i16::MAX),
    ],
};

const DESCRIBE_GROUPS: Schema = Schema {
    flexible_from: 5,
    fields: &[always(ArrayOf(&Str)), at(Int8, 3, i16::MAX)],
};

const DELETE_GROUPS: Schema = Schema {
    flexible_from: 2,
    fields: &[always(ArrayOf(&Str))],
};

const INIT_PRODUCER_ID: Schema = Schema {
    flexible_from: 2,
    fields: &[
        always(Str),
        always(Int32),
        at(Int64, 3, i16::MAX),
        at(Int16, 3, i16::MAX),
    ],
};

fn schema(api_key: ApiKey) -> Option<&'static Schema> {
    match api_key {
        ApiKey::ApiVersions => Some(&API_VERSIONS),
        ApiKey::Metadata => Some(&METADATA),
        ApiKey::Produce => Some(&PRODUCE),
        ApiKey::Fetch => Some(&FETCH),
        ApiKey::ListOffsets => Some(&LIST_OFFSETS),
        ApiKey::CreateTopics => Some(&CREATE_TOPICS),
        ApiKey::DeleteTopics => Some(&DELETE_TOPICS),
        ApiKey::CreatePartitions => Some(&CREATE_PARTITIONS),
        ApiKey::DeleteRecords => Some(&DELETE_RECORDS),
        ApiKey::DescribeConfigs => Some(&DESCRIBE_CONFIGS),
        ApiKey::InitProducerId => Some(&INIT_PRODUCER_ID),
        ApiKey::IncrementalAlterConfigs => Some(&INCREMENTAL_ALTER_CONFIGS),
        _ => group_schema(api_key),
    }
}

fn group_schema(api_key: ApiKey) -> Option<&'static Schema> {
    match api_key {
        ApiKey::FindCoordinator => Some(&FIND_COORDINATOR),
        ApiKey::JoinGroup => Some(&JOIN_GROUP),
        ApiKey::SyncGroup => Some(&SYNC_GROUP),
        ApiKey::Heartbeat => Some(&HEARTBEAT),
        ApiKey::LeaveGroup => Some(&LEAVE_GROUP),
        ApiKey::OffsetCommit => Some(&OFFSET_COMMIT),
        ApiKey::OffsetFetch => Some(&OFFSET_FETCH),
        ApiKey::ListGroups => Some(&LIST_GROUPS),
        ApiKey::DescribeGroups => Some(&DESCRIBE_GROUPS),
        ApiKey::DeleteGroups => Some(&DELETE_GROUPS),
        _ => None,
    }
}

/// Why a request body was refused before decoding.
#[derive(Debug, Error, PartialEq, Eq)]
pub(crate) enum ShapeError {
    #[error("API {api_key} has no request schema here")]
    NoSchema { api_key: i16 },
    #[error("the request ends {position} bytes in, inside a field")]
    Truncated { position: usize },
    #[error("a length at byte {position} is negative")]
    NegativeLength { position: usize },
    #[error(
        "an array at byte {position} claims {count} elements with {remaining_bytes} bytes left"
    )]
    ImpossibleCount {
        position: usize,
        count: u64,
        remaining_bytes: usize,
    },
}

/// Checks `body` (the request after its header) of `api_key` at `version`; answers how many
/// bytes the request's fields take (trailing bytes are the decoder's business).
pub(crate) fn check(api_key: ApiKey, version: i16, body: &[u8]) -> Result<usize, ShapeError> {
    let schema = schema(api_key).ok_or(ShapeError::NoSchema {
        api_key: api_key as i16,
    })?;
    let mut walk = Walk {
        body,
        position: 0,
        version,
        flexible: version >= schema.flexible_from,
    };
    walk.fields(schema.fields)?;
    Ok(walk.position)
}

/// The walk's place in the body.
struct Walk<'a> {
    body: &'a [u8],
    position: usize,
    version: i16,
    flexible: bool,
}

impl Walk<'_> {
    fn remaining_bytes(&self) -> usize {
        self.body.len().saturating_sub(self.position)
    }

    /// A struct's fields present at this version, then its tagged fields when flexible.
    fn fields(&mut self, slots: &[Slot]) -> Result<(), ShapeError> {
        for slot in slots {
            if (slot.min_version..=slot.max_version).contains(&self.version) {
                self.field(slot.field)?;
            }
        }
        if self.flexible {
            self.tagged_fields()?;
        }
        Ok(())
    }

    fn field(&mut self, field: Field) -> Result<(), ShapeError> {
        match field {
            Int8 => self.skip(1),
            Int16 => self.skip(2),
            Int32 => self.skip(4),
            Int64 => self.skip(8),
            Uuid => self.skip(16),
            Str => {
                let length = self.length(LengthPrefix::Int16)?;
                self.skip(length)
            }
            Bytes => {
                let length = self.length(LengthPrefix::Int32)?;
                self.skip(length)
            }
            Array(slots) => {
                let count = self.count()?;
                (0..count).try_for_each(|_| self.fields(slots))
            }
            ArrayOf(element) => {
                let count = self.count()?;
                (0..count).try_for_each(|_| self.field(*element))
            }
        }
    }

    /// An array's element count, refused above the bytes left.
    fn count(&mut self) -> Result<usize, ShapeError> {
        let position = self.position;
        let count = self.length(LengthPrefix::Int32)?;
        let remaining_bytes = self.remaining_bytes();
        if count > remaining_bytes {
            return Err(ShapeError::ImpossibleCount {
                position,
                count: count as u64,
                remaining_bytes,
            });
        }
        Ok(count)
    }

    /// A length or count: fixed-width signed when not flexible (-1: null), else an unsigned
    /// varint of length + 1 (0: null). Null reads as 0.
    fn length(&mut self, prefix: LengthPrefix) -> Result<usize, ShapeError> {
        let position = self.position;
        let value = match (self.flexible, prefix) {
            (true, _) => self.unsigned_varint()?.saturating_sub(1),
            (false, LengthPrefix::Int16) => {
                let bytes = self.take::<2>()?;
                non_negative(i64::from(i16::from_be_bytes(bytes)), position)?
            }
            (false, LengthPrefix::Int32) => {
                let bytes = self.take::<4>()?;
                non_negative(i64::from(i32::from_be_bytes(bytes)), position)?
            }
        };
        usize::try_from(value)
            .ok()
            .ok_or(ShapeError::Truncated { position })
    }

    fn tagged_fields(&mut self) -> Result<(), ShapeError> {
        let count = self.unsigned_varint()?;
        for _ in 0..count {
            self.unsigned_varint()?;
            let position = self.position;
            let size = self.unsigned_varint()?;
            let size = usize::try_from(size)
                .ok()
                .ok_or(ShapeError::Truncated { position })?;
            self.skip(size)?;
        }
        Ok(())
    }

    fn unsigned_varint(&mut self) -> Result<u64, ShapeError> {
        let position = self.position;
        let mut value = 0u64;
        for shift in (0..35).step_by(7) {
            let [byte] = self.take::<1>()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ShapeError::Truncated { position })
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], ShapeError> {
        let position = self.position;
        let bytes = self
            .body
            .get(position..position.saturating_add(N))
            .and_then(|bytes| <[u8; N]>::try_from(bytes).ok())
            .ok_or(ShapeError::Truncated { position })?;
        self.position += N;
        Ok(bytes)
    }

    fn skip(&mut self, length: usize) -> Result<(), ShapeError> {
        if length > self.remaining_bytes() {
            return Err(ShapeError::Truncated {
                position: self.position,
            });
        }
        self.position += length;
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
enum LengthPrefix {
    Int16,
    Int32,
}

/// -1 is null (read as empty); below that the length is malformed.
fn non_negative(value: i64, position: usize) -> Result<u64, ShapeError> {
    match value {
        -1 => Ok(0),
        value => u64::try_from(value)
            .ok()
            .ok_or(ShapeError::NegativeLength { position }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SUPPORTED_APIS;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn name(text: &'static str) -> TopicName {
        TopicName(StrBytes::from_static_str(text))
    }

    fn two<T: Clone>(item: T) -> Vec<T> {
        vec![item.clone(), item]
    }

    fn metadata() -> MetadataRequest {
        let topic = metadata_request::MetadataRequestTopic::default().with_name(Some(name("t")));
        MetadataRequest::default().with_topics(Some(two(topic)))
    }

    fn produce() -> ProduceRequest {
        let partition = produce_request::PartitionProduceData::default()
            .with_index(1)
            .with_records(Some(Bytes::from_static(b"records")));
        let topic = produce_request::TopicProduceData::default()
            .with_name(name("t"))
            .with_partition_data(two(partition));
        ProduceRequest::default()
            .with_transactional_id(Some(TransactionalId(StrBytes::from_static_str("tx"))))
            .with_topic_data(two(topic))
    }

    fn fetch(version: i16) -> FetchRequest {
        let partition = fetch_request::FetchPartition::default().with_partition(1);
        let topic = fetch_request::FetchTopic::default()
            .with_topic(name("t"))
            .with_partitions(two(partition));
        let forgotten = fetch_request::ForgottenTopic::default()
            .with_topic(name("t"))
            .with_partitions(vec![1, 2]);
        let request = FetchRequest::default().with_topics(two(topic));
        let request = match version {
            7.. => request.with_forgotten_topics_data(two(forgotten)),
            _ => request,
        };
        match version {
            11.. => request.with_rack_id(StrBytes::from_static_str("rack")),
            _ => request,
        }
    }

    fn list_offsets() -> ListOffsetsRequest {
        let partition = list_offsets_request::ListOffsetsPartition::default().with_timestamp(-1);
        let topic = list_offsets_request::ListOffsetsTopic::default()
            .with_name(name("t"))
            .with_partitions(two(partition));
        ListOffsetsRequest::default().with_topics(two(topic))
    }

    fn create_topics() -> CreateTopicsRequest {
        let assignment = create_topics_request::CreatableReplicaAssignment::default()
            .with_broker_ids(vec![BrokerId(0), BrokerId(1)]);
        let config = create_topics_request::CreatableTopicConfig::default()
            .with_name(StrBytes::from_static_str("retention.ms"))
            .with_value(Some(StrBytes::from_static_str("1")));
        let topic = create_topics_request::CreatableTopic::default()
            .with_name(name("t"))
            .with_assignments(two(assignment))
            .with_configs(two(config));
        CreateTopicsRequest::default().with_topics(two(topic))
    }

    fn delete_topics(version: i16) -> DeleteTopicsRequest {
        match version {
            6.. => {
                let topic =
                    delete_topics_request::DeleteTopicState::default().with_name(Some(name("t")));
                DeleteTopicsRequest::default().with_topics(two(topic))
            }
            _ => DeleteTopicsRequest::default().with_topic_names(two(name("t"))),
        }
    }

    fn create_partitions() -> CreatePartitionsRequest {
        let assignment = create_partitions_request::CreatePartitionsAssignment::default()
            .with_broker_ids(vec![BrokerId(0)]);
        let topic = create_partitions_request::CreatePartitionsTopic::default()
            .with_name(name("t"))
            .with_assignments(Some(two(assignment)));
        CreatePartitionsRequest::default().with_topics(two(topic))
    }

    fn delete_records() -> DeleteRecordsRequest {
        let partition = delete_records_request::DeleteRecordsPartition::default().with_offset(3);
        let topic = delete_records_request::DeleteRecordsTopic::default()
            .with_name(name("t"))
            .with_partitions(two(partition));
        DeleteRecordsRequest::default().with_topics(two(topic))
    }

    fn describe_configs() -> DescribeConfigsRequest {
        let resource = describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("t"))
            .with_configuration_keys(Some(two(StrBytes::from_static_str("retention.ms"))));
        DescribeConfigsRequest::default().with_resources(two(resource))
    }

    fn incremental_alter_configs() -> IncrementalAlterConfigsRequest {
        let config = incremental_alter_configs_request::AlterableConfig::default()
            .with_name(StrBytes::from_static_str("cleanup.policy"))
            .with_config_operation(2)
            .with_value(Some(StrBytes::from_static_str("compact")));
        let resource = incremental_alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("t"))
            .with_configs(two(config));
        IncrementalAlterConfigsRequest::default()
            .with_resources(two(resource))
            .with_validate_only(true)
    }

    fn api_versions() -> ApiVersionsRequest {
        ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("name"))
            .with_client_software_version(StrBytes::from_static_str("1.0"))
    }

    fn text(value: &'static str) -> StrBytes {
        StrBytes::from_static_str(value)
    }

    fn group() -> GroupId {
        GroupId(text("g"))
    }

    fn join_group(version: i16) -> JoinGroupRequest {
        let protocol = join_group_request::JoinGroupRequestProtocol::default()
            .with_name(text("range"))
            .with_metadata(Bytes::from_static(b"subscription"));
        let instance_id = (version >= 5).then(|| text("i"));
        let reason = (version >= 8).then(|| text("r"));
        JoinGroupRequest::default()
            .with_reason(reason)
            .with_group_id(group())
            .with_member_id(text("m"))
            .with_group_instance_id(instance_id)
            .with_protocol_type(text("consumer"))
            .with_protocols(two(protocol))
    }

    fn sync_group(version: i16) -> SyncGroupRequest {
        let assignment = sync_group_request::SyncGroupRequestAssignment::default()
            .with_member_id(text("m"))
            .with_assignment(Bytes::from_static(b"assignment"));
        let instance_id = (version >= 3).then(|| text("i"));
        SyncGroupRequest::default()
            .with_group_id(group())
            .with_member_id(text("m"))
            .with_group_instance_id(instance_id)
            .with_assignments(two(assignment))
    }

    fn leave_group(version: i16) -> LeaveGroupRequest {
        let request = LeaveGroupRequest::default().with_group_id(group());
        match version {
            3.. => {
                let member = leave_group_request::MemberIdentity::default()
                    .with_member_id(text("m"))
                    .with_group_instance_id(Some(text("i")))
                    .with_reason((version >= 5).then(|| text("r")));
                request.with_members(two(member))
            }
            _ => request.with_member_id(text("m")),
        }
    }

    fn offset_commit() -> OffsetCommitRequest {
        let partition = offset_commit_request::OffsetCommitRequestPartition::default()
            .with_partition_index(1)
            .with_committed_offset(5)
            .with_committed_metadata(Some(text("meta")));
        let topic = offset_commit_request::OffsetCommitRequestTopic::default()
            .with_name(name("t"))
            .with_partitions(two(partition));
        OffsetCommitRequest::default()
            .with_group_id(group())
            .with_member_id(text("m"))
            .with_topics(two(topic))
    }

    fn offset_fetch() -> OffsetFetchRequest {
        let topic = offset_fetch_request::OffsetFetchRequestTopic::default()
            .with_name(name("t"))
            .with_partition_indexes(vec![0, 1]);
        OffsetFetchRequest::default()
            .with_group_id(group())
            .with_topics(Some(two(topic)))
    }

    fn init_producer_id(version: i16) -> InitProducerIdRequest {
        let request = InitProducerIdRequest::default()
            .with_transactional_id(Some(TransactionalId(text("tx"))))
            .with_transaction_timeout_ms(60_000);
        match version {
            3.. => request
                .with_producer_id(ProducerId(7))
                .with_producer_epoch(2),
            _ => request,
        }
    }

    fn group_request(api_key: ApiKey, version: i16, body: &mut BytesMut) {
        let encoded = match api_key {
            ApiKey::FindCoordinator => FindCoordinatorRequest::default()
                .with_key(text("g"))
                .encode(body, version),
            ApiKey::JoinGroup => join_group(version).encode(body, version),
            ApiKey::SyncGroup => sync_group(version).encode(body, version),
            ApiKey::Heartbeat => HeartbeatRequest::default()
                .with_group_id(group())
                .with_member_id(text("m"))
                .encode(body, version),
            ApiKey::LeaveGroup => leave_group(version).encode(body, version),
            ApiKey::OffsetCommit => offset_commit().encode(body, version),
            ApiKey::OffsetFetch => offset_fetch().encode(body, version),
            ApiKey::ListGroups => {
                let states = (version >= 4).then(|| two(text("Stable")));
                ListGroupsRequest::default()
                    .with_states_filter(states.unwrap_or_default())
                    .encode(body, version)
            }
            ApiKey::DescribeGroups => DescribeGroupsRequest::default()
                .with_groups(two(group()))
                .encode(body, version),
            ApiKey::DeleteGroups => DeleteGroupsRequest::default()
                .with_groups_names(two(group()))
                .encode(body, version),
            other => panic!("no request built for {other:?}"),
        };
        encoded.unwrap_or_else(|error| panic!("{api_key:?} v{version}: {error}"));
    }

    /// A request of `api_key` with every array holding two elements, encoded at `version`.
    fn encoded(api_key: ApiKey, version: i16) -> BytesMut {
        let mut body = BytesMut::new();
        let encoded = match api_key {
            ApiKey::ApiVersions => api_versions().encode(&mut body, version),
            ApiKey::Metadata => metadata().encode(&mut body, version),
            ApiKey::Produce => produce().encode(&mut body, version),
            ApiKey::Fetch => fetch(version).encode(&mut body, version),
            ApiKey::ListOffsets => list_offsets().encode(&mut body, version),
            ApiKey::CreateTopics => create_topics().encode(&mut body, version),
            ApiKey::DeleteTopics => delete_topics(version).encode(&mut body, version),
            ApiKey::CreatePartitions => create_partitions().encode(&mut body, version),
            ApiKey::DeleteRecords => delete_records().encode(&mut body, version),
            ApiKey::DescribeConfigs => describe_configs().encode(&mut body, version),
            ApiKey::InitProducerId => init_producer_id(version).encode(&mut body, version),
            ApiKey::IncrementalAlterConfigs => {
                incremental_alter_configs().encode(&mut body, version)
            }
            other => {
                group_request(other, version, &mut body);
                Ok(())
            }
        };
        encoded.unwrap_or_else(|error| panic!("{api_key:?} v{version}: {error}"));
        body
    }

    /// The walk consumes exactly the bytes the codec writes, at every version answered: the
    /// schemas above agree with the crate's.
    #[test]
    fn shape_check_matches_the_codec() {
        for api in SUPPORTED_APIS {
            let api_key = ApiKey::try_from(api.api_key).unwrap();
            for version in api.min_version..=api.max_version {
                let body = encoded(api_key, version);
                let consumed = check(api_key, version, &body);
                assert_eq!(consumed, Ok(body.len()), "{} v{version}", api.name);
            }
        }
    }

    /// Every array count raised to 2^31 - 1 (or the varint equivalent) is refused, and every cut
    /// of the body is refused or a whole prefix, never a panic.
    #[test]
    fn impossible_counts_and_cuts_are_refused() {
        let body = encoded(ApiKey::Metadata, 1);
        let mut bomb = body.clone();
        bomb[..4].copy_from_slice(&i32::MAX.to_be_bytes());
        let refused = check(ApiKey::Metadata, 1, &bomb);
        assert!(
            matches!(refused, Err(ShapeError::ImpossibleCount { .. })),
            "{refused:?}"
        );
        let flexible = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x00, 0x00, 0x00, 0x00];
        let refused = check(ApiKey::Metadata, 12, &flexible);
        assert!(
            matches!(refused, Err(ShapeError::ImpossibleCount { .. })),
            "{refused:?}"
        );
        for api in SUPPORTED_APIS {
            let api_key = ApiKey::try_from(api.api_key).unwrap();
            let body = encoded(api_key, api.max_version);
            for cut in 0..body.len() {
                let result = check(api_key, api.max_version, &body[..cut]);
                assert!(result.is_err(), "{} cut at {cut}", api.name);
            }
        }
    }

    /// Decodes `body` as the request of `api_key` at `version`; whether it decoded.
    fn decodes(api_key: ApiKey, version: i16, body: &[u8]) -> bool {
        use kafka_protocol::protocol::Decodable;
        let mut body = Bytes::copy_from_slice(body);
        let body = &mut body;
        match api_key {
            ApiKey::ApiVersions => ApiVersionsRequest::decode(body, version).is_ok(),
            ApiKey::Metadata => MetadataRequest::decode(body, version).is_ok(),
            ApiKey::Produce => ProduceRequest::decode(body, version).is_ok(),
            ApiKey::Fetch => FetchRequest::decode(body, version).is_ok(),
            ApiKey::ListOffsets => ListOffsetsRequest::decode(body, version).is_ok(),
            ApiKey::CreateTopics => CreateTopicsRequest::decode(body, version).is_ok(),
            ApiKey::DeleteTopics => DeleteTopicsRequest::decode(body, version).is_ok(),
            ApiKey::CreatePartitions => CreatePartitionsRequest::decode(body, version).is_ok(),
            ApiKey::DeleteRecords => DeleteRecordsRequest::decode(body, version).is_ok(),
            ApiKey::DescribeConfigs => DescribeConfigsRequest::decode(body, version).is_ok(),
            ApiKey::IncrementalAlterConfigs => {
                IncrementalAlterConfigsRequest::decode(body, version).is_ok()
            }
            ApiKey::InitProducerId => InitProducerIdRequest::decode(body, version).is_ok(),
            ApiKey::FindCoordinator => FindCoordinatorRequest::decode(body, version).is_ok(),
            ApiKey::JoinGroup => JoinGroupRequest::decode(body, version).is_ok(),
            ApiKey::SyncGroup => SyncGroupRequest::decode(body, version).is_ok(),
            ApiKey::Heartbeat => HeartbeatRequest::decode(body, version).is_ok(),
            ApiKey::LeaveGroup => LeaveGroupRequest::decode(body, version).is_ok(),
            ApiKey::OffsetCommit => OffsetCommitRequest::decode(body, version).is_ok(),
            ApiKey::OffsetFetch => OffsetFetchRequest::decode(body, version).is_ok(),
            ApiKey::ListGroups => ListGroupsRequest::decode(body, version).is_ok(),
            ApiKey::DescribeGroups => DescribeGroupsRequest::decode(body, version).is_ok(),
            ApiKey::DeleteGroups => DeleteGroupsRequest::decode(body, version).is_ok(),
            other => panic!("no decoder for {other:?}"),
        }
    }

    /// xorshift64: a fixed, dependency-free sequence, so a failure replays.
    fn next(state: &mut u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    }

    /// Valid requests with bytes overwritten (a random byte, or four bytes of a large count)
    /// either fail the walk or decode to `Ok` or `Err`, never a panic or an abort: what the walk
    /// lets through, the codec handles.
    #[test]
    fn mutated_requests_never_panic_the_codec() {
        const MUTATIONS_PER_VERSION: usize = 500;
        let mut state = 0x5e91_0c4a_f00d_u64;
        for api in SUPPORTED_APIS {
            let api_key = ApiKey::try_from(api.api_key).unwrap();
            for version in api.min_version..=api.max_version {
                let valid = encoded(api_key, version);
                if valid.is_empty() {
                    continue;
                }
                for _ in 0..MUTATIONS_PER_VERSION {
                    let mut body = valid.clone();
                    let position = next(&mut state) as usize % body.len();
                    match next(&mut state) % 2 {
                        0 => body[position] = next(&mut state) as u8,
                        _ => {
                            let end = (position + 4).min(body.len());
                            let count = (next(&mut state) as u32 | 0x4000_0000).to_be_bytes();
                            body[position..end].copy_from_slice(&count[..end - position]);
                        }
                    }
                    if check(api_key, version, &body).is_ok() {
                        decodes(api_key, version, &body);
                    }
                }
            }
        }
    }
}
