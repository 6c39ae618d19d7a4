"""The relay: the outbox read from Redis, folded into rows, written to PostgreSQL."""
