"""A uint64 -> int64 hash table in two numpy arrays, probed and filled a batch at a time.

Why not a dict: a Python dict entry for an int key and value costs ~110 bytes;
14 band keys per document would be 1.5 GB per million documents. Here a slot
is 16 bytes (8 key + 8 value) and the table stays under half full, so a key
costs 32-64 bytes.

Open addressing with linear probing; key 0 marks an empty slot (callers map
real zero keys to 1); keys are never deleted. Keys are already well-mixed
hashes, so their low bits pick the home slot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MAX_LOAD = 0.5


class HashTable:
    def __init__(self, capacity: int = 1 << 16) -> None:
        import numpy as np

        capacity = 1 << max(4, (capacity - 1).bit_length())
        self.keys = np.zeros(capacity, dtype=np.uint64)
        self.values = np.zeros(capacity, dtype=np.int64)
        self.size = 0

    @property
    def capacity(self) -> int:
        return len(self.keys)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.values.nbytes

    def find(self, q: np.ndarray) -> np.ndarray:
        """(N,) slot of each key, or -1 where the key is absent."""
        import numpy as np

        mask = np.uint64(self.capacity - 1)
        slots = np.full(len(q), -1, dtype=np.int64)
        pending = np.arange(len(q))
        pos = (q & mask).astype(np.int64)
        keys = self.keys
        while pending.size:
            p = pos[pending]
            k = keys[p]
            hit = k == q[pending]
            slots[pending[hit]] = p[hit]
            go_on = ~hit & (k != 0)
            pending = pending[go_on]
            pos[pending] = (pos[pending] + 1) & (self.capacity - 1)
        return slots

    def get(self, q: np.ndarray, default: int = -1) -> np.ndarray:
        """(N,) value of each key, or `default` where absent."""
        import numpy as np

        slots = self.find(q)
        return np.where(slots >= 0, self.values[slots], default)

    def insert_new(self, q: np.ndarray, v: np.ndarray) -> None:
        """Insert keys that are distinct and not in the table yet, with their values."""
        if len(q) == 0:
            return
        if (self.size + len(q)) > MAX_LOAD * self.capacity:
            self._grow(self.size + len(q))
        self._place(q, v)
        self.size += len(q)

    def _place(self, q: np.ndarray, v: np.ndarray) -> None:
        import numpy as np

        cap_mask = self.capacity - 1
        pos = (q & np.uint64(cap_mask)).astype(np.int64)
        pending = np.arange(len(q))
        keys, values = self.keys, self.values
        while pending.size:
            p = pos[pending]
            free = np.flatnonzero(keys[p] == 0)
            # Several pending keys may want the same free slot: the first of them takes it.
            slots, won = _first_per_slot(p[free], free)  # won: positions in `pending`
            winners = pending[won]
            keys[slots] = q[winners]
            values[slots] = v[winners]
            # Masks over `pending` only: a long probe chain makes many rounds, and a mask
            # over all of q per round made growing a big table quadratic-ish.
            left = np.ones(len(pending), dtype=bool)
            left[won] = False
            pending = pending[left]
            pos[pending] = (pos[pending] + 1) & cap_mask  # their slot is taken now either way

    def _grow(self, need: int) -> None:
        import numpy as np

        capacity = self.capacity
        while need > MAX_LOAD * capacity:
            capacity *= 2
        used = self.keys != 0
        old_k, old_v = self.keys[used], self.values[used]
        self.keys = np.zeros(capacity, dtype=np.uint64)
        self.values = np.zeros(capacity, dtype=np.int64)
        self._place(old_k, old_v)

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        used = self.keys != 0
        return self.keys[used], self.values[used]

    @classmethod
    def from_items(cls, keys: np.ndarray, values: np.ndarray) -> HashTable:
        table = cls(int(len(keys) / MAX_LOAD) + 1)
        table.insert_new(keys, values)
        return table


def _first_per_slot(slots: np.ndarray, where: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct slots (ascending) and, for each, the first of `where` (increasing) that
    wants it: np.unique(slots, return_index=True), without its stable argsort (the
    slowest part of growing a table). Slot and position are packed into one uint64 so
    that numpy's plain sort gives the same order."""
    import numpy as np

    if len(where) == 0:
        return slots, where
    bits = max(1, int(where[-1]).bit_length())
    if bits + int(slots.max()).bit_length() > 64:
        first = np.unique(slots, return_index=True)
        return first[0], where[first[1]]
    shift = np.uint64(bits)
    packed = np.sort((slots.astype(np.uint64) << shift) | where.astype(np.uint64))
    slot = (packed >> shift).astype(np.int64)
    first = np.empty(len(slot), dtype=bool)
    first[0] = True
    np.not_equal(slot[1:], slot[:-1], out=first[1:])
    return slot[first], (packed[first] & ((np.uint64(1) << shift) - np.uint64(1))).astype(np.int64)


def first_occurrence(table: HashTable, keys: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """Query-then-insert for a batch: the first document that had each key.

    keys (N,) uint64 with 0 meaning "no key", docs (N,) int64 document numbers in
    ascending stream order. Returns (N,) int64: the earliest document that had
    the same key, counting earlier batches (from the table) and this one; -1
    where the key is 0. Keys new to the table are inserted with that document.
    """
    import numpy as np

    first = table.get(keys)
    first[keys == 0] = -1
    new = (first < 0) & (keys != 0)
    if new.any():
        new_idx = np.flatnonzero(new)
        uniq, first_pos, inverse = np.unique(keys[new_idx], return_index=True, return_inverse=True)
        # np.unique's return_index is the first position in the (document-ordered) input.
        owner = docs[new_idx[first_pos]]
        first[new_idx] = owner[inverse]
        table.insert_new(uniq, owner)
    return first
