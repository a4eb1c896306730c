//! One client connection: read request frames and answer them, in order, until the client
//! leaves, the connection idles past `connections.max.idle.ms`, a frame is bad, or the server
//! stops. Produce requests are pipelined: up to [`PRODUCES_IN_FLIGHT_MAX`] are sent to the
//! engine before the first is answered; any other request waits for them.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreateTopicsRequest, DeleteGroupsRequest,
    DeleteRecordsRequest, DeleteTopicsRequest, DescribeConfigsRequest, DescribeGroupsRequest,
    FetchRequest, FindCoordinatorRequest, HeartbeatRequest, IncrementalAlterConfigsRequest,
    InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest, ListGroupsRequest,
    ListOffsetsRequest, MetadataRequest, OffsetCommitRequest, OffsetFetchRequest, ProduceRequest,
    RequestHeader, SyncGroupRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::api_versions;
use crate::broker::Broker;
use crate::error::ConnectionError;
use crate::fetch_frame::fetch_response_frame;
use crate::frame::{ResponseFrame, read_frame, response_frame};
use crate::produce::ProduceOutcome;
use crate::shape_check;
use crate::{
    alter_configs, delete_records, describe_configs, fetch, groups, init_producer_id, list_offsets,
    metadata, offsets, produce, topics,
};

/// Every request header starts with API key (2 bytes), version (2) and correlation id (4),
/// whatever the header's version.
const HEADER_PREFIX_BYTES: usize = 8;

/// Serves one connection until it ends; why it ended is logged here, once.
pub(crate) async fn run(broker: Arc<Broker>, stream: TcpStream, stop: watch::Receiver<bool>) {
    let peer_ip = stream.peer_addr().ok().map(|peer| peer.ip());
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "an unknown peer".to_owned(), |peer| peer.to_string());
    // Kafka's form of a group member's `client_host`.
    let client_host = peer_ip.map_or_else(String::new, |ip| format!("/{ip}"));
    match serve_requests(&broker, stream, stop, &client_host).await {
        Ok(()) => tracing::debug!("connection from {peer} closed"),
        Err(error) => tracing::info!("connection from {peer} closed: {error}"),
    }
}

/// Produce requests a connection keeps in flight: read and sent to the engine, their answers not
/// yet written. The next request is read while they are written; answers go out in order.
const PRODUCES_IN_FLIGHT_MAX: usize = 16;

/// A request being answered, the response frame to come (`None`: nothing to send).
type Answer = Pin<Box<dyn Future<Output = Result<Option<ResponseFrame>, ConnectionError>> + Send>>;

/// What the connection's loop waits for.
enum Event {
    Stopped,
    Idle,
    Answered(Result<Option<ResponseFrame>, ConnectionError>),
    Frame(Option<Result<Bytes, ConnectionError>>),
}

async fn serve_requests(
    broker: &Broker,
    stream: TcpStream,
    mut stop: watch::Receiver<bool>,
    client_host: &str,
) -> Result<(), ConnectionError> {
    stream.set_nodelay(true)?;
    let (reader, mut writer) = stream.into_split();
    let idle_ms = broker.config.connections_max_idle_ms;
    // Frames are read on a task of their own: a read cut off half way would lose its bytes.
    let (frames_sender, mut frames) = mpsc::channel(1);
    let reading = tokio::spawn(read_frames(
        reader,
        broker.config.socket_request_max_bytes,
        frames_sender,
    ));
    let _reading = AbortOnDrop(reading);
    let mut in_flight: VecDeque<Answer> = VecDeque::new();
    loop {
        let event = tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => Event::Stopped,
            answered = first(&mut in_flight), if !in_flight.is_empty() => Event::Answered(answered),
            frame = frames.recv(), if in_flight.len() < PRODUCES_IN_FLIGHT_MAX => Event::Frame(frame),
            () = tokio::time::sleep(Duration::from_millis(idle_ms)), if in_flight.is_empty() => {
                Event::Idle
            }
        };
        match event {
            Event::Stopped => return Ok(()),
            Event::Idle => return Err(ConnectionError::Idle { idle_ms }),
            Event::Answered(answer) => {
                in_flight.pop_front();
                if !write_answer(&mut writer, answer?, idle_ms, &mut stop).await? {
                    return Ok(());
                }
            }
            // The client is gone: what it sent is still answered, in case it only closed its
            // sending half.
            Event::Frame(None) => {
                drain(&mut in_flight, &mut writer, idle_ms, &mut stop).await?;
                return Ok(());
            }
            Event::Frame(Some(frame)) => match start(broker, frame?).await? {
                Started::InFlight(answer) => in_flight.push_back(answer),
                Started::Inline(frame) => {
                    // Any other request sees every produce before it applied.
                    if !drain(&mut in_flight, &mut writer, idle_ms, &mut stop).await? {
                        return Ok(());
                    }
                    let answer = answer(broker, frame, client_host).await?;
                    if !write_answer(&mut writer, answer, idle_ms, &mut stop).await? {
                        return Ok(());
                    }
                }
            },
        }
    }
}

