//! A Fetch response framed without copying its record batches: they go to the socket from the
//! buffers the engine read them into.
//!
//! `kafka-protocol` encodes a response into one buffer, and a `BufMut` that kept references
//! instead of copying would need `unsafe` (the trait's `advance_mut`). So each partition's
//! records of at least [`SHARED_RECORDS_BYTES_MIN`] are swapped for a marker (16 bytes random to
//! this process, then the partition's index) before encoding; the encoded frame (a few bytes per
//! partition) is cut at each marker and the batches put back in its place, with their own
//! length prefix, as pieces written by one vectored write. A marker not found right after the
//! length prefix it should have (a client's topic name holding those bytes, say) makes the frame
//! be encoded whole instead, as before: never a wrong frame.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::fetch_response::FetchResponse;

use crate::error::ConnectionError;
use crate::frame::{ResponseFrame, response_frame};

/// Records shorter than this are copied into the frame: a piece of its own costs more.
pub(crate) const SHARED_RECORDS_BYTES_MIN: usize = 16 * 1024;

/// The first version of Fetch that encodes compactly (records: a varint length + 1).
const FLEXIBLE_FROM_VERSION: i16 = 12;

const MARKER_RANDOM_BYTES: usize = 16;
const MARKER_BYTES: usize = MARKER_RANDOM_BYTES + 4;

/// `response` framed at `version`, its larger record sets as pieces of their own.
pub(crate) fn fetch_response_frame(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    mut response: FetchResponse,
) -> Result<ResponseFrame, ConnectionError> {
    let taken = take_records(&mut response);
    if taken.is_empty() {
        return response_frame(api_key, version, correlation_id, &response)
            .map(|frame| vec![frame]);
    }
    let encoded = response_frame(api_key, version, correlation_id, &response)?;
    match splice(&encoded, &taken, version >= FLEXIBLE_FROM_VERSION) {
        Some(pieces) => Ok(pieces),
        None => {
            put_back(&mut response, taken);
            response_frame(api_key, version, correlation_id, &response).map(|frame| vec![frame])
        }
    }
}

/// This process's marker bytes: random, so no client can send them on purpose.
fn marker_random() -> &'static [u8; MARKER_RANDOM_BYTES] {
    static RANDOM: OnceLock<[u8; MARKER_RANDOM_BYTES]> = OnceLock::new();
    RANDOM.get_or_init(|| {
        let state = std::collections::hash_map::RandomState::new();
        let mut bytes = [0u8; MARKER_RANDOM_BYTES];
        for (index, chunk) in bytes.chunks_mut(8).enumerate() {
            let mut hasher = state.build_hasher();
            hasher.write_usize(index);
            chunk.copy_from_slice(&hasher.finish().to_le_bytes());
        }
        bytes
    })
}

fn marker(index: usize) -> Bytes {
    let mut marker = BytesMut::with_capacity(MARKER_BYTES);
    marker.put_slice(marker_random());
    marker.put_u32(u32::try_from(index).unwrap_or(u32::MAX));
    marker.freeze()
}

/// Swaps every partition's records of at least [`SHARED_RECORDS_BYTES_MIN`] for its marker, in
/// encoding order; returns the records taken.
fn take_records(response: &mut FetchResponse) -> Vec<Bytes> {
    let mut taken = Vec::new();
    let partitions = response
        .responses
        .iter_mut()
        .flat_map(|topic| topic.partitions.iter_mut());
    for partition in partitions {
        let shared = partition
            .records
            .as_ref()
            .is_some_and(|records| records.len() >= SHARED_RECORDS_BYTES_MIN);
        if shared {
            let records = partition.records.replace(marker(taken.len()));
            taken.extend(records);
        }
    }
    taken
}

/// Undoes [`take_records`].
fn put_back(response: &mut FetchResponse, taken: Vec<Bytes>) {
    let mut taken = taken.into_iter();
    let partitions = response
        .responses
        .iter_mut()
        .flat_map(|topic| topic.partitions.iter_mut());
    for partition in partitions {
        let is_marker = partition.records.as_ref().is_some_and(|records| {
            records.len() == MARKER_BYTES && records.starts_with(marker_random())
        });
        if is_marker {
            partition.records = taken.next();
        }
    }
}

