#!/usr/bin/env python3
"""Checks the code blocks of the project's markdown, so that a changed API fails a test instead of
silently breaking the README or a tutorial (the idea of Rust's doc tests and Python's doctest).

A fenced block is checked by its language, and by a marker: an HTML comment on the line right above the
fence (invisible when the markdown is rendered):

    <!-- check: KIND [key=value ...]
    optional hidden lines (C++ set-up for a fragment)
    -->

C++ (cpp, c++): every block of one markdown file goes into one generated translation unit, built with the
library (`extract`) and run by one ctest (`run`). Kinds:
  program            a whole program with main(): compiled and run; exit status 0 (or status=N);
                     the default for a block that defines main()
  doctest            doctest TEST_CASEs: compiled and run with the file's other doctest blocks
  ... continue       (with any kind) in the namespace of the C++ block before, as the rest of one file
  fragment [run]     statements: wrapped in a function after the hidden lines; compiled (and run)
  header             declarations at namespace scope: compiled
  file=NAME          saved as NAME beside the generated source, for a later block to #include
  excerpt=PATH [new=REGEX]  lines quoted from PATH: each line must occur in PATH (whitespace-normalised;
                     "..." lines and lines that REGEX matches, the ones a recipe adds, are exempt)
  skip="why"         not checked, with the reason
Shell (sh, bash, shell): run by bash -euo pipefail in a scratch folder that links every top-level entry
of the source tree and `build` (the build folder under test); exit status 0 (or status=N), at most
timeout=SECONDS (default 300). Kinds: skip="why", excerpt=PATH.
Python (python, py): run by the same interpreter with the built module on PYTHONPATH; the whole set is
skipped, with a line that says so, when the module is not built. Kinds: skip="why".
Text (text, console, or none) is checked only when marked:
  output [options]      the standard output of the block above (a C++ program or shell block)
  transcript [options]  lines "$ command" followed by that command's output: each command is run
Output options: rtol=X compares every number within relative X (otherwise the text must be equal);
small=Y lets a number below Y stand for any number below Y (rounding noise); ignore=REGEX (repeatable)
blanks what varies, such as timings. Lines are compared with runs of spaces collapsed.

Usage: doc_blocks.py extract MD OUTDIR --source S   (writes OUTDIR/doc_blocks.cpp, OUTDIR/blocks.json, files)
       doc_blocks.py run OUTDIR --source S --build B --exe E
       doc_blocks.py citations --source S     (every docs/spec.md citation and link names a heading there,
                                              and nothing points outside the repository)
       doc_blocks.py selftest                 (passes right blocks, fails wrong ones)
"""

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w+-]*)\s*$")
MARKER_OPEN = "<!-- check:"
CPP = {"cpp", "c++", "cxx"}
SHELL = {"sh", "bash", "shell"}
PYTHON = {"python", "py", "python3"}
TEXT = {"", "text", "console", "output"}


class DocError(Exception):
    pass


# ---- parsing ------------------------------------------------------------------------------------------


def parse_marker(lines, fence_index):
    """The marker above the fence at lines[fence_index]: (options dict, hidden lines), or ({}, [])."""
    end = fence_index - 1
    if end < 0 or not lines[end].rstrip().endswith("-->"):
        return {}, []
    start = end
    while start >= 0 and MARKER_OPEN not in lines[start]:
        if start < end and lines[start].rstrip().endswith("-->"):
            return {}, []
        start -= 1
    if start < 0:
        return {}, []
    first = lines[start].split(MARKER_OPEN, 1)[1]
    body = lines[start + 1 : end + 1] if start < end else []
    if start == end:
        first = first.rsplit("-->", 1)[0]
    else:
        body[-1] = body[-1].rsplit("-->", 1)[0]
    options = {"kind": None, "ignore": []}
    for word in shlex.split(first):
        key, eq, value = word.partition("=")
        if key == "ignore":
            options["ignore"].append(value)
        elif eq:
            options[key] = value
        elif options["kind"] is None:
            options["kind"] = key
        else:
            options[key] = True
    hidden = [line for line in body if line.strip()]
    return options, hidden


