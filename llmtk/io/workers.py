"""`--workers N`: order-preserving parallel map over chunks of a stream.

`ordered_map(fn, items, workers)` calls `fn(chunk) -> list` on chunks of
`items` in worker processes and yields the results in input order, so output
bytes do not depend on N. At most `2 * workers` chunks are in flight, so a
slow consumer or a huge input never piles up in memory (multiprocessing's
Pool.imap would read the whole input ahead). `fn` must be picklable: a
module-level function or an instance of a module-level class.
"""

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def ordered_map(
    fn: Callable[[list[T]], list[R]],
    items: Iterable[T],
    workers: int = 1,
    chunk_size: int = 256,
) -> Iterator[R]:
    if workers <= 1:
        for chunk in chunked(items, chunk_size):
            yield from fn(chunk)
        return
    # Imported here: multiprocessing costs ~15 ms of start-up that one process never needs.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # fork: workers inherit loaded modules and models, which start in milliseconds.
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        pending: deque = deque()
        try:
            for chunk in chunked(items, chunk_size):
                pending.append(pool.submit(fn, chunk))
                if len(pending) >= 2 * workers:
                    yield from pending.popleft().result()
            while pending:
                yield from pending.popleft().result()
        finally:
            for future in pending:
                future.cancel()
