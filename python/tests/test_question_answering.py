"""vkattn's extractive question answering — a …ForQuestionAnswering checkpoint's qa_outputs on
every token, and PretrainedEncoder.answer reading its logits as Hugging Face's question-answering
pipeline does — against torch and against that pipeline, written in conftest.py from its
definition (transformers is not a Debian package), on both backends.

The folder is made here: models/tiny_bert's encoder (no pooler, no masked-LM head) under "bert.",
as BertForQuestionAnswering saves it, with a random qa_outputs. The pair's tokens, their
characters and their words come from train.py's own WordPiece for ASCII text, not vkattn's
(conftest.wordpiece_pair)."""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

import vkattn
from conftest import (MODELS, assert_close, definition, overflow, qa_pipeline, read_safetensors, recorded_steps,
                      wordpiece_pair)

FOLDER = os.path.join(MODELS, "tiny_bert")
QUESTION = "Who was tired of sitting by her sister?"
# words of several tokens each ("liddell" is l ##i ##d ##d ##e ##l ##l), so that spans start and end
# inside words
CONTEXT = "Alice Liddell dozed beside Lorina, her sister, daydreaming of marmalade jars and pockets."


class Answerer:
    """The torch side: tiny_bert's encoder, a qa_outputs and the folder."""

    def __init__(self, folder):
        from article_safetensors import save_safetensors
        train = definition("tiny_bert")
        weights = read_safetensors(os.path.join(FOLDER, "model.safetensors"))
        model = train.BertForMaskedLM(weights["bert.embeddings.word_embeddings.weight"].shape[0])
        model.load_state_dict(weights)
        self.bert = model.bert.eval()
        torch.manual_seed(11)
        self.qa_outputs = torch.nn.Linear(train.E, 2).eval()
        with torch.no_grad():
            self.qa_outputs.weight.mul_(4.0)  # logits of some spread, so that one span stands out
        for name in ("vocab.txt", "tokenizer_config.json"):
            shutil.copy(os.path.join(FOLDER, name), folder / name)
        with open(os.path.join(FOLDER, "config.json")) as f:
            config = json.load(f)
        config.update(architectures=["BertForQuestionAnswering"], torch_dtype="float32")
        (folder / "config.json").write_text(json.dumps(config))
        state = {"bert." + n: t for n, t in self.bert.state_dict().items() if not n.startswith("pooler.")}
        state.update({"qa_outputs." + n: t.detach() for n, t in self.qa_outputs.state_dict().items()})
        save_safetensors(state, folder / "model.safetensors", {"format": "pt"})
        self.folder = folder

    def logits(self, question, context):
        """torch's (1, T, 2): qa_outputs on the last hidden state"""
        ids, types, _, _, _ = wordpiece_pair(question, context)
        return self.feature_logits(ids, types)

    def feature_logits(self, ids, types):
        """torch's (1, T, 2) of one feature's ids and token types, alone, as the pipeline runs it"""
        ids, types = torch.tensor([ids]), torch.tensor([types])
        with torch.no_grad():
            return self.qa_outputs(self.bert(ids, types, torch.ones_like(ids))[0])


@pytest.fixture(scope="module")
def answerer(tmp_path_factory):
    return Answerer(tmp_path_factory.mktemp("question_answering"))


def as_list(found):
    return found if isinstance(found, list) else [found]


def test_qa_outputs_gives_torchs_start_and_end_logits(device, answerer):
    model = vkattn.from_pretrained(answerer.folder, device=device)
    assert "question-answering head" in model.config["model"]
    ids, types, _, _, _ = wordpiece_pair(QUESTION, CONTEXT)
    expected = answerer.logits(QUESTION, CONTEXT)  # (1, T, 2)
    assert_close(model.classify(QUESTION, text_pair=CONTEXT), expected, atol=1e-4, rtol=1e-4)
    assert_close(model.classify(np.array([ids]), token_type_ids=np.array([types])), expected, atol=1e-4, rtol=1e-4)
    assert model(QUESTION, text_pair=CONTEXT).pooler_output is None  # BertForQuestionAnswering's has none


