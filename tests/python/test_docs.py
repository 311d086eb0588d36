# docs/python.md: every ```python block runs as written, in order, in one namespace, in a fresh folder.
import contextlib
import io
import os
import re


def python_blocks(source_dir):
    text = open(os.path.join(source_dir, "docs", "python.md")).read()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_every_python_block_of_docs_python_md_runs(source_dir, tmp_path, monkeypatch):
    blocks = python_blocks(source_dir)
    assert len(blocks) >= 8
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    for number, block in enumerate(blocks, 1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(block, "docs/python.md block %d" % number, "exec"), namespace)
        if os.environ.get("XGRAD_SHOW_DOCS"):
            print("---- block %d ----\n%s" % (number, printed.getvalue()))
