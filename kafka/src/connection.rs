//! One client connection: read a request frame, answer it, in order, until the client leaves,
//! the connection idles past `connections.max.idle.ms`, a frame is bad, or the server stops.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreateTopicsRequest, DeleteRecordsRequest,
    DeleteTopicsRequest, DescribeConfigsRequest, FetchRequest, ListOffsetsRequest, MetadataRequest,
    ProduceRequest, RequestHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::api_versions;
use crate::broker::Broker;
use crate::error::ConnectionError;
use crate::frame::{read_frame, response_frame};
use crate::produce::ProduceOutcome;
use crate::shape_check;
use crate::{delete_records, describe_configs, fetch, list_offsets, metadata, produce, topics};

/// Every request header starts with API key (2 bytes), version (2) and correlation id (4),
/// whatever the header's version.
const HEADER_PREFIX_BYTES: usize = 8;

/// Serves one connection until it ends; why it ended is logged here, once.
pub(crate) async fn run(broker: Arc<Broker>, stream: TcpStream, stop: watch::Receiver<bool>) {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "an unknown peer".to_owned(), |peer| peer.to_string());
    match serve_requests(&broker, stream, stop).await {
        Ok(()) => log::debug!("connection from {peer} closed"),
        Err(error) => log::info!("connection from {peer} closed: {error}"),
    }
}

async fn serve_requests(
    broker: &Broker,
    stream: TcpStream,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ConnectionError> {
    stream.set_nodelay(true)?;
    let (reader, mut writer) = stream.into_split();
    let mut reader = BufReader::new(reader);
    let idle_ms = broker.config.connections_max_idle_ms;
    let size_max_bytes = broker.config.socket_request_max_bytes;
    loop {
        let frame = tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
            frame = tokio::time::timeout(
                Duration::from_millis(idle_ms),
                read_frame(&mut reader, size_max_bytes),
            ) => frame.map_err(|_elapsed| ConnectionError::Idle { idle_ms })?,
        };
        let Some(frame) = frame? else {
            return Ok(());
        };
        let Some(response) = answer(broker, frame).await? else {
            continue;
        };
        // Written first, even when stopping (the answer of a long-poll cut short by the stop
        // included); but a client that stops reading holds its response no longer than an idle
        // one, and does not hold up a stopping server.
        tokio::select! {
            biased;
            written = tokio::time::timeout(
                Duration::from_millis(idle_ms),
                writer.write_all(&response),
            ) => written.map_err(|_elapsed| ConnectionError::Idle { idle_ms })??,
            _ = stop.wait_for(|stopped| *stopped) => return Ok(()),
        }
    }
}

/// The response frame to one request frame; `None` when the request expects none (a produce
/// with `acks=0`).
async fn answer(broker: &Broker, mut frame: Bytes) -> Result<Option<Bytes>, ConnectionError> {
    if frame.len() < HEADER_PREFIX_BYTES {
        return Err(ConnectionError::HeaderTruncated {
            size_bytes: frame.len(),
        });
    }
    let api_key_code = frame.slice(0..2).get_i16();
    let version = frame.slice(2..4).get_i16();
    let api_key = ApiKey::try_from(api_key_code).map_err(|()| ConnectionError::UnknownApi {
        api_key: api_key_code,
    })?;
    if !api_versions::is_supported(api_key, version) {
        return refuse_version(api_key, version, &frame);
    }
    // A request header holds no array: the codec reserves nothing from it.
    let header = RequestHeader::decode(&mut frame, api_key.request_header_version(version))
        .map_err(|source| ConnectionError::Decode {
            api_key: api_key_code,
            version,
            source: source.into(),
        })?;
    answer_api(broker, api_key, version, header.correlation_id, frame).await
}

/// An unsupported version: ApiVersions answers `UNSUPPORTED_VERSION` with its table (encoded at
/// version 0, which every client reads); any other API closes the connection, as Kafka does.
fn refuse_version(
    api_key: ApiKey,
    version: i16,
    frame: &Bytes,
) -> Result<Option<Bytes>, ConnectionError> {
    if api_key != ApiKey::ApiVersions {
        return Err(ConnectionError::UnsupportedVersion {
            api_key: api_key as i16,
            version,
        });
    }
    let correlation_id = frame.slice(4..HEADER_PREFIX_BYTES).get_i32();
    let response = api_versions::answer(false);
    response_frame(api_key, 0, correlation_id, &response).map(Some)
}

