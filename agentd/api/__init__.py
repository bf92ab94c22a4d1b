"""The control plane: REST API, health, metrics, live streams, MCP mounts, the worker's probe
port, and serving it all. It never imports the admin UI: `agentd.app` mounts `agentd.admin`
on the app `app.create_api` builds."""