@pytest.mark.parametrize("options", [{}, {"top_k": 5}, {"top_k": 8, "max_answer_len": 2},
                                     {"top_k": 3, "align_to_words": False}, {"handle_impossible_answer": True},
                                     {"top_k": 4, "handle_impossible_answer": True}],
                         ids=["default", "top_5", "two_tokens_at_most", "not_aligned", "impossible",
                              "impossible_top_4"])
def test_answers_are_the_pipelines(device, answerer, options):
    model = vkattn.from_pretrained(answerer.folder, device=device)
    _, _, sequence, offsets, words = wordpiece_pair(QUESTION, CONTEXT)
    expected = as_list(qa_pipeline([(answerer.logits(QUESTION, CONTEXT), sequence, offsets, words)], CONTEXT,
                                   **options))
    found = model.answer(QUESTION, CONTEXT, **options)
    assert isinstance(found, dict) == (len(expected) == 1)
    found = as_list(found)
    assert [(a["answer"], a["start"], a["end"]) for a in found] == \
           [(a["answer"], a["start"], a["end"]) for a in expected]
    np.testing.assert_allclose([a["score"] for a in found], [a["score"] for a in expected], rtol=1e-4, atol=1e-6)
    for a in found:
        assert CONTEXT[a["start"]:a["end"]] == a["answer"]
    if options.get("top_k", 1) > 1 and not options.get("handle_impossible_answer"):
        assert len(found) > 1


# about 140 tokens: past tiny_bert's 64 positions, so read in windows
LONG_CONTEXT = (CONTEXT + " The rabbit hurried past, checking a watch and muttering about being late. "
                "Alice followed it across the field and down a large hole under the hedge. The tunnel went "
                "straight on like a corridor and then dipped suddenly down, so suddenly that Alice had not a "
                "moment to think about stopping herself before she found herself falling down a deep well.")


@pytest.mark.parametrize("options", [{}, {"top_k": 6}, {"max_seq_len": 40, "doc_stride": 8, "top_k": 3},
                                     {"doc_stride": 0, "top_k": 2, "handle_impossible_answer": True}],
                         ids=["default", "top_6", "windows_of_40", "no_stride_impossible"])
