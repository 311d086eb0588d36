"""Assignment 6: Exercise 20.1 at small scale: many heads or one?

Train the same small GPT with different head counts (same d_model, so the same parameter count) on a
text, several seeds each, with xgrad's training runner (``xgrad.train.run``), and compare the validation
losses. ``run_grid`` runs every (heads, seed) pair and returns their final validation losses;
``summarise`` turns them into a mean and a sample standard deviation per head count, and names the head
count with the lowest mean.

Grade it: ``python3 -m xgrad.course check DIR --exercise 6`` (small runs: a few seconds).
"""

import os

import numpy as np

import xgrad


def run_grid(corpus, out_dir, heads_list, seeds, steps, d_model=16, layers=1, block_size=16, batch=4):
    """For every h in heads_list and s in seeds, ``xgrad.train.run(corpus, <out_dir>/h<h>_s<s>,
    steps=steps, layers=layers, d_model=d_model, heads=h, block_size=block_size, batch=batch, seed=s,
    progress=False, sample_tokens=0, eval_every=steps)`` (the other options left at their defaults).
    Returns {h: [val_loss of seed s for s in seeds]}."""
    raise NotImplementedError("run_grid")


def summarise(results):
    """{h: [losses]} -> ({h: (mean, sample standard deviation (ddof=1))}, the h with the lowest mean)."""
    raise NotImplementedError("summarise")
