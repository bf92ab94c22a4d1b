"""The durable loop engine: worker, waker, lease renewer, reaper, janitor, lifecycle."""
