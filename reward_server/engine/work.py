"""The cost model behind admission: how much work an item is, before it runs.

Admission (:mod:`reward_server.admission`) bounds queued *work*, not items: 1,280 completions of 200k characters
are not 1,280 items' worth of work, and a reference that timed out before will hold a worker for its whole
``timeout_s`` again. The unit is the **work unit**: one plain item, that is one cheap component (math, format,
length...) on up to :data:`CHARS_PER_UNIT` characters of completion and reference. An item costs

* one unit per :data:`CHARS_PER_UNIT` characters of completion and reference (at least one),
* times :data:`SANDBOX_WORK` for an item that runs code in the sandbox,
* plus :data:`SLOW_REFERENCE_WORK` when its reference is *known slow*: one whose item timed out before (the
  server remembers the last :data:`SLOW_REFERENCES_KEPT` such references, least recently seen first out).

The figures are coarse on purpose: they only have to rank a batch of long completions or known-slow references
above a batch of short ones, so that the queue's bound (``RLVR_MAX_QUEUED_WORK``) refuses at the door what would
otherwise be admitted and then expire for lack of time.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

#: Characters of completion plus reference that make one work unit.
CHARS_PER_UNIT = 10_000
#: The factor on an item that runs code in the sandbox (a process start, compiling, tests) against a math item.
SANDBOX_WORK = 10.0
#: The extra work of an item whose reference is known to be slow (about a default ``timeout_s`` of a worker, in
#: units of a plain item's few milliseconds, kept small enough that a group of 16 still fits a small queue).
SLOW_REFERENCE_WORK = 50.0
#: How many slow references the server remembers (LRU).
SLOW_REFERENCES_KEPT = 4096


def _key(reference: str) -> bytes:
    return hashlib.blake2b(reference.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class SlowReferences:
    """A bounded LRU set of references whose items timed out (or ran past a soft deadline) before.

    Thread-safe; keys are 16-byte digests, so a 50k-character reference costs 16 bytes here.
    """

    def __init__(self, capacity: int = SLOW_REFERENCES_KEPT) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, reference: str) -> None:
        """Remember ``reference`` as slow (the least recently seen one goes when full)."""
        key = _key(reference)
        with self._lock:
            self._seen[key] = None
            self._seen.move_to_end(key)
            while len(self._seen) > self.capacity:
                self._seen.popitem(last=False)

    def __contains__(self, reference: object) -> bool:
        if not isinstance(reference, str) or not reference:
            return False
        key = _key(reference)
        with self._lock:
            if key in self._seen:
                self._seen.move_to_end(key)
                return True
        return False


def item_work(chars: int, *, sandbox: bool = False, slow_reference: bool = False) -> float:
    """The work units of one item (see the module's docstring).

    Args:
        chars: characters of completion plus reference.
        sandbox: the item runs code in the sandbox.
        slow_reference: its reference is known slow.
    """
    work = max(1.0, chars / CHARS_PER_UNIT)
    if sandbox:
        work *= SANDBOX_WORK
    if slow_reference:
        work += SLOW_REFERENCE_WORK
    return work


def batch_work(
    chars: Sequence[int], sandbox: Sequence[bool], references: Sequence[str | None], slow: SlowReferences
) -> float:
    """The work units of a batch: the sum of :func:`item_work` over its items (sequences in item order)."""
    return sum(
        item_work(c, sandbox=s, slow_reference=r is not None and r in slow)
        for c, s, r in zip(chars, sandbox, references, strict=True)
    )


def body_work(content_length: int) -> float:
    """The least work a request body of ``content_length`` bytes can hold: its characters are at least that
    many bytes less the JSON around them, so a body is never less than this much work (for refusing at the door
    before reading it)."""
    return max(1.0, content_length / CHARS_PER_UNIT / 2)
