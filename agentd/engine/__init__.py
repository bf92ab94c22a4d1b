"""The durable loop engine: worker, waker, lease renewer, reaper, janitor, lifecycle.

Its core is what the pipelines import — context, runtime, dispatch, chaining,
loop_limits, transcript, and the stacks port (engine/stacks.py) — so the engine itself
never imports the pipeline: the worker runs whatever stacks it is handed.
"""
