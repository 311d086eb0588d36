#!/usr/bin/env python3
"""Checks that the GPT is described once (docs/spec.md, "The model" and "Architecture variants"): outside
the tests, the docs and the foreign-format mappings, each config key is spelled as a string literal in one
C++ file and at most one Python file, and each parameter name in one C++ file. The keys and the names are
read from docs/spec.md's tables (tests/test_gpt_config.cpp checks those against the model's description),
so a new key or tensor is checked as soon as it is documented.

    tools/check_one_description.py [SOURCE_DIR]      prints every key and name with its files; exit 1 if
                                                     one is spelled in too many
    tools/check_one_description.py --self-test       the check must fail on a tree with one file more that
                                                     restates a key and a parameter name
"""
import pathlib
import re
import sys

SELF_TEST = sys.argv[1:] == ["--self-test"]
ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 and not SELF_TEST
                    else pathlib.Path(__file__).resolve().parent.parent)
RESTATING = ("train/restating.cpp", 'c.tied_head = metadata.at("tied_head") == "true"; at("blocks.0.attn.W_Q");')

# Where a name may be restated: the tests and docs (they pin it), the mappings to other formats (they
# translate it), and code about another model or file than the GPT's description.
EXCLUDED_DIRS = ("tests", "docs", "fuzz", "course", "build")
THIS = "tools/check_one_description.py"
FOREIGN = ("io/hf_gpt2.cpp", "io/hf_gpt2.hpp", "io/llama2c.cpp", "io/llama2c.hpp", "tools/nanogpt_convert.py",
           "bench/torch_side.cpp")
OTHER_MEANING = {
    "examples/byte_mlp.cpp": "the byte MLP's own checkpoint metadata",
    "train/tokenizer.cpp": "the tokenizer's own vocab_size",
}
# A literal used as an activation name (models/gpt.hpp's list: "blocks.{i}.mlp", "blocks.{i}.mlp_hidden")
# or a layer's argument in an error message, not as the config key of the same spelling.
ACTIVATION_USE = re.compile(r'(prefix \+ |block_name\([a-z0-9 -]+, |activation\(|row\(|return |require_shape\([^,]+, )$')


def spec_table_keys(text, header):
    """The first column's `names` of the markdown tables whose header row starts with `header`."""
    keys, in_table = [], False
    for line in text.splitlines():
        if line.startswith(header):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            in_table = False
        if in_table and not line.startswith("|---"):
            keys += re.findall(r"`([^`]+)`", line.split("|")[1])
    return keys


def config_keys(spec):
    sizes = ["vocab_size", "block_size", "layers", "d_model", "heads", "kv_heads"]  # "The model"'s sizes
    return sizes + spec_table_keys(spec, "| key | values | default |")


def parameter_names(spec):
    """The tensors' names without the block prefix: attn.W_Q, mlp.W_fc, wte, lm_head, ln_f.weight, ..."""
    names = set()
    for name in spec_table_keys(spec, "| name | shape |"):
        names.add(re.sub(r"^blocks\.\{i\}\.", "", name))
    return sorted(names)


def sources():
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.suffix not in (".cpp", ".hpp", ".py") or rel.split("/")[0] in EXCLUDED_DIRS:
            continue
        if rel.startswith("build") or rel in FOREIGN or rel in OTHER_MEANING or rel == THIS:
            continue
        yield rel, without_comments(path.read_text(errors="replace"), path.suffix)


def without_comments(text, suffix):
    """The code only: each line without its // comment (C++) or # comment (Python)."""
    marker = "//" if suffix != ".py" else "#"
    return "\n".join(line.split(marker)[0] if marker in line else line for line in text.splitlines())


def files_spelling(literal_pattern, texts, skip_activation_use):
    found = set()
    for rel, text in texts:
        for m in re.finditer(literal_pattern, text):
            before = text[max(0, m.start() - 40):m.start()]
            if skip_activation_use and ACTIVATION_USE.search(before):
                continue
            found.add(rel)
    return sorted(found)


def main():
    spec = (ROOT / "docs" / "spec.md").read_text()
    texts = list(sources()) + ([RESTATING] if SELF_TEST else [])
    cpp = [(r, t) for r, t in texts if not r.endswith(".py")]
    python = [(r, t) for r, t in texts if r.endswith(".py")]
    too_many = []
    for key in config_keys(spec):
        pattern = '"' + re.escape(key) + '"'
        in_cpp, in_python = files_spelling(pattern, cpp, True), files_spelling(pattern, python, True)
        print(f"key  {key:16} C++: {', '.join(in_cpp) or '-'}   Python: {', '.join(in_python) or '-'}")
        if len(in_cpp) > 1 or len(in_python) > 1:
            too_many.append(key)
    for name in parameter_names(spec):
        # a literal that is the name, alone or after a block prefix: "attn.W_Q", "blocks.0.attn.W_Q",
        # "attn.W_" + "Q" is caught by its first half; prose that mentions a name (a help text, an error
        # message) is not a second description of it
        pattern = r'"(?:[A-Za-z0-9_{}]+\.)*' + re.escape(name) + '"'
        in_cpp = files_spelling(pattern, cpp, False)
        print(f"name {name:16} C++: {', '.join(in_cpp) or '-'}")
        if len(in_cpp) > 1:
            too_many.append(name)
    if too_many:
        print("spelled in more than one file: " + ", ".join(too_many), file=sys.stderr)
        return 1
    print("each key and parameter name is spelled once")
    return 0


if __name__ == "__main__":
    status = main()
    if SELF_TEST:
        print("self-test: " + ("the restating file was found" if status == 1 else "MISSED the restating file"))
        sys.exit(0 if status == 1 else 1)
    sys.exit(status)
