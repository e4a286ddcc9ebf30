"""The pieces of Java semantics the assignors' results depend on.

Kafka's assignors iterate ``java.util.HashMap``/``HashSet`` in places where the iteration order
decides the outcome (which member keeps its partitions first, which previously moved partition
is moved back), compare strings with ``String.compareTo`` (UTF-16 code units, not code points)
and walk ``LinkedList`` iterators whose misuse throws. This module reproduces those:

- ``string_hash`` / ``topic_partition_hash``: ``String.hashCode`` and ``TopicPartition.hashCode``;
- ``java_str_key``: a sort key that orders strings as ``String.compareTo`` does;
- ``JavaHashMap`` / ``JavaHashSet``: a model of the OpenJDK (8+) HashMap table: a power-of-two
  array of bins, each a linked list; ``put`` appends to its bin, ``computeIfAbsent`` prepends,
  resizes split every bin in order, iteration walks the bins in index order. The model keeps
  the same bins, so it iterates in exactly the order Java does;
- ``JavaLinkedList`` and its iterator, with Java's fail-fast and ``IllegalStateException`` rules;
- ``AssignorError``: raised where the Java code would throw, named after the Java exception.

Not modelled: bins that Java turns into red-black trees (a bin reaching 9 entries, 8 through
computeIfAbsent, in a table of 64 or more bins; smaller tables grow instead, which is modelled).
A tree bin iterates in tree order, not insertion order; ``JavaHashMap`` records that one formed
in ``treeified``, and ``lib.assignors.assign`` warns when its result may depend on one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

TopicPartition = tuple[str, int]


class AssignorError(RuntimeError):
    """The Java assignor throws at this point; ``java_exception`` is the simple name of the class
    it throws (e.g. ``IllegalStateException``, ``NullPointerException``)."""

    def __init__(self, java_exception: str, message: str = "") -> None:
        super().__init__(f"{java_exception}: {message}" if message else java_exception)
        self.java_exception = java_exception


def to_int32(value: int) -> int:
    """Wrap like Java int arithmetic."""
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value & 0x80000000 else value


def _utf16_units(s: str) -> bytes:
    # Java strings are UTF-16; lone surrogates (possible in Python strs) pass through as units.
    return s.encode("utf-16-be", "surrogatepass")


@lru_cache(maxsize=65536)
def string_hash(s: str) -> int:
    """java.lang.String.hashCode: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as int."""
    data = _utf16_units(s)
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return to_int32(h)


def topic_partition_hash(tp: TopicPartition) -> int:
    """org.apache.kafka.common.TopicPartition.hashCode: 31 * (31 + partition) + topic.hashCode()."""
    return to_int32(31 * to_int32(31 + tp[1]) + string_hash(tp[0]))


@lru_cache(maxsize=65536)
def java_str_key(s: str) -> bytes:
    """Sort key ordering strings as String.compareTo does: lexicographically by UTF-16 code unit,
    a proper prefix first. Big-endian UTF-16 bytes compare exactly that way (Python's own str
    order differs for characters outside the BMP)."""
    return _utf16_units(s)


def java_compare(a: str, b: str) -> int:
    """The sign of a.compareTo(b)."""
    ka, kb = java_str_key(a), java_str_key(b)
    return (ka > kb) - (ka < kb)


def tp_key(tp: TopicPartition) -> tuple[bytes, int]:
    """Kafka's TopicPartitionComparator: topic (String.compareTo), then partition."""
    return (java_str_key(tp[0]), tp[1])


# HashMap constants (java.util.HashMap)
_DEFAULT_INITIAL_CAPACITY = 16
_MAXIMUM_CAPACITY = 1 << 30
_TREEIFY_THRESHOLD = 8
_MIN_TREEIFY_CAPACITY = 64


def table_size_for(capacity: int) -> int:
    """HashMap.tableSizeFor: the smallest power of two >= capacity (1 for 0 or 1)."""
    if capacity <= 1:
        return 1
    return min(1 << (capacity - 1).bit_length(), _MAXIMUM_CAPACITY)


def _spread(h: int) -> int:
    """HashMap.hash: the hash code with its high half folded into the low half (unsigned)."""
    u = h & 0xFFFFFFFF
    return u ^ (u >> 16)


