"""agentd benchmarks (run by hand; see bench/README.md)."""
