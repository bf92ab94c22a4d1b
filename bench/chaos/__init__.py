"""Chaos soak: real `agentd worker` and `agentd api` processes against one database, under
random SIGKILL/SIGTERM of workers, a faulty fake LLM and a faulty, restarting MCP server.

    python -m bench.chaos --minutes 10            # by hand
    tests/acceptance/test_chaos.py                # a 2-3 minute version in the suite

`soak.run()` drives the load and the faults; `checks.inspect()` reads the rows after the
system quiesces and reports every broken invariant; `report.table()` prints the summary.
"""