class JavaHashMap(Generic[K, V]):
    """A java.util.HashMap (load factor 0.75) that iterates in the order Java's would.

    Lookups go through a Python dict; the bins (lists of keys, in linked-list order) only decide
    iteration order. ``hasher`` is the key type's Java hashCode. ``initial_capacity`` mirrors
    ``new HashMap<>(n)`` (None: ``new HashMap<>()``)."""

    __slots__ = ("_bins", "_hasher", "_hashes", "_threshold", "_values", "treeified")

    def __init__(self, hasher: Callable[[K], int], initial_capacity: int | None = None) -> None:
        self._hasher = hasher
        self._values: dict[K, V] = {}
        self._hashes: dict[K, int] = {}
        self._bins: list[list[K]] = []  # the table; empty until the first insertion, as in Java
        # Java keeps the requested initial capacity in `threshold` until the table exists
        self._threshold = 0 if initial_capacity is None else table_size_for(initial_capacity)
        self.treeified = False

    # -- the table -----------------------------------------------------------------------
    def _resize(self) -> None:
        """HashMap.resize: allocate or double the table; bins split preserving their order."""
        old_cap = len(self._bins)
        old_thr = self._threshold
        new_thr = 0
        if old_cap > 0:
            if old_cap >= _MAXIMUM_CAPACITY:
                self._threshold = 0x7FFFFFFF
                return
            new_cap = old_cap << 1
            if new_cap < _MAXIMUM_CAPACITY and old_cap >= _DEFAULT_INITIAL_CAPACITY:
                new_thr = old_thr << 1
        elif old_thr > 0:
            new_cap = old_thr
        else:
            new_cap = _DEFAULT_INITIAL_CAPACITY
            new_thr = int(0.75 * _DEFAULT_INITIAL_CAPACITY)
        if new_thr == 0:
            new_thr = int(new_cap * 0.75) if new_cap < _MAXIMUM_CAPACITY else 0x7FFFFFFF
        self._threshold = new_thr
        bins: list[list[K]] = [[] for _ in range(new_cap)]
        mask = new_cap - 1
        # each new bin takes keys from one old bin only, so walking the old bins in order and
        # appending keeps Java's lo/hi split order
        for old_bin in self._bins:
            for key in old_bin:
                bins[_spread(self._hashes[key]) & mask].append(key)
        self._bins = bins

    def _bin_of(self, key: K) -> list[K]:
        return self._bins[_spread(self._hashes[key]) & (len(self._bins) - 1)]

    def _treeify_bin(self) -> None:
        """HashMap.treeifyBin: small tables grow instead of growing trees."""
        if len(self._bins) < _MIN_TREEIFY_CAPACITY:
            self._resize()
        else:
            self.treeified = True  # order within that bin is no longer insertion order

    # -- Map operations --------------------------------------------------------------------
    def put(self, key: K, value: V) -> None:
        """HashMap.put (putVal): a new key goes to the tail of its bin."""
        if key in self._values:
            self._values[key] = value  # existing node keeps its place
            return
        if not self._bins:
            self._resize()
        self._hashes[key] = self._hasher(key)
        self._values[key] = value
        bin_ = self._bin_of(key)
        before = len(bin_)
        bin_.append(key)
        if before >= _TREEIFY_THRESHOLD:
            self._treeify_bin()
        if len(self._values) > self._threshold:
            self._resize()

    def compute_if_absent(self, key: K, factory: Callable[[K], V]) -> V:
        """HashMap.computeIfAbsent: resizes *before* looking (if already over threshold) and
        puts a new key at the head of its bin."""
        if len(self._values) > self._threshold or not self._bins:
            self._resize()
        if key in self._values:
            return self._values[key]
        value = factory(key)
        self._hashes[key] = self._hasher(key)
        self._values[key] = value
        bin_ = self._bin_of(key)
        before = len(bin_)
        bin_.insert(0, key)
        if before >= _TREEIFY_THRESHOLD - 1:
            self._treeify_bin()
        return value

    def get(self, key: K | None) -> V | None:
        """Map.get; Java maps answer null for a null key, as here for None."""
        return None if key is None else self._values.get(key)

    def __getitem__(self, key: K) -> V:
        return self._values[key]

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __len__(self) -> int:
        return len(self._values)

    def remove(self, key: K) -> V | None:
        """HashMap.remove: unlink the node; the table never shrinks."""
        if key not in self._values:
            return None
        self._bin_of(key).remove(key)
        del self._hashes[key]
        return self._values.pop(key)

    def clear(self) -> None:
        """HashMap.clear: empty the bins, keep the table size."""
        self._values.clear()
        self._hashes.clear()
        for bin_ in self._bins:
            bin_.clear()

    def keys(self) -> list[K]:
        """keySet() in iteration order (a snapshot)."""
        return [key for bin_ in self._bins for key in bin_]

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def items(self) -> list[tuple[K, V]]:
        return [(key, self._values[key]) for key in self.keys()]

    def values(self) -> list[V]:
        return [self._values[key] for key in self.keys()]


