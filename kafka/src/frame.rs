//! Kafka's framing: a 4-byte big-endian size, then that many bytes of request or response.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, ResponseHeader};
use kafka_protocol::protocol::Encodable;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::error::ConnectionError;

/// A response frame as the pieces written, in order, by one vectored write: one buffer, or a
/// fetch's encoded fields between the record batches the engine read (`fetch_frame.rs`).
pub(crate) type ResponseFrame = Vec<Bytes>;

/// The bytes of a frame's size prefix.
const SIZE_PREFIX_BYTES: usize = 4;
/// The most a frame's body is given room for before its bytes arrive.
const FRAME_RESERVE_BYTES_MAX: usize = 1024 * 1024;

/// Reads one request frame. `None`: the peer closed the connection between frames. The body is
/// read as it arrives; no more than [`FRAME_RESERVE_BYTES_MAX`] is allocated ahead of the bytes a
/// peer claims.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    size_max_bytes: u32,
) -> Result<Option<Bytes>, ConnectionError> {
    let mut prefix = [0u8; SIZE_PREFIX_BYTES];
    match reader.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error.into()),
    }
    let size_bytes = i32::from_be_bytes(prefix);
    let size_bytes = u32::try_from(size_bytes)
        .ok()
        .filter(|size| (1..=size_max_bytes).contains(size))
        .ok_or(ConnectionError::FrameSize {
            size_bytes: i64::from(size_bytes),
            size_max_bytes,
        })?;
    // Room for the body up to a bound: a frame of that size or less is read straight into it,
    // and a peer that claims more without sending it holds no more than the bound.
    let mut body = Vec::with_capacity((size_bytes as usize).min(FRAME_RESERVE_BYTES_MAX));
    reader
        .take(u64::from(size_bytes))
        .read_to_end(&mut body)
        .await?;
    if body.len() != size_bytes as usize {
        return Err(ConnectionError::FrameTruncated {
            size_bytes,
            received_bytes: body.len(),
        });
    }
    Ok(Some(Bytes::from(body)))
}

/// A whole response frame: size, the response header of the version `api_key` and `version`
/// call for, and `response` encoded at `version`.
pub(crate) fn response_frame<R: Encodable>(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    response: &R,
) -> Result<Bytes, ConnectionError> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = api_key.response_header_version(version);
    // Sized once: a fetch response is mostly record batches, copied in whole.
    let size_bytes = header
        .compute_size(header_version)
        .and_then(|header_bytes| Ok(header_bytes + response.compute_size(version)?));
    let mut frame = BytesMut::with_capacity(SIZE_PREFIX_BYTES + size_bytes.unwrap_or(0));
    frame.put_i32(0);
    let encoded = header
        .encode(&mut frame, header_version)
        .and_then(|()| response.encode(&mut frame, version));
    if let Err(source) = encoded {
        return Err(ConnectionError::Encode {
            api_key: api_key as i16,
            version,
            source: source.into(),
        });
    }
    let body_bytes = frame.len() - SIZE_PREFIX_BYTES;
    let size_bytes = i32::try_from(body_bytes)
        .ok()
        .ok_or(ConnectionError::ResponseTooLarge { body_bytes })?;
    frame[..SIZE_PREFIX_BYTES].copy_from_slice(&size_bytes.to_be_bytes());
    Ok(frame.freeze())
}
