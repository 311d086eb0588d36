# xgrad.Tokenizer: every tokenizer kind from a checkpoint or GPT-2's folder; GPT-2's against the reference
# fixtures (tests/fixtures/gpt2, made after OpenAI's encoder.py); the GPT's encode and decode through it.
import json
import os

import numpy as np
import pytest

import xgrad


@pytest.fixture
def gpt2_folder(source_dir):
    return os.path.join(source_dir, "tests", "fixtures", "gpt2")


def test_gpt2_folder_encodes_and_decodes_as_the_reference(gpt2_folder):
    tok = xgrad.Tokenizer.load(gpt2_folder)
    assert tok.kind == "gpt2" and tok.vocab_size == 3257
    with open(os.path.join(gpt2_folder, "encode.json"), encoding="utf-8") as f:
        for case in json.load(f):
            assert tok.encode(case["text"]) == case["ids"], case["name"]
            assert tok.decode(case["ids"]) == case["text"], case["name"]
    with open(os.path.join(gpt2_folder, "decode.json"), encoding="utf-8") as f:
        for case in json.load(f):
            assert tok.decode(np.array(case["ids"])) == case["text"], case["name"]
    assert tok.encode(b"caf\xc3\xa9") == tok.encode("café")
    with pytest.raises(ValueError, match="byte 0xff at position 1 is not valid UTF-8"):
        tok.encode(b"a\xff")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([3257])


def test_every_kind_loads_from_a_checkpoint(tmp_path, gpt2_folder):
    text = "the cat sat on the mat and the dog sat on the log. " * 40
    gpt2 = xgrad.Tokenizer.load(gpt2_folder)
    byte_metadata = {"vocab": xgrad.models.gpt.vocabulary_json(sorted(set(text.encode())))}
    sentencepiece = xgrad.Tokenizer(xgrad._core.Tokenizer.train_sentencepiece(text, "bpe:40"))
    for kind, metadata in [("bytes", byte_metadata), ("sentencepiece", sentencepiece.metadata()),
                           ("gpt2", gpt2.metadata())]:
        tok = xgrad.Tokenizer.from_metadata(metadata)
        m = xgrad.GPT(vocab_size=tok.vocab_size, block_size=8, layers=1, d_model=8, heads=2, dtype="float32")
        path = tmp_path / (kind + ".safetensors")
        m.save(path, metadata)
        loaded = xgrad.Tokenizer.load(path)
        assert loaded.kind == kind and loaded.vocab_size == tok.vocab_size
        ids = loaded.encode("the dog sat")
        assert all(isinstance(i, int) for i in ids) and loaded.decode(ids) == "the dog sat"
        model = xgrad.GPT.load(path)
        assert model.encode("the cat") == loaded.encode("the cat")
        assert isinstance(model.sample("the cat", tokens=3, seed=1), str)
    assert repr(gpt2) == "Tokenizer(kind='gpt2', vocab_size=3257)"


def test_bad_paths_and_metadata_are_value_errors(tmp_path):
    with pytest.raises(ValueError, match="vocab.json: does not exist"):
        xgrad.Tokenizer.load(tmp_path)
    (tmp_path / "short.safetensors").write_bytes(b"abc")
    with pytest.raises(ValueError, match="shorter than the 8-byte header"):
        xgrad.Tokenizer.load(tmp_path / "short.safetensors")
    with pytest.raises(ValueError, match="allowed: bytes, sentencepiece, gpt2"):
        xgrad.Tokenizer.from_metadata({"tokenizer": "wordpiece"})
    with pytest.raises(ValueError, match="\"tokenizer_merges\" is missing"):
        xgrad.Tokenizer.from_metadata({"tokenizer": "gpt2", "tokenizer_vocab": ""})