class JavaHashSet(Generic[T]):
    """java.util.HashSet: a JavaHashMap of its elements."""

    __slots__ = ("_map",)

    def __init__(self, hasher: Callable[[T], int], items: Iterable[T] = ()) -> None:
        self._map: JavaHashMap[T, bool] = JavaHashMap(hasher)
        for item in items:
            self._map.put(item, True)

    def add(self, item: T) -> None:
        self._map.put(item, True)

    def remove(self, item: T) -> None:
        self._map.remove(item)

    def __contains__(self, item: object) -> bool:
        return item in self._map

    def __len__(self) -> int:
        return len(self._map)

    def __iter__(self) -> Iterator[T]:
        return iter(self._map.keys())

    def first(self) -> T:
        """iterator().next()"""
        for item in self._map.keys():
            return item
        raise AssignorError("NoSuchElementException")

    @property
    def treeified(self) -> bool:
        return self._map.treeified


class JavaLinkedList(Generic[T]):
    """The parts of java.util.LinkedList the sticky assignor uses, with a modification count so
    that its iterators fail as Java's do."""

    __slots__ = ("items", "mod_count")

    def __init__(self) -> None:
        self.items: list[T] = []
        self.mod_count = 0

    def add(self, item: T) -> None:
        self.items.append(item)
        self.mod_count += 1

    def poll(self) -> T | None:
        """Remove and return the head, None if empty."""
        if not self.items:
            return None
        self.mod_count += 1
        return self.items.pop(0)

    def remove_item(self, item: T) -> bool:
        """List.remove(Object): the first occurrence."""
        try:
            self.items.remove(item)
        except ValueError:
            return False
        self.mod_count += 1
        return True

    def remove_at(self, index: int) -> T:
        self.mod_count += 1
        return self.items.pop(index)

    def clear(self) -> None:
        self.items.clear()
        self.mod_count += 1

    def sort(self, key: Callable[[T], Any]) -> None:
        """Collections.sort: stable; on a LinkedList it sets elements in place through a list
        iterator, which leaves modCount alone."""
        self.items.sort(key=key)

    def get(self, index: int) -> T:
        return self.items[index]

    def is_empty(self) -> bool:
        return not self.items

    def __len__(self) -> int:
        return len(self.items)

    def iterator(self) -> JavaListIterator[T]:
        return JavaListIterator(self)


class JavaListIterator(Generic[T]):
    """LinkedList.ListItr: fail-fast next()/remove(); remove() only once per next()."""

    __slots__ = ("_expected", "_last", "_list", "_next_index")

    def __init__(self, owner: JavaLinkedList[T]) -> None:
        self._list = owner
        self._next_index = 0
        self._last: int | None = None  # index of the element next() returned last
        self._expected = owner.mod_count

    def has_next(self) -> bool:
        return self._next_index < len(self._list.items)

    def next(self) -> T:
        if self._list.mod_count != self._expected:
            raise AssignorError("ConcurrentModificationException")
        if not self.has_next():
            raise AssignorError("NoSuchElementException")
        self._last = self._next_index
        self._next_index += 1
        return self._list.items[self._last]

    def remove(self) -> None:
        if self._list.mod_count != self._expected:
            raise AssignorError("ConcurrentModificationException")
        if self._last is None:
            raise AssignorError("IllegalStateException")
        self._list.remove_at(self._last)
        if self._next_index > self._last:
            self._next_index -= 1
        self._last = None
        self._expected = self._list.mod_count
