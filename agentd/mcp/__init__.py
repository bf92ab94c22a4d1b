"""MCP: the transport port, HTTP / stdio / in-process transports, the client, toolsets and
the mounts served to MCP clients (served over HTTP by `agentd.api.mcp_server`)."""
