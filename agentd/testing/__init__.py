"""Test kit: fake LLM and MCP servers, database fixtures, the transport conformance suite."""
