"""`python -m agentd.testing.fake_llm`: the same server as `agentd fake-llm`."""

from __future__ import annotations

import sys

from agentd.testing.fake_llm.command import main

main(sys.argv[1:])
