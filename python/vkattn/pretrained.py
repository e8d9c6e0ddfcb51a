"""Checkpoint folders as the Hugging Face hub lays them out — config.json, model.safetensors (or
shards), tokenizer.json or vocab.json + merges.txt — run on a vkattn device:

    gpt2 = vkattn.from_pretrained("models/tiny_gpt2")          # device=None: the default GPU
    logits = gpt2("Alice was beginning")                       # (1, T, vocab_size), numpy
    print(gpt2.generate("Alice was", max_new_tokens=20))       # greedy, with the KV cache
    logits, trace = gpt2.trace("Alice was")                    # every step of every layer

Architectures so far: GPT2LMHeadModel (GPT-2), LlamaForCausalLM, MistralForCausalLM and
Qwen2ForCausalLM. Another is a ConfigError naming it."""
import numpy as np

from . import _vkattn
from .devices import resolve
from .modules import _fold
from .trace import Trace


def _ids(model, tokens):
    """Text (str: the model's tokenizer), or token ids (a list, array or tensor of ints, (T,) or
    (B, T)), as a (B, T) int64 array."""
    if isinstance(tokens, str):
        return np.asarray([model.encode(tokens)], dtype=np.int64)
    if type(tokens).__module__.startswith("torch"):
        tokens = tokens.detach().cpu().numpy()
    a = np.asarray(tokens)
    if a.dtype.kind not in "iu":
        raise _vkattn.ShapeError(f"token ids: dtype {a.dtype}; give a str, or integer ids (T,) or (B, T)")
    if a.ndim == 1:
        a = a[None]
    if a.ndim != 2 or a.shape[1] == 0:
        raise _vkattn.ShapeError(f"token ids {a.shape}: give (T,) or (B, T) with T >= 1")
    return np.ascontiguousarray(a, dtype=np.int64)


class PretrainedModel:
    """A causal language model from a checkpoint folder, its weights kept on its device; call it
    on text or token ids for the logits (B, T, vocab_size)."""

    def __init__(self, path, device=None):
        self._impl = _vkattn._Pretrained(str(path), *resolve(device))
        # config.json's entries, with architecture, path, model (vkattn's reading), parameters,
        # stored_dtype and stored_bytes
        self.config = self._impl.config

    @property
    def device(self):
        """Where it runs: "gpu: <the device's name>" or "cpu: reference (C++ loops)"."""
        return self._impl.device

    def __repr__(self):
        c = self.config
        return f"vkattn.PretrainedModel({c['architecture']} from {c['path']!r}: {c['model']}) on {self.device}"

    def encode(self, text):
        """The tokenizer's ids of `text`."""
        return self._impl.encode(text)

    def decode(self, ids):
        """The text of token ids (bytes that end inside a character become U+FFFD)."""
        return self._impl.decode([int(i) for i in ids]).decode("utf-8", errors="replace")

    def __call__(self, tokens):
        """The logits (B, T, vocab_size) of text or token ids ((T,) gives B = 1)."""
        return self._impl.forward(_ids(self, tokens), False)

    forward = __call__

    def trace(self, tokens, values=True, fold_layout_steps=None):
        """(logits, Trace): the forward with every step of every layer recorded."""
        logits, recorded = self._impl.forward(_ids(self, tokens), True, _fold(fold_layout_steps))
        return logits, Trace(recorded, values=values)

    def generate(self, prompt, max_new_tokens=20, temperature=0.0, top_k=0, seed=0):
        """The continuation of `prompt` (text: returns text; ids: returns ids), one token at a time
        with the KV cache, stopping early at the end-of-text token: greedy at temperature 0, else
        drawn from softmax(logits / temperature) over the top_k likeliest (0: all), the same
        tokens for the same seed — as `vkattn generate`."""
        ids = _ids(self, prompt)
        if ids.shape[0] != 1:
            raise _vkattn.ShapeError(f"generate: one prompt at a time; the ids are {ids.shape}")
        new = self._impl.generate(ids[0].tolist(), int(max_new_tokens), float(temperature), int(top_k), int(seed))
        return self.decode(new) if isinstance(prompt, str) else new


def from_pretrained(path, device=None):
    """The model of a checkpoint folder (GPT-2, Llama), on `device` (as the modules' device=)."""
    return PretrainedModel(path, device)
