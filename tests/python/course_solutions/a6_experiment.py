"""Assignment 6, solved with xgrad.train.run."""

import os

import numpy as np

import xgrad


def run_grid(corpus, out_dir, heads_list, seeds, steps, d_model=16, layers=1, block_size=16, batch=4):
    results = {}
    for h in heads_list:
        results[h] = [xgrad.train.run(corpus, os.path.join(out_dir, "h%d_s%d" % (h, s)), steps=steps,
                                      layers=layers, d_model=d_model, heads=h, block_size=block_size,
                                      batch=batch, seed=s, progress=False, sample_tokens=0,
                                      eval_every=steps)["val_loss"]
                      for s in seeds]
    return results


def summarise(results):
    stats = {h: (float(np.mean(v)), float(np.std(v, ddof=1))) for h, v in results.items()}
    return stats, min(stats, key=lambda h: stats[h][0])
