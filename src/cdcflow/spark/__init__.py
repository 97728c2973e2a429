"""Spark integration: session builder, Arrow-batched decoding, raw readers."""
