# Python misuse that once crashed the interpreter or answered silently wrong (hostile input, second
# round): sizes whose products wrap in 64 bits, a manual backward given a gradient of the wrong shape, a
# label that would rewrite a DOT graph, and two training runs writing one folder. Each is a ValueError or
# RuntimeError naming the problem, and nothing is allocated by the sizes first.
import fcntl
import os
import re

import numpy as np
import pytest

import xgrad
from xgrad import models

SMALL = dict(vocab_size=5, block_size=4, layers=1, d_model=4, heads=2)


@pytest.mark.parametrize("field, value, group", [
    ("vocab_size", 2 ** 62, r"wte \(V, d\)"),  # V d wrapped to 0: 920 parameters, then a crash
    ("block_size", 2 ** 62, r"wpe \(block_size, d\)"),
    ("layers", 2 ** 60, r"the blocks \(layers x block\)"),
    ("vocab_size", 2 ** 45, r"wte \(V, d\)"),  # no wrap, but past any address space
])
def test_gpt_sizes_that_overflow_are_value_errors(field, value, group):
    sizes = dict(SMALL, **{field: value})
    for dtype in ("float64", "float32"):
        with pytest.raises(ValueError, match=r"^GPT: the model needs .* parameter values \(the largest group, " +
                           group + r".*at most 2\^47 bytes"):
            xgrad.GPT(dtype=dtype, **sizes)
    with pytest.raises(ValueError, match=r"^gpt_parameter_count: the model needs"):
        xgrad._core.gpt_parameter_count(*[sizes[k] for k in ("vocab_size", "block_size", "layers", "d_model",
                                                              "heads")], 0)


def test_a_gpt_of_legal_size_still_builds_and_counts():
    m = xgrad.GPT(**SMALL)
    assert m.parameter_count() == xgrad._core.gpt_parameter_count(5, 4, 1, 4, 2, 0)


def test_masks_and_counts_that_overflow_are_value_errors():
    with pytest.raises(ValueError, match=r"^causal_mask: the mask of shape \(4294967296, 4294967296\) needs over"):
        models.causal_mask(2 ** 32, 2 ** 32)
    with pytest.raises(ValueError, match=r"^padding_mask: the mask of shape"):
        models.padding_mask([1, 2], 2 ** 63)
    with pytest.raises(ValueError, match=r"^mha_parameter_count: W_Q of shape"):
        models.parameter_count(2 ** 33, 1)


def test_shapes_whose_count_passes_2_to_the_64_are_value_errors_not_wrapped():
    x = xgrad.Tape().input(np.ones(4))
    with pytest.raises(ValueError, match=r"^reshape: shape \(4611686018427387905, 4\) has more elements than 2\^64"):
        x.reshape(2 ** 62 + 1, 4)
    with pytest.raises(ValueError, match=r"^scatter_add: shape \(4294967296, 4294967296\) has more elements"):
        xgrad.ops.scatter_add(x[:3], np.array([0, 1, 2]), [2 ** 32, 2 ** 32])


def test_token_ids_are_whole_numbers_in_32_bits_and_a_prompt_holds_one():
    m = xgrad.GPT(**SMALL)
    with pytest.raises(ValueError, match="the prompt holds no token"):
        m.sample([])
    with pytest.raises(ValueError, match=r"GPT.sample prompt: token id 1099511627776 is outside \[0, 2\^31\)"):
        m.sample([2 ** 40])
    with pytest.raises(ValueError, match="GPT.sample prompt: expected an integer array"):
        m.sample([1.7])
    tok = xgrad.Tokenizer.from_metadata({"vocab": xgrad.models.gpt.vocabulary_json([104, 105])})
    assert tok.decode([0, 1]) == "hi"
    assert tok.decode([]) == ""
    with pytest.raises(ValueError, match="Tokenizer.decode: expected an integer array"):
        tok.decode([104.7])
    with pytest.raises(ValueError, match=r"Tokenizer.decode: token id -1 is outside"):
        tok.decode([-1])


