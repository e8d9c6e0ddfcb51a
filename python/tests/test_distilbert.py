"""vkattn.from_pretrained on DistilBERT's checkpoints, as the hub saves distilbert-base-uncased
(DistilBertForMaskedLM) and its fine-tuned classifiers (DistilBertForSequenceClassification — the
sentiment model Hugging Face's pipeline picks by default — and DistilBertForTokenClassification),
against torch running the same weights, on both backends.

The folders are made here from tiny_bert's trained encoder under DistilBERT's names
("distilbert.", q_lin … out_lin, sa_layer_norm, ffn.lin1, output_layer_norm), without its token
types and pooler, with tiny_bert's WordPiece vocabulary and random heads. torch runs tiny_bert's
definition (models/tiny_bert/train.py) with a token-type table of zeros, which adds nothing: a
DistilBERT."""
import json
import os
import shutil

import numpy as np
import pytest
import torch

import vkattn
from conftest import MODELS, assert_close, definition, padded, qa_pipeline, read_safetensors, wordpiece_pair

TINY_BERT = os.path.join(MODELS, "tiny_bert")
TEXTS = ["Alice was beginning to get very tired of sitting by her sister.", "The White Rabbit ran!"]

# tiny_bert's names -> DistilBERT's, for one layer's tensors
LAYER_NAMES = {"attention.self.query": "attention.q_lin", "attention.self.key": "attention.k_lin",
               "attention.self.value": "attention.v_lin", "attention.output.dense": "attention.out_lin",
               "attention.output.LayerNorm": "sa_layer_norm", "intermediate.dense": "ffn.lin1",
               "output.dense": "ffn.lin2", "output.LayerNorm": "output_layer_norm"}


def distilbert_names(bert_state):
    """A BertModel's state_dict under DistilBERT's names (its token types and pooler left out)."""
    out = {}
    for name, t in bert_state.items():
        if name.startswith(("embeddings.token_type_embeddings", "pooler.")):
            continue
        if name.startswith("encoder.layer."):
            i, rest = name[len("encoder.layer."):].split(".", 1)
            module, param = rest.rsplit(".", 1)
            name = f"transformer.layer.{i}.{LAYER_NAMES[module]}.{param}"
        out["distilbert." + name] = t
    return out


class DistilBert:
    """The torch side (tiny_bert's encoder, its token types zeros; random heads) and the folders."""

    def __init__(self, root):
        from article_safetensors import save_safetensors
        train = definition("tiny_bert")
        trained = read_safetensors(os.path.join(TINY_BERT, "model.safetensors"))
        V = trained["bert.embeddings.word_embeddings.weight"].shape[0]
        bert = train.BertForMaskedLM(V)
        bert.load_state_dict(trained)
        self.encoder = bert.bert.eval()
        E = train.E
        torch.manual_seed(9)
        with torch.no_grad():
            self.encoder.embeddings.token_type_embeddings.weight.zero_()
        self.vocab_transform, self.vocab_layer_norm = torch.nn.Linear(E, E), torch.nn.LayerNorm(E, eps=1e-12)
        self.vocab_projector_bias = torch.randn(V) * 0.1
        self.pre_classifier, self.classifier = torch.nn.Linear(E, E), torch.nn.Linear(E, 2)
        self.token_classifier = torch.nn.Linear(E, 3)
        self.qa_outputs = torch.nn.Linear(E, 2)
        config = {"model_type": "distilbert", "activation": "gelu", "dim": E, "hidden_dim": train.FF,
                  "n_heads": train.HEADS, "n_layers": train.LAYERS, "max_position_embeddings": train.POSITIONS,
                  "vocab_size": V, "pad_token_id": 0, "sinusoidal_pos_embds": False, "torch_dtype": "float32"}
        encoder = distilbert_names(self.encoder.state_dict())
        state = lambda prefix, m: {prefix + n: t for n, t in m.state_dict().items()}  # noqa: E731
        heads = {
            "masked_lm": ("DistilBertForMaskedLM",
                          {**state("vocab_transform.", self.vocab_transform),
                           **state("vocab_layer_norm.", self.vocab_layer_norm),
                           "vocab_projector.weight": self.encoder.embeddings.word_embeddings.weight,
                           "vocab_projector.bias": self.vocab_projector_bias}, {}),
            "sentiment": ("DistilBertForSequenceClassification",
                          {**state("pre_classifier.", self.pre_classifier), **state("classifier.", self.classifier)},
                          {"id2label": {"0": "NEGATIVE", "1": "POSITIVE"}}),
            "tagger": ("DistilBertForTokenClassification", state("classifier.", self.token_classifier),
                       {"id2label": {"0": "O", "1": "B-PER", "2": "I-PER"}}),
            "answerer": ("DistilBertForQuestionAnswering", state("qa_outputs.", self.qa_outputs), {}),
        }
        self.folders = {}
        for kind, (architecture, weights, extra) in heads.items():
            folder = root / kind
            folder.mkdir()
            for name in ("vocab.txt", "tokenizer_config.json"):
                shutil.copy(os.path.join(TINY_BERT, name), folder / name)
            (folder / "config.json").write_text(json.dumps({**config, "architectures": [architecture], **extra}))
            save_safetensors({**encoder, **{n: t.detach() for n, t in weights.items()}}, folder / "model.safetensors",
                             {"format": "pt"})
            self.folders[kind] = folder

    def hidden(self, ids, mask):
        with torch.no_grad():
            return self.encoder(ids, torch.zeros_like(ids), mask)[0]

    def masked_lm(self, ids):  # vocab_projector(vocab_layer_norm(gelu(vocab_transform(x))))
        with torch.no_grad():
            x = self.hidden(ids, torch.ones_like(ids))
            h = self.vocab_layer_norm(torch.nn.functional.gelu(self.vocab_transform(x)))
            return h @ self.encoder.embeddings.word_embeddings.weight.T + self.vocab_projector_bias

    def classify(self, ids, mask):  # classifier(relu(pre_classifier(x[:, 0])))
        with torch.no_grad():
            return self.classifier(torch.relu(self.pre_classifier(self.hidden(ids, mask)[:, 0])))

    def tag(self, ids, mask):
        with torch.no_grad():
            return self.token_classifier(self.hidden(ids, mask))

    def answer_logits(self, ids):  # qa_outputs on every token: (B, T, 2)
        with torch.no_grad():
            return self.qa_outputs(self.hidden(ids, torch.ones_like(ids)))


