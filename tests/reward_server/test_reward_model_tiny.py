"""Model-based rewards on tiny classifiers the test builds and saves: the model worker in this process, and the
``reward_model`` component and ``prm`` step component through ``POST /v1/rewards`` on a live app, each compared
with the same model run here directly on the input written out by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from reward_server.engine.reward_models import ModelCatalog, ModelError, ModelInfo, ModelOutcome
from reward_server.settings import Settings
from reward_server.verifiers import reward_model as rm

torch = pytest.importorskip("torch", reason="the train extra: pip install -e '.[train]'")
transformers = pytest.importorskip("transformers")

from trainer.tiny import build_tokenizer  # noqa: E402  (needs torch)

# A chat template that, like DeepSeek-R1's, drops the reasoning from an assistant turn: the server must still
# score the completion verbatim. (The newline is an expression: transformers renders with trim_blocks.)
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>"
    "{% if m['role'] == 'assistant' %}{{ m['content'].split('</think>')[-1] }}{% else %}{{ m['content'] }}{% endif %}"
    "{{ '\\n' }}{% endfor %}"
)


def _tokenizer() -> Any:
    # vocab_size 257: the 256 bytes and EOS, no merges, so an ASCII character is one token (offsets by hand).
    return build_tokenizer(["0123456789 +-=abc"], vocab_size=257, chat_template=TEMPLATE)


def _save(model: Any, tokenizer: Any, path: Path) -> str:
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def _config(tokenizer: Any, num_labels: int) -> Any:
    return transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        num_labels=num_labels,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A one-label reward model (with OpenRLHF's mean/std in its config), a two-label PRM, a causal LM, and the
    tokenizer they share, saved to disk."""
    root = tmp_path_factory.mktemp("models")
    tokenizer = _tokenizer()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        orm = transformers.Qwen2ForSequenceClassification(_config(tokenizer, 1))
        prm = transformers.Qwen2ForTokenClassification(_config(tokenizer, 2))
        lm = transformers.Qwen2ForCausalLM(_config(tokenizer, 2))
    with torch.no_grad():  # heads scaled up, so that different inputs get clearly different scores
        orm.score.weight.mul_(50)
        prm.score.weight.mul_(50)
    orm.config.mean, orm.config.std = 0.5, 2.0
    return {
        "tokenizer": tokenizer,
        "orm": orm.eval(),
        "prm": prm.eval(),
        "orm_path": _save(orm, tokenizer, root / "orm"),
        "prm_path": _save(prm, tokenizer, root / "prm"),
        "lm_path": _save(lm, tokenizer, root / "lm"),
    }


def _ids(tiny: dict[str, Any], text: str) -> list[int]:
    ids: list[int] = tiny["tokenizer"](text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text.encode())  # one token a byte: positions below are character indices
    return ids


def _orm_logit(tiny: dict[str, Any], ids: list[int]) -> float:
    with torch.no_grad():
        return float(tiny["orm"](input_ids=torch.tensor([ids])).logits[0, 0])


def _prm_probs(tiny: dict[str, Any], text: str, positions: list[int]) -> list[float]:
    with torch.no_grad():
        logits = tiny["prm"](input_ids=torch.tensor([_ids(tiny, text)])).logits[0]  # (T, 2)
    return [float(torch.softmax(logits[p], -1)[1]) for p in positions]


# --- configuration


def test_the_catalog_reads_configs_without_torch(tiny: dict[str, Any]) -> None:
    catalog = ModelCatalog.from_settings(Settings(reward_model_path=tiny["orm_path"], prm_path=tiny["prm_path"]))
    orm, prm = catalog.infos["reward_model"], catalog.infos["prm"]
    assert (orm.kind, orm.architecture, orm.num_labels, orm.mean, orm.std) == (
        "sequence",
        "Qwen2ForSequenceClassification",
        1,
        0.5,
        2.0,
    )
    assert (prm.kind, prm.architecture, prm.num_labels, prm.label) == ("token", "Qwen2ForTokenClassification", 2, 1)
    assert catalog.reason("reward_model") is None and catalog.unavailable == {}
    none = ModelCatalog.from_settings(Settings())
    assert "RLVR_REWARD_MODEL_PATH" in (none.reason("reward_model") or "")
    assert "RLVR_PRM_PATH" in (none.reason("prm") or "")
    assert "pip install 'rlvr[train]'" in (none.reason("reward_model") or "")


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        # A causal LM as a reward model would load with a random head.
        ({"reward_model_path": "lm_path"}, "RLVR_REWARD_MODEL_PATH=.*AutoModelForSequenceClassification.*CausalLM"),
        ({"prm_path": "orm_path"}, "RLVR_PRM_PATH=.*AutoModelForTokenClassification"),
        ({"reward_model_path": "/nonexistent/model"}, "no /nonexistent/model/config.json"),
        ({"prm_path": "prm_path", "prm_label": 2}, "RLVR_PRM_LABEL=2, but .* has 2 label"),
    ],
)
def test_a_model_that_cannot_serve_fails_at_start(tiny: dict[str, Any], settings: dict[str, Any], match: str) -> None:
    values = {k: tiny.get(v, v) if isinstance(v, str) else v for k, v in settings.items()}
    with pytest.raises(ModelError, match=match):
        ModelCatalog.from_settings(Settings(**values))