def parse_blocks(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, lang = m.group(1), m.group(2), m.group(3).lower()
        options, hidden = parse_marker(lines, i)
        j = i + 1
        while j < len(lines) and lines[j].strip() != ticks:
            j += 1
        if j == len(lines):
            raise DocError(f"{path}:{i + 1}: a code block that never closes")
        code = [line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : j]]
        blocks.append({"index": len(blocks), "line": i + 1, "lang": lang, "code": code,
                       "options": options, "hidden": hidden})
        i = j + 1
    return blocks


# ---- extract: one C++ translation unit per markdown file -----------------------------------------------

INCLUDE = re.compile(r"^\s*#\s*include\s")
MAIN = re.compile(r"\bint\s+main\s*\(\s*(int\s+\w+\s*,\s*char\s*\*\*?\s*\w+(\[\])?)?\s*\)")


def closing_brace(text, open_at):
    """The index of the brace that closes the one at open_at (strings, characters and comments skipped)."""
    depth, k = 0, open_at
    while k < len(text):
        c = text[k]
        if text.startswith("//", k):
            k = text.find("\n", k)
            k = len(text) if k < 0 else k
            continue
        if text.startswith("/*", k):
            k = text.find("*/", k) + 2
            continue
        if c in "\"'":
            k += 1
            while k < len(text) and text[k] != c:
                k += 2 if text[k] == "\\" else 1
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return k
        k += 1
    raise DocError("main() never closes")


def cpp_kind(block, where):
    kind = block["options"].get("kind")
    if block["options"].get("skip") or kind == "skip":
        return "skip"
    if block["options"].get("file"):
        return "file"
    if block["options"].get("excerpt"):
        return "excerpt"
    if kind is None:
        if any(MAIN.search(line) for line in block["code"]):
            return "program"
        raise DocError(f"{where}: a C++ block without a marker; say what it is, e.g. <!-- check: fragment -->"
                       " (see tests/doc_blocks.py)")
    if kind not in {"program", "doctest", "fragment", "header"}:
        raise DocError(f"{where}: unknown C++ marker '{kind}'")
    return kind


