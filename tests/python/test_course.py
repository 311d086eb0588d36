"""The course's grader: correct solutions get full marks; each typical mistake fails its own task with a
message naming the first wrong node (or step, or parameter); the stubs fail as not implemented."""

import os
import shutil
import subprocess
import sys

import pytest

import xgrad.course

HERE = os.path.dirname(os.path.abspath(__file__))
SOLUTIONS = os.path.join(HERE, "course_solutions")

HANDWRITTEN_ADAMW_WITHOUT_BIAS_CORRECTION = '''

class AdamW:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.params, self.lr, self.betas, self.eps, self.wd = params, lr, betas, eps, weight_decay
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, grads):
        b1, b2 = self.betas
        for k, p in self.params.items():
            p *= 1 - self.lr * self.wd
            self.m[k] = b1 * self.m[k] + (1 - b1) * grads[k]
            self.v[k] = b2 * self.v[k] + (1 - b2) * grads[k] ** 2
            p -= self.lr * self.m[k] / (np.sqrt(self.v[k]) + self.eps)
'''

# (file, the correct line(s), the mistake, the task that must fail, what its message must name)
MISTAKES = {
    "transposed matmul gradient": (
        "a1_functions.py", "return grad @ b.T, a.T @ grad", "return grad @ b, a.T @ grad", "1.7", "'a'"),
    "missing broadcast reduction": (
        "a1_functions.py", "return unbroadcast(grad * b, a.shape), unbroadcast(grad * a, b.shape)",
        "return grad * b, grad * a", "1.3", "input 1 ('b')"),
    "unbroadcast keeps stretched axes": (
        "a1_functions.py",
        "return grad.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)", "return grad",
        "1.2", "input 1 ('b')"),
    "exp backward uses x": (
        "a1_functions.py", "return grad * y", "return grad * np.log(y)", "1.4", "'u'"),
    "sum backward spreads the total": (
        "a1_functions.py", "np.broadcast_to(np.expand_dims(grad, ctx.axis), shape)",
        "np.broadcast_to(grad.sum(), shape)", "1.6", "'x'"),
    "softmax backward without the row sum": (
        "a2_softmax_norm.py", "return y * (grad - (grad * y).sum(axis=-1, keepdims=True))", "return y * grad",
        "2.1", "'scores'"),
    "softmax row sum over the wrong axis": (
        "a2_softmax_norm.py", "return y * (grad - (grad * y).sum(axis=-1, keepdims=True))",
        "return y * (grad - (grad * y).sum(axis=0, keepdims=True))", "2.1", "'scores'"),
    "layer norm missing the mean term": (
        "a2_softmax_norm.py", "d_x = inv_std * (d_xhat - d_xhat.mean(axis=-1, keepdims=True)",
        "d_x = inv_std * (d_xhat", "2.3", "'h'"),
    "layer norm weight gradient without x hat": (
        "a2_softmax_norm.py", "d_weight = (grad * xhat).sum(axis=rows)", "d_weight = grad.sum(axis=rows)",
        "2.3", "'weight'"),
    "MHA's dW_K from the wrong head": (
        "a3_mha.py", "d_proj = combine_heads(grads[name])",
        "d_proj = combine_heads(grads[name][:, ::-1] if name == 'K' else grads[name])", "3.1", "'W_K'"),
    "MHA's dQ without 1/sqrt(dh)": (
        "a3_mha.py", 'd_Q = d_S @ c["K"] * scale', 'd_Q = d_S @ c["K"]', "3.1", "'Q'"),
    "MHA's softmax backward without the row sum": (
        "a3_mha.py", "d_S = P * (d_P - (d_P * P).sum(axis=-1, keepdims=True))", "d_S = P * d_P",
        "3.1", "'S'"),
    "block drops the residual gradient": (
        "a4_block.py", 'g["res_1"] = d_res2 + d_from_ln2', 'g["res_1"] = d_from_ln2',
        "4.1", "'blocks.0.res_1'"),
    "block's GELU slope without the 3": (
        "a4_block.py", "(1 + 3 * 0.044715 * x ** 2)", "(1 + 0.044715 * x ** 2)",
        "4.1", "'blocks.0.mlp_hidden'"),
    "schedule one step late": (
        "a5_training.py", "return schedule(step)", "return schedule(step - 1)", "5.1", "first wrong step 1 "),
    "AdamW without bias correction": (
        "a5_training.py", "\n\ndef train(", HANDWRITTEN_ADAMW_WITHOUT_BIAS_CORRECTION + "\n\ndef train(",
        "5.3", "after step 1: first wrong parameter 'w'"),
}

