//! Why `serve` stops, and why a connection closes.

use std::io;

use thiserror::Error;

/// Why [`serve`](crate::serve) could not run.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The listener's own address, which Metadata advertises, cannot be read.
    #[error("cannot read the listener's address: {source}")]
    ListenerAddress {
        /// The socket error.
        #[source]
        source: io::Error,
    },
}

/// A decoder's or encoder's error, from the `kafka-protocol` crate.
pub(crate) type CodecError = Box<dyn std::error::Error + Send + Sync>;

/// Why a connection was closed. Logged where the connection ends, never sent: Kafka's protocol
/// has no answer for a request that cannot be read.
#[derive(Debug, Error)]
pub(crate) enum ConnectionError {
    #[error("socket error: {source}")]
    Io {
        #[from]
        source: io::Error,
    },
    #[error(
        "request frame of {size_bytes} bytes is outside 1..={size_max_bytes} (socket.request.max.bytes)"
    )]
    FrameSize {
        size_bytes: i64,
        size_max_bytes: u32,
    },
    #[error("the peer closed the connection {received_bytes} bytes into a {size_bytes}-byte frame")]
    FrameTruncated {
        size_bytes: u32,
        received_bytes: usize,
    },
    #[error("no whole request for {idle_ms} ms (connections.max.idle.ms)")]
    Idle { idle_ms: u64 },
    #[error("request frame of {size_bytes} bytes is too short for a request header")]
    HeaderTruncated { size_bytes: usize },
    #[error("unknown API key {api_key}")]
    UnknownApi { api_key: i16 },
    #[error("API {api_key} version {version} is not supported")]
    UnsupportedVersion { api_key: i16, version: i16 },
    #[error("API {api_key} version {version} request is malformed: {source}")]
    Shape {
        api_key: i16,
        version: i16,
        #[source]
        source: crate::shape_check::ShapeError,
    },
    #[error("API {api_key} version {version} request does not decode: {source}")]
    Decode {
        api_key: i16,
        version: i16,
        #[source]
        source: CodecError,
    },
    #[error("a produce with acks=0 failed with error code {error_code}: closed to tell the client")]
    UnansweredProduceFailed { error_code: i16 },
    #[error("a response of {body_bytes} bytes does not fit a frame")]
    ResponseTooLarge { body_bytes: usize },
    #[error("API {api_key} version {version} response does not encode: {source}")]
    Encode {
        api_key: i16,
        version: i16,
        #[source]
        source: CodecError,
    },
}