def generate(rel_md, blocks, outdir):
    # A block's code keeps its place in the markdown for the compiler's messages, by the page's path in
    # the repository: the generated source is then the same in every clone (ccache finds it).
    def line_marker(b):
        return f'#line {b["line"] + 1} "{rel_md}"'

    includes, bodies, programs = [], [], []
    has_doctest = False
    name = None
    for b in blocks:
        if b["lang"] not in CPP:
            continue
        where = f"{rel_md}:{b['line']}"
        kind = cpp_kind(b, where)
        b["kind"] = kind
        if kind in {"skip", "excerpt"}:
            continue
        if kind == "file":
            with open(os.path.join(outdir, b["options"]["file"]), "w", encoding="utf-8") as f:
                f.write(line_marker(b) + "\n" + "\n".join(b["code"]) + "\n")
            continue
        code = []
        for line in b["code"]:
            if INCLUDE.match(line):
                if line.strip() not in includes:
                    includes.append(line.strip())
                code.append("")
            else:
                code.append(line)
        hidden = [line for line in b["hidden"] if not INCLUDE.match(line)]
        includes += [line.strip() for line in b["hidden"] if INCLUDE.match(line) and line.strip() not in includes]
        if not (b["options"].get("continue") and name):
            name = f"doc_block_{b['index']}"
        text = "\n".join(code)
        out = [f"namespace {name}\n{{"]
        if kind == "program":
            m = MAIN.search(text)
            if not m:
                raise DocError(f"{where}: a program block without main()")
            text = text[: m.start()] + "int doc_main(int, char**)" + text[m.end() :]
            close = closing_brace(text, text.index("{", m.start()))
            text = text[:close] + "    return 0;  // as main() does when it ends\n" + text[close:]
            out += [line_marker(b), text]
            programs.append((b["index"], f"{name}::doc_main"))
        elif kind == "fragment":
            out += ["void doc_fragment()", "{"] + hidden + [line_marker(b), text, "}"]
            if b["options"].get("run"):
                out += ["int doc_main(int, char**)", "{", "    doc_fragment();", "    return 0;", "}"]
                programs.append((b["index"], f"{name}::doc_main"))
        else:
            out += hidden + [line_marker(b), text]
            has_doctest = has_doctest or kind == "doctest"
        out.append(f"}}  // namespace {name}")
        bodies.append("\n".join(out))
    head = [f"// Generated by tests/doc_blocks.py from {rel_md}: edit the markdown, not this file.",
            "#pragma GCC diagnostic ignored \"-Wunused-variable\"",
            "#pragma GCC diagnostic ignored \"-Wunused-but-set-variable\"",
            "#pragma GCC diagnostic ignored \"-Wunused-function\"",
            "#include <doctest/doctest.h>",
            "#include <cstring>",
            "#include <string>"] + includes
    table = ["struct doc_program", "{", "    int block;", "    int (*run)(int, char**);", "};",
             "const doc_program doc_programs[] = {"]
    table += [f"    {{{index}, &{fn}}}," for index, fn in programs] + ["    {-1, nullptr}};"]
    main = ["// doc_blocks --block N: runs that block's program; --doctest: the doctest blocks.",
            "int main(int argc, char** argv)",
            "{",
            "    if (argc >= 3 && std::strcmp(argv[1], \"--block\") == 0)",
            "    {",
            "        const int wanted = std::stoi(argv[2]);",
            "        for (const doc_program* p = doc_programs; p->run; ++p)",
            "        {",
            "            if (p->block == wanted)",
            "            {",
            "                return p->run(argc - 2, argv + 2);",
            "            }",
            "        }",
            "        return 99;",
            "    }",
            "    doctest::Context context;",
            "    context.applyCommandLine(argc - 1, argv + 1);",
            "    return context.run();",
            "}"]
    source = "\n".join(head) + "\n\n" + "\n\n".join(bodies) + "\n\n" + "\n".join(table + main) + "\n"
    path = os.path.join(outdir, "doc_blocks.cpp")
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
    if old != source:
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
    return has_doctest


def extract(md, outdir, source):
    os.makedirs(outdir, exist_ok=True)
    rel_md = os.path.relpath(md, source)
    blocks = parse_blocks(md)
    has_doctest = generate(rel_md, blocks, outdir)
    with open(os.path.join(outdir, "blocks.json"), "w", encoding="utf-8") as f:
        json.dump({"md": md, "rel_md": rel_md, "has_doctest": has_doctest, "blocks": blocks}, f, indent=1)


# ---- run -------------------------------------------------------------------------------------------------

NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def normalise(line, ignores):
    for pattern in ignores:
        line = re.sub(pattern, "<varies>", line)
    return " ".join(line.split())


def numbers_agree(expected, actual, rtol, small):
    e, a = float(expected), float(actual)
    if small is not None and abs(e) < small and abs(a) < small:
        return True
    return abs(a - e) <= rtol * abs(e)


def line_agrees(expected, actual, rtol, small):
    if rtol is None:
        return expected == actual
    e_parts, a_parts = NUMBER.split(expected), NUMBER.split(actual)
    e_nums, a_nums = NUMBER.findall(expected), NUMBER.findall(actual)
    if e_parts != a_parts or len(e_nums) != len(a_nums):
        return False
    return all(numbers_agree(e, a, rtol, small) for e, a in zip(e_nums, a_nums))


