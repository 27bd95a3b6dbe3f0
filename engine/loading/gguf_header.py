"""A GGUF file's metadata and tensor table, read in one pass over its header.

gguf's own reader builds a numpy view for every element of every metadata array; a tokenizer's
vocabulary and merges are some 300,000 strings, which took it 23 s a read of Qwen2.5-Coder-0.5B
on this project's CPU, most of a conversion. This reads the header with `struct` from the bytes
themselves: scalars and short arrays become Python values, long arrays of strings are skipped
(their length read, their strings kept undecoded until asked for), and each tensor's data is a
view of the file mapped once. The layout (GGUF v2/v3): magic, version, tensor count, key count;
the keys, each a string, a value type and a value; the tensor table, each a name, dimensions
(innermost first), a GGML type and an offset into the data section, which starts at the next
multiple of `general.alignment` (32 unless the file says otherwise).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# value types: struct format of each scalar one
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
DECODED = 64  # longer arrays of strings stay bytes until read (a vocabulary, its merges)


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # innermost first, as the file stores it
    tensor_type: object  # gguf.GGMLQuantizationType
    data: np.ndarray  # the file's bytes (quantized: [rows, bytes a row]) or values (float types)


class GGUFHeader:
    """Fields by key (`get`) and the tensor table (`tensors`) of a GGUF file."""

    def __init__(self, path: str | Path):
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        self.path = Path(path)
        self.file = np.memmap(self.path, dtype=np.uint8, mode="r")
        buf = self.file
        self.pos = 0
        magic, version, tensor_count, key_count = self._unpack("<4sIQQ")
        if magic != b"GGUF" or version not in (2, 3):
            raise ValueError(f"not a GGUF v2/v3 header (magic {magic!r}, version {version})")
        self.fields: dict[str, object] = {}
        for _ in range(key_count):
            key = self._string().decode()
            (kind,) = self._unpack("<I")
            self.fields[key] = self._value(kind)
        table = []
        for _ in range(tensor_count):
            name = self._string().decode()
            (dims,) = self._unpack("<I")
            shape = self._unpack(f"<{dims}Q")
            kind, offset = self._unpack("<IQ")
            table.append((name, shape, GGMLQuantizationType(kind), offset))
        alignment = int(self.fields.get("general.alignment", 32))
        start = -(-self.pos // alignment) * alignment
        self.tensors: list[TensorInfo] = []
        for name, shape, kind, offset in table:
            block, size = GGML_QUANT_SIZES[kind]
            count = int(np.prod(shape))
            begin = start + offset
            raw = buf[begin : begin + count // block * size]
            if raw.size != count // block * size:
                raise ValueError(f"tensor {name} runs past the end of the file")
            self.tensors.append(TensorInfo(name, tuple(shape), kind, self._data(raw, shape, kind, block, size)))

    def get(self, key: str, default=None):
        value = self.fields.get(key, default)
        if isinstance(value, LazyStrings):
            value = self.fields[key] = value.decode()
        return value

    @staticmethod
    def _data(raw: np.ndarray, shape, kind, block: int, size: int) -> np.ndarray:
        """What gguf's dequantize takes: values for float types, [rows, bytes a row] otherwise."""
        outer = tuple(reversed(shape))
        floats = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
        if kind.name in floats:
            return raw.view(floats[kind.name]).reshape(outer)
        return raw.reshape(*outer[:-1], shape[0] // block * size)

    def _unpack(self, fmt: str) -> tuple:
        values = struct.unpack_from(fmt, self.file, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def _string(self) -> bytes:
        (n,) = self._unpack("<Q")
        text = bytes(self.file[self.pos : self.pos + n])
        if len(text) != n:
            raise ValueError("a string runs past the end of the file")
        self.pos += n
        return text

    def _value(self, kind: int):
        if kind in SCALARS:
            return self._unpack("<" + SCALARS[kind])[0]
        if kind == STRING:
            return self._string().decode()
        if kind != ARRAY:
            raise ValueError(f"unknown GGUF value type {kind}")
        inner, count = self._unpack("<IQ")
        if inner in SCALARS:
            fmt = f"<{count}{SCALARS[inner]}"
            values = struct.unpack_from(fmt, self.file, self.pos)
            self.pos += struct.calcsize(fmt)
            return list(values)
        if inner == STRING:
            first = self.pos
            for _ in range(count):  # lengths only: the strings are decoded when read
                (n,) = struct.unpack_from("<Q", self.file, self.pos)
                self.pos += 8 + n
            lazy = LazyStrings(self.file, first, self.pos, count)
            return lazy.decode() if count <= DECODED else lazy
        return [self._value(inner) for _ in range(count)]


@dataclass
class LazyStrings:
    """An array of strings not yet decoded: where it starts in the file, how many."""

    file: np.ndarray
    start: int
    end: int
    count: int

    def decode(self) -> list[str]:
        out, pos, data = [], 0, bytes(self.file[self.start : self.end])
        for _ in range(self.count):
            (n,) = struct.unpack_from("<Q", data, pos)
            out.append(data[pos + 8 : pos + 8 + n].decode("utf-8", errors="replace"))
            pos += 8 + n
        return out
