#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/): a few small, valid or nearly
valid inputs that show libFuzzer the shape of each format. Deterministic; run from anywhere:

    /usr/bin/python3 fuzz/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def npy(header_dict, data=b"", major=1, pad=True):
    """A .npy file as NumPy lays it out: magic, version, header length, the dict padded to 64 bytes."""
    header = header_dict.encode("latin1")
    prefix = 10 if major == 1 else 12
    if pad:
        total = (prefix + len(header) + 1 + 63) // 64 * 64
        header += b" " * (total - prefix - len(header) - 1) + b"\n"
    length = struct.pack("<H", len(header)) if major == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([major, 0]) + length + header + data


def floats(fmt, values):
    return b"".join(struct.pack(fmt, v) for v in values)


def npy_seeds():
    f8 = "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }"
    f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }"
    b1 = "{'descr': '|b1', 'fortran_order': False, 'shape': %s, }"
    return {
        "f8_2x3.npy": npy(f8 % "(2, 3)", floats("<d", [0.5, -1.0, 2.0, 1e300, -0.0, 3.25])),
        "f4_3.npy": npy(f4 % "(3,)", floats("<f", [1.0, float("inf"), float("nan")])),
        "f8_scalar.npy": npy(f8 % "()", floats("<d", [7.0])),
        "f8_empty.npy": npy(f8 % "(0, 4)"),
        "b1_2x2.npy": npy(b1 % "(2, 2)", bytes([1, 0, 0, 1])),
        "f8_v2.npy": npy(f8 % "(1, 1, 2)", floats("<d", [1.0, 2.0]), major=2),
        "f8_v3_utf8.npy": npy(f8 % "(2,)", floats("<d", [1.0, 2.0]), major=3),
        "f8_python2_long.npy": npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 1L), }",
                                   floats("<d", [1.0, 2.0])),
        "big_endian.npy": npy("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }", floats(">d", [1.0])),
        "fortran.npy": npy("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2), }", floats("<d", [1, 2, 3, 4])),
        "int64.npy": npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", struct.pack("<qq", 1, 2)),
        "structured.npy": npy("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }",
                              floats("<d", [1.0])),
        "nested.npy": npy("{'descr': '<f8', 'fortran_order': False, 'shape': ((1,),), 'x': {'y': [None]}}"),
        "truncated.npy": npy(f8 % "(4,)", floats("<d", [1.0, 2.0])),
    }


