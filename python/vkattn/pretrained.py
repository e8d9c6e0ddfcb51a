"""Checkpoint folders as the Hugging Face hub lays them out — config.json, model.safetensors (or
shards), tokenizer.json, vocab.json + merges.txt or vocab.txt — run on a vkattn device:

    gpt2 = vkattn.from_pretrained("models/tiny_gpt2")          # device=None: the default GPU
    logits = gpt2("Alice was beginning")                       # (1, T, vocab_size), numpy
    print(gpt2.generate("Alice was", max_new_tokens=20))       # greedy, with the KV cache
    logits, trace = gpt2.trace("Alice was")                    # every step of every layer

    bert = vkattn.from_pretrained("models/tiny_bert")          # an encoder
    out = bert(["Alice was tired.", "The Rabbit ran!"])        # padded, as a tokenizer would
    out.last_hidden_state, out.pooler_output                   # (2, T, E), (2, E)

Architectures so far: GPT2LMHeadModel (GPT-2), LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM, GemmaForCausalLM and Phi3ForCausalLM (PretrainedModel);
BertModel, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification and
RoBERTa's and DistilBERT's four of those names (PretrainedEncoder).
Another is a ConfigError naming it."""
import collections

import numpy as np

from . import _vkattn, hooks
from ._convert import _numpy
from .devices import resolve
from .modules import _fold
from .trace import Trace


def _ids(model, tokens):
    """Text (str: the model's tokenizer), or token ids (a list, array or tensor of ints, (T,) or
    (B, T)), as a (B, T) int64 array."""
    if isinstance(tokens, str):
        return np.asarray([model.encode(tokens)], dtype=np.int64)
    if isinstance(tokens, _vkattn.DeviceTensor):
        raise _vkattn.ShapeError(f"token ids: {tokens!r} is a vkattn.DeviceTensor; give ids as ints on the host "
                                 "(a list, array or tensor), and to_host=False for outputs left on the device")
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


def _a(kind):
    return ("an " if kind[0] in "aeiou" else "a ") + kind


class _Checkpoint:
    """What a model of a checkpoint folder offers whatever it is: its config, device and tokenizer."""

    _kind = None  # the config's "kind" that the class runs

    def __init__(self, path, device=None, _impl=None):
        self._impl = _impl or _vkattn._Pretrained(str(path), *resolve(device))
        c = self._impl.config
        if c["kind"] != self._kind:
            raise _vkattn.ConfigError(f"{path}: {c['architecture']} is {_a(c['kind'])}, not {_a(self._kind)}: "
                                      f"vkattn.from_pretrained picks the class")
        # config.json's entries, with architecture, path, kind ("language model", "encoder"),
        # model (vkattn's reading), parameters, stored_dtype and stored_bytes
        self.config = self._impl.config

    @property
    def device(self):
        """Where it runs: "gpu: <the device's name>" or "cpu: reference (C++ loops)"."""
        return self._impl.device

    @property
    def device_bytes(self):
        """The bytes its weights take on its device once a forward has put them there (0 before):
        a 16-bit checkpoint's matrices 2 each on a GPU, everything 4 on the CPU reference."""
        return self._impl.device_bytes

    def _check_steps(self, recorded, tokens, atol, rtol, token_type_ids=None):
        """`recorded` ({vkattn step name: tensor}) against this model's steps on `tokens`."""
        from .check import CheckReport
        steps = [(name, np.ascontiguousarray(_numpy(t), dtype=np.float32)) for name, t in recorded.items()]
        return CheckReport(self._impl.check(steps, _ids(self, tokens), token_type_ids, atol, rtol))

    def __repr__(self):
        c = self.config
        return f"vkattn.{type(self).__name__}({c['architecture']} from {c['path']!r}: {c['model']}) on {self.device}"

    def encode(self, text):
        """The tokenizer's ids of `text`."""
        return self._impl.encode(text)

    def decode(self, ids, continuation=False):
        """The text of token ids (bytes that end inside a character become U+FFFD); continuation:
        ids that follow others, whose leading space SentencePiece's decoding would drop."""
        return self._impl.decode([int(i) for i in ids], continuation).decode("utf-8", errors="replace")


