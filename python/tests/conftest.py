"""Shared by the tests: both backends, torch's reference, the tolerances of the golden tests, the
shipped models' torch definitions and weights."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # article_safetensors
# The lessons' hand-written attention (check_your_attention.ArticleAttention) is tested too.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tutorials", "python"))

ATOL, RTOL = 1e-5, 1e-5  # tests/golden's: vkattn against PyTorch in float32


@pytest.fixture(params=["gpu", "cpu"])
def device(request):
    """The default Vulkan device (lavapipe in CI) and the C++ reference."""
    return None if request.param == "gpu" else "cpu"


def assert_close(actual, expected, atol=ATOL, rtol=RTOL):
    expected = expected.detach().numpy() if isinstance(expected, torch.Tensor) else expected
    assert isinstance(actual, np.ndarray) and actual.dtype == np.float32
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, atol=atol, rtol=rtol)


MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "models")


def definition(name):
    """models/NAME/train.py, which defines the model in torch."""
    spec = importlib.util.spec_from_file_location(f"{name}_train", os.path.join(MODELS, name, "train.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gemma_folder(tmp_path):
    """models/tiny_llama saved as a GemmaForCausalLM in tmp_path/gemma: config.json as the hub's
    Gemma configs (hidden_act gelu, hidden_activation gelu_pytorch_tanh; tie_word_embeddings left
    out: tied), no lm_head, and norms of about 0 (Gemma's scale by 1 + weight), not all 0."""
    from article_safetensors import save_safetensors
    folder = tmp_path / "gemma"
    shutil.copytree(os.path.join(MODELS, "tiny_llama"), folder, ignore=shutil.ignore_patterns("*.py"))
    config = json.loads((folder / "config.json").read_text())
    del config["tie_word_embeddings"]
    config.update(architectures=["GemmaForCausalLM"], model_type="gemma", hidden_act="gelu",
                  hidden_activation="gelu_pytorch_tanh")
    (folder / "config.json").write_text(json.dumps(config))
    state = read_safetensors(folder / "model.safetensors")
    del state["lm_head.weight"]
    torch.manual_seed(0)
    for name in state:
        if name.endswith("norm.weight"):
            state[name] = 0.5 * torch.rand(state[name].shape) - 0.25
    save_safetensors(state, folder / "model.safetensors", {"format": "pt"})
    return folder


def read_safetensors(path):
    """The F32, F16 and BF16 tensors of a safetensors file, as float32 torch tensors."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    tensors = {}
    for name, e in header.items():
        raw = data[e["data_offsets"][0]:e["data_offsets"][1]]
        if e["dtype"] == "BF16":  # the high 16 bits of a float32
            a = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, "<f2").astype(np.float32)
        else:
            a = np.frombuffer(raw, "<f4")
        tensors[name] = torch.from_numpy(a.reshape(e["shape"]).copy())
    return tensors


def padded(model, texts, left=False):
    """An encoder's texts as its tokenizer pads them for Hugging Face's model: ids (B, T) padded with
    the model's pad token to the longest, on the right (or the left), and attention_mask (B, T)."""
    rows = [model.encode(t) for t in texts]
    pad, T = model.config["pad_token_id"], max(len(r) for r in rows)
    fill = [[pad] * (T - len(r)) for r in rows]
    ids = [f + r if left else r + f for r, f in zip(rows, fill)]
    mask = [[0] * len(f) + [1] * len(r) if left else [1] * len(r) + [0] * len(f) for r, f in zip(rows, fill)]
    return torch.tensor(ids), torch.tensor(mask)


def wordpiece_pair(question, context):
    """[CLS] question [SEP] context [SEP] by models/tiny_bert's vocabulary and train.py's own
    WordPiece for ASCII text (not vkattn's): (ids, token types, sequence ids, offsets in
    characters, words), the last three None or (0, 0) for a template's token, as Hugging Face's
    tokenizers give them."""
    train = definition("tiny_bert")
    with open(os.path.join(MODELS, "tiny_bert", "vocab.txt")) as f:
        vocab = {line.rstrip("\n"): i for i, line in enumerate(f)}
    tokens = {i: t for t, i in vocab.items()}

    def pieces(text):  # (id, (first character, past the last), word) for each token
        out = []
        for word, m in enumerate(re.finditer(r"[a-z0-9]+|[^a-z0-9\s]", text.lower())):
            at = m.start()
            for i in train.word_pieces(m.group(), vocab):
                n = len(tokens[i]) - (2 if tokens[i].startswith("##") else 0)
                out.append((i, (at, at + n), word))
                at += n
        return out

    q, c = pieces(question), pieces(context)
    ids = [vocab["[CLS]"]] + [i for i, _, _ in q] + [vocab["[SEP]"]] + [i for i, _, _ in c] + [vocab["[SEP]"]]
    types = [0] * (len(q) + 2) + [1] * (len(c) + 1)
    sequence = [None] + [0] * len(q) + [None] + [1] * len(c) + [None]
    offsets = [(0, 0)] + [o for _, o, _ in q] + [(0, 0)] + [o for _, o, _ in c] + [(0, 0)]
    words = [None] + [w for _, _, w in q] + [None] + [w for _, _, w in c] + [None]
    return ids, types, sequence, offsets, words


def overflow(pair, max_length, stride):
    """A pair (ids, types, sequence, offsets, words: wordpiece_pair's) cut as a fast tokenizer
    cuts it with truncation="only_second", max_length, stride and return_overflowing_tokens
    (tokenizers' Encoding::truncate): the context's tokens in windows of max_length less the
    others', starting every (that - stride) tokens, the last at the context's end; every window
    keeps the template's tokens and the question. A list of such pairs."""
    context = [t for t, s in enumerate(pair[2]) if s == 1]
    if len(pair[0]) <= max_length:
        return [pair]
    room = max_length - (len(pair[0]) - len(context))
    assert 0 <= stride < room
    windows = []
    for start in range(0, len(context), room - stride):
        kept = set(context[start:start + room])
        windows.append(tuple([x for t, x in enumerate(field) if pair[2][t] != 1 or t in kept] for field in pair))
        if start + room >= len(context):
            break
    return windows


def qa_pipeline(features, context, top_k=1, max_answer_len=15, align_to_words=True, handle_impossible_answer=False):
    """Hugging Face's QuestionAnsweringPipeline (question first), from its definition
    (select_starts_ends, decode_spans, get_indices, get_answer and the postprocess), over the
    features of a context (one, or its windows: overflow()): each (logits, sequence, offsets,
    words), logits (1, T, 2) torch's on that feature alone; sequence, offsets (characters) and
    words each token's, None where a template's token has none."""
    answers = []
    min_null_score = 1000000
    for logits, sequence, offsets, words in features:
        start, end = logits[0, :, 0].numpy(), logits[0, :, 1].numpy()
        p_mask = np.array([s != 1 for s in sequence])
        p_mask[0] = False  # the cls_token stays unmasked
        wanted = ~p_mask
        start, end = np.where(p_mask, -10000.0, start), np.where(p_mask, -10000.0, end)
        start = np.exp(start - start.max()) / np.exp(start - start.max()).sum()
        end = np.exp(end - end.max()) / np.exp(end - end.max()).sum()
        min_null_score = min(min_null_score, start[0] * end[0])
        start[0] = end[0] = 0.0
        candidates = np.tril(np.triu(np.outer(start, end)), max_answer_len - 1)
        flat = candidates.flatten()
        best = np.argsort(-flat, kind="stable")[:top_k]
        starts, ends = np.unravel_index(best, candidates.shape)
        for s, e in zip(starts, ends):
            if not (wanted[s] and wanted[e]):
                continue
            if align_to_words:  # word_to_chars of the words of s and e, in this feature
                first = min(t for t in range(len(words)) if sequence[t] == 1 and words[t] == words[s])
                last = max(t for t in range(len(words)) if sequence[t] == 1 and words[t] == words[e])
                a, b = offsets[first][0], offsets[last][1]
            else:
                a, b = offsets[s][0], offsets[e][1]
            same = [x for x in answers if x["answer"].lower() == context[a:b].lower()]
            if same:
                same[0]["score"] += float(candidates[s, e])
            else:
                answers.append({"score": float(candidates[s, e]), "start": a, "end": b, "answer": context[a:b]})
    if handle_impossible_answer:
        answers.append({"score": float(min_null_score), "start": 0, "end": 0, "answer": ""})
    answers = sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k]
    return answers[0] if len(answers) == 1 else answers


def recorded_steps(tmp_path, folder, *args):
    """`vkattn run --model folder` with `args` (--text …) on the reference, every step's value
    saved, then renamed as check reads them (tmp_path/mine/<step>.npy): (that folder, the run's
    stdout)"""
    done = subprocess.run([os.environ["VKATTN_CLI"], "run", "--model", str(folder), *map(str, args),
                           "--trace", str(tmp_path / "trace"), "--trace-values", "--backend", "cpu"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    mine = tmp_path / "mine"
    mine.mkdir()
    for f in (tmp_path / "trace").glob("[0-9][0-9][0-9]_*.npy"):  # NNN_<step>.npy -> <step>.npy
        (mine / f.name[4:]).write_bytes(f.read_bytes())
    return mine, done.stdout
