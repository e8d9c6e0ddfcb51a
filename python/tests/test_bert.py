"""vkattn.from_pretrained on models/tiny_bert (BERT's architecture, saved as the hub saves
bert-base-uncased: BertForMaskedLM's names, F16) against torch running the same weights from the
model's definition (models/tiny_bert/train.py), on both backends: texts padded as a tokenizer pads
them, ids with token types and Hugging Face's attention_mask, the trace's steps, bad inputs."""
import json
import os
import shutil

import numpy as np
import pytest
import torch

import vkattn
from conftest import MODELS, assert_close, definition, padded, read_safetensors

FOLDER = os.path.join(MODELS, "tiny_bert")


@pytest.fixture(scope="module")
def torch_bert():
    """torch's BertModel of the file's weights (its "bert." part)."""
    train = definition("tiny_bert")
    weights = read_safetensors(os.path.join(FOLDER, "model.safetensors"))
    model = train.BertForMaskedLM(weights["bert.embeddings.word_embeddings.weight"].shape[0])
    model.load_state_dict(weights)
    return model.bert.eval()


def save_classifier(folder, torch_bert, architecture, labels, seed, pooler=True):
    """tiny_bert's encoder under "bert." (without the pooler where `pooler` is False), a classifier of
    len(labels) labels (random, from `seed`) and config.json naming them, in `folder` as
    `architecture` saves it; returns torch's classifier (nn.Linear)."""
    from article_safetensors import save_safetensors
    for name in ("vocab.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(FOLDER, name), folder / name)
    with open(os.path.join(FOLDER, "config.json")) as f:
        config = json.load(f)
    config.update(architectures=[architecture], torch_dtype="float32", id2label=labels,
                  label2id={v: int(k) for k, v in labels.items()})
    (folder / "config.json").write_text(json.dumps(config))
    torch.manual_seed(seed)
    classifier = torch.nn.Linear(torch_bert.pooler.dense.in_features, len(labels))
    weights = {"bert." + n: t for n, t in torch_bert.state_dict().items() if pooler or not n.startswith("pooler.")}
    weights.update({"classifier." + n: t for n, t in classifier.state_dict().items()})
    save_safetensors(weights, folder / "model.safetensors", {"format": "pt"})
    return classifier.eval()


def test_texts_padded_to_one_length_match_torch(device, torch_bert):
    bert = vkattn.from_pretrained(FOLDER, device=device)
    assert isinstance(bert, vkattn.PretrainedEncoder)
    texts = ["Alice was beginning to get very tired of sitting by her sister.", "The White Rabbit ran!"]
    out = bert(texts)
    ids, mask = padded(bert, texts)
    assert mask[1, -1] == 0  # the second is padded
    with torch.no_grad():
        hidden, pooled = torch_bert(ids, torch.zeros_like(ids), mask)
    assert_close(out.last_hidden_state, hidden, atol=1e-4, rtol=1e-4)
    assert_close(out.pooler_output, pooled, atol=1e-4, rtol=1e-4)
    # the same ids and mask given as Hugging Face's tokenizer gives them
    again = bert(ids.numpy(), attention_mask=mask.numpy())
    np.testing.assert_array_equal(again.last_hidden_state, out.last_hidden_state)


def test_pairs_of_texts_are_joined_as_berts_tokenizer_joins_them(device, torch_bert):
    bert = vkattn.from_pretrained(FOLDER, device=device)
    with open(os.path.join(FOLDER, "expected.json")) as f:
        expected = json.load(f)
    first, second = expected["pair"]
    case = expected["pair_case"]
    out = bert(first, text_pair=second)  # torch's hidden states for train.py's pair
    assert_close(out.last_hidden_state, torch.tensor(case["last_hidden_state"]).reshape(1, -1, 64), atol=1e-4, rtol=0)
    # a batch of pairs, padded: [CLS] a [SEP] b [SEP], token types 0 then 1, then [PAD]s
    firsts, seconds = ["Where is Alice?", first], ["Down the rabbit-hole, tired.", "Alice!"]
    rows = [(bert.encode(a), bert.encode(b)[1:]) for a, b in zip(firsts, seconds)]
    T = max(len(a) + len(b) for a, b in rows)
    ids = torch.tensor([a + b + [0] * (T - len(a) - len(b)) for a, b in rows])
    types = torch.tensor([[0] * len(a) + [1] * len(b) + [0] * (T - len(a) - len(b)) for a, b in rows])
    mask = torch.tensor([[1] * (len(a) + len(b)) + [0] * (T - len(a) - len(b)) for a, b in rows])
    with torch.no_grad():
        hidden, pooled = torch_bert(ids, types, mask)
    out = bert(firsts, text_pair=seconds)
    assert_close(out.last_hidden_state, hidden, atol=1e-4, rtol=1e-4)
    assert_close(out.pooler_output, pooled, atol=1e-4, rtol=1e-4)
    with pytest.raises(vkattn.ShapeError, match="1 second texts for 2 first ones"):
        bert(firsts, text_pair="Alice!")
    with pytest.raises(vkattn.ShapeError, match="a pair of texts gives its own"):
        bert(first, token_type_ids=[0], text_pair=second)
    with pytest.raises(vkattn.ShapeError, match="not token ids"):
        bert(ids.numpy(), text_pair=second)


@pytest.fixture(scope="module")
def torch_masked_lm():
    """torch's BertForMaskedLM of the whole file: the encoder and its cls.predictions head."""
    train = definition("tiny_bert")
    weights = read_safetensors(os.path.join(FOLDER, "model.safetensors"))
    model = train.BertForMaskedLM(weights["bert.embeddings.word_embeddings.weight"].shape[0])
    model.load_state_dict(weights)
    return model.eval()


def test_the_masked_lm_head_gives_torchs_logits_and_fills_a_mask(device, torch_masked_lm):
    bert = vkattn.from_pretrained(FOLDER, device=device)
    text = "Alice was beginning to get very [MASK] of sitting by her sister."
    ids = bert.encode(text)
    with torch.no_grad():
        expected = torch_masked_lm(torch.tensor([ids]))  # (1, T, V)
    assert_close(bert.masked_lm(text), expected, atol=1e-4, rtol=1e-4)
    assert_close(bert.masked_lm(np.array([ids])), expected, atol=1e-4, rtol=1e-4)
    (fills,) = bert.fill_mask(text, top_k=3)
    position = ids.index(bert.config["mask_token_id"])
    probabilities = torch.softmax(expected[0, position], -1)
    best = torch.argsort(probabilities, descending=True)[:3]
    assert [token for token, _ in fills] == [bert.decode([int(t)]) for t in best]
    np.testing.assert_allclose([p for _, p in fills], probabilities[best].numpy(), atol=1e-5)
    with pytest.raises(vkattn.ShapeError, match="has no \\[MASK\\] token to fill"):
        bert.fill_mask("Alice was tired.")


@pytest.fixture(scope="module")
def classifier_folder(tmp_path_factory, torch_bert):
    """tiny_bert as BertForSequenceClassification saves it, with three labels: (folder, nn.Linear)"""
    folder = tmp_path_factory.mktemp("classifier")
    return folder, save_classifier(folder, torch_bert, "BertForSequenceClassification",
                                   {"0": "sad", "1": "calm", "2": "glad"}, seed=5)


def test_a_sequence_classifier_gives_torchs_logits(device, torch_bert, classifier_folder):
    folder, classifier = classifier_folder
    bert = vkattn.from_pretrained(folder, device=device)
    assert bert.config["num_labels"] == 3 and bert.config["id2label"]["2"] == "glad"
    texts = ["Alice was beginning to get very tired of sitting by her sister.", "The White Rabbit ran!"]
    ids, mask = padded(bert, texts)
    with torch.no_grad():
        expected = classifier(torch_bert(ids, torch.zeros_like(ids), mask)[1])  # (2, 3)
    logits = bert.classify(texts)
    assert logits.shape == (2, 3)
    assert_close(logits, expected, atol=1e-4, rtol=1e-4)
    assert_close(bert.classify(texts[1]), expected[1:], atol=1e-4, rtol=1e-4)
    with pytest.raises(vkattn.ConfigError, match=r"this BERT has no classifier \(BertForSequenceClassification's"):
        vkattn.from_pretrained(FOLDER, device=device).classify("Alice")


def test_a_classifier_of_other_labels_than_config_names_is_refused(tmp_path, classifier_folder):
    folder, _ = classifier_folder
    for name in os.listdir(folder):
        shutil.copy(folder / name, tmp_path / name)
    config = json.loads((tmp_path / "config.json").read_text())
    config["id2label"] = {"0": "no", "1": "yes"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(vkattn.FileError, match=r"tensor 'classifier.weight' is float32 \(3, 64\), expected float "
                                               r"\(num_labels, hidden_size\) = \(2, 64\)"):
        vkattn.from_pretrained(tmp_path, device="cpu")


@pytest.fixture(scope="module")
def token_classifier_folder(tmp_path_factory, torch_bert):
    """tiny_bert as BertForTokenClassification saves it (no pooler), four labels: (folder, nn.Linear)"""
    folder = tmp_path_factory.mktemp("token_classifier")
    labels = {"0": "O", "1": "B-PER", "2": "I-PER", "3": "B-LOC"}
    return folder, save_classifier(folder, torch_bert, "BertForTokenClassification", labels, seed=6, pooler=False)


def test_a_token_classifier_labels_every_token_as_torch(device, torch_bert, token_classifier_folder):
    folder, classifier = token_classifier_folder
    bert = vkattn.from_pretrained(folder, device=device)
    assert bert.config["num_labels"] == 4 and "token classifier of 4 labels" in bert.config["model"]
    texts = ["Alice was beginning to get very tired of sitting by her sister.", "The White Rabbit ran!"]
    ids, mask = padded(bert, texts)
    with torch.no_grad():
        expected = classifier(torch_bert(ids, torch.zeros_like(ids), mask)[0])  # (2, T, 4)
    logits = bert.classify(texts)
    assert logits.shape == (2, ids.shape[1], 4)
    assert_close(logits, expected, atol=1e-4, rtol=1e-4)
    assert bert(texts).pooler_output is None  # BertForTokenClassification's encoder has no pooler


def test_token_types_are_read(device, torch_bert):
    bert = vkattn.from_pretrained(FOLDER, device=device)
    a, b = bert.encode("Down the rabbit-hole."), bert.encode("Alice felt sleepy.")[1:]
    ids = torch.tensor([a + b])
    types = torch.tensor([[0] * len(a) + [1] * len(b)])
    with torch.no_grad():
        hidden, pooled = torch_bert(ids, types, torch.ones_like(ids))
    out = bert(ids, token_type_ids=types)
    assert_close(out.last_hidden_state, hidden, atol=1e-4, rtol=1e-4)
    assert_close(out.pooler_output, pooled, atol=1e-4, rtol=1e-4)
    assert np.abs(bert(ids).last_hidden_state - hidden.numpy()).max() > 1e-2  # zeros are another input


def test_the_trace_ends_with_the_pooler():
    bert = vkattn.from_pretrained(FOLDER)
    out, trace = bert.trace("Alice was tired.")
    names = [s.name for s in trace.steps]
    assert names[:5] == ["embeddings.word_embeddings", "embeddings.token_type_embeddings", "embeddings.add_token_types",
                         "embeddings.position_embeddings", "embeddings.LayerNorm"]
    assert names[-3:] == ["pooler.first_token", "pooler.dense", "pooler.tanh"]
    np.testing.assert_array_equal(trace["pooler.tanh"], out.pooler_output)
    np.testing.assert_array_equal(trace["layers.1.norm2"], out.last_hidden_state)
    assert bert.config["kind"] == "encoder" and bert.config["stored_dtype"] == "F16"
    assert "PretrainedEncoder(BertForMaskedLM" in repr(bert)


def test_bad_inputs_are_one_line_errors():
    bert = vkattn.from_pretrained(FOLDER, device="cpu")
    with pytest.raises(vkattn.ShapeError, match="token type 2 at index 1 is outside the token types"):
        bert([2, 7, 3], token_type_ids=[0, 2, 0])
    with pytest.raises(vkattn.ShapeError, match="token id 266 at index 0 is outside the vocabulary"):
        bert([266])
    with pytest.raises(vkattn.ShapeError, match=r"attention_mask \(2,\) must be the ids' shape \(1, 3\)"):
        bert([2, 7, 3], attention_mask=[1, 1])
    with pytest.raises(vkattn.ShapeError, match="texts are padded here"):
        bert(["a", "b"], attention_mask=[[1], [1]])
    with pytest.raises(vkattn.ConfigError, match="is an encoder: it does not generate"):
        bert._impl.generate([2], 1, 0.0, 0, 0)
    with pytest.raises(vkattn.ConfigError, match="BertForMaskedLM is an encoder, not a language model"):
        vkattn.PretrainedModel(FOLDER, device="cpu")
