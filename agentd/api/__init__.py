"""The control plane: REST API, health, metrics, live streams, MCP mounts, the worker's probe
port, and serving it all (the admin UI, `agentd.admin`, is mounted by `app.py`)."""
