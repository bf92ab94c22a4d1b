"""MCP: the transport port, HTTP / stdio / in-process transports, the client and the server."""
