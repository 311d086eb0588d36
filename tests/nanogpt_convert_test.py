#!/usr/bin/python3
"""tools/nanogpt_convert.py on a nanoGPT-shaped checkpoint made here (nanoGPT's state_dict names, a
torch.compile "_orig_mod." prefix, the mask buffers, a character-level meta.pkl): to xgrad, checked by
xgrad-convert's strict reader, and back, equal bit for bit. Exit 77 (skipped) without PyTorch.

    nanogpt_convert_test.py XGRAD_CONVERT SCRATCH_DIR
"""
import json
import os
import pickle
import struct
import subprocess
import sys

try:
    import numpy as np
    import torch
except ImportError:
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "tools", "nanogpt_convert.py")


def nanogpt_state(L, d, V, T, bias, g):
    s = {"transformer.wte.weight": torch.randn(V, d, generator=g), "transformer.wpe.weight": torch.randn(T, d, generator=g)}
    for i in range(L):
        p = f"transformer.h.{i}."
        shapes = {"ln_1.weight": (d,), "attn.c_attn.weight": (3 * d, d), "attn.c_proj.weight": (d, d), "ln_2.weight": (d,),
                  "mlp.c_fc.weight": (4 * d, d), "mlp.c_proj.weight": (d, 4 * d)}
        if bias:
            shapes.update({"ln_1.bias": (d,), "attn.c_attn.bias": (3 * d,), "attn.c_proj.bias": (d,), "ln_2.bias": (d,),
                           "mlp.c_fc.bias": (4 * d,), "mlp.c_proj.bias": (d,)})
        for k, shape in shapes.items():
            s[p + k] = torch.randn(*shape, generator=g)
        s[p + "attn.bias"] = torch.tril(torch.ones(T, T)).view(1, 1, T, T)
    s["transformer.ln_f.weight"] = torch.randn(d, generator=g)
    if bias:
        s["transformer.ln_f.bias"] = torch.randn(d, generator=g)
    s["lm_head.weight"] = s["transformer.wte.weight"]
    return s


def with_metadata(src, dst, extra):
    """Copies the safetensors file src to dst with `extra` added to its metadata."""
    data = open(src, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header["__metadata__"].update(extra)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data[8 + n:])


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True)


def main(convert, scratch):
    os.makedirs(scratch, exist_ok=True)
    g = torch.Generator().manual_seed(5)
    failures = 0
    for bias in (True, False):
        L, d, V, T = 2, 8, 6, 5
        state = nanogpt_state(L, d, V, T, bias, g)
        ckpt = {"model": {"_orig_mod." + k: v for k, v in state.items()},
                "model_args": {"n_layer": L, "n_head": 2, "n_embd": d, "block_size": T, "bias": bias, "vocab_size": V,
                               "dropout": 0.0}, "iter_num": 250, "best_val_loss": 1.5, "config": {}}
        src, xg, back, meta = (os.path.join(scratch, n) for n in ("ckpt.pt", "model.safetensors", "back.pt", "meta.pkl"))
        torch.save(ckpt, src)
        with open(meta, "wb") as f:
            pickle.dump({"vocab_size": V, "itos": dict(enumerate("\n !abc")), "stoi": {}}, f)
        steps = [run(sys.executable, SCRIPT, "to-xgrad", src, xg, "--meta", meta),
                 run(convert, "--from", "xgrad", "--to", "xgrad", xg, os.path.join(scratch, "checked.safetensors")),
                 run(sys.executable, SCRIPT, "to-nanogpt", xg, back)]
        for r in steps:
            if r.returncode != 0:
                print("FAILED:", r.args, r.stderr)
                return 1
        out = torch.load(back)
        expected = {k: v for k, v in state.items() if not k.endswith(".attn.bias") or k.count(".") != 4}
        if sorted(out["model"]) != sorted(expected):
            print("FAILED: names differ:", sorted(set(out["model"]) ^ set(expected)))
            failures += 1
        for k, v in expected.items():
            if not torch.equal(out["model"][k], v):
                print("FAILED: tensor differs after the round trip:", k)
                failures += 1
        if out["model_args"] != ckpt["model_args"] or out["iter_num"] != 250:
            print("FAILED: model_args", out["model_args"])
            failures += 1
        header = open(xg, "rb").read(4096)
        for needle in (b'"vocab":"[10, 32, 33, 97, 98, 99]"', b'"mlp":"gelu"', b'"bias":"' + (b"all" if bias else b"none")):
            if needle not in header:
                print("FAILED: metadata lacks", needle)
                failures += 1
    for key, value, later in (("qk_norm", "rms", "qk_norm"), ("logit_softcap", "30", "logit_softcap"),
                              ("mlp", "relu2", "mlp")):
        # A later variant (docs/spec.md, "More architecture variants") nanoGPT cannot express: refused by name.
        variant = os.path.join(scratch, "later.safetensors")
        with_metadata(os.path.join(scratch, "model.safetensors"), variant, {key: value, "model_keys": later})
        r = run(sys.executable, SCRIPT, "to-nanogpt", variant, os.path.join(scratch, "later.pt"))
        if r.returncode != 2 or r.stderr.count("\n") != 1 or f'"{later}"' not in r.stderr or \
                os.path.exists(os.path.join(scratch, "later.pt")):
            print("FAILED: a later variant gave", r.returncode, r.stderr)
            failures += 1
    bad = run(sys.executable, SCRIPT, "to-xgrad", os.path.join(scratch, "meta.pkl"), os.path.join(scratch, "x.safetensors"))
    if bad.returncode != 2 or bad.stderr.count("\n") != 1 or os.path.exists(os.path.join(scratch, "x.safetensors")):
        print("FAILED: bad input gave", bad.returncode, bad.stderr)
        failures += 1
    print("nanogpt_convert: ok" if not failures else f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
