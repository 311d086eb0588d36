"""Training a small GPT on a text file, exactly as the ``xgrad-train`` command does (train/trainer.hpp):
byte tokens, a 90/10 split, AdamW with warm-up and cosine decay, gradient clipping, validation, log.csv,
atomic checkpoints with the optimiser's state, and ``resume`` that continues where a run stopped.

    summary = xgrad.train.run("corpus.txt", "runs/tiny", steps=300, layers=2, d_model=64, heads=4)
    model = xgrad.GPT.load(summary["checkpoint"])

The progress bar goes to the process's stderr (a terminal: rewritten in place; otherwise plain lines).
The loop runs in C++ without the GIL; Ctrl-C stops it after the current step, with a checkpoint.
"""

import os

from . import _core
from .models.gpt import config_fields


def run(data, out, steps=2000, layers=2, d_model=64, heads=4, kv_heads=None, block_size=64, batch=16,
        lr=3e-3, warmup=None, decay_steps=None, seed=1, threads=1, resume=False, progress=True,
        weight_decay=0.1, beta2=0.99, clip=1.0, eval_every=100, eval_windows=64, save_every=100,
        sample_tokens=200, plots=False, detect_anomaly=False, dropout=0.0, sharpness_every=0, sharpness_iters=20,
        **variant):
    """Trains (or with ``resume`` continues) a GPT on the text file ``data``, writing ``out``/model.safetensors
    and ``out``/log.csv. The flags mean what xgrad-train's do; the architecture variant is given by keyword
    as xgrad.GPT takes it (norm="rmsnorm", position="rope", ...); sharpness_every / sharpness_iters give
    log.csv's sharpness column (the top Hessian eigenvalue on a fixed batch). Returns a dict: first_step,
    last_step, interrupted, train_loss, val_loss, tokens_per_s, parameters, sample (bytes), checkpoint (the
    path).
    Bad options: ValueError; unreadable data or a checkpoint that does not fit: RuntimeError."""
    counts = dict(batch=batch, seed=seed, eval_windows=eval_windows, sample_tokens=sample_tokens)
    for name, value in counts.items():
        if int(value) < 0:
            raise ValueError("train.run: %s must be >= 0, got %d" % (name, value))
    o = _core.TrainOptions()
    o.data, o.out, o.steps, o.batch, o.lr = os.fspath(data), os.fspath(out), int(steps), int(batch), float(lr)
    o.seed, o.threads, o.resume, o.dropout = int(seed), int(threads), bool(resume), float(dropout)
    o.warmup = None if warmup is None else int(warmup)
    o.decay_steps = None if decay_steps is None else int(decay_steps)
    o.weight_decay, o.beta2, o.clip = float(weight_decay), float(beta2), float(clip)
    o.eval_every, o.eval_windows, o.save_every = int(eval_every), int(eval_windows), int(save_every)
    o.sample_tokens, o.plots, o.detect_anomaly = int(sample_tokens), bool(plots), bool(detect_anomaly)
    if int(sharpness_every) < 0 or int(sharpness_iters) < 1:
        raise ValueError("train.run: sharpness_every must be >= 0 and sharpness_iters >= 1")
    o.sharpness_every, o.sharpness_iters = int(sharpness_every), int(sharpness_iters)
    model = dict(layers=layers, d_model=d_model, heads=heads, kv_heads=kv_heads or None, block_size=block_size,
                 **variant)
    o.set_model(config_fields("train.run", model))
    summary = _core.run_training(o, bool(progress))
    summary["checkpoint"] = os.path.join(o.out, "model.safetensors")
    return summary
