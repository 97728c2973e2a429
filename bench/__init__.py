"""Benchmarks (make bench); not tests."""