async fn answer_api(
    broker: &Broker,
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    mut body: Bytes,
) -> Result<Option<Bytes>, ConnectionError> {
    let respond = |response: &dyn EncodeAt| response.frame(api_key, version, correlation_id);
    match api_key {
        ApiKey::ApiVersions => respond(&api_versions::answer(true)),
        ApiKey::Metadata => {
            let request = decode::<MetadataRequest>(&mut body, api_key, version)?;
            respond(&metadata::answer(broker, request, version).await)
        }
        ApiKey::Produce => {
            let request = decode::<ProduceRequest>(&mut body, api_key, version)?;
            match produce::answer(broker, request).await {
                ProduceOutcome::Answer(response) => respond(&response),
                ProduceOutcome::Unanswered => Ok(None),
                ProduceOutcome::UnansweredFailure(error) => {
                    Err(ConnectionError::UnansweredProduceFailed {
                        error_code: error.code(),
                    })
                }
            }
        }
        ApiKey::Fetch => {
            let request = decode::<FetchRequest>(&mut body, api_key, version)?;
            respond(&fetch::answer(broker, request).await)
        }
        ApiKey::ListOffsets => {
            let request = decode::<ListOffsetsRequest>(&mut body, api_key, version)?;
            respond(&list_offsets::answer(broker, request).await)
        }
        _ => answer_admin(broker, api_key, version, correlation_id, body).await,
    }
}

async fn answer_admin(
    broker: &Broker,
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    mut body: Bytes,
) -> Result<Option<Bytes>, ConnectionError> {
    let respond = |response: &dyn EncodeAt| response.frame(api_key, version, correlation_id);
    match api_key {
        ApiKey::CreateTopics => {
            let request = decode::<CreateTopicsRequest>(&mut body, api_key, version)?;
            respond(&topics::create(broker, request, version).await)
        }
        ApiKey::DeleteTopics => {
            let request = decode::<DeleteTopicsRequest>(&mut body, api_key, version)?;
            respond(&topics::delete(broker, request).await)
        }
        ApiKey::CreatePartitions => {
            let request = decode::<CreatePartitionsRequest>(&mut body, api_key, version)?;
            respond(&topics::create_partitions(broker, request).await)
        }
        ApiKey::DeleteRecords => {
            let request = decode::<DeleteRecordsRequest>(&mut body, api_key, version)?;
            respond(&delete_records::answer(broker, request).await)
        }
        ApiKey::DescribeConfigs => {
            let request = decode::<DescribeConfigsRequest>(&mut body, api_key, version)?;
            respond(&describe_configs::answer(broker, request).await)
        }
        // `is_supported` let only the APIs above through.
        _ => Err(ConnectionError::UnsupportedVersion {
            api_key: api_key as i16,
            version,
        }),
    }
}

/// Decodes a request body, once its arrays passed `shape_check` (the codec would reserve memory
/// for whatever count a peer claims).
fn decode<T: Decodable>(
    body: &mut Bytes,
    api_key: ApiKey,
    version: i16,
) -> Result<T, ConnectionError> {
    shape_check::check(api_key, version, body).map_err(|source| ConnectionError::Shape {
        api_key: api_key as i16,
        version,
        source,
    })?;
    T::decode(body, version).map_err(|source| ConnectionError::Decode {
        api_key: api_key as i16,
        version,
        source: source.into(),
    })
}

/// A response of any API, framed at the request's version.
trait EncodeAt {
    fn frame(
        &self,
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
    ) -> Result<Option<Bytes>, ConnectionError>;
}

impl<R: Encodable> EncodeAt for R {
    fn frame(
        &self,
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
    ) -> Result<Option<Bytes>, ConnectionError> {
        response_frame(api_key, version, correlation_id, self).map(Some)
    }
}
