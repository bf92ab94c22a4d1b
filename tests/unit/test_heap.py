"""The CLI's processes set the collector once start-up is done (agentd/heap.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_settle_freezes_start_up_and_still_collects_later_cycles() -> None:
    # In a child: the settings are process-wide and would outlive this test.
    script = textwrap.dedent(
        """
        import gc, weakref
        from agentd import heap

        heap.settle()
        assert gc.get_threshold() == heap.THRESHOLDS, gc.get_threshold()
        assert gc.get_freeze_count() > 1000, gc.get_freeze_count()
        assert gc.isenabled()

        class Node:
            pass

        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        for _ in range(50):  # well past one generation-0 threshold of allocations
            junk = [[i] for i in range(heap.THRESHOLDS[0])]
            if gone() is None:
                break
        assert gone() is None, "a cycle made after settle() was never collected"
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
