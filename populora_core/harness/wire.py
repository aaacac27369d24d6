"""The wire between a judged program and its answer's process (`candidate.py`): what
crosses, and how.

Messages are pickles (protocol 5, streamed in 64 KiB frames), each followed by a line
counting its tagged tuples. ``Unpickler`` builds only builtin values: a message naming any
other class or function is refused. What is no builtin value crosses as a tagged tuple
(``TAGS``) that ``resolve`` rebuilds from checked parts: a handle to a value that stayed
behind, a Fraction, a Decimal. A subclass crosses as its base type (``plain``).
"""

from __future__ import annotations

import builtins
import decimal
import fractions
import io
import pickle

TYPES = (list, tuple, dict, set, frozenset, int, float, complex, str, bytes, bytearray, range, slice)
"""The only classes a message may name (``Unpickler``): builtin types, which pickle names."""
HANDLE, FRACTION, DECIMAL = "\x00candidate-object", "\x00fraction", "\x00decimal"
TAGS = (HANDLE, FRACTION, DECIMAL)
"""Tagged tuples for what crosses but is no builtin (rebuilt by ``resolve``, which checks
their parts): a handle, a Fraction (two ints), a Decimal (its text)."""


def plain(obj, handle_of, handle_type):
    """How ``obj`` crosses (a pickle reduction), or NotImplemented for what pickle's C code
    writes itself (exact builtin values); a subclass as its base type, anything else as
    ``(HANDLE, n)`` with ``n = handle_of(obj)``."""
    kind = type(obj)
    if kind is complex:
        return complex, (obj.real, obj.imag)
    if isinstance(obj, fractions.Fraction):
        return tuple, ((FRACTION, int(obj.numerator), int(obj.denominator)),)
    if isinstance(obj, decimal.Decimal):
        return tuple, ((DECIMAL, decimal.Decimal.__str__(obj)),)
    if obj is None or kind is bool or kind in TYPES:
        return NotImplemented  # pickled as they are (a range or a slice reduces itself to its three ends)
    if kind is type and obj in TYPES:
        return NotImplemented  # a reduction's own callable: pickled by name
    if handle_type is not None and isinstance(obj, handle_type):
        return tuple, ((HANDLE, obj._handle),)
    for base, value in (
        (dict, lambda: list(dict.items(obj))),
        (list, lambda: list.copy(obj)),
        (tuple, lambda: list(tuple.__iter__(obj))),
        (frozenset, lambda: list(frozenset.__iter__(obj))),
        (set, lambda: list(set.__iter__(obj))),
        (str, lambda: str.__str__(obj)),
        (bytes, lambda: bytes.__bytes__(obj)),
        (bytearray, lambda: bytes(memoryview(obj))),
        (int, lambda: int.__int__(obj)),
        (float, lambda: float.__float__(obj)),
        (complex, lambda: complex.__complex__(obj)),
    ):
        if isinstance(obj, base):
            return base, (value(),)
    return tuple, ((HANDLE, handle_of(obj)),)


class Pickler(pickle.Pickler):
    """Writes a message as it crosses (``plain``), counting its tagged tuples (``handles``)."""

    def __init__(self, file, handle_of, handle_type=None) -> None:
        super().__init__(file, protocol=5)
        self.handle_of, self.handle_type, self.handles = handle_of, handle_type, 0

    def reducer_override(self, obj):
        reduced = plain(obj, self.handle_of, self.handle_type)
        if reduced is not NotImplemented and reduced[0] is tuple and type(reduced[1][0]) is tuple:
            self.handles += 1  # a tagged tuple: the receiver resolves the message
        return reduced


class Unpickler(pickle.Unpickler):
    """Builds only builtin values: any other class or function a message names is refused."""

    def find_class(self, module, name):
        kind = getattr(builtins, name, None) if module == "builtins" else None
        if kind in TYPES:
            return kind
        raise pickle.UnpicklingError(f"a message may not name {module}.{name}")


def resolve(value, object_of):
    """``value`` with every tagged tuple rebuilt (``TAGS``): ``(HANDLE, n)`` as
    ``object_of(n)``, the numbers from their checked parts."""
    kind = type(value)
    if kind is tuple:
        tag = value[0] if value and type(value[0]) is str else None
        if tag == HANDLE and len(value) == 2 and type(value[1]) is int:
            return object_of(value[1])
        if tag == FRACTION and len(value) == 3 and type(value[1]) is int and type(value[2]) is int:
            return fractions.Fraction(value[1], value[2])
        if tag == DECIMAL and len(value) == 2 and type(value[1]) is str:
            return decimal.Decimal(value[1])
        return tuple(resolve(v, object_of) for v in value)
    if kind is list:
        return [resolve(v, object_of) for v in value]
    if kind is dict:
        return {resolve(k, object_of): resolve(v, object_of) for k, v in value.items()}
    if kind in (set, frozenset):
        return kind(resolve(v, object_of) for v in value)
    return value


class Channel:
    """One end of the pipes (the messages: the module docstring)."""

    def __init__(self, read_fd: int, write_fd: int, handle_type=None) -> None:
        self.handle_type = handle_type  # the handles this end sends back (the judge's)
        self.reader = open(read_fd, "rb", closefd=False)  # noqa: SIM115 - lives as long as the process
        self.writer = open(write_fd, "wb", closefd=False)  # noqa: SIM115

    def send(self, message: dict, handle_of) -> None:
        """Streams ``message`` (the candidate's replies, which may be large)."""
        pickler = Pickler(self.writer, handle_of, self.handle_type)
        pickler.dump(message)
        self.writer.write(b"%d\n" % pickler.handles)
        self.writer.flush()

    def pack(self, message: dict, handle_of) -> bytes:
        """``message`` as ``send`` writes it, made in memory: what cannot cross raises before
        anything is written (the judge's calls)."""
        buffer = io.BytesIO()
        pickler = Pickler(buffer, handle_of, self.handle_type)
        pickler.dump(message)
        buffer.write(b"%d\n" % pickler.handles)
        return buffer.getvalue()

    def write(self, payload: bytes) -> None:
        self.writer.write(payload)
        self.writer.flush()

    def receive(self, object_of):
        """The next message (None at end of file), its handles resolved by ``object_of``."""
        try:
            message = Unpickler(self.reader).load()
        except EOFError:
            return None
        handles = self.reader.readline()
        if not handles.endswith(b"\n"):
            return None
        return resolve(message, object_of) if int(handles) else message