def test_a_long_context_is_read_in_windows_as_the_pipeline_reads_it(device, answerer, options):
    model = vkattn.from_pretrained(answerer.folder, device=device)
    max_seq_len = options.get("max_seq_len", 64)  # min(384, the model's 64)
    windows = overflow(wordpiece_pair(QUESTION, LONG_CONTEXT), max_seq_len,
                       options.get("doc_stride", min(max_seq_len // 2, 128)))
    assert len(windows) >= 3
    features = [(answerer.feature_logits(ids, types), sequence, offsets, words)
                for ids, types, sequence, offsets, words in windows]
    asked = {k: v for k, v in options.items() if k not in ("max_seq_len", "doc_stride")}
    expected = as_list(qa_pipeline(features, LONG_CONTEXT, **asked))
    found = as_list(model.answer(QUESTION, LONG_CONTEXT, **options))
    assert [(a["answer"], a["start"], a["end"]) for a in found] == \
           [(a["answer"], a["start"], a["end"]) for a in expected]
    np.testing.assert_allclose([a["score"] for a in found], [a["score"] for a in expected], rtol=1e-4, atol=1e-6)
    if options.get("top_k", 1) >= 3:  # answers from past the first window: the windows are all read
        assert any(a["end"] > windows[0][3][-2][1] for a in found)


def test_start_and_end_count_characters_not_bytes(answerer):
    model = vkattn.from_pretrained(answerer.folder)
    context = "Déjà vu: Alice — née Liddell — was tired of sitting by her sister."
    for a in as_list(model.answer(QUESTION, context, top_k=10)):
        assert context[a["start"]:a["end"]] == a["answer"], a


def test_a_pairs_steps_are_checked_to_its_head(tmp_path, answerer):
    """`vkattn run` on a question and its context, every step's value saved, is checked on the same
    pair — token types and qa_outputs included — from Python and by `vkattn check --text-pair`;
    qa_outputs changed is where they part."""
    cli = os.environ["VKATTN_CLI"]
    mine, _ = recorded_steps(tmp_path, answerer.folder, "--text", QUESTION, "--text-pair", CONTEXT)
    recorded = {f.stem: np.load(f) for f in mine.glob("*.npy")}
    assert "qa_outputs" in recorded and "embeddings.token_type_embeddings" in recorded
    model = vkattn.from_pretrained(answerer.folder, device="cpu")
    report = vkattn.check(recorded, model, QUESTION, text_pair=CONTEXT)
    assert report.ok, str(report)
    assert not model.check(recorded, QUESTION).ok  # the question alone is another input
    check = [cli, "check", mine, "--model", answerer.folder, "--text", QUESTION, "--text-pair", CONTEXT]
    done = subprocess.run(check, capture_output=True, text=True)
    assert done.returncode == 0 and f"all {len(recorded)} recorded steps agree" in done.stdout, done.stdout + done.stderr
    np.save(mine / "qa_outputs.npy", recorded["qa_outputs"] + np.float32(0.5))
    recorded["qa_outputs"] = recorded["qa_outputs"] + np.float32(0.5)
    assert model.check(recorded, QUESTION, text_pair=CONTEXT).first_divergent["name"] == "qa_outputs"
    done = subprocess.run(check, capture_output=True, text=True)
    assert done.returncode == 1 and "first divergent step: 37 qa_outputs (linear)" in done.stdout, done.stdout
    with pytest.raises(vkattn.ShapeError, match=r"check: text_pair checks one pair of texts"):
        model.check(recorded, [QUESTION], text_pair=[CONTEXT])


def test_bad_inputs_are_one_line_errors(answerer):
    model = vkattn.from_pretrained(answerer.folder, device="cpu")
    with pytest.raises(vkattn.ConfigError, match=r"answer: top_k=0 must be an int of at least 1"):
        model.answer(QUESTION, CONTEXT, top_k=0)
    with pytest.raises(vkattn.ConfigError, match=r"answer: max_answer_len=1.5 must be an int"):
        model.answer(QUESTION, CONTEXT, max_answer_len=1.5)
    with pytest.raises(vkattn.ShapeError, match=r"the question and the context are texts"):
        model.answer(QUESTION, [CONTEXT])
    with pytest.raises(vkattn.ShapeError, match=r"the context has no tokens, so no answer"):
        model.answer(QUESTION, "  ")
    with pytest.raises(vkattn.ConfigError, match=r"max_seq_len=65 must be from 1 to the 64 tokens the model takes"):
        model.answer(QUESTION, LONG_CONTEXT, max_seq_len=65)
    with pytest.raises(vkattn.ConfigError, match=r"doc_stride=41 must be from 0 to max_seq_len=40"):
        model.answer(QUESTION, LONG_CONTEXT, max_seq_len=40, doc_stride=41)
    with pytest.raises(vkattn.ConfigError, match=r"stride=26 \(doc_stride\) must be at least 0 and below the 26 tokens"):
        model.answer(QUESTION, LONG_CONTEXT, max_seq_len=40, doc_stride=26)
    with pytest.raises(vkattn.ConfigError, match=r"take 14 tokens, which leaves no room for the second text"):
        model.answer(QUESTION, LONG_CONTEXT, max_seq_len=14)
    with pytest.raises(vkattn.ConfigError, match=r"answer: doc_stride='8' must be an int or None"):
        model.answer(QUESTION, LONG_CONTEXT, doc_stride="8")
    masked_lm = vkattn.from_pretrained(FOLDER, device="cpu")
    with pytest.raises(vkattn.ConfigError, match=r"BertForMaskedLM has no question-answering head \(qa_outputs"):
        masked_lm.answer(QUESTION, CONTEXT)
