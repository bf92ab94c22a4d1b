"""The control plane: REST API, health, metrics, live streams, MCP mounts, admin UI."""
