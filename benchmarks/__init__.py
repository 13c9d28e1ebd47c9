"""Benchmarks for the vodou engine: ``python -m benchmarks``.

Every case drives the real engine (compile, verify, run against a real
SQLite store) unless it is a baseline, repeats each measurement and reports
medians, and compares figures only with others measured in the same process
run. See ``benchmarks/RESULTS.md`` for the latest figures.
"""
