"""Every tokenizer xgrad knows behind one class: the byte vocabulary of text checkpoints, SentencePiece
models (xgrad-train --tokenizer bpe:N / unigram:N) and GPT-2's byte-level BPE (vocab.json + merges.txt).

    tok = xgrad.Tokenizer.load(path)      # a checkpoint, or a folder holding vocab.json and merges.txt
    ids = tok.encode("Hello world")       # list of int
    text = tok.decode(ids)                # str; bytes that are not UTF-8 become U+FFFD (errors="replace")
    tok.vocab_size, tok.kind              # int; "bytes" | "sentencepiece" | "gpt2"
"""

import json
import os

from . import _core
from ._tape import as_token_list

_MAX_HEADER_BYTES = 100_000_000  # as xgrad's safetensors reader


def checkpoint_metadata(path):
    """The string metadata of a safetensors file, read from its header alone (not its tensors)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{path}: is shorter than the 8-byte header length")
        length = int.from_bytes(head, "little")
        if length > size - 8 or length > _MAX_HEADER_BYTES:
            raise ValueError(f"{path}: header length {length} exceeds the file's {size} bytes")
        try:
            header = json.loads(f.read(length))
        except (ValueError, RecursionError):
            raise ValueError(f"{path}: header is not valid JSON") from None
    metadata = header.get("__metadata__", {}) if isinstance(header, dict) else None
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError(f"{path}: __metadata__ is not an object of strings")
    return metadata


class Tokenizer:
    """Text to token ids and back, as the checkpoint's model was trained (see the module's docstring)."""

    def __init__(self, core):
        self._t = core

    @classmethod
    def load(cls, path):
        """From a checkpoint (its metadata: "vocab", or "tokenizer" with its keys) or from a folder that
        holds GPT-2's vocab.json and merges.txt. ValueError names the file and what is wrong."""
        path = os.fspath(path)
        if os.path.isdir(path):
            return cls(_core.Tokenizer.from_gpt2_folder(path))
        return cls.from_metadata(checkpoint_metadata(path), path)

    @classmethod
    def from_metadata(cls, metadata, source="metadata"):
        """From a checkpoint's metadata ({str: str}); ``source`` starts the messages of errors."""
        return cls(_core.Tokenizer.from_metadata(dict(metadata), str(source)))

    @property
    def vocab_size(self):
        return self._t.size()

    @property
    def kind(self):
        """ "bytes", "sentencepiece" or "gpt2"."""
        return self._t.kind()

    def encode(self, text):
        """Token ids (list of int) of ``text``: a str (encoded as UTF-8) or bytes. ValueError names the
        first character the tokenizer cannot encode."""
        return self._t.encode(text.encode("utf-8") if isinstance(text, str) else bytes(text))

    def decode(self, ids):
        """The text token ids stand for, as str; bytes that are not UTF-8 become U+FFFD."""
        return self._t.decode(as_token_list(ids, "Tokenizer.decode")).decode("utf-8", "replace")

    def metadata(self):
        """The checkpoint metadata that restores this tokenizer ({str: str})."""
        return self._t.metadata()

    def __repr__(self):
        return f"Tokenizer(kind={self.kind!r}, vocab_size={self.vocab_size})"