def test_integers_beyond_what_the_library_holds_are_value_errors_naming_the_argument():
    t = xgrad.Tape()
    x, w = t.input(np.ones((1, 2, 4))), t.input(np.ones((4, 4)))
    with pytest.raises(ValueError, match=r"multi_head_attention: heads must be an integer in \[1, "):
        models.self_attention(x, w, w, w, w, heads=-1)
    with pytest.raises(ValueError, match=r"dropout: seed must be an integer in \[0, 18446744073709551616\)"):
        xgrad.ops.dropout(x, 0.5, seed=2 ** 70)
    with pytest.raises(ValueError, match=r"rope: position_offset must be an integer"):
        xgrad.ops.rope(t.input(np.ones((1, 1, 2, 4))), position_offset=2 ** 64)
    with pytest.raises(ValueError, match=r"rope: position_offset must be an integer"):
        xgrad.ops.rope(t.input(np.ones((1, 1, 2, 4))), position_offset=-1)


def test_an_unknown_config_key_is_named_with_the_fields_there_are():
    with pytest.raises(ValueError, match=r"'key' = 'bogus_key' is not one of vocab_size, block_size, .*qk_norm"):
        xgrad.GPT(**SMALL, bogus_key=1)


def mha_case():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((2, 3, 4))
    Ws = [rng.standard_normal((4, 4)) for _ in range(4)]
    return X, Ws


@pytest.mark.parametrize("shape", [(24,), (2, 3), (2, 3, 5), (1, 3, 4), (2, 4, 4), (2, 3, 4, 1)])
def test_manual_mha_backward_checks_the_gradient_against_the_cache(shape):
    X, Ws = mha_case()
    out, cache = models.manual.mha_forward(X, X, X, *Ws, heads=2)
    with pytest.raises(ValueError, match=r"^mha_backward: grad_output must be \(2, 3, 4\), got \(.*\)$"):
        models.manual.mha_backward(np.ones(shape), cache)
    g = models.manual.mha_backward(np.ones(out.shape), cache)  # the right shape still works
    assert g["W_O"].shape == (4, 4)


def test_to_dot_escapes_labels():
    t = xgrad.Tape()
    hostile = 'x"];\n  evil [label="owned'
    a = t.input(np.ones(2), label=hostile)
    (a * 2).named('back\\slash').sum()
    dot = t.to_dot()
    lines = dot.splitlines()
    assert all(line.startswith(("digraph", "  rankdir", "  node ", "  n", "}")) for line in lines), dot
    assert r'x\"];\\x0a  evil [label=\"owned' in dot
    assert r"back\\slash" in dot
    # Every node line has one label string whose quotes are all escaped.
    for line in dot.splitlines():
        if "[label=" in line:
            assert len(re.findall(r'(?<!\\)"', line.split(", style")[0].split(", penwidth")[0])) == 2


def test_a_second_training_run_on_one_folder_is_refused(tmp_path):
    corpus = tmp_path / "text.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 40)
    out = tmp_path / "run"
    out.mkdir()
    options = dict(steps=2, layers=1, d_model=8, heads=2, block_size=8, batch=2, sample_tokens=0, eval_windows=2,
                   progress=False)
    with open(out / ".xgrad.lock", "w") as held:  # another run's lock
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(RuntimeError, match=r"another training run is writing to this folder \(it holds "
                                               r"\.xgrad\.lock\); wait for it to end"):
            xgrad.train.run(corpus, out, **options)
        assert not (out / "log.csv").exists()
    summary = xgrad.train.run(corpus, out, **options)  # released: the folder is free again
    assert summary["last_step"] == 2 and (out / "log.csv").exists()


def test_a_zero_size_is_named_not_a_key_the_caller_never_passed(tmp_path):
    # d_model=0 once read "'mlp_hidden' = '0' is not a positive decimal integer": mlp_hidden, never passed,
    # had been filled in as 4 d.
    with pytest.raises(ValueError, match=r"^'d_model' = '0' is not a positive decimal integer") as e:
        xgrad.GPT(vocab_size=5, block_size=4, layers=1, d_model=0, heads=2)
    assert "mlp_hidden" not in str(e.value)
    corpus = tmp_path / "text.txt"
    corpus.write_text("abc " * 500)
    with pytest.raises(ValueError) as e:
        xgrad.train.run(corpus, tmp_path / "out", steps=1, d_model=0, progress=False)
    assert "mlp_hidden" not in str(e.value)
    assert xgrad.GPT(vocab_size=5, block_size=4, layers=1, d_model=4, heads=2).config["mlp_hidden"] == 16
