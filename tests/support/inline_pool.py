"""A thread pool that runs each job at once on the calling thread: deterministic disk work in
unit tests.
"""

from __future__ import annotations


class InlinePool:
    """Runs the manager's file writes (leader-epoch checkpoints) at once, in the test's thread."""

    def callInThreadWithCallback(self, on_result, fn, *args, **kwargs):  # noqa: N802
        try:
            result = fn(*args, **kwargs)
        except Exception as e:
            on_result(False, e)
        else:
            on_result(True, result)

    def callFromThread(self, fn, *args, **kwargs):  # noqa: N802 (the reactor's side)
        fn(*args, **kwargs)


