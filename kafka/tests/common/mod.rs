//! A broker started in-process on `127.0.0.1:0` over a fresh engine, and a bare Kafka client that
//! encodes requests and decodes responses with the `kafka-protocol` crate (issue 44).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use seglog::engine::{Engine, EngineConfig};
use seglog::format::{BatchBuilder, NewRecord};
use seglog_kafka::{ServeConfig, ServeError, serve};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running broker; `stop` shuts it down and closes its engine.
pub struct Broker {
    pub address: SocketAddr,
    pub engine: Engine,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), ServeError>>,
    dir: TempDir,
}

impl Broker {
    pub async fn start(config: ServeConfig) -> Broker {
        Broker::start_in(tempfile::tempdir().unwrap(), config).await
    }

    /// A broker over the engine in `dir` (a restart, when `dir` held one before).
    pub async fn start_in(dir: TempDir, config: ServeConfig) -> Broker {
        let engine_config = EngineConfig::default()
            .with_shard_count(2)
            .with_pin_shards(false);
        let engine = Engine::open(dir.path(), engine_config).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
        };
        let task = tokio::spawn(serve(engine.clone(), listener, config, shutdown));
        Broker {
            address,
            engine,
            stop,
            task,
            dir,
        }
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.address).await
    }

    pub async fn stop(self) {
        self.stop_keeping_dir().await;
    }

    /// Stops the broker and closes its engine; the data directory stays for a restart.
    pub async fn stop_keeping_dir(self) -> TempDir {
        self.stop.send(()).unwrap();
        self.task.await.unwrap().unwrap();
        self.engine.close().unwrap();
        self.dir
    }
}

/// One connection, speaking one request at a time.
pub struct Client {
    pub stream: TcpStream,
    correlation_id: i32,
}

impl Client {
    pub async fn connect(address: SocketAddr) -> Client {
        let stream = TcpStream::connect(address).await.unwrap();
        Client {
            stream,
            correlation_id: 0,
        }
    }

    /// Sends `request` at `version` and returns its response.
    pub async fn call<R: Request>(&mut self, request: &R, version: i16) -> R::Response {
        let correlation_id = self.send(request, version).await;
        self.receive::<R>(version, correlation_id).await
    }

    /// Sends `request` at `version` without waiting; returns its correlation id.
    pub async fn send<R: Request>(&mut self, request: &R, version: i16) -> i32 {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("seglog-kafka-test")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, R::header_version(version))
            .unwrap();
        request.encode(&mut body, version).unwrap();
        self.send_frame(&body).await;
        self.correlation_id
    }

    pub async fn send_frame(&mut self, body: &[u8]) {
        let mut frame = BytesMut::new();
        frame.put_i32(body.len() as i32);
        frame.put_slice(body);
        self.stream.write_all(&frame).await.unwrap();
    }

    /// Reads the next response, which must answer `correlation_id`.
    pub async fn receive<R: Request>(&mut self, version: i16, correlation_id: i32) -> R::Response {
        let mut body = self
            .receive_frame()
            .await
            .expect("a response, not a closed connection");
        let header_version = <R::Response as HeaderVersion>::header_version(version);
        let header = ResponseHeader::decode(&mut body, header_version).unwrap();
        assert_eq!(header.correlation_id, correlation_id);
        let response = R::Response::decode(&mut body, version).unwrap();
        assert_eq!(body.remaining(), 0, "the whole frame is the response");
        response
    }

    /// The next frame's body; `None` when the broker closed the connection.
    pub async fn receive_frame(&mut self) -> Option<Bytes> {
        let mut size = [0u8; 4];
        if self.stream.read_exact(&mut size).await.is_err() {
            return None;
        }
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body).await.ok()?;
        Some(Bytes::from(body))
    }

    /// Whether the broker closed the connection: the next read finds its end.
    pub async fn is_closed_by_broker(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.stream.read(&mut byte).await, Ok(0) | Err(_))
    }
}

/// A batch of `count` records `key-i` / `value-i`, timestamps `timestamp_ms + i`.
pub fn batch(count: usize, timestamp_ms: i64) -> Bytes {
    idempotent_batch(count, timestamp_ms, (-1, -1, -1))
}

/// [`batch`] from an idempotent producer: `(producer id, epoch, first sequence)`.
pub fn idempotent_batch(count: usize, timestamp_ms: i64, producer: (i64, i16, i32)) -> Bytes {
    let mut builder = BatchBuilder::new(0).with_producer(producer.0, producer.1, producer.2);
    for i in 0..count {
        let key = format!("key-{i}");
        let value = format!("value-{i}");
        builder.push(&NewRecord {
            timestamp_ms: timestamp_ms + i as i64,
            key: Some(key.as_bytes()),
            value: Some(value.as_bytes()),
            headers: &[],
        });
    }
    builder.build().unwrap()
}