class PretrainedModel(_Checkpoint):
    """A causal language model from a checkpoint folder, its weights kept on its device; call it
    on text or token ids for the logits (B, T, vocab_size)."""

    _kind = "language model"

    def __call__(self, tokens, logits_to_keep=0, to_host=True):
        """The logits (B, T, vocab_size) of text or token ids ((T,) gives B = 1); logits_to_keep=n
        (Hugging Face's) the last n positions' alone, (B, n, vocab_size), the final norm and lm_head
        run on those rows only (what the next token needs: n = 1). to_host=False leaves them on the
        model's device, a vkattn.DeviceTensor (numpy() reads it back), as torch's on CUDA."""
        if not to_host:
            return self._impl.forward_on_device(_ids(self, tokens), logits_to_keep=int(logits_to_keep))
        return self._impl.forward(_ids(self, tokens), False, logits_to_keep=int(logits_to_keep))

    forward = __call__

    def trace(self, tokens, values=True, fold_layout_steps=None, attention="auto"):
        """(logits, Trace): the forward with every step of every layer recorded; attention="unfused"
        records each layer's scores, mask, softmax (the pattern) and weights @ v as steps."""
        logits, recorded = self._impl.forward(_ids(self, tokens), True, _fold(fold_layout_steps), attention)
        return logits, Trace(recorded, values=values)

    def check(self, cache, tokens, atol=1e-4, rtol=1e-4):
        """Your tensors against this model's on the same tokens: a CheckReport naming the first
        that differs. `cache` is a TransformerLens-style cache ({hook name: tensor}, e.g. an
        ActivationCache of GPT-2), checked hook by hook in TransformerLens's order against a trace
        with attention unfused; or a Recorder (or dict) under vkattn's step names (as this model's
        trace names them), checked step by step with check's diagnoses. vkattn.check(cache, model,
        tokens) too."""
        from .check import CheckReport
        cache = {name: (t.detach().cpu().numpy() if hasattr(t, "detach") else t)
                 for name, t in dict(getattr(cache, "tensors", cache)).items()}
        if not any(name.startswith(("blocks.", "hook_", "ln_final.")) for name in cache):
            return self._check_steps(cache, tokens, atol, rtol)
        _, trace = self.trace(tokens, attention="unfused")
        return CheckReport(hooks.HookCheck(cache, trace, self.config["architecture"], atol, rtol))

    def generate(self, prompt, max_new_tokens=20, temperature=0.0, top_k=0, seed=0, cache_dtype=None):
        """The continuation of `prompt` (text: returns text; ids: returns ids), one token at a time
        with the KV cache, stopping early at the end-of-text token: greedy at temperature 0, else
        drawn from softmax(logits / temperature) over the top_k likeliest (0: all), the same
        tokens for the same seed — as `vkattn generate`. cache_dtype "float16" or "bfloat16" (or
        torch.float16, torch.bfloat16) keeps the cache's keys and values rounded to 16 bits, 2 bytes
        each on a GPU; None keeps them float32."""
        ids = _ids(self, prompt)
        if ids.shape[0] != 1:
            raise _vkattn.ShapeError(f"generate: one prompt at a time; the ids are {ids.shape}")
        if cache_dtype is not None and not isinstance(cache_dtype, str):
            cache_dtype = str(cache_dtype).replace("torch.", "")  # torch.float16 -> "float16"
        new = self._impl.generate(ids[0].tolist(), int(max_new_tokens), float(temperature), int(top_k), int(seed),
                                  cache_dtype or "")
        return self.decode(new, continuation=True) if isinstance(prompt, str) else new


# An encoder's outputs, as Hugging Face's BaseModelOutputWithPooling names them: numpy arrays
# (B, T, E) and (B, E), or vkattn.DeviceTensors (to_host=False); pooler_output is None for a model
# without a pooler.
EncoderOutput = collections.namedtuple("EncoderOutput", ["last_hidden_state", "pooler_output"])