/// Reads request frames into `frames` until the peer closes (the channel then closes) or a
/// frame is bad (sent as the last item).
async fn read_frames(
    reader: OwnedReadHalf,
    size_max_bytes: u32,
    frames: mpsc::Sender<Result<Bytes, ConnectionError>>,
) {
    let mut reader = BufReader::new(reader);
    loop {
        let frame = match read_frame(&mut reader, size_max_bytes).await {
            Ok(Some(frame)) => Ok(frame),
            Ok(None) => return,
            Err(error) => Err(error),
        };
        let failed = frame.is_err();
        if frames.send(frame).await.is_err() || failed {
            return;
        }
    }
}

/// Aborts the task when dropped: the reader ends with its connection.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The oldest request's answer, once it is ready.
async fn first(in_flight: &mut VecDeque<Answer>) -> Result<Option<ResponseFrame>, ConnectionError> {
    match in_flight.front_mut() {
        Some(answer) => answer.as_mut().await,
        None => std::future::pending().await,
    }
}

/// Writes every answer in flight, in order. `false`: the server stopped meanwhile.
async fn drain(
    in_flight: &mut VecDeque<Answer>,
    writer: &mut OwnedWriteHalf,
    idle_ms: u64,
    stop: &mut watch::Receiver<bool>,
) -> Result<bool, ConnectionError> {
    while let Some(answer) = in_flight.pop_front() {
        if !write_answer(writer, answer.await?, idle_ms, stop).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes `response`, if any. `false`: the server stopped first.
///
/// Written first, even when stopping (the answer of a long-poll cut short by the stop
/// included); but a client that stops reading holds its response no longer than an idle one,
/// and does not hold up a stopping server.
async fn write_answer(
    writer: &mut OwnedWriteHalf,
    response: Option<ResponseFrame>,
    idle_ms: u64,
    stop: &mut watch::Receiver<bool>,
) -> Result<bool, ConnectionError> {
    let Some(mut response) = response else {
        return Ok(true);
    };
    tokio::select! {
        biased;
        written = tokio::time::timeout(
            Duration::from_millis(idle_ms),
            write_pieces(writer, &mut response),
        ) => {
            written.map_err(|_elapsed| ConnectionError::Idle { idle_ms })??;
            Ok(true)
        }
        _ = stop.wait_for(|stopped| *stopped) => Ok(false),
    }
}

/// Writes every piece, in order, with as few (vectored) writes as the socket takes them in.
async fn write_pieces(writer: &mut OwnedWriteHalf, pieces: &mut [Bytes]) -> std::io::Result<()> {
    /// More slices than a `writev` takes at once are written in the next call.
    const SLICES_PER_WRITE_MAX: usize = 64;
    let mut first = 0;
    loop {
        while pieces.get(first).is_some_and(Bytes::is_empty) {
            first += 1;
        }
        let Some(rest) = pieces.get_mut(first..).filter(|rest| !rest.is_empty()) else {
            return Ok(());
        };
        let slices: Vec<std::io::IoSlice<'_>> = rest
            .iter()
            .take(SLICES_PER_WRITE_MAX)
            .map(|piece| std::io::IoSlice::new(piece))
            .collect();
        let mut written = writer.write_vectored(&slices).await?;
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        for piece in rest.iter_mut() {
            let advanced = written.min(piece.len());
            piece.advance(advanced);
            written -= advanced;
            if written == 0 {
                break;
            }
        }
    }
}

/// How a request is answered: a produce is sent to the engine now and answered later, in
/// order; any other request is answered once every produce before it was.
enum Started {
    InFlight(Answer),
    Inline(Bytes),
}

async fn start(broker: &Broker, frame: Bytes) -> Result<Started, ConnectionError> {
    let Some((api_key, version)) = api_and_version(&frame) else {
        return Ok(Started::Inline(frame));
    };
    if api_key != ApiKey::Produce || !api_versions::is_supported(api_key, version) {
        return Ok(Started::Inline(frame));
    }
    let mut body = frame;
    let header = decode_header(&mut body, api_key, version)?;
    let request = decode::<ProduceRequest>(&mut body, api_key, version)?;
    let settled = produce::submit(broker, request).await;
    let correlation_id = header.correlation_id;
    Ok(Started::InFlight(Box::pin(async move {
        match settled.await {
            ProduceOutcome::Answer(response) => response.frame(api_key, version, correlation_id),
            ProduceOutcome::Unanswered => Ok(None),
            ProduceOutcome::UnansweredFailure(error) => {
                Err(ConnectionError::UnansweredProduceFailed {
                    error_code: error.code(),
                })
            }
        }
    })))
}

/// The API key and version of a frame, if it holds a whole header prefix naming a known API.
fn api_and_version(frame: &Bytes) -> Option<(ApiKey, i16)> {
    if frame.len() < HEADER_PREFIX_BYTES {
        return None;
    }
    let api_key = ApiKey::try_from(frame.slice(0..2).get_i16()).ok()?;
    Some((api_key, frame.slice(2..4).get_i16()))
}

fn decode_header(
    frame: &mut Bytes,
    api_key: ApiKey,
    version: i16,
) -> Result<RequestHeader, ConnectionError> {
    // A request header holds no array: the codec reserves nothing from it.
    RequestHeader::decode(frame, api_key.request_header_version(version)).map_err(|source| {
        ConnectionError::Decode {
            api_key: api_key as i16,
            version,
            source: source.into(),
        }
    })
}

/// The response frame to one request frame; `None` when the request expects none (a produce
/// with `acks=0`).
async fn answer(
    broker: &Broker,
    mut frame: Bytes,
    client_host: &str,
) -> Result<Option<ResponseFrame>, ConnectionError> {
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
    let header = decode_header(&mut frame, api_key, version)?;
    if is_group_api(api_key) {
        let client = Client {
            header: &header,
            host: client_host,
        };
        return answer_group(broker, api_key, version, client, frame).await;
    }
    answer_api(broker, api_key, version, header.correlation_id, frame).await
}

/// An unsupported version: ApiVersions answers `UNSUPPORTED_VERSION` with its table (encoded at
/// version 0, which every client reads); any other API closes the connection, as Kafka does.
fn refuse_version(
    api_key: ApiKey,
    version: i16,
    frame: &Bytes,
) -> Result<Option<ResponseFrame>, ConnectionError> {
    if api_key != ApiKey::ApiVersions {
        return Err(ConnectionError::UnsupportedVersion {
            api_key: api_key as i16,
            version,
        });
    }
    let correlation_id = frame.slice(4..HEADER_PREFIX_BYTES).get_i32();
    let response = api_versions::answer(false);
    response_frame(api_key, 0, correlation_id, &response).map(|frame| Some(vec![frame]))
}

async fn answer_api(
    broker: &Broker,
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    mut body: Bytes,
) -> Result<Option<ResponseFrame>, ConnectionError> {
    let respond = |response: &dyn EncodeAt| response.frame(api_key, version, correlation_id);
    match api_key {
        ApiKey::ApiVersions => respond(&api_versions::answer(true)),
        ApiKey::Metadata => {
            let request = decode::<MetadataRequest>(&mut body, api_key, version)?;
            respond(&metadata::answer(broker, request, version).await)
        }
        ApiKey::Produce => {
            let request = decode::<ProduceRequest>(&mut body, api_key, version)?;
            match produce::submit(broker, request).await.await {
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
            let response = fetch::answer(broker, request).await;
            fetch_response_frame(api_key, version, correlation_id, response).map(Some)
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
) -> Result<Option<ResponseFrame>, ConnectionError> {
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
        ApiKey::InitProducerId => {
            let request = decode::<InitProducerIdRequest>(&mut body, api_key, version)?;
            respond(&init_producer_id::answer(broker, request).await)
        }
        ApiKey::IncrementalAlterConfigs => {
            let request = decode::<IncrementalAlterConfigsRequest>(&mut body, api_key, version)?;
            respond(&alter_configs::answer(broker, request).await)
        }
        // `is_supported` let only the APIs above through.
        _ => Err(ConnectionError::UnsupportedVersion {
            api_key: api_key as i16,
            version,
        }),
    }
}

fn is_group_api(api_key: ApiKey) -> bool {
    matches!(
        api_key,
        ApiKey::FindCoordinator
            | ApiKey::JoinGroup
            | ApiKey::SyncGroup
            | ApiKey::Heartbeat
            | ApiKey::LeaveGroup
            | ApiKey::OffsetCommit
            | ApiKey::OffsetFetch
            | ApiKey::ListGroups
            | ApiKey::DescribeGroups
            | ApiKey::DeleteGroups
    )
}

/// Who sent a request: its header, and the host it came from.
#[derive(Clone, Copy)]
struct Client<'a> {
    header: &'a RequestHeader,
    host: &'a str,
}

/// The group APIs; a JoinGroup or SyncGroup may wait for the rest of its group.
async fn answer_group(
    broker: &Broker,
    api_key: ApiKey,
    version: i16,
    client: Client<'_>,
    mut body: Bytes,
) -> Result<Option<ResponseFrame>, ConnectionError> {
    let header = client.header;
    let respond = |response: &dyn EncodeAt| response.frame(api_key, version, header.correlation_id);
    match api_key {
        ApiKey::FindCoordinator => {
            let request = decode::<FindCoordinatorRequest>(&mut body, api_key, version)?;
            respond(&groups::find_coordinator(broker, &request))
        }
        ApiKey::JoinGroup => {
            let request = decode::<JoinGroupRequest>(&mut body, api_key, version)?;
            let member = groups::Joining {
                client_id: header.client_id.as_ref().map_or("", |id| id.as_str()),
                client_host: client.host,
            };
            respond(&groups::join(broker, request, version, member).await)
        }
        ApiKey::SyncGroup => {
            let request = decode::<SyncGroupRequest>(&mut body, api_key, version)?;
            respond(&groups::sync(broker, request).await)
        }
        ApiKey::Heartbeat => {
            let request = decode::<HeartbeatRequest>(&mut body, api_key, version)?;
            respond(&groups::heartbeat(broker, &request))
        }
        ApiKey::LeaveGroup => {
            let request = decode::<LeaveGroupRequest>(&mut body, api_key, version)?;
            respond(&groups::leave(broker, &request, version))
        }
        _ => answer_offsets(broker, api_key, version, header.correlation_id, body).await,
    }
}

async fn answer_offsets(
    broker: &Broker,
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    mut body: Bytes,
) -> Result<Option<ResponseFrame>, ConnectionError> {
    let respond = |response: &dyn EncodeAt| response.frame(api_key, version, correlation_id);
    match api_key {
        ApiKey::OffsetCommit => {
            let request = decode::<OffsetCommitRequest>(&mut body, api_key, version)?;
            respond(&offsets::commit(broker, request).await)
        }
        ApiKey::OffsetFetch => {
            let request = decode::<OffsetFetchRequest>(&mut body, api_key, version)?;
            respond(&offsets::fetch(broker, request).await)
        }
        ApiKey::ListGroups => {
            let request = decode::<ListGroupsRequest>(&mut body, api_key, version)?;
            respond(&offsets::list(broker, &request).await)
        }
        ApiKey::DescribeGroups => {
            let request = decode::<DescribeGroupsRequest>(&mut body, api_key, version)?;
            respond(&offsets::describe(broker, request).await)
        }
        ApiKey::DeleteGroups => {
            let request = decode::<DeleteGroupsRequest>(&mut body, api_key, version)?;
            respond(&offsets::delete(broker, request).await)
        }
        // `is_group_api` let only the group APIs through.
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
    ) -> Result<Option<ResponseFrame>, ConnectionError>;
}

impl<R: Encodable> EncodeAt for R {
    fn frame(
        &self,
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
    ) -> Result<Option<ResponseFrame>, ConnectionError> {
        response_frame(api_key, version, correlation_id, self).map(|frame| Some(vec![frame]))
    }
}
