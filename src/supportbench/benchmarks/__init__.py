"""Benchmarks: the protocol (base), the shared J evaluator, and one subpackage per benchmark."""
