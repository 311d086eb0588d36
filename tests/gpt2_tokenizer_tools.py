#!/usr/bin/env python3
"""GPT-2's tokenizer through the tools: a tiny random GPT-2 in Hugging Face's folder layout with the test
vocabulary (tests/fixtures/gpt2) converts to xgrad with the two files in its metadata, samples words from
a text prompt, and converts back with both files byte-identical; xgrad-train --tokenizer gpt2:DIR trains
and logs val_bpb; bad folders are one line on stderr, exit 2, nothing written.

    gpt2_tokenizer_tools.py BIN_DIR SCRATCH_DIR
"""
import base64
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import numpy as np

BIN, SCRATCH = sys.argv[1], sys.argv[2]
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "gpt2")
VOCAB = 3257
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED:", what)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def run(tool, *args):
    r = subprocess.run([os.path.join(BIN, tool), *args], capture_output=True, cwd=SCRATCH)
    return r.returncode, r.stdout.decode("utf-8"), r.stderr.decode("utf-8", errors="replace")


def safetensors_metadata(path):
    data = read(path)
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]).get("__metadata__", {})


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        raw = a.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def hf_folder(path, vocab_size=VOCAB, with_files=("vocab.json", "merges.txt"), d=16, block=32):
    """A random one-layer GPT-2 as Hugging Face saves GPT2LMHeadModel, with the tokenizer's files."""
    rng = np.random.default_rng(36)
    w = lambda *shape: rng.normal(0, 0.5, shape)
    t = {"transformer.wte.weight": w(vocab_size, d), "transformer.wpe.weight": w(block, d),
         "transformer.ln_f.weight": 1 + w(d) / 10, "transformer.ln_f.bias": w(d) / 10}
    h = "transformer.h.0."
    shapes = [("ln_1.weight", (d,)), ("ln_1.bias", (d,)), ("attn.c_attn.weight", (d, 3 * d)),
              ("attn.c_attn.bias", (3 * d,)), ("attn.c_proj.weight", (d, d)), ("attn.c_proj.bias", (d,)),
              ("ln_2.weight", (d,)), ("ln_2.bias", (d,)), ("mlp.c_fc.weight", (d, 4 * d)),
              ("mlp.c_fc.bias", (4 * d,)), ("mlp.c_proj.weight", (4 * d, d)), ("mlp.c_proj.bias", (d,))]
    for name, shape in shapes:
        t[h + name] = w(*shape)
    os.makedirs(path)
    write_safetensors(os.path.join(path, "model.safetensors"), t)
    config = {"model_type": "gpt2", "n_embd": d, "n_head": 2, "n_layer": 1, "n_positions": block,
              "vocab_size": vocab_size, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    for name in with_files:
        shutil.copy(os.path.join(FIXTURES, name), os.path.join(path, name))


def refused(expected, tool, *args, out=None):
    before = sorted(os.listdir(SCRATCH))
    status, stdout, stderr = run(tool, *args)
    ok = status == 2 and stderr.count("\n") == 1 and expected in stderr
    ok = ok and sorted(os.listdir(SCRATCH)) == before
    check(ok, f"{tool} {' '.join(args)}: status {status}, stderr {stderr!r}, expected {expected!r} "
              "and nothing written")


def main():
    shutil.rmtree(SCRATCH, ignore_errors=True)
    os.makedirs(SCRATCH)
    hf_folder(os.path.join(SCRATCH, "hf"))

    # In: the two files go into the metadata, byte for byte.
    status, _, err = run("xgrad-convert", "--from", "hf-gpt2", "--to", "xgrad", "hf", "gpt2.safetensors")
    check(status == 0, f"hf-gpt2 -> xgrad: {err}")
    meta = safetensors_metadata(os.path.join(SCRATCH, "gpt2.safetensors"))
    check(meta.get("tokenizer") == "gpt2", "metadata tokenizer is gpt2")
    check(base64.b64decode(meta.get("tokenizer_vocab", "")) == read(os.path.join(FIXTURES, "vocab.json")),
          "tokenizer_vocab holds vocab.json")
    check(base64.b64decode(meta.get("tokenizer_merges", "")) == read(os.path.join(FIXTURES, "merges.txt")),
          "tokenizer_merges holds merges.txt")

    # A text prompt in, words out.
    prompt = "The meaning of life is"
    status, out, err = run("xgrad-sample", "--checkpoint", "gpt2.safetensors", "--prompt", prompt,
                           "--tokens", "24", "--seed", "3")
    print("xgrad-sample:", out.rstrip())
    check(status == 0 and out.startswith(prompt), f"xgrad-sample continues the prompt: {status} {err}")
    check(re.search(r"[A-Za-z]{2,}", out[len(prompt):]) is not None, f"the continuation holds words: {out!r}")

    # Out: both files byte-identical, not repeated in the model's metadata.
    status, _, err = run("xgrad-convert", "--from", "xgrad", "--to", "hf-gpt2", "gpt2.safetensors", "back")
    check(status == 0, f"xgrad -> hf-gpt2: {err}")
    check(sorted(os.listdir(os.path.join(SCRATCH, "back"))) ==
          ["config.json", "merges.txt", "model.safetensors", "vocab.json"], "the folder holds both files")
    for name in ("vocab.json", "merges.txt"):
        check(read(os.path.join(SCRATCH, "back", name)) == read(os.path.join(FIXTURES, name)),
              f"{name} comes back byte-identical")
    back_meta = safetensors_metadata(os.path.join(SCRATCH, "back", "model.safetensors"))
    check(not any("tokenizer" in k for k in back_meta), f"no tokenizer keys in the model: {list(back_meta)}")
    status, _, err = run("xgrad-convert", "--from", "hf-gpt2", "--to", "xgrad", "back", "again.safetensors")
    again = safetensors_metadata(os.path.join(SCRATCH, "again.safetensors"))
    check(status == 0 and again.get("tokenizer_vocab") == meta["tokenizer_vocab"],
          f"the round trip keeps the tokenizer: {err}")

    # Bad folders and a tokenizer that disagrees with the model.
    hf_folder(os.path.join(SCRATCH, "only_vocab"), with_files=("vocab.json",))
    refused("has no merges.txt beside it", "xgrad-convert", "--from", "hf-gpt2", "--to", "xgrad",
            "only_vocab", "x.safetensors")
    hf_folder(os.path.join(SCRATCH, "wider"), vocab_size=VOCAB + 7)
    refused(f"the tokenizer in the metadata has {VOCAB} tokens but \"vocab_size\" is {VOCAB + 7}",
            "xgrad-convert", "--from", "hf-gpt2", "--to", "xgrad", "wider", "x.safetensors")
    hf_folder(os.path.join(SCRATCH, "bad_merges"), with_files=("vocab.json",))
    with open(os.path.join(SCRATCH, "bad_merges", "merges.txt"), "w") as f:
        f.write("#version: 0.2\nĠt he\nq \u4e2d\n")
    refused("merges.txt: line 3: piece '\\xe4\\xb8\\xad' is not in the vocabulary", "xgrad-convert", "--from",
            "hf-gpt2", "--to", "hf-gpt2", "bad_merges", "out")

    # xgrad-train --tokenizer gpt2:DIR: val_bpb in the log, the tokenizer in the checkpoint, words sampled.
    with open(os.path.join(SCRATCH, "text.txt"), "w") as f:
        f.write("The cat sat on the mat. The dog ran in the park, and the bird sang a song.\n" * 300)
    status, _, err = run("xgrad-train", "--data", "text.txt", "--out", "run", "--steps", "3", "--layers", "1",
                         "--d-model", "16", "--heads", "2", "--block", "16", "--batch", "4", "--tokenizer",
                         "gpt2:" + FIXTURES, "--quiet", "--no-plots", "--sample-tokens", "0")
    check(status == 0, f"xgrad-train --tokenizer gpt2:DIR: {err}")
    log = read(os.path.join(SCRATCH, "run", "log.csv")).decode().splitlines()
    check("val_bpb" in log[0].split(","), f"log.csv has val_bpb: {log[0]}")
    check(safetensors_metadata(os.path.join(SCRATCH, "run", "model.safetensors")).get("tokenizer_merges") ==
          meta["tokenizer_merges"], "the trained checkpoint holds the tokenizer")
    status, _, err = run("xgrad-train", "--data", "text.txt", "--out", "run", "--steps", "5", "--layers", "1",
                         "--d-model", "16", "--heads", "2", "--block", "16", "--batch", "4", "--tokenizer",
                         "gpt2:" + FIXTURES, "--quiet", "--no-plots", "--sample-tokens", "0", "--resume")
    check(status == 0, f"--resume with the same GPT-2 tokenizer: {err}")
    status, out, err = run("xgrad-sample", "--checkpoint", "run/model.safetensors", "--prompt", "The dog",
                           "--tokens", "8")
    check(status == 0 and out.startswith("The dog"), f"sampling the trained model: {err}")
    refused("tokenizer gpt2:missing: missing/vocab.json: does not exist", "xgrad-train", "--data", "text.txt",
            "--out", "run2", "--steps", "1", "--tokenizer", "gpt2:missing", "--quiet")

    print(f"gpt2_tokenizer_tools: {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
