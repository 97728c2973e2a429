"""Watching a pipeline: its tables read without a JVM (pyiceberg), its status, and a running
pipeline's Prometheus metrics, health endpoints and status page."""
