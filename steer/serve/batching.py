"""Requests that arrive together, decoded in one batch: a bounded queue in front of one model.

Why: the model is loaded once and decodes one batch at a time; outputs do not depend on how texts
are batched (the batch-invariance tests), so requests for the same recipe that wait together are
joined into one call. The queue is bounded (a full one is `QueueFull`, which the server answers
503 with a retry hint) and each request has its own timeout; a request that times out while
queued is taken out of the queue, one that times out while decoding is answered and its rows are
dropped when the batch ends.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


class QueueFull(Exception):
    """The queue holds `max_queue` requests already."""


@dataclass(eq=False)
class _Pending:
    key: Hashable
    texts: list[str]
    future: asyncio.Future[list[Any]] = field(repr=False)


def _settle(pending: _Pending, results: list[Any] | None = None, error: Exception | None = None) -> None:
    """Answer a request that is still waiting (one that timed out is answered already)."""
    if pending.future.done():
        return
    if error is not None:
        pending.future.set_exception(error)
    else:
        pending.future.set_result(results or [])


class Batcher:
    """`await submit(key, texts, timeout)` → `run(key, texts, interrupted)`'s results for those texts,
    where `run` was called once for every request of the same `key` waiting together (up to
    `max_batch` texts; one larger request runs alone). `run` is synchronous and runs on one worker
    thread; it should stop early once `interrupted()` (every request it serves timed out, or the
    batcher stops). A batch that raises is run again request by request, so a request's error is
    its own."""

    def __init__(
        self,
        run: Callable[[Hashable, list[str], Callable[[], bool]], Sequence[Any]],
        *,
        max_batch: int = 16,
        max_queue: int = 64,
        window_s: float = 0.005,
    ) -> None:
        self.run, self.max_batch, self.max_queue, self.window_s = run, max_batch, max_queue, window_s
        self.batches: list[int] = []  # how many requests each call of `run` served (for tests and logs)
        self._waiting: deque[_Pending] = deque()
        self._ready: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="steer-decode")
        self._stopping = False  # set by `stop`: a running decode ends at its next step

    async def start(self) -> None:
        self._ready = asyncio.Event()
        self._worker = asyncio.create_task(self._work())

    async def stop(self) -> None:
        self._stopping = True
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
        for pending in self._waiting:
            if not pending.future.done():
                pending.future.cancel()
        self._waiting.clear()
        self._thread.shutdown(wait=True)

    @property
    def queued(self) -> int:
        return len(self._waiting)

    async def submit(self, key: Hashable, texts: list[str], timeout_s: float) -> list[Any]:
        """The results for `texts`; `QueueFull` at once when the queue is full, `TimeoutError` after `timeout_s`."""
        if self._ready is None:
            raise RuntimeError("the batcher is not started")
        if len(self._waiting) >= self.max_queue:
            raise QueueFull
        pending = _Pending(key, list(texts), asyncio.get_running_loop().create_future())
        self._waiting.append(pending)
        self._ready.set()
        try:
            return await asyncio.wait_for(asyncio.shield(pending.future), timeout_s)
        except TimeoutError:
            if pending in self._waiting:
                self._waiting.remove(pending)
            pending.future.cancel()  # answered: a batch whose every request is answered stops decoding
            raise

    def _take(self) -> list[_Pending]:
        """The first waiting request and every later one of its key that fits in `max_batch` texts."""
        first = self._waiting.popleft()
        batch, size = [first], len(first.texts)
        for pending in list(self._waiting):
            if pending.key == first.key and size + len(pending.texts) <= self.max_batch:
                self._waiting.remove(pending)
                batch.append(pending)
                size += len(pending.texts)
        return batch

    async def _run(self, loop: Any, batch: list[_Pending], texts: list[str]) -> Sequence[Any]:
        """`run` on the decoding thread, told to stop once every request of `batch` is answered
        (timed out) or the batcher stops."""

        def interrupted() -> bool:
            return self._stopping or all(p.future.done() for p in batch)

        return await loop.run_in_executor(self._thread, self.run, batch[0].key, texts, interrupted)

    async def _work(self) -> None:
        assert self._ready is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._ready.wait()
            await asyncio.sleep(self.window_s)  # requests sent together arrive within a few milliseconds
            while self._waiting:
                batch = [p for p in self._take() if not p.future.done()]
                if not batch:
                    continue
                texts = [t for p in batch for t in p.texts]
                self.batches.append(len(batch))
                try:
                    results = await self._run(loop, batch, texts)
                except Exception as err:  # noqa: BLE001
                    if len(batch) == 1:
                        _settle(batch[0], error=err)
                        continue
                    # one request's text may have failed the batch: each request alone, so it fails only itself
                    for p in batch:
                        if p.future.done():  # timed out meanwhile: nobody waits for it
                            continue
                        try:
                            _settle(p, list(await self._run(loop, [p], p.texts)))
                        except Exception as own:  # noqa: BLE001 - this request's own error
                            _settle(p, error=own)
                    continue
                start = 0
                for p in batch:
                    if not p.future.done():
                        p.future.set_result(list(results[start : start + len(p.texts)]))
                    start += len(p.texts)
            self._ready.clear()
