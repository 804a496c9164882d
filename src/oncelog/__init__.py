"""oncelog: an event log with exactly-once semantics that speaks the Kafka protocol."""
