"""vkattn.from_pretrained on RoBERTa's checkpoints, as the hub saves roberta-base
(RobertaForMaskedLM) and its fine-tuned classifiers (RobertaForSequenceClassification), against
torch running the same weights, on both backends.

The folders are made here: tiny_bert's trained encoder layers under RoBERTa's names ("roberta."),
new embeddings for a byte-level BPE vocabulary (tiny_gpt2's after RoBERTa's <s>, <pad>, </s> and
<unk>, <mask> last, in a tokenizer.json as RobertaTokenizerFast writes it), RoBERTa's
position_embeddings (max positions + 2 rows) and one token type, and random heads. torch runs
tiny_bert's definition (models/tiny_bert/train.py) with RoBERTa's position ids, written below from
Hugging Face's create_position_ids_from_input_ids."""
import json
import os
import re

import numpy as np
import pytest
import torch

import vkattn
from conftest import MODELS, assert_close, definition, overflow, padded, qa_pipeline, read_safetensors

PAD, LABELS = 1, {"0": "negative", "1": "neutral", "2": "positive"}
TEXTS = ["Alice was beginning to get very tired of sitting by her sister.", "The White Rabbit ran!"]


def roberta_positions(ids, padding_idx=PAD):
    """Hugging Face's create_position_ids_from_input_ids: a token that is not padding takes
    padding_idx + 1 + the number of such tokens before it; padding takes padding_idx."""
    mask = (ids != padding_idx).int()
    return (torch.cumsum(mask, dim=1) * mask + padding_idx).long()


def tokenizer_json():
    """RoBERTa's tokenizer.json over tiny_gpt2's byte-level BPE: its tokens 4 ids on, <mask> last."""
    with open(os.path.join(MODELS, "tiny_gpt2", "vocab.json")) as f:
        gpt2 = json.load(f)
    with open(os.path.join(MODELS, "tiny_gpt2", "merges.txt")) as f:
        merges = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#version")]
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for token, i in sorted(gpt2.items(), key=lambda item: item[1]):
        if token != "<|endoftext|>":
            vocab[token] = len(vocab)
    vocab["<mask>"] = len(vocab)
    added = [{"id": i, "content": t, "single_word": False, "lstrip": t == "<mask>", "rstrip": False,
              "normalized": t != "<mask>", "special": True} for t, i in vocab.items() if t.startswith("<")]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                               "trim_offsets": True, "add_prefix_space": False},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": merges}}