/// The length prefix of `length` bytes of records.
fn length_prefix(length: usize, flexible: bool) -> Option<Bytes> {
    let mut prefix = BytesMut::with_capacity(5);
    match flexible {
        true => {
            let mut value = u32::try_from(length.checked_add(1)?).ok()?;
            while value >= 0x80 {
                prefix.put_u8((value as u8 & 0x7f) | 0x80);
                value >>= 7;
            }
            prefix.put_u8(value as u8);
        }
        false => prefix.put_i32(i32::try_from(length).ok()?),
    }
    Some(prefix.freeze())
}

/// The pieces of the frame with each marker (and its prefix) replaced by the records it stands
/// for; `None` when a marker is not where the encoding puts one.
fn splice(encoded: &Bytes, taken: &[Bytes], flexible: bool) -> Option<ResponseFrame> {
    let marker_prefix = length_prefix(MARKER_BYTES, flexible)?;
    let mut pieces = Vec::with_capacity(taken.len() * 3 + 2);
    let mut body_bytes = encoded.len().checked_sub(4)?;
    let mut cursor = 4;
    for (index, records) in taken.iter().enumerate() {
        let at_marker = cursor + find(encoded.get(cursor..)?, &marker(index))?;
        let prefix_start = at_marker.checked_sub(marker_prefix.len())?;
        if prefix_start < cursor || encoded.get(prefix_start..at_marker)? != &marker_prefix[..] {
            return None;
        }
        let prefix = length_prefix(records.len(), flexible)?;
        body_bytes = body_bytes - marker_prefix.len() - MARKER_BYTES + prefix.len() + records.len();
        pieces.push(encoded.slice(cursor..prefix_start));
        pieces.push(prefix);
        pieces.push(records.clone());
        cursor = at_marker + MARKER_BYTES;
    }
    pieces.push(encoded.slice(cursor..));
    let size = i32::try_from(body_bytes).ok()?;
    pieces.insert(0, Bytes::copy_from_slice(&size.to_be_bytes()));
    Some(pieces)
}

/// Where `needle` first occurs in `haystack` (the encoded frame without its large records: a
/// few bytes per partition).
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::protocol::StrBytes;

    fn response(topic: &str, records: &[usize]) -> FetchResponse {
        let partitions = records
            .iter()
            .enumerate()
            .map(|(index, bytes)| {
                let fill = u8::try_from(index + 1).unwrap();
                PartitionData::default()
                    .with_partition_index(i32::try_from(index).unwrap())
                    .with_high_watermark(7)
                    .with_records(Some(Bytes::from(vec![fill; *bytes])))
            })
            .collect();
        let topic = FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(partitions);
        FetchResponse::default().with_responses(vec![topic])
    }

    fn joined(pieces: &[Bytes]) -> Vec<u8> {
        pieces
            .iter()
            .flat_map(|piece| piece.iter().copied())
            .collect()
    }

    /// The pieces are, byte for byte, the frame encoded whole, at every version answered, with
    /// large, small and empty record sets (lengths that need 3-byte varints included).
    #[test]
    fn the_pieces_are_the_frame_encoded_whole() {
        let sizes = [70_000, 10, 0, SHARED_RECORDS_BYTES_MIN, 2_100_000];
        for version in 4..=12 {
            let whole = response_frame(ApiKey::Fetch, version, 9, &response("t", &sizes)).unwrap();
            let pieces =
                fetch_response_frame(ApiKey::Fetch, version, 9, response("t", &sizes)).unwrap();
            assert!(pieces.len() > 1, "v{version}: records were shared");
            assert_eq!(joined(&pieces), whole.to_vec(), "v{version}");
        }
    }

    /// Records holding a marker's bytes ahead of where it is put make the frame be encoded
    /// whole: still right.
    #[test]
    fn a_marker_found_elsewhere_falls_back_to_the_whole_frame() {
        let mut carrier = vec![0xaa];
        carrier.extend_from_slice(&marker(0));
        for version in [4, 12] {
            let build = || {
                let mut built = response("t", &[1, 40_000]);
                built.responses[0].partitions[0].records = Some(Bytes::from(carrier.clone()));
                built
            };
            let whole = response_frame(ApiKey::Fetch, version, 3, &build()).unwrap();
            let pieces = fetch_response_frame(ApiKey::Fetch, version, 3, build()).unwrap();
            assert_eq!(pieces.len(), 1, "v{version}: encoded whole");
            assert_eq!(joined(&pieces), whole.to_vec(), "v{version}");
        }
    }
}
