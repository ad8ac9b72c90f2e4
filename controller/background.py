"""Work done off the reconcile path, one piece at a time, that a stopping controller does not wait for."""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future


class Background:
    """A queue of work run one piece at a time on a daemon thread, each with its Future. A ThreadPoolExecutor's
    threads are joined when the interpreter exits, with every piece still queued run first: `headroom run` asked to
    stop went on training every series queued (10 s each), after it had let its Lease go, until the kubelet killed
    it. Here the process exits without waiting: the piece under way is cut, as a kill would cut it (its writes are
    fenced by the Lease, and an MLflow training cut short is marked abandoned by the next one), and drop() cancels
    what has not started."""

    def __init__(self, name: str):
        self._queue: queue.SimpleQueue[tuple[Future, Callable, tuple]] = queue.SimpleQueue()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def submit(self, work: Callable, *args) -> Future:
        future: Future = Future()
        self._queue.put((future, work, args))
        return future

    def drop(self) -> None:
        """Cancel the work queued and not started."""
        while True:
            try:
                future, _, _ = self._queue.get_nowait()
            except queue.Empty:
                return
            future.cancel()

    def _run(self) -> None:
        while True:
            future, work, args = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(work(*args))
            except BaseException as exc:  # noqa: BLE001 - the Future carries it to whoever takes the result
                future.set_exception(exc)
