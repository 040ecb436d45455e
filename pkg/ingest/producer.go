package ingest

import "context"

// recordProducer writes one request record to the requests topic.
//
// Produce must return nil only once the record is durably written
// (acks=all), and must be safe for concurrent use. An error means the
// outcome is unknown: the record may still land later, which is why a
// client retries with its Idempotency-Key. Produce may keep key and value
// after it returns; the caller must not modify them.
type recordProducer interface {
	Produce(ctx context.Context, key, value []byte) error
}
