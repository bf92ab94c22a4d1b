"""An example agentd plugin."""
