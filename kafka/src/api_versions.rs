//! ApiVersions: what this broker implements, at which versions. A client picks, for each API,
//! the highest version both sides support, so this table is the truth: nothing is listed that is
//! not answered.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};

/// One API this broker answers, with the versions it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupportedApi {
    /// Kafka's API key.
    pub api_key: i16,
    /// Kafka's name for the API.
    pub name: &'static str,
    /// The lowest version answered.
    pub min_version: i16,
    /// The highest version answered.
    pub max_version: i16,
}

const fn api(key: ApiKey, name: &'static str, min_version: i16, max_version: i16) -> SupportedApi {
    SupportedApi {
        api_key: key as i16,
        name,
        min_version,
        max_version,
    }
}

/// Every API this broker answers. The upper bounds stop where a version needs what is not built:
/// Produce 13 and Fetch 13 name topics by id only; ListOffsets 7 asks for the offset of the
/// largest timestamp; FindCoordinator 4 batches keys; JoinGroup 9 lets a static leader skip
/// assigning; SyncGroup 5 checks the protocol type and name; OffsetCommit 9 and OffsetFetch 8
/// serve the new group protocol and batched groups.
pub const SUPPORTED_APIS: &[SupportedApi] = &[
    api(ApiKey::Produce, "Produce", 3, 12),
    api(ApiKey::Fetch, "Fetch", 4, 12),
    api(ApiKey::ListOffsets, "ListOffsets", 1, 6),
    api(ApiKey::Metadata, "Metadata", 0, 12),
    api(ApiKey::ApiVersions, "ApiVersions", 0, 4),
    api(ApiKey::CreateTopics, "CreateTopics", 2, 7),
    api(ApiKey::DeleteTopics, "DeleteTopics", 1, 6),
    api(ApiKey::CreatePartitions, "CreatePartitions", 0, 3),
    api(ApiKey::DeleteRecords, "DeleteRecords", 0, 2),
    api(ApiKey::DescribeConfigs, "DescribeConfigs", 1, 4),
    api(ApiKey::InitProducerId, "InitProducerId", 0, 5),
    api(
        ApiKey::IncrementalAlterConfigs,
        "IncrementalAlterConfigs",
        0,
        1,
    ),
    api(ApiKey::FindCoordinator, "FindCoordinator", 0, 3),
    api(ApiKey::JoinGroup, "JoinGroup", 0, 8),
    api(ApiKey::SyncGroup, "SyncGroup", 0, 4),
    api(ApiKey::Heartbeat, "Heartbeat", 0, 4),
    api(ApiKey::LeaveGroup, "LeaveGroup", 0, 5),
    api(ApiKey::OffsetCommit, "OffsetCommit", 2, 8),
    api(ApiKey::OffsetFetch, "OffsetFetch", 1, 7),
    api(ApiKey::ListGroups, "ListGroups", 0, 4),
    api(ApiKey::DescribeGroups, "DescribeGroups", 0, 5),
    api(ApiKey::DeleteGroups, "DeleteGroups", 0, 2),
];

/// Whether `version` of `api_key` is answered.
pub(crate) fn is_supported(api_key: ApiKey, version: i16) -> bool {
    SUPPORTED_APIS.iter().any(|api| {
        api.api_key == api_key as i16 && (api.min_version..=api.max_version).contains(&version)
    })
}

/// The answer to ApiVersions: the table, and `UNSUPPORTED_VERSION` when the request's own version
/// is not answered (the client then retries at a version from the table, encoded as version 0).
pub(crate) fn answer(request_version_supported: bool) -> ApiVersionsResponse {
    let error_code = match request_version_supported {
        true => 0,
        false => ResponseError::UnsupportedVersion.code(),
    };
    let api_keys = SUPPORTED_APIS
        .iter()
        .map(|api| {
            ApiVersion::default()
                .with_api_key(api.api_key)
                .with_min_version(api.min_version)
                .with_max_version(api.max_version)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::Message;

    /// Every listed version is one the codec handles, so no listed request fails to decode for
    /// want of a version.
    #[test]
    fn every_listed_version_is_within_the_codecs() {
        for api in SUPPORTED_APIS {
            let key = ApiKey::try_from(api.api_key).unwrap();
            let codec = key.valid_versions();
            assert!(codec.min <= api.min_version, "{}", api.name);
            assert!(api.max_version <= codec.max, "{}", api.name);
            assert!(api.min_version <= api.max_version, "{}", api.name);
        }
        assert_eq!(
            kafka_protocol::messages::ApiVersionsRequest::VERSIONS.max,
            4
        );
    }
}
