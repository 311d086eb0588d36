#!/usr/bin/python3
"""Converts nanoGPT's ckpt.pt to an xgrad checkpoint and back (docs/spec.md, "Architecture variants":
nanoGPT is bias = all or none with mlp = gelu; its c_attn is W_Q | W_K | W_V stacked, and every nn.Linear
weight is xgrad's matrix transposed).

    nanogpt_convert.py to-xgrad ckpt.pt model.safetensors [--meta meta.pkl]
    nanogpt_convert.py to-nanogpt model.safetensors ckpt.pt

to-xgrad drops torch.compile's "_orig_mod." prefixes and the attention mask buffers; with --meta (the
meta.pkl of nanoGPT's character-level data sets) whose characters are single bytes, the checkpoint gets
that byte vocabulary as "vocab", so xgrad-sample can use it. to-nanogpt writes {"model", "model_args",
"iter_num", "best_val_loss", "config"} as nanoGPT's train.py does, with lm_head.weight tied to wte and no
mask buffers (nanoGPT with PyTorch 2's flash attention has none). Needs PyTorch and NumPy (Debian:
python3-torch, python3-numpy). Errors: one line on stderr, exit 2, nothing written.
"""
import json
import math
import os
import pickle
import struct
import sys
import tempfile

import numpy as np
import torch

SIZE_KEYS = ("vocab_size", "block_size", "layers", "d_model", "heads", "kv_heads")
# The variant keys of docs/spec.md's first table, each checked below against what nanoGPT can express
# (rope_base has no effect with learned positions); a later key is named in "model_keys" and refused.
# tests/test_gpt_config.cpp pins these two lists to the model's description.
VARIANT_KEYS = ("norm", "position", "rope_base", "mlp", "mlp_hidden", "bias", "tied_head")


class ConvertError(Exception):
    pass


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ConvertError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ConvertError(f"{path}: header length {n} exceeds the file's {len(data)} bytes")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError:
        raise ConvertError(f"{path}: header is not valid JSON")
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        dtype = {"F32": "<f4", "F64": "<f8"}.get(e.get("dtype"))
        if dtype is None:
            raise ConvertError(f"{path}: tensor {name} has dtype {e.get('dtype')}; only F32 and F64 are read")
        begin, end = e["data_offsets"]
        a = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=dtype)
        if a.size != math.prod(e["shape"]):
            raise ConvertError(f"{path}: tensor {name}'s bytes do not match its shape {e['shape']}")
        tensors[name] = a.reshape(e["shape"]).astype(np.float32)
    return metadata, tensors