class Roberta:
    """The torch side: the encoder (tiny_bert's BertModel, RoBERTa-sized), the heads, the folders."""

    def __init__(self, root):
        from article_safetensors import save_safetensors
        train = definition("tiny_bert")
        trained = read_safetensors(os.path.join(MODELS, "tiny_bert", "model.safetensors"))
        bert = train.BertForMaskedLM(trained["bert.embeddings.word_embeddings.weight"].shape[0])
        bert.load_state_dict(trained)
        tokenizer = tokenizer_json()
        V, E, P = len(tokenizer["model"]["vocab"]), train.E, train.POSITIONS + PAD + 1
        torch.manual_seed(7)
        self.encoder = train.BertModel(V)
        self.encoder.embeddings.position_embeddings = torch.nn.Embedding(P, E)
        self.encoder.embeddings.token_type_embeddings = torch.nn.Embedding(1, E)
        self.encoder.embeddings.LayerNorm.load_state_dict(bert.bert.embeddings.LayerNorm.state_dict())
        self.encoder.encoder.load_state_dict(bert.bert.encoder.state_dict())
        self.lm_head = train.Module(dense=torch.nn.Linear(E, E), layer_norm=torch.nn.LayerNorm(E, eps=train.EPS))
        self.lm_head.bias = torch.nn.Parameter(torch.randn(V) * 0.1)
        self.classifier = train.Module(dense=torch.nn.Linear(E, E), out_proj=torch.nn.Linear(E, 3))
        self.token_classifier = torch.nn.Linear(E, 2)
        self.qa_outputs = torch.nn.Linear(E, 2)
        with torch.no_grad():
            self.qa_outputs.weight.mul_(4.0)  # logits of some spread, so that one span stands out
        for m in (self.encoder, self.lm_head, self.classifier, self.token_classifier, self.qa_outputs):
            m.eval()
        encoder = {"roberta." + n: t for n, t in self.encoder.state_dict().items() if not n.startswith("pooler.")}
        config = {"model_type": "roberta", "hidden_act": "gelu", "hidden_size": E, "intermediate_size": train.FF,
                  "layer_norm_eps": train.EPS, "max_position_embeddings": P, "num_attention_heads": train.HEADS,
                  "num_hidden_layers": train.LAYERS, "pad_token_id": PAD, "bos_token_id": 0, "eos_token_id": 2,
                  "position_embedding_type": "absolute", "type_vocab_size": 1, "vocab_size": V,
                  "torch_dtype": "float32"}
        heads = {
            "masked_lm": ("RobertaForMaskedLM",
                          {**{"lm_head." + n: t for n, t in self.lm_head.state_dict().items()},
                           "lm_head.decoder.weight": self.encoder.embeddings.word_embeddings.weight}, {}),
            "classifier": ("RobertaForSequenceClassification",
                           {"classifier." + n: t for n, t in self.classifier.state_dict().items()},
                           {"id2label": LABELS, "label2id": {v: int(k) for k, v in LABELS.items()}}),
            "token_classifier": ("RobertaForTokenClassification",
                                 {"classifier." + n: t for n, t in self.token_classifier.state_dict().items()},
                                 {"num_labels": 2}),
            "question_answering": ("RobertaForQuestionAnswering",
                                   {"qa_outputs." + n: t for n, t in self.qa_outputs.state_dict().items()}, {}),
        }
        self.folders = {}
        for kind, (architecture, weights, extra) in heads.items():
            folder = root / kind
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps({**config, "architectures": [architecture], **extra}))
            (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
            save_safetensors({**encoder, **{n: t.detach() for n, t in weights.items()}}, folder / "model.safetensors",
                             {"format": "pt"})
            self.folders[kind] = folder

    def hidden(self, ids, mask=None):
        with torch.no_grad():
            mask = torch.ones_like(ids) if mask is None else mask
            return self.encoder(ids, torch.zeros_like(ids), mask, roberta_positions(ids))[0]

    def masked_lm(self, ids):  # RobertaLMHead: layer_norm(gelu(dense(x))) · word_embeddingsᵀ + bias
        with torch.no_grad():
            h = self.lm_head.layer_norm(torch.nn.functional.gelu(self.lm_head.dense(self.hidden(ids))))
            return h @ self.encoder.embeddings.word_embeddings.weight.T + self.lm_head.bias

    def classify_tokens(self, ids, mask):  # RobertaForTokenClassification: a linear layer on every token
        with torch.no_grad():
            return self.token_classifier(self.hidden(ids, mask))

    def answer_logits(self, ids):  # RobertaForQuestionAnswering: qa_outputs on every token, (B, T, 2)
        with torch.no_grad():
            return self.qa_outputs(self.hidden(ids))

    def classify(self, ids, mask):  # RobertaClassificationHead: out_proj(tanh(dense(x[:, 0])))
        with torch.no_grad():
            return self.classifier.out_proj(torch.tanh(self.classifier.dense(self.hidden(ids, mask)[:, 0])))


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    return Roberta(tmp_path_factory.mktemp("roberta"))


def test_texts_padded_to_one_length_match_torch_at_every_position(device, roberta):
    model = vkattn.from_pretrained(roberta.folders["masked_lm"], device=device)
    assert isinstance(model, vkattn.PretrainedEncoder)
    assert model.config["pad_token_id"] == PAD and model.config["mask_token_id"] == model.config["vocab_size"] - 1
    out = model(TEXTS)
    rows = [model.encode(t) for t in TEXTS]
    assert [r[0] for r in rows] == [0, 0] and [r[-1] for r in rows] == [2, 2]  # <s> … </s>
    ids, mask = padded(model, TEXTS)
    assert (ids == PAD).any()  # the second is padded, its padding at position padding_idx
    assert_close(out.last_hidden_state, roberta.hidden(ids, mask), atol=1e-4, rtol=1e-4)
    assert out.pooler_output is None  # RobertaForMaskedLM has no pooler


def test_a_pair_of_texts_is_joined_as_robertas_tokenizer_joins_it(device, roberta):
    model = vkattn.from_pretrained(roberta.folders["masked_lm"], device=device)
    a, b = model.encode(TEXTS[0]), model.encode(TEXTS[1])
    ids = torch.tensor([a + [2] + b[1:]])  # <s> a </s></s> b </s>, one token type
    out = model(TEXTS[0], text_pair=TEXTS[1])
    assert_close(out.last_hidden_state, roberta.hidden(ids, torch.ones_like(ids)), atol=1e-4, rtol=1e-4)


def test_left_padding_takes_huggingfaces_positions(device, roberta):
    model = vkattn.from_pretrained(roberta.folders["masked_lm"], device=device)
    ids, mask = padded(model, TEXTS, left=True)
    expected = roberta.hidden(ids, mask)
    got = model(ids.numpy(), attention_mask=mask.numpy()).last_hidden_state
    assert_close(got, expected, atol=1e-4, rtol=1e-4)
    # the second text's tokens as when it is alone: positions count from its first token
    alone = model(TEXTS[1]).last_hidden_state[0]
    assert_close(got[1, -alone.shape[0]:], alone, atol=1e-4, rtol=1e-4)


def test_the_masked_lm_fills_a_mask_that_takes_the_space_before_it(device, roberta):
    model = vkattn.from_pretrained(roberta.folders["masked_lm"], device=device)
    gpt2 = vkattn.from_pretrained(os.path.join(MODELS, "tiny_gpt2"), device="cpu")
    text = "Alice was beginning to get very <mask> of sitting by her sister."
    ids = model.encode(text)
    mask_id = model.config["mask_token_id"]
    # <mask> is lstrip: "very <mask> of" is "very", <mask>, " of" — no token for the space before it
    assert ids == ([0] + [i + 4 for i in gpt2.encode("Alice was beginning to get very")] + [mask_id] +
                   [i + 4 for i in gpt2.encode(" of sitting by her sister.")] + [2])
    expected = roberta.masked_lm(torch.tensor([ids]))
    assert_close(model.masked_lm(text), expected, atol=1e-4, rtol=1e-4)
    (fills,) = model.fill_mask(text, top_k=3)
    probabilities = torch.softmax(expected[0, ids.index(mask_id)], -1)
    best = torch.argsort(probabilities, descending=True)[:3]
    assert [token for token, _ in fills] == [model.decode([int(t)]) for t in best]
    np.testing.assert_allclose([p for _, p in fills], probabilities[best].numpy(), atol=1e-5)


def test_a_sequence_classifier_gives_torchs_logits(device, roberta):
    model = vkattn.from_pretrained(roberta.folders["classifier"], device=device)
    assert model.config["num_labels"] == 3 and model.config["id2label"]["2"] == "positive"
    ids, mask = padded(model, TEXTS)
    expected = roberta.classify(ids, mask)
    assert_close(model.classify(TEXTS), expected, atol=1e-4, rtol=1e-4)
    assert_close(model.classify(TEXTS[1]), expected[1:], atol=1e-4, rtol=1e-4)
    assert "classifier of 3 labels" in model.config["model"]
    assert "positions (counted from 2)" in model.config["model"]


def test_a_token_classifier_labels_every_token_as_torch(device, roberta):
    model = vkattn.from_pretrained(roberta.folders["token_classifier"], device=device)
    assert model.config["num_labels"] == 2  # num_labels alone: no id2label written
    ids, mask = padded(model, TEXTS)
    logits = model.classify(TEXTS)
    assert logits.shape == (2, ids.shape[1], 2)
    assert_close(logits, roberta.classify_tokens(ids, mask), atol=1e-4, rtol=1e-4)


# GPT-2's pre-tokenizer on ASCII text: each piece is a word (Hugging Face's word_ids)
GPT2_PIECES = r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+"


def test_a_question_answerer_answers_from_whole_words_of_the_context(device, roberta):
    model = vkattn.from_pretrained(roberta.folders["question_answering"], device=device)
    # words of several tokens each, so that spans start and end inside words
    question, context = "Who was tired?", "Alice Liddell dozed beside Lorina, her sister, daydreaming of marmalade."
    q, c = model.encode(question), model.encode(context)
    ids = [0] + q[1:-1] + [2, 2] + c[1:-1] + [2]  # <s> q </s></s> c </s>
    logits = roberta.answer_logits(torch.tensor([ids]))
    assert_close(model.classify(question, text_pair=context), logits, atol=1e-4, rtol=1e-4)
    # each token of the context where its text lies, the whitespace before it left out
    # (trim_offsets); its word the GPT-2 piece it is part of
    pieces = [m.span() for m in re.finditer(GPT2_PIECES, context)]
    offsets, words, at = [], [], 0
    for i in c[1:-1]:
        text = model.decode([i]) if at else model.decode([i]).lstrip()
        start = at + len(text) - len(text.lstrip())
        at += len(text)
        offsets.append((start, at))
        words.append(next(w for w, (a, b) in enumerate(pieces) if a <= start < b))
    assert at == len(context)
    n = len(q) - 2
    sequence = [None] + [0] * n + [None, None] + [1] * len(offsets) + [None]
    offsets = [(0, 0)] * (n + 3) + offsets + [(0, 0)]
    words = [None] + list(range(n)) + [None, None] + words + [None]
    for options in ({}, {"top_k": 5}, {"top_k": 3, "align_to_words": False}):
        expected = qa_pipeline([(logits, sequence, offsets, words)], context, **options)
        found = model.answer(question, context, **options)
        pick = (lambda a: [(x["answer"], x["start"], x["end"]) for x in (a if isinstance(a, list) else [a])])
        assert pick(found) == pick(expected), options
    # in windows of 20 tokens (the question and the template take 12), each run alone by torch
    windows = overflow((ids, [0] * len(ids), sequence, offsets, words), 20, 3)
    assert len(windows) >= 3
    features = [(roberta.answer_logits(torch.tensor([w[0]])), w[2], w[3], w[4]) for w in windows]
    expected = qa_pipeline(features, context, top_k=3)
    found = model.answer(question, context, top_k=3, max_seq_len=20, doc_stride=3)
    assert pick(found) == pick(expected)
    np.testing.assert_allclose([a["score"] for a in found], [a["score"] for a in expected], rtol=1e-4, atol=1e-6)


def test_the_trace_adds_the_positions_looked_up_by_id(roberta):
    model = vkattn.from_pretrained(roberta.folders["masked_lm"])
    out, trace = model.trace("Alice was tired.")
    names = [s.name for s in trace.steps]
    assert names[:6] == ["embeddings.word_embeddings", "embeddings.token_type_embeddings", "embeddings.add_token_types",
                         "embeddings.position_embeddings", "embeddings.add_positions", "embeddings.LayerNorm"]
    ids = model.encode("Alice was tired.")
    rows = roberta.encoder.embeddings.position_embeddings.weight.detach().numpy()[PAD + 1:PAD + 1 + len(ids)]
    assert_close(trace["embeddings.position_embeddings"][0], rows, atol=0, rtol=0)
    np.testing.assert_array_equal(trace["layers.1.norm2"], out.last_hidden_state)


def test_bad_folders_and_inputs_are_one_line_errors(tmp_path, roberta):
    model = vkattn.from_pretrained(roberta.folders["masked_lm"], device="cpu")
    longest = model.config["max_position_embeddings"] - PAD - 1
    assert model([5] * longest).last_hidden_state.shape == (1, longest, 64)
    with pytest.raises(vkattn.ShapeError, match=f"positions 2 … {longest + 2} go past the {longest + 2} rows"):
        model([5] * (longest + 1))
    with pytest.raises(vkattn.ConfigError, match=r"this BERT has no classifier"):
        model.classify("Alice")
    for name in os.listdir(roberta.folders["masked_lm"]):
        if name != "tokenizer.json":
            (tmp_path / name).write_bytes((roberta.folders["masked_lm"] / name).read_bytes())
    with pytest.raises(vkattn.FileError, match="no tokenizer.json: RoBERTa's tokenizer is read from it"):
        vkattn.from_pretrained(tmp_path, device="cpu")
    (tmp_path / "tokenizer.json").write_bytes((roberta.folders["masked_lm"] / "tokenizer.json").read_bytes())
    config = json.loads((tmp_path / "config.json").read_text())
    config["pad_token_id"] = config["max_position_embeddings"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(vkattn.ConfigError, match=r"pad_token_id 66 is not a token id below max_position_embeddings - 1"):
        vkattn.from_pretrained(tmp_path, device="cpu")