def compare_output(expected_lines, actual_text, options, where):
    ignores = options.get("ignore", [])
    rtol = float(options["rtol"]) if "rtol" in options else None
    small = float(options["small"]) if "small" in options else None
    expected = [normalise(line, ignores) for line in expected_lines]
    actual = [normalise(line, ignores) for line in actual_text.rstrip("\n").split("\n")]
    for lines in (expected, actual):
        while lines and not lines[-1]:
            lines.pop()
    for k in range(max(len(expected), len(actual))):
        e = expected[k] if k < len(expected) else "<end of output>"
        a = actual[k] if k < len(actual) else "<end of output>"
        if not line_agrees(e, a, rtol, small):
            raise DocError(f"{where}: output line {k + 1} differs\n  the markdown says: {e}\n  the program says: {a}")


class Runner:
    def __init__(self, outdir, source, build, exe):
        with open(os.path.join(outdir, "blocks.json"), encoding="utf-8") as f:
            data = json.load(f)
        self.rel_md, self.blocks = data["rel_md"], data["blocks"]
        self.has_doctest = data["has_doctest"]
        self.source, self.build, self.exe = os.path.abspath(source), os.path.abspath(build), exe
        self.scratch = tempfile.mkdtemp(prefix="xgrad-doc-")
        for entry in os.listdir(self.source):
            if entry not in {"build", ".git"}:
                os.symlink(os.path.join(self.source, entry), os.path.join(self.scratch, entry))
        os.symlink(self.build, os.path.join(self.scratch, "build"))
        self.python_path = self.find_python_module()
        self.checked = self.skipped = 0

    def find_python_module(self):
        for root, dirs, files in os.walk(self.build):
            dirs[:] = [d for d in dirs if not d.startswith(("CMakeFiles", "_deps", "Testing"))]
            if any(re.match(r"xgrad(\.|_).*\.so$", f) or f == "xgrad.so" for f in files):
                return root
        return None

    def where(self, block):
        return f"{self.rel_md}:{block['line']}"

    def run_process(self, command, block, shell=True, env_extra=None, stdin=None):
        timeout = float(block["options"].get("timeout", 300))
        env = dict(os.environ)
        env.update(env_extra or {})
        try:
            done = subprocess.run(command, shell=False, cwd=self.scratch, env=env, input=stdin,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise DocError(f"{self.where(block)}: still running after {timeout:g} s (mark it skip=\"why\" "
                           "if it is meant to run for minutes)")
        want = int(block["options"].get("status", 0))
        if done.returncode != want:
            raise DocError(f"{self.where(block)}: exit status {done.returncode}, expected {want}\n"
                           f"--- stdout\n{done.stdout}--- stderr\n{done.stderr}")
        return done.stdout

    def bash(self, script, block):
        return self.run_process(["bash", "-euo", "pipefail", "-c", script], block)

    def check_excerpt(self, block):
        path = os.path.join(self.source, block["options"]["excerpt"])
        with open(path, encoding="utf-8") as f:
            lines = [" ".join(line.split()) for line in f]
        new = block["options"].get("new")
        for line in block["code"]:
            wanted = " ".join(line.split())
            if not wanted or wanted == "..." or (new and re.search(new, wanted)):
                continue
            if not any(wanted in have for have in lines):
                raise DocError(f"{self.where(block)}: quoted from {block['options']['excerpt']}, which no "
                               f"longer has the line\n  {wanted}")

    def next_output_block(self, k):
        if k + 1 < len(self.blocks):
            nxt = self.blocks[k + 1]
            if nxt["lang"] in TEXT and nxt["options"].get("kind") == "output":
                return nxt
        return None

    def check_output_of(self, k, stdout):
        out = self.next_output_block(k)
        if out is not None:
            compare_output(out["code"], stdout, out["options"], self.where(out))

    def transcript(self, block):
        commands = []
        for line in block["code"]:
            if line.startswith("$ "):
                commands.append((line[2:], []))
            elif commands:
                commands[-1][1].append(line)
            else:
                raise DocError(f"{self.where(block)}: a transcript must begin with a line '$ command'")
        for command, expected in commands:
            compare_output(expected, self.bash(command, block), block["options"], self.where(block))

    def run_block(self, k, block):
        lang, options = block["lang"], block["options"]
        if options.get("skip") or options.get("kind") == "skip":
            self.skipped += 1
            return
        if options.get("excerpt"):
            self.check_excerpt(block)
        elif lang in CPP:
            if block.get("kind") == "program" or (block.get("kind") == "fragment" and options.get("run")):
                stdout = self.run_process([self.exe, "--block", str(block["index"])], block)
                self.check_output_of(k, stdout)
        elif lang in SHELL:
            self.check_output_of(k, self.bash("\n".join(block["code"]), block))
        elif lang in PYTHON:
            if self.python_path is None:
                self.skipped += 1
                return
            stdout = self.run_process([sys.executable, "-"], block, env_extra={"PYTHONPATH": self.python_path},
                                      stdin="\n".join(block["code"]) + "\n")
            self.check_output_of(k, stdout)
        elif lang in TEXT and options.get("kind") == "transcript":
            self.transcript(block)
        else:
            return
        self.checked += 1

    def run(self):
        try:
            return self.run_all()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)  # the links go, not what they point to

    def run_all(self):
        failures = []
        if self.has_doctest:
            try:
                first = next(b for b in self.blocks if b.get("kind") == "doctest")
                self.run_process([self.exe], {"options": {}, "line": first["line"]})
            except DocError as e:
                failures.append(f"{self.rel_md}: the doctest blocks fail:\n{e}")
        for k, block in enumerate(self.blocks):
            try:
                self.run_block(k, block)
            except DocError as e:
                failures.append(str(e))
        python_note = "" if self.python_path or not any(b["lang"] in PYTHON for b in self.blocks) else \
            " (Python blocks skipped: the Python module is not built)"
        print(f"{self.rel_md}: {len(self.blocks)} blocks, {self.checked} checked, {self.skipped} skipped by "
              f"marker{python_note}, {len(failures)} failed")
        for failure in failures:
            print("FAILED " + failure)
        self.failures = failures
        return 1 if failures else 0


