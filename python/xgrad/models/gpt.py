"""The small GPT (models/gpt.hpp): GPT-2 layout, pre-LayerNorm, learned positions, the head tied to the
token embedding, optional grouped-query heads; safetensors checkpoints; the hand-derived twin; sampling.

    x = wte[tokens] + wpe[0 .. T-1]
    for each layer i:
        x = x + MHA_i(LN(x; ln_1))                         causal, no biases
        x = x + GELU(LN(x; ln_2) @ W_fc + b_fc) @ W_proj + b_proj
    logits = LN(x; ln_f) @ wte^T
"""

import json
import numbers

import numpy as np

from .. import _core
from .._tape import Parameter, Tape, Var, _core_class, _dtype_of, as_ids, as_token_list, whole_number
from ..divergence import first_divergence


class GPTOutput:
    """One forward pass on a fresh tape: ``logits`` (B, T, V) and ``loss`` (a scalar var, or None without
    targets), ``activations`` ({name: var} in forward order: "embed", "blocks.0.ln_1", "blocks.0.attn",
    ..., "ln_f", "logits") and the ``tape`` they live on."""

    def __init__(self, logits, loss, activations, tape):
        self.logits, self.loss, self.activations, self.tape = logits, loss, activations, tape

    def __iter__(self):
        return iter((self.logits, self.loss))