def write_safetensors_atomic(path, tensors, metadata):
    header, chunks, offset = {}, [], 0
    for name in sorted(tensors):
        raw = np.ascontiguousarray(tensors[name], dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    write_atomic(path, struct.pack("<Q", len(text)) + text + b"".join(chunks))


def write_atomic(path, payload):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def numpy_of(t):
    return t.detach().to(torch.float32).cpu().numpy()


def to_xgrad(ckpt_path, out_path, meta_path=None):
    ckpt = torch.load(ckpt_path, map_location="cpu")
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        raise ConvertError(f"{ckpt_path}: not a nanoGPT checkpoint (no 'model' and 'model_args')")
    args = ckpt["model_args"]
    state = {k[len("_orig_mod."):] if k.startswith("_orig_mod.") else k: v for k, v in ckpt["model"].items()}
    state = {k: v for k, v in state.items() if not k.endswith(".attn.bias") or k.count(".") != 4}
    L, d, H, V, T = (int(args[k]) for k in ("n_layer", "n_embd", "n_head", "vocab_size", "block_size"))
    bias = bool(args.get("bias", True))
    take = lambda name: numpy_of(state.pop(name)) if name in state else missing(ckpt_path, name)
    out = {"wte": take("transformer.wte.weight"), "wpe": take("transformer.wpe.weight")}
    for i in range(L):
        p, b = f"transformer.h.{i}.", f"blocks.{i}."
        qkv = take(p + "attn.c_attn.weight")  # (3d, d), nn.Linear (out, in)
        if qkv.shape != (3 * d, d):
            raise ConvertError(f"{ckpt_path}: {p}attn.c_attn.weight has shape {qkv.shape}, n_embd {d} needs {(3 * d, d)}")
        for k, part in enumerate("QKV"):
            out[b + "attn.W_" + part] = qkv[k * d:(k + 1) * d].T
        out[b + "attn.W_O"] = take(p + "attn.c_proj.weight").T
        out[b + "mlp.W_fc"] = take(p + "mlp.c_fc.weight").T
        out[b + "mlp.W_proj"] = take(p + "mlp.c_proj.weight").T
        out[b + "ln_1.weight"] = take(p + "ln_1.weight")
        out[b + "ln_2.weight"] = take(p + "ln_2.weight")
        if bias:
            qkv_b = take(p + "attn.c_attn.bias")
            for k, part in enumerate("QKV"):
                out[b + "attn.b_" + part] = qkv_b[k * d:(k + 1) * d]
            out[b + "attn.b_O"] = take(p + "attn.c_proj.bias")
            out[b + "mlp.b_fc"] = take(p + "mlp.c_fc.bias")
            out[b + "mlp.b_proj"] = take(p + "mlp.c_proj.bias")
            out[b + "ln_1.bias"] = take(p + "ln_1.bias")
            out[b + "ln_2.bias"] = take(p + "ln_2.bias")
    out["ln_f.weight"] = take("transformer.ln_f.weight")
    if bias:
        out["ln_f.bias"] = take("transformer.ln_f.bias")
    head = state.pop("lm_head.weight", None)
    if head is not None and not np.array_equal(numpy_of(head), out["wte"]):
        out["lm_head"] = numpy_of(head).T
    if state:
        raise ConvertError(f"{ckpt_path}: tensor {sorted(state)[0]} is not part of nanoGPT's GPT with {L} layers")
    metadata = {"vocab_size": str(V), "block_size": str(T), "layers": str(L), "d_model": str(d), "heads": str(H),
                "kv_heads": str(H), "bias": "all" if bias else "none", "mlp": "gelu"}
    if "lm_head" in out:
        metadata["tied_head"] = "false"
    if "iter_num" in ckpt:
        metadata["step"] = str(int(ckpt["iter_num"]))
    if meta_path:
        metadata["vocab"] = byte_vocabulary(meta_path, V)
    write_safetensors_atomic(out_path, out, metadata)


def missing(path, name):
    raise ConvertError(f"{path}: tensor {name} is missing")


def byte_vocabulary(meta_path, V):
    with open(meta_path, "rb") as f:
        meta = pickle.load(f)
    itos = meta.get("itos") if isinstance(meta, dict) else None
    if not isinstance(itos, dict) or sorted(itos) != list(range(len(itos))):
        raise ConvertError(f"{meta_path}: no 'itos' map of token ids 0..n-1")
    values = [itos[i].encode("utf-8") for i in range(len(itos))]
    if any(len(v) != 1 for v in values) or [v[0] for v in values] != sorted({v[0] for v in values}):
        raise ConvertError(f"{meta_path}: its characters are not single bytes in ascending order (not a byte vocabulary)")
    if len(values) > V:
        raise ConvertError(f"{meta_path}: {len(values)} characters, more than the model's vocab_size {V}")
    return "[" + ", ".join(str(v[0]) for v in values) + "]"


def to_nanogpt(in_path, out_path):
    metadata, t = read_safetensors(in_path)
    for k in SIZE_KEYS:
        if not metadata.get(k, "").isdigit():
            raise ConvertError(f'{in_path}: metadata has no integer "{k}"')
    V, T, L, d, H, G = (int(metadata[k]) for k in SIZE_KEYS)
    for key in filter(None, metadata.get("model_keys", "").split(",")):  # later variants (docs/spec.md)
        raise ConvertError(f'nanoGPT cannot express metadata "{key}" (a later model key, named in "model_keys")')
    wanted = {"norm": "layernorm", "position": "learned", "mlp": "gelu", "tied_head": "true"}
    for key, value in wanted.items():
        if metadata.get(key, {"mlp": "gelu_tanh"}.get(key, value)) != value:
            raise ConvertError(f'nanoGPT cannot express metadata "{key}" = {metadata.get(key, "gelu_tanh")}'
                               f" (nanoGPT is layernorm, learned positions, exact GELU, a tied head)")
    bias = metadata.get("bias", "mlp")
    if bias not in ("all", "none"):
        raise ConvertError(f'nanoGPT cannot express metadata "bias" = {bias} (allowed: all, none)')
    if G != H or int(metadata.get("mlp_hidden", 4 * d)) != 4 * d:
        raise ConvertError('nanoGPT cannot express metadata "kv_heads" or "mlp_hidden" other than heads and 4 d_model')
    tensor = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    s = {"transformer.wte.weight": tensor(t["wte"]), "transformer.wpe.weight": tensor(t["wpe"])}
    for i in range(L):
        p, b = f"transformer.h.{i}.", f"blocks.{i}."
        s[p + "ln_1.weight"] = tensor(t[b + "ln_1.weight"])
        s[p + "attn.c_attn.weight"] = tensor(np.concatenate([t[b + "attn.W_" + x].T for x in "QKV"]))
        s[p + "attn.c_proj.weight"] = tensor(t[b + "attn.W_O"].T)
        s[p + "ln_2.weight"] = tensor(t[b + "ln_2.weight"])
        s[p + "mlp.c_fc.weight"] = tensor(t[b + "mlp.W_fc"].T)
        s[p + "mlp.c_proj.weight"] = tensor(t[b + "mlp.W_proj"].T)
        if bias == "all":
            s[p + "ln_1.bias"] = tensor(t[b + "ln_1.bias"])
            s[p + "attn.c_attn.bias"] = tensor(np.concatenate([t[b + "attn.b_" + x] for x in "QKV"]))
            s[p + "attn.c_proj.bias"] = tensor(t[b + "attn.b_O"])
            s[p + "ln_2.bias"] = tensor(t[b + "ln_2.bias"])
            s[p + "mlp.c_fc.bias"] = tensor(t[b + "mlp.b_fc"])
            s[p + "mlp.c_proj.bias"] = tensor(t[b + "mlp.b_proj"])
    s["transformer.ln_f.weight"] = tensor(t["ln_f.weight"])
    if bias == "all":
        s["transformer.ln_f.bias"] = tensor(t["ln_f.bias"])
    s["lm_head.weight"] = s["transformer.wte.weight"]
    args = {"n_layer": L, "n_head": H, "n_embd": d, "block_size": T, "bias": bias == "all", "vocab_size": V,
            "dropout": 0.0}
    ckpt = {"model": s, "model_args": args, "iter_num": int(metadata.get("step", 0)),
            "best_val_loss": float("inf"), "config": {}}
    folder = os.path.dirname(os.path.abspath(out_path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(out_path) + ".")
    os.close(fd)
    try:
        torch.save(ckpt, tmp)
        os.replace(tmp, out_path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv):
    usage = "usage: nanogpt_convert.py to-xgrad CKPT.pt OUT.safetensors [--meta meta.pkl] | to-nanogpt IN.safetensors OUT.pt"
    try:
        if len(argv) in (3, 5) and argv[0] == "to-xgrad" and (len(argv) == 3 or argv[3] == "--meta"):
            to_xgrad(argv[1], argv[2], argv[4] if len(argv) == 5 else None)
        elif len(argv) == 3 and argv[0] == "to-nanogpt":
            to_nanogpt(argv[1], argv[2])
        else:
            raise ConvertError(usage)
    except (ConvertError, OSError, KeyError, ValueError, pickle.UnpicklingError, RuntimeError) as e:
        print(f"nanogpt_convert.py: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