# ---- selftest: the checker must pass what is right and fail what is wrong ------------------------------

SELFTEST_GOOD = """
```sh
echo hello
```
<!-- check: output -->
```text
hello
```
<!-- check: transcript rtol=1e-3 small=1e-8 ignore="in [0-9.]+ s" -->
```text
$ echo "loss 1.0001, noise 3e-12, in 4.2 s"
loss 1.0, noise 7e-11, in 9.9 s
```
<!-- check: excerpt=quoted.txt new=added -->
```cpp
int   quoted = 1;  // spaces differ
...
int added = 2;
```
<!-- check: skip="would fail" -->
```sh
exit 1
```
<!-- check: status=3 -->
```sh
exit 3
```
```python
raise SystemExit(1)
```
"""

SELFTEST_BAD = [
    "```sh\nexit 3\n```\n",
    "```sh\necho hello\n```\n<!-- check: output -->\n```text\ngoodbye\n```\n",
    "```sh\necho hello; echo again\n```\n<!-- check: output -->\n```text\nhello\n```\n",
    "<!-- check: transcript rtol=1e-3 -->\n```text\n$ echo 'loss 2.0'\nloss 1.0\n```\n",
    "<!-- check: transcript rtol=1e-3 small=1e-8 -->\n```text\n$ echo 'noise 3e-7'\nnoise 3e-12\n```\n",
    "<!-- check: excerpt=quoted.txt -->\n```cpp\nint gone = 3;\n```\n",
    "<!-- check: timeout=0.5 -->\n```sh\nsleep 5\n```\n",
]