class GPT:
    """A small GPT, from sizes (seeded GPT-2 initialisation) or from a checkpoint (``GPT.load``).

    >>> m = GPT.load("model.safetensors")
    >>> logits, loss = m(tokens, targets)      # NumPy int arrays (B, T); targets -1 = ignored
    >>> loss.backward()                        # gradients accumulate in the parameters
    >>> m.grads()["blocks.0.attn.W_Q"]         # {name: array}; m.zero_grad() resets them

    The architecture variant as keyword arguments named like the checkpoint's metadata keys (docs/spec.md,
    "Architecture variants"): ``norm="rmsnorm"``, ``position="rope"``, ``rope_base=500000.0``,
    ``mlp="swiglu"``, ``mlp_hidden=256``, ``bias="none"``, ``tied_head=False``, and the later ones
    (docs/spec.md, "More architecture variants"): ``qk_norm="rms"``, ``mlp="relu2"``, ``logit_softcap=30.0``,
    ``attention_window=256``;
    an unknown key or value is a ValueError naming it and the values allowed.
    The hand-derived twin (manual_gradients) covers the model it covers in C++.

    ``dtype`` is "float64" (default) or "float32". Parameters are named as in docs/spec.md's checkpoint table
    (wte, wpe, blocks.{i}.ln_1.weight, ...). Arrays handed out are copies; ``parameters()`` returns
    handles that share storage with the model (for optimisers and ``Tape.param``).
    """

    def __init__(self, vocab_size, block_size, layers, d_model, heads, kv_heads=None, seed=1, dtype="float64",
                 **variant):
        self.dtype = _dtype_of(dtype)
        if int(seed) < 0:
            raise ValueError("GPT: seed must be >= 0, got %d" % seed)
        fields = dict(vocab_size=vocab_size, block_size=block_size, layers=layers, d_model=d_model, heads=heads,
                      kv_heads=kv_heads or None, **variant)
        self._m = _core_class("GPT", self.dtype)(config_fields("GPT", fields), int(seed))

    @classmethod
    def load(cls, path, dtype="float64"):
        """Reads a checkpoint strictly (docs/spec.md, "Checkpoint file: safetensors"), F32 or F64, converted to
        ``dtype``. A malformed file raises RuntimeError naming the file and the problem."""
        m = cls.__new__(cls)
        m.dtype = _dtype_of(dtype)
        m._m = _core_class("GPT", m.dtype).load(str(path))
        return m

    def save(self, path, metadata=None):
        """Writes a checkpoint atomically, in the model's dtype, with its metadata (a loaded model keeps
        the file's, e.g. "vocab") plus ``metadata`` ({str: str})."""
        self._m.save(str(path), {str(k): str(v) for k, v in (metadata or {}).items()})

    # ---- what it is ----
    @property
    def config(self):
        """Every field of the config by its key: the sizes (int; kv_heads = H and mlp_hidden = 4 d unless
        set) and the architecture variant (str, float or bool), as GPT(...) takes them."""
        return self._m.config()

    @property
    def metadata(self):
        """The checkpoint's metadata ({str: str}; empty for a model made from sizes)."""
        return self._m.metadata()

    def parameter_count(self):
        """V d + block_size d + L (2 d^2 + 2 d G dh + 8 d^2 + 9 d) + 2 d."""
        return self._m.parameter_count()

    def parameters(self):
        """Every parameter as an xgrad.Parameter handle sharing storage with the model, in docs/spec.md's order."""
        return [Parameter._of(p, self.dtype) for p in self._m.parameters()]

    def named_parameters(self):
        """(name, value) pairs in docs/spec.md's table order; the values are copies. ``dict(m.named_parameters())``."""
        return [(p.name(), p.value()) for p in self._m.parameters()]

    def grads(self):
        """{name: gradient} (copies): what backward passes accumulated since the last zero_grad."""
        return {p.name(): p.grad() for p in self._m.parameters()}

    def zero_grad(self):
        self._m.zero_grad()

    def __repr__(self):
        c = self.config
        return "GPT(V=%d, block=%d, L=%d, d=%d, H=%d, G=%d, %s, %d parameters)" % (
            c["vocab_size"], c["block_size"], c["layers"], c["d_model"], c["heads"], c["kv_heads"],
            np.dtype(self.dtype).name, self.parameter_count())

    # ---- forward on the tape ----
    def forward(self, tokens, targets=None, fused=True):
        """The forward pass recorded on a fresh tape: a GPTOutput. ``tokens`` (B, T) integers in [0, V),
        1 <= T <= block_size; ``targets`` (B, T) in [0, V) or -1 (ignored). ``fused``: the fused
        layer_norm / gelu / attention / cross_entropy ops (default) or their compositions of primitives."""
        t = Tape(self.dtype)
        tg = None if targets is None else as_ids(targets, "GPT targets")
        logits, loss, activations = self._m.forward(t._t, as_ids(tokens, "GPT tokens"), tg, bool(fused))
        return GPTOutput(Var(logits, t), None if loss is None else Var(loss, t),
                         {name: Var(v, t) for name, v in activations}, t)

    def __call__(self, tokens, targets=None):
        """``logits, loss = m(tokens, targets)``: vars on a fresh tape (loss None without targets)."""
        out = self.forward(tokens, targets)
        return out.logits, out.loss

    # ---- gradients three ways ----
    def backward_order(self):
        """Every activation and parameter name in the order a backward pass completes its gradient."""
        return self._m.backward_order()

    def tape_gradients(self, tokens, targets):
        """{name: gradient} in backward order, from the tape: every named activation and every parameter.
        Zeroes the model's gradients first (they then hold this batch's)."""
        self.zero_grad()
        out = self.forward(tokens, targets)
        out.loss.backward(retain_graph=True)
        grads = self.grads()
        return {name: out.activations[name].grad if name in out.activations else grads[name]
                for name in self.backward_order()}

    def manual_gradients(self, tokens, targets, broken=None):
        """The hand-derived backward of the whole model (models/gpt_manual.hpp), no tape:
        (logits, loss, {name: gradient} in backward order). ``broken`` makes one deliberate mistake for
        teaching: "encoder", "layer_norm", "attention", "residual", "matmul_bias", "gelu",
        "cross_entropy"."""
        logits, loss, grads = self._m.manual(as_ids(tokens, "GPT tokens"), as_ids(targets, "GPT targets"),
                                             broken or "none")
        return logits, loss, dict(grads)

    def first_divergence(self, mine, tokens, targets, rtol=None, atol=None):
        """Your gradients ({name: array}: any of the backward_order names, e.g. from your own NumPy
        backward) against the tape's, in backward order: a DivergenceReport naming the first gradient that
        differs. Names you did not give are not compared; an unknown name is a ValueError."""
        unknown = sorted(set(mine) - set(self.backward_order()))
        if unknown:
            raise ValueError("GPT.first_divergence: unknown gradient names %s" % unknown)
        reference = [(n, g) for n, g in self.tape_gradients(tokens, targets).items() if n in mine]
        return first_divergence(mine, reference, rtol, atol, ("tape", "mine"))

    # ---- text and sampling ----
    @property
    def vocabulary(self):
        """The byte vocabulary of a model trained on text (the checkpoint's "vocab"), or None."""
        vocab = self.metadata.get("vocab")
        return None if vocab is None else _core.ByteVocabulary.from_json(vocab)

    def encode(self, text):
        """Token ids of ``text`` (str, UTF-8, or bytes) under the model's tokenizer: its byte vocabulary,
        or the metadata's "tokenizer" (SentencePiece, GPT-2's; xgrad.Tokenizer)."""
        if "tokenizer" in self.metadata:
            return self._tokenizer().encode(text)
        return self._need_vocabulary().encode(text.encode() if isinstance(text, str) else bytes(text))

    def decode(self, ids):
        """The text token ids stand for, as str (undecodable bytes replaced)."""
        if "tokenizer" in self.metadata:
            return self._tokenizer().decode(ids)
        return self._need_vocabulary().decode(as_token_list(ids, "GPT.decode")).decode("utf-8", "replace")

    def _tokenizer(self):
        from ..tokenizer import Tokenizer
        metadata = self.metadata
        keys = ("tokenizer", "tokenizer_model", "tokenizer_vocab", "tokenizer_merges")
        key = tuple(metadata.get(k) for k in keys)
        if getattr(self, "_tokenizer_key", None) != key:  # parsed once per metadata, not per call
            self._tokenizer_cached, self._tokenizer_key = Tokenizer.from_metadata(metadata, "GPT"), key
        return self._tokenizer_cached

    def sample(self, prompt, tokens=200, temperature=1.0, top_k=0, seed=1):
        """Continues ``prompt`` through a KV cache: ``tokens`` new ids drawn at ``temperature`` (0: the most
        likely) among the ``top_k`` most likely (0: all), seeded. ``prompt``: token ids (returns ids) or
        text (returns the continuation as text; needs the model's vocabulary)."""
        tokens = whole_number("GPT.sample: tokens", tokens)
        top_k = whole_number("GPT.sample: top_k", top_k)
        seed = whole_number("GPT.sample: seed", seed, high=2**64)
        if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not temperature >= 0:
            raise ValueError("GPT.sample: temperature must be a number >= 0, got %r" % (temperature,))
        text = isinstance(prompt, (str, bytes))
        ids = self.encode(prompt) if text else as_token_list(prompt, "GPT.sample prompt")
        out = self._m.sample(ids, tokens, float(temperature), top_k, seed)
        return self.decode(out) if text else out

    def _need_vocabulary(self):
        vocab = self.vocabulary
        if vocab is None:
            raise ValueError("GPT: this model has no \"vocab\" metadata (it was not trained on text)")
        return vocab


def vocabulary_json(byte_values):
    """The "vocab" metadata for token ids standing for ``byte_values`` (ascending), e.g. "[10, 32, 33]"."""
    return json.dumps([int(b) for b in byte_values])


def config_fields(caller, fields):
    """The config's fields as the text the C++ side reads (models/gpt_config.hpp): None leaves a field at its
    default; a negative size is a ValueError naming ``caller``."""
    texts = {}
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool):
            texts[key] = "true" if value else "false"
        elif isinstance(value, float):
            texts[key] = repr(value)
        elif isinstance(value, int):
            if value < 0:
                raise ValueError("%s: %s must be >= 0, got %d" % (caller, key, value))
            texts[key] = str(value)
        else:
            texts[key] = str(value)
    return texts