EXERCISE_OF_FILE = {name + ".py": k for k, name in enumerate(
    ["a1_functions", "a2_softmax_norm", "a3_mha", "a4_block", "a5_training", "a6_experiment"], 1)}


def solved(tmp_path, file=None, old=None, new=None):
    folder = tmp_path / "solutions"
    shutil.copytree(SOLUTIONS, folder)
    if file:
        path = folder / file
        text = path.read_text()
        assert text.count(old) == 1, "the mistake's anchor must occur once in %s" % file
        path.write_text(text.replace(old, new))
    return str(folder)


def test_correct_solutions_get_full_marks(tmp_path):
    results = xgrad.course.check(solved(tmp_path))
    assert len(results) == 18
    assert [r.line() for r in results if not r.passed] == []


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_seeded_mistake_fails_its_task_naming_the_first_wrong_node(tmp_path, mistake):
    file, old, new, task, named = MISTAKES[mistake]
    results = xgrad.course.check(solved(tmp_path, file, old, new), exercise=EXERCISE_OF_FILE[file])
    by_task = {r.task: r for r in results}
    assert not by_task[task].passed, by_task[task]
    assert named in by_task[task].message, by_task[task].message


def test_mha_backward_on_the_library_s_code_path_gets_full_marks(tmp_path):
    folder = solved(tmp_path)
    with open(os.path.join(folder, "a3_mha.py"), "a") as f:
        f.write('''

def mha_backward(grad_out, cache):
    from xgrad.models import manual
    c = cache
    _, library_cache = manual.mha_forward(c["X"], c["X"], c["X"], c["W_Q"], c["W_K"], c["W_V"], c["W_O"],
                                          c["heads"], causal=True)
    g = manual.mha_backward(grad_out, library_cache)
    return dict(X=g["Xq"] + g["Xk"] + g["Xv"], W_Q=g["W_Q"], W_K=g["W_K"], W_V=g["W_V"], W_O=g["W_O"])
''')
    assert all(r.passed for r in xgrad.course.check(folder, exercise=3))


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "xgrad.course", *args], capture_output=True, text=True)


def test_new_copies_the_stubs_which_fail_as_not_implemented(tmp_path):
    folder = str(tmp_path / "class")
    done = run_cli("new", folder)
    assert done.returncode == 0, done.stderr
    assert sorted(f for f in os.listdir(folder) if f.endswith(".py")) == sorted(EXERCISE_OF_FILE)
    graded = run_cli("check", folder)
    assert graded.returncode == 1
    lines = graded.stdout.splitlines()
    assert lines[-1] == "0 passed, 18 failed"
    assert all(line.startswith("FAIL ") and "not implemented yet" in line for line in lines[:-1]), lines
    again = run_cli("new", folder)
    assert again.returncode == 2 and "already holds" in again.stderr


def test_check_prints_one_line_per_task_and_exits_0_when_all_pass(tmp_path):
    folder = solved(tmp_path)
    graded = run_cli("check", folder, "--exercise", "2")
    assert graded.returncode == 0, graded.stdout + graded.stderr
    assert graded.stdout.splitlines() == ["PASS 2.1 softmax_backward", "PASS 2.2 masked_softmax_backward",
                                          "PASS 2.3 layer_norm_backward", "3 passed, 0 failed"]
    bad = run_cli("check", folder, "--exercise", "9")
    assert bad.returncode == 2 and "--exercise must be 1 .. 6" in bad.stderr
    missing = run_cli("check", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no folder" in missing.stderr