def selftest():
    problems = []
    with tempfile.TemporaryDirectory() as root:
        os.mkdir(os.path.join(root, "build"))
        with open(os.path.join(root, "quoted.txt"), "w", encoding="utf-8") as f:
            f.write("int quoted = 1;  // spaces differ\n")

        def check(text, name):
            md, out = os.path.join(root, name + ".md"), os.path.join(root, "out-" + name)
            with open(md, "w", encoding="utf-8") as f:
                f.write(text)
            extract(md, out, root)
            runner = Runner(out, root, os.path.join(root, "build"), "/bin/false")
            with contextlib.redirect_stdout(io.StringIO()):
                runner.run()
            return runner

        good = check(SELFTEST_GOOD, "good")
        if good.failures or good.checked != 4 or good.skipped != 2:
            problems.append(f"the good page: {good.checked} checked, {good.skipped} skipped, {good.failures}")
        for k, text in enumerate(SELFTEST_BAD):
            if len(check(text, f"bad{k}").failures) != 1:
                problems.append(f"bad page {k} passed:\n{text}")
        try:
            check("```cpp\nint x = 1;\n```\n", "unmarked")
            problems.append("an unmarked C++ fragment was accepted")
        except DocError:
            pass
    for problem in problems:
        print("SELFTEST FAILED " + problem)
    print(f"selftest: {len(problems)} problems")
    return 1 if problems else 0


# ---- citations -----------------------------------------------------------------------------------------

CITATION = re.compile(r'docs/spec\.md,?\s+\(?"([^"]+)"')
ANCHOR = re.compile(r"spec\.md#([\w-]+)")
OUTSIDE = re.compile(r"\.\./shared|SPEC\.md|STYLE\.md")
SKIP_DIRS = {".git", "fuzz_corpus"}


def headings(spec):
    with open(spec, encoding="utf-8") as f:
        return [re.sub(r"[`*]", "", line.lstrip("#").strip()).lower() for line in f if line.startswith("#")]


def slug(heading):
    """The anchor a markdown renderer (GitHub's) gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def citations(source):
    known = headings(os.path.join(source, "docs", "spec.md"))
    anchors = {slug(h) for h in known}
    failures = []
    for root, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("build")]
        for name in files:
            if not name.endswith((".cpp", ".hpp", ".h", ".md", ".py", ".sh", ".cmake", ".txt", ".json")) \
                    and name not in {"dev", "run"}:
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, source)
            try:
                text = open(path, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            for n, line in enumerate(text.split("\n"), 1):
                if OUTSIDE.search(line):
                    failures.append(f"{rel}:{n}: points outside the repository: {line.strip()}")
                for cited in CITATION.findall(line):
                    want = re.sub(r"[`*]", "", cited).lower()
                    if not any(h.startswith(want) for h in known):
                        failures.append(f"{rel}:{n}: cites docs/spec.md, \"{cited}\", which has no such heading")
                for anchor in ANCHOR.findall(line):
                    if anchor not in anchors:
                        failures.append(f"{rel}:{n}: links spec.md#{anchor}, which has no such heading")
    for failure in failures:
        print("FAILED " + failure)
    print(f"citations: {len(failures)} problems")
    return 1 if failures else 0


def main(argv):
    try:
        if len(argv) == 5 and argv[0] == "extract" and argv[3] == "--source":
            extract(argv[1], argv[2], argv[4])
            return 0
        if argv and argv[0] == "run":
            opts = dict(zip(argv[2::2], argv[3::2]))
            return Runner(argv[1], opts["--source"], opts["--build"], opts["--exe"]).run()
        if argv == ["selftest"]:
            return selftest()
        if len(argv) == 3 and argv[0] == "citations" and argv[1] == "--source":
            return citations(argv[2])
    except DocError as e:
        print(f"doc_blocks: {e}", file=sys.stderr)
        return 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