def safetensors(header, data=b"", pad=True):
    """A safetensors file: 8-byte little-endian header length, the JSON header (padded with spaces to a
    multiple of 8 bytes, as the reference writer pads it), the data buffer."""
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode() if not isinstance(header, bytes) else header
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    two_f32 = floats("<f", [1.5, -2.0])
    three_f64 = floats("<d", [0.25, float("inf"), -0.0])
    return {
        "f32_f64.safetensors": safetensors(
            {"__metadata__": {"format": "pt", "note": "seed"},
             "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F64", "shape": [3, 1], "data_offsets": [8, 32]}}, two_f32 + three_f64),
        "scalar.safetensors": safetensors({"s": {"dtype": "F64", "shape": [], "data_offsets": [0, 8]}},
                                          floats("<d", [3.0])),
        "empty_tensor.safetensors": safetensors({"e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 0]}}),
        "only_metadata.safetensors": safetensors({"__metadata__": {"vocab_size": "3", "vocab": "[10, 32, 33]"}}),
        "empty_object.safetensors": safetensors({}),
        "gpt_sizes.safetensors": safetensors(
            {"__metadata__": {"vocab_size": "2", "block_size": "2", "layers": "0", "d_model": "1",
                              "heads": "1", "kv_heads": "1"},
             "wte": {"dtype": "F32", "shape": [2, 1], "data_offsets": [0, 8]}}, two_f32),
        "int_dtype.safetensors": safetensors({"i": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}},
                                             struct.pack("<q", 5)),
        "overlap.safetensors": safetensors(
            {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
             "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, two_f32),
        "hole.safetensors": safetensors({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, two_f32),
        "unicode_name.safetensors": safetensors(
            {"caf\u00e9": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, floats("<f", [1.0])),
        "header_past_end.safetensors": struct.pack("<Q", 1000) + b"{}",
        "bad_json.safetensors": safetensors(b'{"a": {"dtype": "F32", "shape": [1], '),
    }


def args(*argv):
    return b"\0".join(a.encode() for a in argv)


def mha_npy_args_seeds():
    return {
        "minimal": args("--in", "in", "--out", "out", "--heads", "2"),
        "everything": args("--in", "in", "--out", "out", "--heads", "8", "--kv-heads", "2", "--causal",
                           "--grad", "tape", "--dtype", "float32", "--detect-anomaly"),
        "equals": args("--in=in", "--out=o/", "--heads=4", "--grad=manual", "--dtype=float64"),
        "twice": args("--in", "a", "--in", "b", "--out", "o", "--heads", "1"),
        "bad_count": args("--in", "a", "--out", "o", "--heads", "18446744073709551616"),
        "missing_value": args("--in", "a", "--out", "o", "--heads"),
        "unknown": args("--in", "a", "--out", "o", "--heads", "2", "-x", "stray"),
        "help": args("--help"),
    }


def gpt_npy_args_seeds():
    return {
        "minimal": args("--checkpoint", "m.safetensors", "--in", "in", "--out", "out"),
        "everything": args("--checkpoint=m.safetensors", "--in=in", "--out=out", "--grad=tape",
                           "--dtype=float32", "--detect-anomaly"),
        "manual": args("--checkpoint", "m", "--in", "i", "--out", "o", "--grad", "manual"),
        "bad_member": args("--checkpoint", "m", "--in", "i", "--out", "o", "--dtype", "float16"),
        "unknown": args("--chekpoint=m", "--in", "i", "--out", "o"),
        "stray": args("--checkpoint", "m", "--in", "i", "--out", "o", "extra"),
        "missing": args("--in", "i"),
        "help": args("-h"),
        "dashdash": args("--checkpoint", "m", "--", "--in", "i"),
    }


def checkpoint_seeds():
    """Small GPT checkpoints built by tests/hostile/make_hostile.py's helpers: valid ones of a few sizes
    and dtypes, and the case of a metadata claim far beyond the tensors."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "hostile"))
    import make_hostile as h

    def model(dtype="F32", claim=None, **sizes):
        s = dict(h.SIZES, **sizes)
        tensors = [(n, dtype, shape, values) for n, _, shape, values in h.base_tensors(s, with_optimiser=False)]
        metadata = h.base_metadata(s)
        metadata.update(claim or {})
        entries, data = h.header_and_data(tensors, metadata)
        return h.file_bytes(h.join_header(entries), data)

    tiny = dict(vocab_size=3, block_size=2, d_model=2, heads=1, kv_heads=1)
    return {
        "base.safetensors": model(),
        "tiny.safetensors": model(**tiny),
        "tiny_f64.safetensors": model("F64", **tiny),
        "two_layers.safetensors": model(layers=2, **tiny),
        "gqa.safetensors": model(heads=2, kv_heads=1),
        "layers_claim.safetensors": model(claim={"layers": "4000000000"}, **tiny),
    }


def gpt2_tokenizer_seeds():
    """vocab.json, merges.txt and a text, NUL-separated: GPT-2's 256 byte pieces plus a few merges."""
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
    others = [b for b in range(256) if b not in printable]
    piece = {b: chr(b) if b in printable else chr(256 + others.index(b)) for b in range(256)}
    vocab = {piece[b]: b for b in range(256)}
    vocab.update({"\u0120t": 256, "he": 257, "\u0120the": 258, "<|endoftext|>": 259})
    merges = "#version: 0.2\n\u0120 t\nh e\n\u0120t he\n"
    join = lambda v, m, text: json.dumps(v).encode() + b"\0" + m.encode() + b"\0" + text
    return {
        "valid": join(vocab, merges,
                      "the theme: then, 'll they're 42 \u00e9t\u00e9 \U0001f600 <|endoftext|>!".encode()),
        "invalid_utf8": join(vocab, merges, b"ok \xff\xe2\x82 \xed\xa0\x80 the"),
        "ids_gap": join(dict(vocab, extra=300), merges, b"the"),
        "merge_unknown": join(vocab, merges + "q \u4e2d\n", b"the"),
        "not_object": b"[1, 2]\0#version: 0.2\n\0text",
        "nested": b'{"a": {"b": 1}}\0#version\0x',
    }


def write(target, seeds):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("npy", npy_seeds())
    write("safetensors", safetensors_seeds())
    write("checkpoint", checkpoint_seeds())
    write("mha_npy_args", mha_npy_args_seeds())
    write("gpt_npy_args", gpt_npy_args_seeds())
    write("gpt2_tokenizer", gpt2_tokenizer_seeds())