def test_remote_code_models_are_checked_by_their_auto_map(tmp_path: Path) -> None:
    config = {"architectures": ["MyProcessRewardModel"], "auto_map": {"AutoModelForTokenClassification": "m.PRM"}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError):
        ModelInfo.read("prm", str(tmp_path))
    info = ModelInfo.read("prm", str(tmp_path), trust_remote_code=True)
    assert (info.architecture, info.num_labels) == ("MyProcessRewardModel", 2)


# --- the worker, in this process


def test_the_worker_refuses_a_checkpoint_without_the_head(tiny: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match=r"head is not in the checkpoint.*score\.weight"):
        rm.init_worker({"sequence": tiny["lm_path"]})


def test_batched_scores_equal_single_ones(tiny: dict[str, Any]) -> None:
    # Right padding in a batch of different lengths must not change any score.
    rm.init_worker({"sequence": tiny["orm_path"]}, chat_template=False, max_batch_tokens=64)
    texts = ["1+1=2", "12+30=42 abc", "7", "3-1=2" * 5]
    results = rm.score_payload(("sequence", [(None, t, "response", None) for t in texts]))
    expected = [_orm_logit(tiny, _ids(tiny, t)) for t in texts]
    assert [r[0] for r in results] == ["ok"] * 4
    assert [r[1][0] for r in results] == pytest.approx(expected, abs=1e-5)
    assert len(set(round(e, 3) for e in expected)) == 4  # the scores do tell the inputs apart


def test_truncation_keeps_the_end_of_a_sequence_and_the_start_of_a_prm_input(tiny: dict[str, Any]) -> None:
    rm.init_worker({"sequence": tiny["orm_path"], "token": tiny["prm_path"]}, chat_template=False, max_length=16)
    text = "0123456789" * 3  # 30 tokens
    [(status, logits, dropped)] = rm.score_payload(("sequence", [("q=", text, "response", None)]))
    assert (status, dropped) == ("ok", 16)  # "q=" + 30 characters, 16 kept
    assert logits[0] == pytest.approx(_orm_logit(tiny, _ids(tiny, "q=" + text)[-16:]), abs=1e-5)
    # Steps end at characters 10, 20, 30; the first 16 tokens hold the first step's end (index 9) alone.
    [(status, steps, dropped)] = rm.score_payload(("token", [(None, text, "response", [10, 20, 30])]))
    assert (status, dropped) == ("ok", 14)
    assert steps[1:] == [None, None]
    with torch.no_grad():
        expected = tiny["prm"](input_ids=torch.tensor([_ids(tiny, text)[:16]])).logits[0, 9].tolist()
    assert steps[0] == pytest.approx(expected, abs=1e-5)


def test_prm_reads_each_step_at_its_tag(tiny: dict[str, Any]) -> None:
    rm.init_worker({"token": tiny["prm_path"]}, chat_template=False, step_tag="=")
    # Steps "1+1" and "2+2" (ends 3, 8); with the tag "=" after each the PRM reads "1+1=\n\n2+2=" at 3 and 9.
    [(status, steps, _)] = rm.score_payload(("token", [(None, "1+1\n\n2+2 done", "response", [3, 8])]))
    with torch.no_grad():
        logits = tiny["prm"](input_ids=torch.tensor([_ids(tiny, "1+1=\n\n2+2=")])).logits[0]
    assert status == "ok"
    assert steps == [pytest.approx(logits[3].tolist(), abs=1e-5), pytest.approx(logits[9].tolist(), abs=1e-5)]


def test_an_empty_input_is_an_error_for_itself(tiny: dict[str, Any]) -> None:
    rm.init_worker({"sequence": tiny["orm_path"]}, chat_template=False)
    results = rm.score_payload(("sequence", [(None, "", "response", None), (None, "1", "response", None)]))
    assert results[0] == ("error", "the input is empty (no tokens to score)", 0)
    assert results[1][0] == "ok"


# --- through the HTTP API


