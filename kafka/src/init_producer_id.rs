//! InitProducerId: a new producer id at epoch 0 for an idempotent producer, from the engine's
//! durable allocator (`Engine::allocate_producer_id`), so no id is given twice across restarts.
//! As in Kafka, a producer without a transactional id always gets a new id, also when it asks
//! to bump the epoch of its current one (versions 3 and up, after its sequences broke). The
//! engine's partitions check each idempotent batch's sequence and answer a retried one with its
//! first offsets. Transactions are not built: a transactional id is answered
//! `COORDINATOR_NOT_AVAILABLE`, as FindCoordinator answers a transaction coordinator key.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::ProducerId;
use kafka_protocol::messages::init_producer_id_request::InitProducerIdRequest;
use kafka_protocol::messages::init_producer_id_response::InitProducerIdResponse;
use seglog::error::ProducerIdError;

use crate::broker::Broker;
use crate::error_code;

pub(crate) async fn answer(
    broker: &Broker,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let refused = |error: ResponseError| {
        InitProducerIdResponse::default()
            .with_error_code(error.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    if request.transactional_id.is_some() {
        return refused(ResponseError::CoordinatorNotAvailable);
    }
    let allocated = broker
        .blocking(|engine| engine.allocate_producer_id())
        .await;
    match allocated {
        Ok(Ok(producer_id)) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(0),
        Ok(Err(error)) => {
            tracing::error!("InitProducerId: {error}");
            refused(producer_id_error(&error))
        }
        Err(error) => refused(error),
    }
}

/// An allocator that cannot write its block is a storage failure, which a client retries.
fn producer_id_error(error: &ProducerIdError) -> ResponseError {
    match error {
        ProducerIdError::Unavailable(unavailable) => error_code::unavailable_error(unavailable),
        ProducerIdError::Storage(_) => ResponseError::KafkaStorageError,
        _ => ResponseError::UnknownServerError,
    }
}
