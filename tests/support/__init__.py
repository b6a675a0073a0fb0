"""Harnesses shared by the test suites (import as ``tests.support.<module>``)."""
