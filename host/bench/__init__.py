"""Benchmarks that print one JSON object (also run as ``netco bench ...``)."""
