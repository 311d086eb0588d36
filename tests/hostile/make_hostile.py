#!/usr/bin/env python3
"""Writes the hostile-file corpus of tests/hostile/ (replayed by tests/hostile/replay.sh).

    /usr/bin/python3 tests/hostile/make_hostile.py      (standard library only; rewrites every file)

Each file is a small, otherwise valid input with one hostile change: metadata that claims a model far
larger than the file, the safetensors reference reader's own invalid-header cases (overflowing shapes,
overlapping offsets, forged header lengths, deep nesting, duplicate keys, trailing bytes, metadata that
is not strings, ...) grafted into a valid checkpoint, and .npy files whose shapes ask for more than the
file holds, or whose work would need more memory than a machine has. Every tool must refuse each of
them quickly, with one line on stderr and exit status 2.

Layout: checkpoints/NAME.safetensors (for xgrad-gpt-npy, xgrad-sample, xgrad-train --resume, each with
in/ and text.txt below); gpt_in/NAME/ (tokens for xgrad-gpt-npy with checkpoints/base.safetensors or the
checkpoint named in gpt_in/NAME/checkpoint); mha_in/NAME/ (inputs of xgrad-mha-npy, and its flags in
mha_in/NAME/args); tokenizer_in/NAME/ (GPT-2's vocab.json and merges.txt, for xgrad-convert --from
hf-gpt2 beside a model of the valid files' size, and for xgrad-train --tokenizer gpt2:DIR). Cases named
valid_* must be accepted: they show that the tools and the replay work at
all; valid_gpt_* checkpoints are run by xgrad-gpt-npy only (they hold no vocabulary to sample from).
"""
import base64
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = [10, 32, 97, 98, 99]  # "\n", " ", "a", "b", "c": the bytes of text.txt
SIZES = {"vocab_size": 5, "block_size": 4, "layers": 1, "d_model": 4, "heads": 2, "kv_heads": 2}


def parameter_shapes(V, block, L, d, kv):
    shapes = [("wte", [V, d]), ("wpe", [block, d])]
    for i in range(L):
        b = "blocks.%d." % i
        shapes += [(b + "ln_1.weight", [d]), (b + "ln_1.bias", [d]), (b + "attn.W_Q", [d, d]),
                   (b + "attn.W_K", [d, kv]), (b + "attn.W_V", [d, kv]), (b + "attn.W_O", [d, d]),
                   (b + "ln_2.weight", [d]), (b + "ln_2.bias", [d]), (b + "mlp.W_fc", [d, 4 * d]),
                   (b + "mlp.b_fc", [4 * d]), (b + "mlp.W_proj", [4 * d, d]), (b + "mlp.b_proj", [d])]
    return shapes + [("ln_f.weight", [d]), ("ln_f.bias", [d])]