@pytest.fixture(scope="module")
def client(tiny: dict[str, Any]):
    from fastapi.testclient import TestClient

    from reward_server.app import create_app

    settings = Settings(
        math_workers=1,
        math_timeout_s=5.0,
        preload_language_models=False,
        reward_model_path=tiny["orm_path"],
        prm_path=tiny["prm_path"],
        reward_model_threads=1,
        reward_model_batch_wait_s=0.02,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def _score(client: Any, items: list[dict[str, Any]], **request: Any) -> list[dict[str, Any]]:
    r = client.post("/v1/rewards", json={"items": items, **request})
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


def test_ready_says_which_models_run(client: Any) -> None:
    r = client.get("/readyz")
    assert r.status_code == 200
    assert (r.json()["checks"]["reward_model"], r.json()["checks"]["prm"]) == ("ok", "ok")
    assert 'rlvr_workers_alive{pool="reward_model"} 1.0' in client.get("/metrics").text


def test_reward_model_scores_prompt_and_completion_as_the_model_does(client: Any, tiny: dict[str, Any]) -> None:
    items = [
        # No prompt: the completion alone.
        {"id": "plain", "response": "12+30=42", "ground_truth": "42", "components": {"reward_model": 1.0}},
        # A prompt: the chat template around it; the reasoning stays although the template would drop it.
        {
            "id": "chat",
            "prompt": "add",
            "response": "<think>4+8</think>12",
            "ground_truth": "12",
            "components": {"reward_model": 1.0},
        },
        # scope answer: what follows </think> only.
        {
            "id": "answer",
            "prompt": "add",
            "response": "<think>4+8</think>12",
            "ground_truth": "12",
            "components": {"reward_model": {"weight": 1.0, "scope": "answer"}},
        },
    ]
    plain, chat, answer = _score(client, items)
    assert plain["reward"] == pytest.approx(_orm_logit(tiny, _ids(tiny, "12+30=42")), abs=1e-5)
    expected_chat = _orm_logit(tiny, _ids(tiny, "<user>add\n<assistant><think>4+8</think>12\n"))
    assert chat["reward"] == pytest.approx(expected_chat, abs=1e-5)
    assert answer["reward"] == pytest.approx(_orm_logit(tiny, _ids(tiny, "<user>add\n<assistant>12\n")), abs=1e-5)
    assert chat["components"]["reward_model"]["status"] == "ok"
    assert chat["components"]["reward_model"]["info"]["logits"] == [pytest.approx(chat["reward"])]
    assert len({plain["reward"], chat["reward"], answer["reward"]}) == 3


def test_reward_model_composes_with_weights_and_normalisations(client: Any, tiny: dict[str, Any]) -> None:
    logit = _orm_logit(tiny, _ids(tiny, "so 42"))
    base = {"response": "so 42", "ground_truth": "42"}
    items = [
        {"id": "sum", **base, "components": {"accuracy": 1.0, "reward_model": 0.5}},
        {"id": "sigmoid", **base, "components": {"reward_model": {"weight": 1.0, "normalize": "sigmoid"}}},
        # standardize with the config's mean 0.5 and std 2.0, then with the request's own.
        {"id": "config", **base, "components": {"reward_model": {"weight": 1.0, "normalize": "standardize"}}},
        {
            "id": "own",
            **base,
            "components": {"reward_model": {"weight": 1.0, "normalize": "standardize", "mean": 1.0, "std": 4.0}},
        },
        {"id": "zero", **base, "components": {"accuracy": 1.0, "reward_model": 0.0}},
    ]
    total, sigmoid, config, own, zero = _score(client, items)
    assert total["reward"] == pytest.approx(1.0 + 0.5 * logit, abs=1e-5)  # accuracy 1 (42 is right)
    assert total["components"]["reward_model"]["weight"] == 0.5
    assert sigmoid["reward"] == pytest.approx(1 / (1 + math.exp(-logit)), abs=1e-5)
    assert config["reward"] == pytest.approx((logit - 0.5) / 2.0, abs=1e-5)
    assert own["reward"] == pytest.approx((logit - 1.0) / 4.0, abs=1e-5)
    assert zero["reward"] == 1.0 and zero["components"]["reward_model"]["score"] == pytest.approx(logit, abs=1e-5)


def test_a_group_goes_to_the_model_in_one_batch(client: Any, tiny: dict[str, Any]) -> None:
    models = client.app.state.scoring.reward_models
    before = models.batches
    texts = [f"{k}+{k * 7}={k * 8}" for k in range(8)]
    group = [
        {"id": f"c{k}", "response": t, "ground_truth": "9", "components": {"reward_model": 1}}
        for k, t in enumerate(texts)
    ]
    results = _score(client, group)
    assert models.batches - before == 1
    assert [r["reward"] for r in results] == pytest.approx([_orm_logit(tiny, _ids(tiny, t)) for t in texts], abs=1e-5)


@pytest.mark.parametrize(
    ("component", "match"),
    [
        ({"weight": 1.0, "label": 1}, "label 1 is out of range: the reward model has 1 label"),
        ({"weight": 1.0, "normalize": "softmax"}, "softmax over a single label"),
        ({"weight": 1.0, "normalise": "sigmoid"}, "normalise"),
        ({"weight": 1.0, "std": 0}, "std"),
    ],
)
def test_reward_model_parameters_it_cannot_serve_are_a_422(client: Any, component: Any, match: str) -> None:
    item = {"id": "a", "response": "1", "ground_truth": "1", "components": {"reward_model": component}}
    r = client.post("/v1/rewards", json={"items": [item]})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"][:5] == ["body", "items", 0, "components", "reward_model"]
    assert match in detail["msg"]


def test_prm_step_scores_come_back_with_their_spans(client: Any, tiny: dict[str, Any]) -> None:
    response = "<think>1+1=2\n\n2+2=5</think>5"
    item = {"id": "s", "response": response, "ground_truth": "5", "steps": {"component": "prm"}}
    [result] = _score(client, [item])
    assert result["reward"] == 1.0  # the outcome reward is unchanged
    spans = [(s["start"], s["end"]) for s in result["steps"]]
    assert spans == [(7, 12), (14, 19)]  # "<think>" is 7 characters
    # No prompt: the PRM reads the completion up to the last step, and each step at its last character.
    expected = _prm_probs(tiny, response[:19], [11, 18])
    assert [s["score"] for s in result["steps"]] == pytest.approx(expected, abs=1e-5)
    assert [s["status"] for s in result["steps"]] == ["ok", "ok"]


def test_prm_reads_the_prompt_through_the_chat_template(client: Any, tiny: dict[str, Any]) -> None:
    response = "3*3=9\n\n9+1=10"
    item = {"id": "p", "prompt": "q", "response": response, "ground_truth": "10", "steps": {"component": "prm"}}
    [result] = _score(client, [item])
    before = "<user>q\n<assistant>"  # 19 characters
    expected = _prm_probs(tiny, before + response + "\n", [len(before) + 4, len(before) + 12])
    assert [s["score"] for s in result["steps"]] == pytest.approx(expected, abs=1e-5)


def test_rule_and_model_step_components_side_by_side(client: Any) -> None:
    items = [
        {"id": "rule", "response": "1+1=3\n\n2+2=4", "ground_truth": "4", "steps": {"component": "arithmetic"}},
        {"id": "model", "response": "1+1=3\n\n2+2=4", "ground_truth": "4", "steps": {"component": "prm"}},
        {"id": "empty", "response": "<think></think>4", "ground_truth": "4", "steps": {"component": "prm"}},
        {"id": "none", "response": "4", "ground_truth": "4"},
    ]
    rule, model, empty, none = _score(client, items)
    assert [(s["score"], s["status"]) for s in rule["steps"]] == [(0.0, "wrong"), (1.0, "ok")]
    assert [s["status"] for s in model["steps"]] == ["ok", "ok"]
    assert all(0 < s["score"] < 1 for s in model["steps"])
    assert empty["steps"] == [] and none["steps"] is None
    metrics = client.get("/metrics").text
    assert 'rlvr_verdicts_total{component="step:arithmetic",status="wrong"} 1.0' in metrics
    assert 'rlvr_verdicts_total{component="step:prm",status="ok"}' in metrics


def test_a_model_failure_is_null_never_zero(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # What the batcher gives when a hand-off overran its deadline (test_reward_model.py makes a real worker
    # overrun); here, what the component and the steps make of it.
    async def overrun(kind: str, items: list[Any]) -> list[ModelOutcome]:
        return [ModelOutcome("timeout", detail="no scores within 60 s")] * len(items)

    monkeypatch.setattr(client.app.state.scoring.reward_models, "score", overrun)
    item = {"id": "t", "response": "1+1=2\n\n2+2=4", "ground_truth": "4", "steps": {"component": "prm"}}
    orm = {"id": "o", "response": "4", "ground_truth": "4", "components": {"accuracy": 1.0, "reward_model": 1.0}}
    step_result, orm_result = _score(client, [item, orm])
    assert [(s["score"], s["status"]) for s in step_result["steps"]] == [(None, "timeout"), (None, "timeout")]
    assert step_result["reward"] == 1.0  # the outcome reward is not the steps'
    assert (orm_result["reward"], orm_result["status"]) == (None, "timeout")
    assert orm_result["components"]["reward_model"]["score"] is None
    assert orm_result["components"]["accuracy"]["score"] == 1.0
