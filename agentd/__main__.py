from __future__ import annotations

from agentd.cli import main

main()