def count(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def small_values(n, seed):
    # Deterministic, small, varied: a model that computes finite numbers.
    return [((k * 7919 + seed * 104729) % 200 - 100) / 2000.0 for k in range(n)]


def base_tensors(sizes=SIZES, with_optimiser=True):
    """(name, dtype, shape, values) of a valid checkpoint, parameters and optimiser state as xgrad-train
    writes them."""
    d = sizes["d_model"]
    kv = sizes["kv_heads"] * (d // sizes["heads"])
    params = parameter_shapes(sizes["vocab_size"], sizes["block_size"], sizes["layers"], d, kv)
    tensors = [(name, "F32", shape, small_values(count(shape), k)) for k, (name, shape) in enumerate(params)]
    if with_optimiser:
        tensors.append(("optim.step", "F32", [], [1.0]))
        for kind in ("exp_avg", "exp_avg_sq"):
            tensors += [("optim.%s.%s" % (kind, name), "F32", shape, [0.0] * count(shape))
                        for name, shape in params]
    return tensors


def base_metadata(sizes=SIZES):
    m = {k: str(v) for k, v in sizes.items()}
    m.update({"vocab": json.dumps(VOCAB), "step": "1", "seed": "1", "batch": "2"})
    return m


def pack(dtype, values):
    return struct.pack("<%d%s" % (len(values), "f" if dtype == "F32" else "d"), *values)


def header_and_data(tensors, metadata):
    """The header as an ordered list of (key, JSON text) and the data buffer."""
    entries = [("__metadata__", json.dumps(metadata))] if metadata is not None else []
    data = b""
    for name, dtype, shape, values in sorted(tensors, key=lambda t: t[0]):
        raw = pack(dtype, values)
        entries.append((name, json.dumps({"dtype": dtype, "shape": shape,
                                          "data_offsets": [len(data), len(data) + len(raw)]})))
        data += raw
    return entries, data


def join_header(entries):
    return "{" + ",".join(json.dumps(k) + ":" + v for k, v in entries) + "}"


def file_bytes(header_text, data, length=None):
    header = header_text.encode() if isinstance(header_text, str) else header_text
    header += b" " * ((8 - len(header) % 8) % 8)
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def checkpoint(metadata_change=None, tensors=None, entry_change=None, header_change=None, data_change=None,
               length=None):
    tensors = base_tensors() if tensors is None else tensors
    metadata = base_metadata()
    if metadata_change:
        metadata_change(metadata)
    entries, data = header_and_data(tensors, metadata)
    if entry_change:
        entries = entry_change(entries)
    text = join_header(entries)
    if header_change:
        text = header_change(text)
    if data_change:
        data = data_change(data)
    return file_bytes(text, data, length)


def set_meta(**changes):
    return lambda m: m.update(changes)


def replace_entry(name, **fields):
    def change(entries):
        out = []
        for k, v in entries:
            if k == name:
                obj = json.loads(v)
                obj.update(fields)
                v = json.dumps(obj)
            out.append((k, v))
        return out
    return change


def offsets_of(entries, name):
    return dict((k, json.loads(v)) for k, v in entries)[name]["data_offsets"]


def overlap(entries):
    # wpe claims the bytes of the tensor before it as well as its own; the lengths stay consistent
    # because wte moves over its neighbour's range.
    out = []
    first = entries[1][0]  # the first tensor in data order
    second = entries[2][0]
    b2 = offsets_of(entries, second)
    for k, v in entries:
        if k == first:
            obj = json.loads(v)
            length = obj["data_offsets"][1] - obj["data_offsets"][0]
            obj["data_offsets"] = [b2[0] - 4, b2[0] - 4 + length]
            v = json.dumps(obj)
        out.append((k, v))
    return out


def shift_offsets(by):
    def change(entries):
        out = []
        for k, v in entries:
            obj = json.loads(v)
            if k != "__metadata__":
                obj["data_offsets"] = [o + by for o in obj["data_offsets"]]
            out.append((k, json.dumps(obj)))
        return out
    return change


def duplicate_tensor(entries):
    return entries + [entries[1]]


def duplicate_metadata(entries):
    return [entries[0]] + entries + []


def add_entry(name, text):
    return lambda entries: entries + [(name, text)]


# ---- SentencePiece models (protobuf wire format, written by hand: the standard library has no protobuf)

def varint(n):
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def field(number, payload):
    """A length-delimited field (wire type 2); an int payload is a varint field (wire type 0)."""
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def sentencepiece_model(normalizer_extra=b"", extra=b"", letters="abc"):
    """A unigram ModelProto as xgrad trains them: <unk> <s> </s>, the newline and tab as user-defined
    pieces, then the word boundary and the letters of text.txt; the identity normaliser."""
    UNKNOWN, CONTROL, USER_DEFINED, NORMAL = 2, 3, 4, 1
    pieces = [("<unk>", UNKNOWN), ("<s>", CONTROL), ("</s>", CONTROL), ("\n", USER_DEFINED), ("\t", USER_DEFINED),
              ("\u2581", NORMAL)] + [(c, NORMAL) for c in letters]
    out = b""
    for k, (piece, kind) in enumerate(pieces):
        score = struct.pack("<f", -float(k))
        out += field(1, field(1, piece.encode()) + varint(2 << 3 | 5) + score + field(3, kind))
    out += field(2, field(3, 1) + field(4, len(pieces)))  # trainer_spec: model_type UNIGRAM, vocab_size
    normalizer = field(1, b"identity") + field(3, 0) + field(4, 0) + normalizer_extra
    return out + field(3, normalizer) + extra


# A precompiled character map as libsentencepiece reads it (the trie's byte size, the trie, the strings):
# a trie of 0xff units sends the library's lookups far outside the blob.
CORRUPT_CHARSMAP = struct.pack("<I", 8) + b"\xff" * 8 + b"x\0"
SP_SIZES = dict(SIZES, vocab_size=9)


def sentencepiece_checkpoint(model):
    def change(m):
        m.update(vocab_size="9", tokenizer="sentencepiece", tokenizer_model=base64.b64encode(model).decode())
        del m["vocab"]  # a SentencePiece checkpoint holds no byte vocabulary
    return checkpoint(change, tensors=base_tensors(SP_SIZES))


def checkpoint_cases():
    big = "4000000000"
    u64max = "18446744073709551615"
    cases = {
        "valid_base": checkpoint(),
        # The case found from outside: 3.6 KB, every tensor valid, metadata says 4e9 layers.
        "layers_4000000000": checkpoint(set_meta(layers=big)),
        "layers_u64_max": checkpoint(set_meta(layers=u64max)),
        "layers_past_u64": checkpoint(set_meta(layers="184467440737095516160")),
        "vocab_size_huge": checkpoint(set_meta(vocab_size=big)),
        "block_size_huge": checkpoint(set_meta(block_size=big)),
        "block_size_huge_no_position": checkpoint(set_meta(block_size=big, position="none")),
        "d_model_huge": checkpoint(set_meta(d_model="4611686018427387904", heads="1", kv_heads="1")),
        "d_model_quarter_overflow": checkpoint(set_meta(d_model="4611686018427387905", heads="5", kv_heads="5")),
        "kv_heads_huge": checkpoint(set_meta(kv_heads=u64max)),
        "heads_huge": checkpoint(set_meta(heads=u64max, kv_heads="1")),
        "heads_zero": checkpoint(set_meta(heads="0")),
        "mlp_hidden_huge": checkpoint(set_meta(mlp_hidden=u64max)),
        "swiglu_layers_huge": checkpoint(set_meta(layers=big, mlp="swiglu", bias="all", tied_head="false")),
        "untied_vocab_huge": checkpoint(set_meta(vocab_size=big, tied_head="false")),
        "layers_negative": checkpoint(set_meta(layers="-1")),
        "layers_hex": checkpoint(set_meta(layers="0x10")),
        "layers_padded": checkpoint(set_meta(layers=" 1")),
        # control bytes in a value that messages quote: they must reach stderr escaped
        "metadata_control_bytes": checkpoint(set_meta(norm="layer\x1b[2J\x00norm")),
        "tokenizer_control_bytes": checkpoint(set_meta(tokenizer="\x1b[2J\x00words")),
        "step_huge": checkpoint(set_meta(step="99999999999999999999999999")),
        "vocab_deep": checkpoint(set_meta(vocab="[" * 100000)),
        "vocab_long": checkpoint(set_meta(vocab="[" + ", ".join(["97"] * 100000) + "]")),
        "metadata_number": checkpoint(header_change=lambda t: t.replace('"layers": "1"', '"layers": 1')),
        "metadata_array": checkpoint(header_change=lambda t: t.replace('"layers": "1"', '"layers": ["1"]')),
        "metadata_not_object": checkpoint(
            entry_change=lambda e: [("__metadata__", '["layers", "1"]')] + e[1:]),
        # The safetensors reference reader's invalid-header cases, grafted into the checkpoint.
        "header_length_u64_max": checkpoint(length=2**64 - 1),
        "header_length_past_end": checkpoint(length=10**6),
        "header_length_short": checkpoint(length=60),
        "header_length_zero": checkpoint(length=0),
        "header_only_length": struct.pack("<Q", 2**40),
        "header_too_small": b"\x01\x00\x00",
        "header_not_utf8": checkpoint(header_change=lambda t: t.replace('"batch"', '"b\udcffatch"', 1)
                                      .encode("utf-8", "surrogateescape")),
        "header_not_json": checkpoint(header_change=lambda t: t[:-1]),
        "header_not_object": file_bytes("[1, 2, 3]", b""),
        "header_deep_nesting": checkpoint(header_change=lambda t: t[:-1] + ', "x": ' + "[" * 50000 +
                                          "]" * 50000 + "}"),
        "header_deep_in_metadata": checkpoint(header_change=lambda t: t.replace(
            '"layers": "1"', '"layers": "1", "deep": ' + "{\"a\":" * 10000 + "1" + "}" * 10000)),
        "header_many_empty_tensors": checkpoint(entry_change=lambda e: e + [
            ("z%05d" % k, '{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}')
            for k in range(3000)]),
        "duplicate_tensor": checkpoint(entry_change=duplicate_tensor),
        "duplicate_metadata": checkpoint(entry_change=duplicate_metadata),
        "trailing_bytes": checkpoint(data_change=lambda d: d + b"\x00" * 4),
        "hole_in_buffer": checkpoint(entry_change=shift_offsets(8), data_change=lambda d: b"\x00" * 8 + d),
        "overlapping_offsets": checkpoint(entry_change=overlap),
        "offsets_end_before_begin": checkpoint(entry_change=replace_entry("wte", data_offsets=[80, 0])),
        "offsets_past_buffer": checkpoint(entry_change=replace_entry("wte", data_offsets=[0, 2**63])),
        "offsets_three": checkpoint(entry_change=replace_entry("wte", data_offsets=[0, 80, 160])),
        "offsets_negative": checkpoint(entry_change=replace_entry("wte", data_offsets=[-80, 0])),
        "shape_overflow": checkpoint(entry_change=replace_entry("wte", shape=[2, 18446744073709551614])),
        "shape_bytes_overflow": checkpoint(entry_change=replace_entry("wte", shape=[2, 9223372036854775807])),
        "shape_float": checkpoint(entry_change=replace_entry("wte", shape=[5.0, 4])),
        "shape_negative": checkpoint(entry_change=replace_entry("wte", shape=[-5, -4])),
        "shape_many_dims": checkpoint(entry_change=replace_entry("wte", shape=[1] * 60000 + [5, 4])),
        "shape_wrong": checkpoint(entry_change=replace_entry("wte", shape=[4, 5])),
        "dtype_i64": checkpoint(entry_change=replace_entry("wte", dtype="I64")),
        "dtype_f16_half_bytes": checkpoint(entry_change=replace_entry("wte", dtype="F16")),
        "unknown_field": checkpoint(entry_change=replace_entry("wte", extra=1)),
        "unknown_tensor": checkpoint(entry_change=add_entry("evil", '{"dtype":"F32","shape":[0],"data_offsets":[0,0]}')),
        "optim_empty_huge": checkpoint(entry_change=add_entry(
            "optim.exp_avg.evil", '{"dtype":"F32","shape":[0,18446744073709551615],"data_offsets":[0,0]}')),
        "optim_step_wrong": checkpoint(entry_change=replace_entry("optim.step", shape=[1])),
        "missing_tensor": checkpoint(tensors=[t for t in base_tensors() if t[0] != "ln_f.bias"]),
        "truncated": checkpoint()[:-100],
        "empty": b"",
        # The tokenizer model inside the checkpoint: a normaliser's charsmap or a denormaliser once reached
        # libsentencepiece, which read out of bounds while encoding the prompt.
        "valid_sentencepiece": sentencepiece_checkpoint(sentencepiece_model()),
        "sentencepiece_charsmap": sentencepiece_checkpoint(
            sentencepiece_model(normalizer_extra=field(2, CORRUPT_CHARSMAP))),
        "sentencepiece_denormalizer": sentencepiece_checkpoint(
            sentencepiece_model(extra=field(5, field(1, b"x") + field(2, CORRUPT_CHARSMAP)))),
        "sentencepiece_not_protobuf": sentencepiece_checkpoint(b"\x0b" + b"\xff" * 64),
    }
    # A GPT-2 tokenizer in the metadata that does not parse, or has another size than the model's 5.
    cases["gpt2_size_disagrees"] = checkpoint(gpt2_metadata())
    cases["gpt2_vocab_not_base64"] = checkpoint(gpt2_metadata(tokens="@@@@"))
    cases["gpt2_vocab_deep"] = checkpoint(gpt2_metadata(vocab_text='{"a": ' + "[" * 100000))
    cases["gpt2_merges_unknown_piece"] = checkpoint(gpt2_metadata(merges_text="#version: 0.2\nq z\n"))
    # A model of the GPT-2 tokenizer's size: replay.sh makes it a Hugging Face folder for tokenizer_in/.
    cases["valid_gpt_gpt2_vocab"] = file_bytes(*big_model(dict(SIZES, vocab_size=259)))
    # Big sizes that match their tensors: a tiny model with a vocabulary or context a tool must not
    # multiply by a batch it cannot hold (see gpt_in/).
    wide = dict(SIZES, vocab_size=65536, d_model=1, heads=1, kv_heads=1)
    cases["valid_gpt_wide_vocab"] = file_bytes(*big_model(wide))
    long_context = dict(SIZES, block_size=65536, d_model=1, heads=1, kv_heads=1)
    cases["valid_gpt_long_context"] = file_bytes(*big_model(long_context))
    return cases


def gpt2_files(extra_tokens=0):
    """GPT-2's tokenizer files: the 256 byte pieces of its byte-to-unicode table, three merges (259 tokens),
    and ``extra_tokens`` added tokens."""
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE]
    others = [b for b in range(256) if b not in printable]
    vocab = {(chr(b) if b in printable else chr(256 + others.index(b))): b for b in range(256)}
    vocab.update({"ab": 256, "abc": 257, "\u0120abc": 258})
    vocab.update({"<extra%d>" % k: 259 + k for k in range(extra_tokens)})
    return vocab, "#version: 0.2\na b\nab c\n\u0120 abc\n"


def tokenizer_cases():
    """Folders of GPT-2 tokenizer files (tokenizer_in/NAME/), each with one hostile change."""
    vocab, merges = gpt2_files()
    dump = lambda v: json.dumps(v)
    case = lambda v=None, m=None: {"vocab.json": dump(vocab) if v is None else v,
                                   "merges.txt": merges if m is None else m}
    with_id = lambda piece, value: dump(vocab)[:-1] + ', "%s": %s}' % (piece, value)
    return {
        "valid_gpt2": case(),
        "valid_gpt2_crlf": case(m=merges.replace("\n", "\r\n")),
        "size_disagrees": case(dump(dict(vocab, **{"<extra%d>" % k: 259 + k for k in range(41)}))),
        "vocab_not_object": case("[1, 2, 3]"),
        "vocab_not_json": case(dump(vocab)[:-1]),
        "vocab_deep": case('{"a": ' + "[" * 100000),
        "vocab_nested_object": case(dump(vocab)[:-1] + ', "x": {"y": 1}}'),
        "vocab_id_string": case(with_id("x", '"259"')),
        "vocab_id_negative": case(with_id("x", "-1")),
        "vocab_id_fraction": case(with_id("x", "259.5")),
        "vocab_id_huge": case(with_id("x", "18446744073709551615")),
        "vocab_id_past_u64": case(with_id("x", "1" + "0" * 400)),
        "vocab_ids_collide": case(with_id("x", "3")),
        "vocab_ids_gap": case(with_id("x", "300")),
        "vocab_duplicate_piece": case(with_id("ab", "259")),
        "vocab_missing_byte": case(dump({k: v for k, v in vocab.items() if v != 0} | {"zz": 0})),
        "vocab_piece_long": case(with_id("x" * 5000, "259")),
        "vocab_not_utf8": case(dump(vocab)[:-1].encode() + b', "\xff\xfe": 259}'),
        "vocab_empty": case(""),
        "merges_no_header": case(m="a b\n"),
        "merges_unknown_piece": case(m=merges + "q \u4e2d\n"),
        "merges_merged_unknown": case(m=merges + "b c\n"),
        "merges_three_pieces": case(m=merges + "a b c\n"),
        "merges_missing": {"vocab.json": dump(vocab)},
        "vocab_missing": {"merges.txt": merges},
    }


def gpt2_metadata(vocab_text=None, merges_text=None, tokens=None):
    """Checkpoint metadata holding a GPT-2 tokenizer (and no byte vocabulary) instead of the base's."""
    import base64
    vocab, merges = gpt2_files()
    encode = lambda t: base64.b64encode(t.encode() if isinstance(t, str) else t).decode()

    def change(m):
        del m["vocab"]
        m.update(tokenizer="gpt2", tokenizer_vocab=encode(vocab_text or json.dumps(vocab)),
                 tokenizer_merges=encode(merges_text or merges))
        if tokens is not None:
            m["tokenizer_vocab"] = tokens
    return change


def big_model(sizes):
    metadata = base_metadata(sizes)
    del metadata["vocab"]
    entries, data = header_and_data(base_tensors(sizes, with_optimiser=False), metadata)
    return join_header(entries), data


# ---- .npy -----------------------------------------------------------------------------------------------

def npy(descr, shape, payload, major=1, header_text=None, length=None):
    shape_text = "(" + "".join("%d, " % s for s in shape)[:-2] + ("," if len(shape) == 1 else "") + ")"
    text = header_text or "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)
    length_bytes = 2 if major == 1 else 4
    total = 6 + 2 + length_bytes + len(text) + 1
    text += " " * ((64 - total % 64) % 64) + "\n"
    n = len(text) if length is None else length
    prefix = b"\x93NUMPY" + bytes([major, 0]) + n.to_bytes(length_bytes, "little")
    return prefix + text.encode("latin-1") + payload


def f8(shape, fill=0.01):
    return npy("<f8", shape, struct.pack("<%dd" % count(shape), *([fill] * count(shape))))


def f4(shape, fill=0.01):
    return npy("<f4", shape, struct.pack("<%df" % count(shape), *([fill] * count(shape))))


def i4(shape, values=None):
    values = values if values is not None else [k % 5 for k in range(count(shape))]
    return npy("<i4", shape, struct.pack("<%di" % len(values), *values))


def mha_valid(B=1, T=3, d=4):
    return {"X.npy": f8([B, T, d]), "W_Q.npy": f8([d, d]), "W_K.npy": f8([d, d]), "W_V.npy": f8([d, d]),
            "W_O.npy": f8([d, d])}


def mha_cases():
    cases = {"valid_small": mha_valid()}
    # 1 MB of X, attention weights of 131072^2 values per head: 137 GB.
    cases["long_sequence"] = dict(mha_valid(), **{"X.npy": f4([1, 131072, 1]), "W_Q.npy": f8([1, 1]),
                                                  "W_K.npy": f8([1, 1]), "W_V.npy": f8([1, 1]),
                                                  "W_O.npy": f8([1, 1])})
    # Many heads over a long sequence: d = 64 heads of width 1.
    cases["many_heads"] = dict(mha_valid(), **{"args": "--heads 64", "X.npy": f4([1, 1024, 64]), "W_Q.npy": f8([64, 64]),
                                               "W_K.npy": f8([64, 64]), "W_V.npy": f8([64, 64]),
                                               "W_O.npy": f8([64, 64])})
    cases["valid_zero_batch_huge_t"] = dict(mha_valid(), **{"X.npy": npy("<f8", [0, 2**40, 4], b"")})
    cases["zero_width_huge_t"] = dict(mha_valid(), **{"X.npy": npy("<f8", [1, 2**32, 0], b"")})
    cases["shape_overflow"] = dict(mha_valid(), **{"X.npy": npy("<f8", [2**32, 2**32, 2**32], b"")})
    cases["shape_bytes_overflow"] = dict(mha_valid(), **{"X.npy": npy("<f8", [2**61, 1, 1], b"")})
    cases["shape_past_data"] = dict(mha_valid(), **{"X.npy": npy("<f8", [1, 100000, 4], b"\0" * 800)})
    cases["header_length_forged"] = dict(mha_valid(), **{"X.npy": npy("<f8", [1, 3, 4], b"\0" * 96, major=2,
                                                                       length=2**32 - 1)})
    cases["header_deep"] = dict(mha_valid(), **{"X.npy": npy("<f8", [1], b"", major=2, header_text="{'descr': " +
                                                              "(" * 50000 + ")" * 50000 + "}")})
    cases["header_long"] = dict(mha_valid(), **{"X.npy": npy("<f8", [1], b"", major=2,
                                                             header_text="{'descr': '" + "f" * 500000 + "'}")})
    cases["shape_many_dims"] = dict(mha_valid(), **{"X.npy": npy("<f8", [1] * 60000, b"\0" * 8, major=2)})
    cases["mask_huge_broadcast"] = dict(mha_valid(), **{"mask.npy": npy("|b1", [2**31, 2**31, 0], b"")})
    cases["mask_long"] = dict(mha_valid(), **{"mask.npy": npy("|b1", [1, 1, 100000], b"\1" * 100000)})
    return cases


def gpt_cases():
    return {
        "valid_base": {"tokens.npy": i4([2, 3]), "targets.npy": i4([2, 3])},
        "tokens_long_row": {"tokens.npy": i4([1, 5000], [0] * 5000)},
        "tokens_zero_rows_huge_t": {"tokens.npy": npy("<i4", [0, 2**40], b"")},
        "tokens_shape_overflow": {"tokens.npy": npy("<i8", [2**62, 2**62], b"")},
        "tokens_out_of_range": {"tokens.npy": i4([1, 3], [0, 1, 2**31 - 1])},
        # A checkpoint of V = 65536 (d = 1, 256 KB) and 65536 one-token rows: logits of 65536^2 values.
        "wide_vocab_many_rows": {"checkpoint": "valid_gpt_wide_vocab", "tokens.npy": i4([65536, 1], [1] * 65536),
                                 "targets.npy": i4([65536, 1], [2] * 65536)},
        # A context of 65536 (d = 1): one row of 65536 tokens needs 65536^2 attention weights.
        "long_context_row": {"checkpoint": "valid_gpt_long_context", "tokens.npy": i4([1, 65536], [1] * 65536)},
    }


# ---- xgrad-convert: a fixture folder of tests/data/convert_fixtures/ (named in the case's file "base")
# with the case's files put over it; "format" says --from.

FIXTURES = os.path.join(HERE, "..", "data", "convert_fixtures")


def hf_config(**changes):
    with open(os.path.join(FIXTURES, "hf_f32", "config.json")) as f:
        config = json.load(f)
    config.update(changes)
    return json.dumps(config, indent=2)


def hf_model_with_metadata(extra):
    """hf_f32's model.safetensors with keys added to its __metadata__ (xgrad.* keys carry xgrad's own)."""
    with open(os.path.join(FIXTURES, "hf_f32", "model.safetensors"), "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header["__metadata__"].update(extra)
    return file_bytes(json.dumps(header), data[8 + n:])


def hf_sentencepiece(model):
    return hf_model_with_metadata({"xgrad.tokenizer": "sentencepiece",
                                   "xgrad.tokenizer_model": base64.b64encode(model).decode()})


def convert_cases():
    hf = lambda **files: dict(base="hf_f32\n", format="hf-gpt2\n", **files)
    llama = lambda **files: dict(base="llama2c\n", format="llama2c\n", **files)
    deep = "[" * 100000 + "]" * 100000
    return {
        "valid_hf": hf(),
        "valid_hf_sentencepiece": hf(**{"model.safetensors": hf_sentencepiece(
            sentencepiece_model(letters="abcde"))}),  # 11 pieces: the fixture's vocab_size
        # config.json: every error names the file, the key and what was expected
        "config_activation_number": hf(**{"config.json": hf_config(activation_function=5)}),
        "config_n_embd_string": hf(**{"config.json": hf_config(n_embd="8")}),
        "config_n_inner_deep": hf(**{"config.json": hf_config()[:-1] + ', "n_inner": ' + deep + "}"}),
        "config_flag_string": hf(**{"config.json": hf_config(scale_attn_weights="yes")}),
        "config_directory": hf(**{"config.json": {"x": ""}}),
        "config_not_json": hf(**{"config.json": hf_config()[:-2]}),
        # the tokenizer model in an hf-gpt2 folder's metadata, and llama2.c's tokenizer.model beside
        "hf_sentencepiece_charsmap": hf(**{"model.safetensors": hf_sentencepiece(
            sentencepiece_model(normalizer_extra=field(2, CORRUPT_CHARSMAP), letters="abcde"))}),
        "hf_sentencepiece_denormalizer": hf(**{"model.safetensors": hf_sentencepiece(
            sentencepiece_model(extra=field(5, field(2, CORRUPT_CHARSMAP)), letters="abcde"))}),
        "llama2c_tokenizer_model_charsmap": llama(**{"tokenizer.model": sentencepiece_model(
            normalizer_extra=field(2, CORRUPT_CHARSMAP))}),
        "llama2c_tokenizer_model_denormalizer": llama(**{"tokenizer.model": sentencepiece_model(
            extra=field(5, b""))}),
        "llama2c_tokenizer_model_not_protobuf": llama(**{"tokenizer.model": b"\xff" * 32}),
    }


# ---- xgrad-experiment specs (run with --dry-run and --data text.txt)

def spec(**fields):
    base = {"seeds": 1, "budget": {"steps": 2}, "fixed": {"block": 8, "d-model": 8, "heads": 2, "batch": 2}}
    base.update(fields)
    return json.dumps(base)


def spec_cases():
    return {
        "valid_spec.json": spec(axes={"heads": [1, 2]}),
        "deep_nesting.json": '{"seeds": ' + "[" * 200000 + "]" * 200000 + "}",
        "deep_object.json": '{"fixed": ' + '{"a": ' * 100000 + "1" + "}" * 100000 + "}",
        "seeds_huge.json": spec(seeds=1000000000000),
        "seeds_list_long.json": spec(seeds=list(range(1, 20001))),
        "axes_product_huge.json": spec(axes={"a%d" % k: list(range(100)) for k in range(6)}),
        "axes_product_wraps.json": spec(axes={"a%d" % k: list(range(2**8)) for k in range(8)}),
        "runs_too_many.json": spec(seeds=10000, axes={"heads": [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]}),
        "variant_dot_dot.json": spec(variants=[{"name": ".."}]),
        "variant_dot.json": spec(variants=[{"name": "."}]),
        "variant_slash.json": spec(variants=[{"name": "../../escape"}]),
        "variant_control.json": spec(variants=[{"name": "a\u001b[2J"}, {"name": "a\u001b[2J", "lr": 1}]),
        "variant_name_number.json": spec(variants=[{"lr": 0.1, "name": 5}]),
        "budget_steps_1e300.json": spec(budget={"steps": 1e300}),
        "budget_tokens_1e300.json": spec(budget={"tokens": 1e300}),
        "budget_steps_fraction.json": spec(budget={"steps": 0.4}),
        "budget_steps_negative.json": spec(budget={"steps": -1}),
        "budget_seconds_huge.json": spec(budget={"seconds": 1e300}),
        "baseline_number.json": spec(baseline=5),
        "fixed_not_object.json": spec(fixed=[1, 2]),
        "not_json.json": spec()[:-1],
        "not_object.json": "[1, 2]",
        "directory.json": {"x": ""},
    }


# ---- xgrad-sample's flags (with checkpoints/valid_base and the prompt "ab"): each refused with exit 2

SAMPLE_FLAGS = {
    "tokens_negative": "--tokens -1",
    "tokens_negative_joined": "--tokens=-1",
    "tokens_huge": "--tokens 18446744073709551615",
    "top_k_negative": "--top-k -1",
    "temperature_nan": "--temperature nan",
    "temperature_negative": "--temperature -0.5",
    "temperature_inf": "--temperature inf",
    "checkpoint_missing": "--checkpoint /nonexistent/model.safetensors",
    "valid_flags": "--tokens 3 --top-k 2 --temperature 0.5",
}


# ---- xgrad-train's flags (a tiny run on text.txt): each refused with exit 2

TRAIN_FLAGS = {
    "threads_huge": "--threads 100000",  # once "Resource temporarily unavailable" from thread creation
    "threads_zero": "--threads 0",
    "valid_train_flags": "--threads 2",
}


# Outcomes other than the rule "valid_* exit 0, every other case exit 2", by (case, tool): files that
# are hostile to one tool only, and the trainer's own --resume checks, which exit 1. "x" accepts any exit
# status (the memory and time limits still hold): a context that no tensor bounds is valid once the
# model knows `position = none`, and refused before.
OUTCOMES = {
    ("block_size_huge_no_position", "gpt-npy"): "x", ("block_size_huge_no_position", "sample"): "x",
    ("block_size_huge_no_position", "resume"): "x",
    ("step_huge", "gpt-npy"): 0, ("step_huge", "sample"): 0,  # --resume: a malformed checkpoint, 2
    ("optim_step_wrong", "gpt-npy"): 0, ("optim_step_wrong", "sample"): 0,
    ("vocab_deep", "gpt-npy"): 0, ("vocab_long", "gpt-npy"): 0,
    ("vocab_deep", "resume"): 1, ("vocab_long", "resume"): 1,  # the trainer refuses another vocabulary
    # an empty batch, but its (B, H, Tq, Tk) attention weights would have strides past 2^63: refused
    ("valid_zero_batch_huge_t", "mha-npy"): 2,
    # xgrad-gpt-npy reads no tokenizer; --resume with bytes refuses a checkpoint without "vocab" (status 1)
    **{(case, "gpt-npy"): 0 for case in ("gpt2_size_disagrees", "gpt2_vocab_not_base64", "gpt2_vocab_deep",
                                          "gpt2_merges_unknown_piece")},
    **{(case, "resume"): 1 for case in ("gpt2_size_disagrees", "gpt2_vocab_not_base64", "gpt2_vocab_deep",
                                         "gpt2_merges_unknown_piece")},
    ("size_disagrees", "train"): 0,  # a valid tokenizer of 300 tokens trains; the 259-token model refuses it
    # xgrad-gpt-npy reads no tokenizer; a resumed run trains its own tokenizer from text.txt (bytes),
    # another vocabulary than the checkpoint's: exit 1, as for vocab_deep
    ("sentencepiece_charsmap", "gpt-npy"): 0, ("sentencepiece_denormalizer", "gpt-npy"): 0,
    ("sentencepiece_not_protobuf", "gpt-npy"): 0, ("valid_sentencepiece", "resume"): 1,
    ("tokenizer_control_bytes", "gpt-npy"): 0, ("tokenizer_control_bytes", "resume"): 0,  # bytes kept
    ("sentencepiece_charsmap", "resume"): 1, ("sentencepiece_denormalizer", "resume"): 1,
    ("sentencepiece_not_protobuf", "resume"): 1,
}


def write_tree(root, files):
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    for name, content in files.items():
        if isinstance(content, dict):
            write_tree(os.path.join(root, name), content)
        else:
            mode = "w" if isinstance(content, str) else "wb"
            with open(os.path.join(root, name), mode) as f:
                f.write(content)


def main():
    checkpoints = {name + ".safetensors": data for name, data in checkpoint_cases().items()}
    write_tree(os.path.join(HERE, "checkpoints"), checkpoints)
    write_tree(os.path.join(HERE, "gpt_in"), gpt_cases())
    write_tree(os.path.join(HERE, "mha_in"), mha_cases())
    write_tree(os.path.join(HERE, "tokenizer_in"), tokenizer_cases())
    write_tree(os.path.join(HERE, "convert"), convert_cases())
    write_tree(os.path.join(HERE, "specs"), spec_cases())
    with open(os.path.join(HERE, "train_flags.txt"), "w") as f:
        f.write("# case flags: xgrad-train on text.txt, one step of a tiny model, with FLAGS\n")
        for case, flags in TRAIN_FLAGS.items():
            f.write("%s %s\n" % (case, flags))
    with open(os.path.join(HERE, "sample_flags.txt"), "w") as f:
        f.write("# case flags: xgrad-sample --checkpoint checkpoints/valid_base.safetensors --prompt ab FLAGS\n")
        for case, flags in SAMPLE_FLAGS.items():
            f.write("%s %s\n" % (case, flags))
    with open(os.path.join(HERE, "outcomes.txt"), "w") as f:
        f.write("# case tool status: the exceptions to 'valid_* exit 0, all else exit 2' (make_hostile.py)\n")
        for (case, tool), status in sorted(OUTCOMES.items()):
            f.write("%s %s %s\n" % (case, tool, status))
    with open(os.path.join(HERE, "text.txt"), "w") as f:
        f.write("abc abc\nabcabc ab c\n" * 30)
    sizes = [os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(HERE) for f in fs]
    print("tests/hostile: %d files, the largest %d bytes" % (len(sizes), max(sizes)))


if __name__ == "__main__":
    main()