class PretrainedEncoder(_Checkpoint):
    """An encoder (BERT) from a checkpoint folder, its weights kept on its device; call it on a
    text, a list of texts (padded to the longest, as a tokenizer's padding=True does) or token
    ids for an EncoderOutput(last_hidden_state, pooler_output)."""

    _kind = "encoder"

    def _inputs(self, tokens, token_type_ids, attention_mask, text_pair=None):
        """(ids, token types, key padding mask: True = padding) for the engine."""
        texts = isinstance(tokens, str) or (
            isinstance(tokens, (list, tuple)) and tokens and all(isinstance(t, str) for t in tokens))
        if text_pair is not None:
            if not texts:
                raise _vkattn.ShapeError("text_pair: give it with a text (or a list of texts), not token ids")
            if token_type_ids is not None:
                raise _vkattn.ShapeError("token_type_ids: a pair of texts gives its own; leave them out")
            firsts = [tokens] if isinstance(tokens, str) else list(tokens)
            seconds = [text_pair] if isinstance(text_pair, str) else list(text_pair)
            if len(firsts) != len(seconds) or not all(isinstance(t, str) for t in seconds):
                raise _vkattn.ShapeError(f"text_pair: {len(seconds)} second texts for {len(firsts)} first ones; "
                                         "give one text each")
            pairs = [self._impl.encode_pair(a, b) for a, b in zip(firsts, seconds)]
            rows, type_rows = [ids for ids, _ in pairs], [types for _, types in pairs]
        elif isinstance(tokens, (list, tuple)) and texts:
            rows, type_rows = [self.encode(t) for t in tokens], None
        else:
            rows = None
        if rows is not None:
            if attention_mask is not None:
                raise _vkattn.ShapeError("attention_mask: texts are padded here; give it with token ids only")
            T = max(len(r) for r in rows)
            pad = self.config["pad_token_id"]
            if pad < 0 and any(len(r) < T for r in rows):
                raise _vkattn.ConfigError("the tokenizer has no [PAD] token to pad the texts to one length")
            ids = np.asarray([r + [max(pad, 0)] * (T - len(r)) for r in rows], dtype=np.int64)
            attention_mask = np.asarray([[1] * len(r) + [0] * (T - len(r)) for r in rows])
            if type_rows is not None and self.config["type_vocab_size"] > 0:
                token_type_ids = np.asarray([t + [0] * (T - len(t)) for t in type_rows], dtype=np.int64)
        else:
            ids = _ids(self, tokens)
        types = None if token_type_ids is None else np.ascontiguousarray(
            np.asarray(token_type_ids).reshape(ids.shape), dtype=np.int64)
        padding = None
        if attention_mask is not None:
            mask = np.asarray(attention_mask)
            if mask.shape != ids.shape and mask.shape != ids.shape[1:]:
                raise _vkattn.ShapeError(f"attention_mask {mask.shape} must be the ids' shape {ids.shape}")
            padding = np.ascontiguousarray(mask.reshape(ids.shape) == 0)  # Hugging Face's 1 = a token
        return ids, types, padding

    def __call__(self, tokens, token_type_ids=None, attention_mask=None, text_pair=None, to_host=True):
        """EncoderOutput(last_hidden_state (B, T, E), pooler_output (B, E)) of a text, texts or ids.
        token_type_ids (B, T): 0 for sentence A, 1 for B (zeros when absent); attention_mask
        (B, T): 1 for a token, 0 for padding, as Hugging Face's tokenizers give it. text_pair:
        a second text for each (a question's context, a sentence to compare), joined to it as the
        tokenizer joins a pair — BERT's [CLS] a [SEP] b [SEP], token types 0 then 1 — as a
        Hugging Face tokenizer's text_pair= does. to_host=False leaves both on the model's device,
        vkattn.DeviceTensors, for a module there (a batch-first vkattn.MultiheadAttention, say) to
        take as they lie; their numpy() reads them back."""
        inputs = self._inputs(tokens, token_type_ids, attention_mask, text_pair)
        if not to_host:
            return EncoderOutput(*self._impl.encoder_forward_on_device(*inputs))
        hidden, pooled = self._impl.encoder_forward(*inputs, False)
        return EncoderOutput(hidden, pooled)

    forward = __call__

    def check(self, recorded, tokens, atol=1e-4, rtol=1e-4, text_pair=None):
        """Your tensors (a Recorder, or a dict, under vkattn's step names as this model's trace
        names them) against this model's on one text or unpadded token ids (with text_pair: the
        pair of texts, as a call joins them): a CheckReport naming the first that differs, with
        check's diagnoses. Where you recorded a head's steps (the classifier's, qa_outputs, cls.…)
        that head's pass is checked. vkattn.check(recorded, model, tokens) too."""
        recorded = dict(getattr(recorded, "tensors", recorded))
        if text_pair is None:
            return self._check_steps(recorded, tokens, atol, rtol)
        if not isinstance(tokens, str) or not isinstance(text_pair, str):
            raise _vkattn.ShapeError("check: text_pair checks one pair of texts: give tokens and text_pair as str")
        ids, types, _ = self._inputs(tokens, None, None, text_pair)  # types None: DistilBERT's, which has none
        return self._check_steps(recorded, ids, atol, rtol, types)

    def masked_lm(self, tokens, token_type_ids=None, attention_mask=None, text_pair=None):
        """BertForMaskedLM's logits (B, T, vocab_size) of a text, texts or ids (inputs as a
        call's, text_pair too): the vocabulary's scores at each position. ConfigError where the
        checkpoint has no masked-LM head (its cls.predictions)."""
        return self._impl.masked_lm(*self._inputs(tokens, token_type_ids, attention_mask, text_pair), False)

    def classify(self, tokens, token_type_ids=None, attention_mask=None, text_pair=None):
        """A classifier's logits of a text, texts or ids (inputs as a call's, text_pair too: a
        cross-encoder's or an NLI model's pair).

        A sequence classifier's are (B, num_labels): BertForSequenceClassification's classifier
        on the pooler's output; RobertaForSequenceClassification's dense and tanh on the first
        token, then out_proj; DistilBertForSequenceClassification's the same with relu. A token
        classifier's (…ForTokenClassification) are (B, T, num_labels), a label for every token.
        config["id2label"] names the labels (softmax the logits for their probabilities).
        ConfigError where the checkpoint has no classifier."""
        return self._impl.classify(*self._inputs(tokens, token_type_ids, attention_mask, text_pair), False)

    def fill_mask(self, text, top_k=5):
        """The likeliest tokens at each [MASK] (RoBERTa's <mask>) of `text`, as Hugging Face's
        fill-mask pipeline gives them: a list (one per mask, in order) of `top_k` (token,
        probability) pairs."""
        return [[(token.decode("utf-8", errors="replace"), p) for token, p in fills]
                for fills in self._impl.fill_mask(text, top_k)]

    def answer(self, question, context, top_k=1, max_answer_len=15, align_to_words=True,
               handle_impossible_answer=False, doc_stride=None, max_seq_len=None):
        """The answer to `question` in `context` of a question answerer (…ForQuestionAnswering),
        as Hugging Face's question-answering pipeline gives it: {"score", "start", "end",
        "answer"}, the answer context[start:end]; a list of such, the likeliest first, where more
        than one is found (top_k: the spans tried; spans of one text are one answer, their scores
        summed). A span's score is P(start) · P(end), each a softmax of qa_outputs' logits over
        the context's tokens; an answer has at most max_answer_len tokens and, with
        align_to_words, whole words; handle_impossible_answer adds the empty answer, scored by
        [CLS]. A context longer than max_seq_len tokens (question and template included; default
        min(384, the model's)) is read in windows that share doc_stride of its tokens (default
        min(max_seq_len // 2, 128)), one batch. ConfigError where the checkpoint has no
        question-answering head."""
        if not isinstance(question, str) or not isinstance(context, str):
            raise _vkattn.ShapeError("answer: the question and the context are texts (str)")
        for name, value in (("top_k", top_k), ("max_answer_len", max_answer_len)):
            if not isinstance(value, int) or value < 1:
                raise _vkattn.ConfigError(f"answer: {name}={value!r} must be an int of at least 1")
        for name, value in (("doc_stride", doc_stride), ("max_seq_len", max_seq_len)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise _vkattn.ConfigError(f"answer: {name}={value!r} must be an int or None")
        found = [{"score": score, "start": start, "end": end, "answer": text}
                 for score, start, end, text in self._impl.answer(
                     question, context, top_k, max_answer_len, align_to_words, handle_impossible_answer,
                     max_seq_len, doc_stride)]
        return found[0] if len(found) == 1 else found

    def trace(self, tokens, token_type_ids=None, attention_mask=None, values=True, fold_layout_steps=None,
              text_pair=None):
        """(EncoderOutput, Trace): the forward with every step of every layer recorded."""
        (hidden, pooled), recorded = self._impl.encoder_forward(
            *self._inputs(tokens, token_type_ids, attention_mask, text_pair), True, _fold(fold_layout_steps))
        return EncoderOutput(hidden, pooled), Trace(recorded, values=values)


def from_pretrained(path, device=None, weights_dtype=None):
    """The model of a checkpoint folder on `device` (as the modules' device=): a PretrainedModel
    (GPT-2, Llama, Mistral, Qwen2, Qwen3, Gemma) or a PretrainedEncoder (BERT). weights_dtype="bfloat16" or
    "float16" (or torch.bfloat16, torch.float16) rounds its weights so as they are read, as
    model.to(dtype) would: a GPU then keeps its matrices in half the memory; None takes them as
    the files hold them."""
    if weights_dtype is not None and not isinstance(weights_dtype, str):
        weights_dtype = str(weights_dtype).replace("torch.", "")  # torch.bfloat16 -> "bfloat16"
    impl = _vkattn._Pretrained(str(path), *resolve(device), weights_dtype or "")
    return (PretrainedEncoder if impl.config["kind"] == "encoder" else PretrainedModel)(path, _impl=impl)