@pytest.fixture(scope="module")
def distilbert(tmp_path_factory):
    return DistilBert(tmp_path_factory.mktemp("distilbert"))


def test_texts_padded_to_one_length_match_torch(device, distilbert):
    model = vkattn.from_pretrained(distilbert.folders["masked_lm"], device=device)
    assert isinstance(model, vkattn.PretrainedEncoder)
    ids, mask = padded(model, TEXTS)
    out = model(TEXTS)
    assert_close(out.last_hidden_state, distilbert.hidden(ids, mask), atol=1e-4, rtol=1e-4)
    assert out.pooler_output is None
    assert "token type" not in model.config["model"]


def test_a_pair_of_texts_has_no_token_types(device, distilbert):
    model = vkattn.from_pretrained(distilbert.folders["masked_lm"], device=device)
    a, b = model.encode(TEXTS[0]), model.encode(TEXTS[1])
    ids = torch.tensor([a + b[1:]])  # [CLS] a [SEP] b [SEP], its types dropped
    out = model(TEXTS[0], text_pair=TEXTS[1])
    assert_close(out.last_hidden_state, distilbert.hidden(ids, torch.ones_like(ids)), atol=1e-4, rtol=1e-4)


def test_the_masked_lm_gives_torchs_logits(device, distilbert):
    model = vkattn.from_pretrained(distilbert.folders["masked_lm"], device=device)
    text = "Alice was beginning to get very [MASK] of sitting by her sister."
    expected = distilbert.masked_lm(torch.tensor([model.encode(text)]))
    assert_close(model.masked_lm(text), expected, atol=1e-4, rtol=1e-4)
    (fills,) = model.fill_mask(text, top_k=2)
    probabilities = torch.softmax(expected[0, model.encode(text).index(model.config["mask_token_id"])], -1)
    best = torch.argsort(probabilities, descending=True)[:2]
    assert [token for token, _ in fills] == [model.decode([int(t)]) for t in best]
    np.testing.assert_allclose([p for _, p in fills], probabilities[best].numpy(), atol=1e-5)


def test_both_classifiers_give_torchs_logits(device, distilbert):
    sentiment = vkattn.from_pretrained(distilbert.folders["sentiment"], device=device)
    ids, mask = padded(sentiment, TEXTS)
    assert_close(sentiment.classify(TEXTS), distilbert.classify(ids, mask), atol=1e-4, rtol=1e-4)
    tagger = vkattn.from_pretrained(distilbert.folders["tagger"], device=device)
    logits = tagger.classify(TEXTS)
    assert logits.shape == (2, ids.shape[1], 3)
    assert_close(logits, distilbert.tag(ids, mask), atol=1e-4, rtol=1e-4)


def test_the_trace_has_no_token_types(distilbert):
    model = vkattn.from_pretrained(distilbert.folders["masked_lm"])
    out, trace = model.trace("Alice was tired.")
    names = [s.name for s in trace.steps]
    assert names[:3] == ["embeddings.word_embeddings", "embeddings.position_embeddings", "embeddings.LayerNorm"]
    np.testing.assert_array_equal(trace["layers.1.norm2"], out.last_hidden_state)
    with pytest.raises(vkattn.ShapeError, match="token_type_ids are given but DistilBertForMaskedLM has no token types"):
        model([2, 7, 3], token_type_ids=[0, 0, 0])


def test_a_question_answerer_reads_a_pair_without_token_types(device, distilbert):
    model = vkattn.from_pretrained(distilbert.folders["answerer"], device=device)
    question, context = "Who was tired?", "Alice Liddell dozed beside Lorina, her sister, daydreaming of marmalade."
    ids, _, sequence, offsets, words = wordpiece_pair(question, context)  # [CLS] q [SEP] c [SEP], no types
    expected = distilbert.answer_logits(torch.tensor([ids]))
    assert_close(model.classify(question, text_pair=context), expected, atol=1e-4, rtol=1e-4)
    for options in ({}, {"top_k": 4}):
        want = qa_pipeline([(expected, sequence, offsets, words)], context, **options)
        found = model.answer(question, context, **options)
        pick = (lambda a: [(x["answer"], x["start"], x["end"]) for x in (a if isinstance(a, list) else [a])])
        assert pick(found) == pick(want), options
