"""The GGUF header reader (engine/loading/gguf_header.py) reads what gguf's own reader reads: every
field's value and every tensor's name, shape, type and bytes, quantized tensors and long arrays
of strings included; a cut file is one error."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import quantize

from engine.loading.gguf_header import DECODED, GGUFHeader


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "mixed.gguf"
    rng = np.random.default_rng(0)
    w = GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_token_list([f"tok{i}\u00e9" for i in range(3 * DECODED)])  # long: read lazily
    w.add_token_merges(["a b", "c d"])  # short: read at once
    w.add_token_types([1] * (3 * DECODED))
    w.add_bool("test.flag", True)
    w.add_array("test.floats", [0.5, 1.5, -2.0])
    w.add_string("test.text", "hello")
    w.add_tensor("plain.weight", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("half.weight", rng.standard_normal((4, 8)).astype(np.float16))
    q8 = rng.standard_normal((4, 64)).astype(np.float32)
    w.add_tensor("q8.weight", quantize(q8, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_every_field_reads_as_ggufs_own_reader_reads_it(gguf_file):
    ours, theirs = GGUFHeader(gguf_file), GGUFReader(gguf_file)
    keys = [k for k in theirs.fields if not k.startswith("GGUF.")]
    assert sorted(keys) == sorted(ours.fields)
    for key in keys:
        assert ours.get(key) == theirs.get_field(key).contents(), key
    assert ours.get("tokenizer.ggml.tokens")[3 * DECODED - 1] == f"tok{3 * DECODED - 1}\u00e9"
    assert ours.get("no.such.key", 7) == 7


def test_every_tensor_reads_as_ggufs_own_reader_reads_it(gguf_file):
    ours, theirs = GGUFHeader(gguf_file), GGUFReader(gguf_file)
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors, strict=True):
        assert a.shape == tuple(int(d) for d in b.shape) and a.tensor_type == b.tensor_type
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape
        assert np.array_equal(a.data, b.data), a.name


def test_a_cut_file_is_an_error(gguf_file, tmp_path):
    data = gguf_file.read_bytes()
    for keep in (10, len(data) // 3, len(data) - 40):  # (the last 16 bytes are padding)
        cut = tmp_path / f"cut{keep}.gguf"
        cut.write_bytes(data[:keep])
        with pytest.raises((ValueError, OverflowError, struct.error)):
            GGUFHeader(cut)
