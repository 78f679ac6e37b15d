"""Server settings: one pydantic-settings class, read from ``RLVR_*`` environment variables."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from sandbox import Limits


def _default_workers() -> int:
    return max(1, os.cpu_count() or 1)


#: Shortest API key accepted: 16 characters of a random token are ~96 bits (``secrets.token_urlsafe(32)`` gives 43).
MIN_API_KEY_CHARS = 16
_KEY_CHARS = re.compile(r"[\x21-\x7e]+")  # printable ASCII without spaces: what a header value carries intact
_KEY_FIX = "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def _check_key(key: str, where: str) -> str:
    if not _KEY_CHARS.fullmatch(key) or "," in key:
        raise ValueError(f"an API key in {where} holds a space, a comma or a non-ASCII character; {_KEY_FIX}")
    if len(key) < MIN_API_KEY_CHARS:
        raise ValueError(
            f"an API key in {where} has {len(key)} characters; at least {MIN_API_KEY_CHARS} are needed; {_KEY_FIX}"
        )
    return key


def _read_key_file(path: Path) -> list[str]:
    """Keys from a file: one per line; blank lines and ``#`` comments are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"RLVR_API_KEYS_FILE={path}: cannot read it ({exc})") from exc
    keys = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not keys:
        raise ValueError(f"RLVR_API_KEYS_FILE={path} holds no key (one key per line)")
    return [_check_key(k, f"RLVR_API_KEYS_FILE={path}") for k in keys]


class Settings(BaseSettings):
    """Every knob of the reward server. Each field is read from ``RLVR_<FIELD>`` (case-insensitive).

    Invalid values fail at start-up with pydantic's message naming the variable, never later.
    """

    # hide_input_in_errors: an error must never print the API keys it was given.
    model_config = SettingsConfigDict(
        env_prefix="RLVR_", env_file=None, extra="ignore", frozen=True, hide_input_in_errors=True
    )

    host: str = Field("127.0.0.1", description="Interface to bind.")
    port: int = Field(8000, ge=0, le=65535, description="TCP port to bind (0 picks a free one).")
    instance_file: str | None = Field(
        None,
        description="Where `python -m reward_server` writes the random instance id it makes at start, which "
        "`/healthz` echoes: a healthcheck that compares the two knows it reached this process and not another "
        "one on the same port (the image sets it; unset: not written).",
    )
    http_workers: int = Field(
        1, ge=1, le=64, description="uvicorn worker processes; each runs its own math pool of `math_workers`."
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["text", "json"] = Field(
        "text", description="`text`: one `key=value` line per event; `json`: one JSON object per line."
    )

    # Math verification pool.
    math_workers: int = Field(
        default_factory=_default_workers, ge=1, le=256, description="Worker processes for math verification."
    )
    math_timeout_s: float = Field(
        5.0,
        gt=0,
        le=600,
        description="Time limit for one item, in its own time on a worker (not queueing or CPU waits): then `timeout`.",
    )
    math_max_timeout_s: float = Field(
        30.0, gt=0, le=600, description="Upper bound on a per-request `options.timeout_s`."
    )
    math_slow_item_s: float = Field(
        1.0,
        gt=0,
        description="An item that has run this long (its own time) is slow: it moves to the slow lane (its worker "
        "drops to nice 19) and an extra worker takes its worker's place while it runs, so slow items never starve "
        "other requests.",
    )
    math_max_extra_workers: int | None = Field(
        None, ge=0, le=256, description="Most workers started in place of slow ones (default: 4 x `math_workers`)."
    )
    request_budget_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="The most one request may take; what is not scored by then is `timeout`. Keep it under the "
        "client's timeout (120 s by default).",
    )
    math_cache_size: int = Field(
        4096, ge=0, description="Parsed ground truths kept per worker (LRU), so a group parses its reference once."
    )
    preload_language_models: bool = Field(
        True, description="Load the language detector at start-up (~2 s, ~350 MB) instead of on first use."
    )
    worker_start_timeout_s: float = Field(120.0, gt=0, description="How long /readyz may wait for workers.")

    # Code sandbox (issue 3).
    sandbox_backend: Literal["local", "docker"] = Field(
        "local", description="`local`: bubblewrap on this host; `docker`: warm containers of `sandbox_image`."
    )
    sandbox_pool_size: int = Field(
        default_factory=_default_workers, ge=1, le=256, description="Warm sandboxes, i.e. programs run at once."
    )
    sandbox_image: str = Field("rlvr-sandbox:latest", description="Image of the docker backend.")
    sandbox_bwrap: str = Field("bwrap", description="The bubblewrap executable of the local backend.")
    sandbox_work_mb: int = Field(256, ge=16, le=65536, description="tmpfs for work directories, per sandbox (MiB).")
    sandbox_cpus: float = Field(1.0, gt=0, le=64, description="CPU share of one sandbox, in CPUs.")
    sandbox_time_s: float = Field(5.0, gt=0, description="Default CPU-time limit per run / test case (s).")
    sandbox_memory_mb: int = Field(512, ge=16, description="Default memory (address space) limit per run (MiB).")
    sandbox_max_time_s: float = Field(30.0, gt=0, le=600, description="Largest `limits.time_s` a request gets.")
    sandbox_max_memory_mb: int = Field(2048, ge=16, description="Largest `limits.memory_mb` a request gets.")
    sandbox_max_processes: int = Field(64, ge=1, le=4096, description="Largest `limits.max_processes`.")
    sandbox_max_output_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, description="Largest `limits.output_bytes` (stdout kept per run)."
    )
    sandbox_max_stack_mb: int = Field(1024, ge=1, description="Largest `limits.stack_mb`.")
    sandbox_max_source_bytes: int = Field(
        512 * 1024, ge=1, description="Longest program accepted (bytes of UTF-8); longer is rejected with 422."
    )
    sandbox_max_cases: int = Field(1000, ge=1, description="Most test cases in one request; more is rejected with 422.")
    sandbox_compile_time_s: float = Field(20.0, gt=0, le=600, description="CPU-time limit of a compile stage (s).")
    sandbox_compile_memory_mb: int = Field(2048, ge=64, description="Memory limit of a compile stage (MiB).")
    sandbox_tail_bytes: int = Field(2048, ge=0, description="stdout/stderr kept per test case in results.")

    # Model-based rewards (issue 11, R1 phase 4; docs/verifiers/reward_model.md). Both optional: without a path
    # the server starts and the component is unavailable (a 422 that says what to set).
    reward_model_path: str | None = Field(
        None,
        description="A saved `AutoModelForSequenceClassification` directory (config, weights, tokenizer): the "
        "`reward_model` component. Needs torch and transformers (`pip install 'rlvr[train]'`).",
    )
    prm_path: str | None = Field(
        None,
        description="A saved `AutoModelForTokenClassification` directory: the process reward model behind the "
        "`prm` step component (`steps: {component: prm}`).",
    )
    reward_model_device: str = Field(
        "cpu",
        pattern=r"^(cpu|auto|cuda(:\d+)?)$",
        description="Where the models run: `cpu`, `cuda`, `cuda:N`, or `auto` (the first GPU if there is one).",
    )
    reward_model_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights' dtype; `auto`: float32 on CPU, bfloat16 on a GPU."
    )
    reward_model_workers: int = Field(
        1, ge=1, le=16, description="Model worker processes (each loads its own copy of the models)."
    )
    reward_model_threads: int | None = Field(
        None, ge=1, le=256, description="torch threads per model worker on CPU (default: torch's, all cores)."
    )
    reward_model_batch_size: int = Field(
        16, ge=1, le=4096, description="Most items in one hand-off to a model worker (one forward pass or more)."
    )
    reward_model_max_batch_tokens: int = Field(
        65_536,
        ge=1,
        description="Most padded tokens in one forward pass; a hand-off is split into passes that fit.",
    )
    reward_model_max_length: int | None = Field(
        None,
        ge=8,
        description="Longest input in tokens (default: the tokenizer's `model_max_length`, capped by the "
        "model's `max_position_embeddings`); longer inputs are truncated and say so in `info`.",
    )
    reward_model_batch_wait_s: float = Field(
        0.005,
        ge=0,
        le=1,
        description="How long an idle model worker waits for more items before it takes a batch (dynamic batching).",
    )
    reward_model_timeout_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Limit for one hand-off on a worker; past it its items are `timeout` and the worker is replaced.",
    )
    reward_model_chat_template: bool = Field(
        True,
        description="Give the models prompt and completion as a chat (the tokenizer's template) when the "
        "tokenizer has one and the item has a `prompt`; else the prompt's text followed by the completion's.",
    )
    reward_model_trust_remote_code: bool = Field(
        False, description="Let transformers run code shipped in the model directories (only for models you trust)."
    )
    prm_step_tag: str | None = Field(
        None,
        min_length=1,
        description="Text the PRM was trained to read a step's score at (e.g. `<extra_0>`), put after each step; "
        "without it the score is read at the step's last token.",
    )
    prm_label: int | None = Field(
        None,
        ge=0,
        description="The PRM label whose probability is a step's score (default: 1, the positive class, with two "
        "labels or more; 0, through a sigmoid, with one).",
    )
    model_start_timeout_s: float = Field(
        600.0, gt=0, description="How long loading the reward models may take at start-up."
    )

    # Request limits.
    max_batch_items: int = Field(4096, ge=1, description="Largest `items` list in one request; above it: 413.")
    max_body_mb: float = Field(256.0, gt=0, description="Largest request body in MB; above it: 413.")
    max_ground_truth_chars: int = Field(
        50_000, ge=1, description="Longest reference answer accepted; longer is rejected with 422."
    )
    max_response_chars: int = Field(
        200_000, ge=1, description="Longest completion accepted; longer text is rejected with 422."
    )

    # Admission and drain (issue 13).
    max_queued_items: int = Field(
        4096,
        ge=1,
        description="Items admitted and not yet answered, over all requests. A request that would pass it is "
        "refused whole with 429 and a Retry-After from the rate at which items are answered.",
    )
    max_queued_work: float = Field(
        32768.0,
        gt=0,
        description="Work units admitted and not yet answered, over all requests (issue 24). One unit is a plain "
        "item: one cheap component on up to 10,000 characters; longer text, sandboxed code and references known "
        "to be slow weigh more (see `reward_server/engine/work.py`). A request that would pass it is refused "
        "whole with 429 and a Retry-After from the rate work is answered; one larger than the bound is admitted "
        "only when nothing else is queued.",
    )
    request_budget_max_s: float = Field(
        110.0,
        gt=0,
        le=3600,
        description="The most a request's budget grows to: RLVR_REQUEST_BUDGET_S holds for a full batch of plain "
        "items queued, and scales with the work queued ahead of a request and its own up to this (stated in the "
        "answer's `X-RLVR-Budget-S`). Keep it under the client's timeout (120 s by default).",
    )
    drain_s: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="On SIGTERM, how long requests in flight may take to finish (new ones get 503); the items "
        "still unscored then come back `cancelled` with a null reward.",
    )

    # Connections (slow and hostile clients).
    header_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Time a client has to send a request's headers; past it: 408 and close."
    )
    body_timeout_s: float = Field(
        60.0, gt=0, le=3600, description="Time a client has to send a whole request body; past it: 408 and close."
    )
    keep_alive_s: float = Field(5.0, gt=0, le=3600, description="An idle keep-alive connection is closed after it.")
    limit_concurrency: int = Field(
        4096,
        ge=1,
        description="uvicorn's `limit_concurrency`: connections (or requests) at once, past which a request "
        "gets 503. A bound on memory, not on work (that is RLVR_MAX_QUEUED_ITEMS).",
    )

    # Authentication.
    api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = Field(
        (),
        description="API keys, comma-separated. With any key (here or in `api_keys_file`), every /v1/* request "
        "needs `Authorization: Bearer <key>`.",
    )
    api_keys_file: Path | None = Field(
        None, description="A file of API keys, one per line (a mounted Kubernetes Secret, a Docker secret)."
    )
    auth_metrics: bool = Field(False, description="Require a key for /metrics too (/healthz and /readyz stay open).")

    # The judge model (issue 23): a generative verifier asked where the rule path refuses an answer.
    judge_url: str | None = Field(
        None,
        min_length=1,
        description="Base URL of an OpenAI-compatible server running the judge model (vLLM's or SGLang's), e.g. "
        "`http://127.0.0.1:8001/v1`; `/chat/completions` is added. Unset: requests that ask for `judge` get 422.",
    )
    judge_model: str = Field(
        "zhangchenxu/TinyV-1.5B", min_length=1, description="The model name the judge server serves (its `model`)."
    )
    judge_api_key: SecretStr | None = Field(None, description="Sent as `Authorization: Bearer <key>` to the judge.")
    judge_timeout_s: float = Field(
        30.0, gt=0, le=600, description="Limit for one judge call; past it the item is `grader_error` (null)."
    )
    judge_max_concurrency: int = Field(
        64,
        ge=1,
        le=4096,
        description="Judge calls in flight at once, over all requests (the judge server batches what is in flight).",
    )
    judge_max_batch: int = Field(
        1024,
        ge=1,
        description="Most items one request sends to the judge; those past it are `grader_error` (null).",
    )
    judge_max_tokens: int = Field(
        256, ge=1, le=32768, description="Most tokens the judge may write per answer (`max_tokens`)."
    )
    judge_prompt: Literal["tinyv", "xverify", "compassverifier"] = Field(
        "tinyv",
        description="Which answer format the prompt asks for: TinyV's True/False, xVerify's Correct/Incorrect or "
        "CompassVerifier's A/B/C. All three are parsed whichever is asked for.",
    )
    # Tool calls for rollouts (issue 25; docs/tools.md). Each call is also capped by the RLVR_SANDBOX_MAX_* limits.
    tool_time_s: float = Field(5.0, gt=0, le=600, description="CPU-time limit of a tool call without `timeout_s` (s).")
    tool_max_time_s: float = Field(30.0, gt=0, le=600, description="Largest `timeout_s` a tool call gets (s).")
    tool_memory_mb: int = Field(512, ge=16, description="Memory (address space) limit of one session / call (MiB).")
    tool_output_bytes: int = Field(
        1024 * 1024, ge=1, description="stdout (and stderr) a call may write; more ends it as `output_limit`."
    )
    tool_max_output_chars: int = Field(
        8192, ge=0, description="stdout and stderr returned per call, each (stdout's start, stderr's end)."
    )
    tool_session_ttl_s: float = Field(600.0, gt=0, description="A session unused this long is closed (s).")
    tool_max_sessions: int = Field(4096, ge=1, description="Sessions open at once; past it: `session_limit`.")
    tool_max_session_calls: int = Field(
        64, ge=1, description="Calls one session may run (each replays the earlier ones); past it: `session_limit`."
    )
    tool_max_session_bytes: int = Field(
        256 * 1024, ge=1, description="Source bytes one session's calls may hold in all; past it: `session_limit`."
    )

    @model_validator(mode="before")
    @classmethod
    def _gather_keys(cls, data: Any) -> Any:
        """Keys from RLVR_API_KEYS (comma-separated) and RLVR_API_KEYS_FILE, each checked."""
        if not isinstance(data, dict):
            return data
        raw = data.get("api_keys", ())
        if isinstance(raw, str):
            raw = [k.strip() for k in raw.split(",") if k.strip()]
        keys = [k.get_secret_value() if isinstance(k, SecretStr) else str(k) for k in raw]
        keys = [_check_key(k, "RLVR_API_KEYS") for k in keys]
        if data.get("api_keys_file"):
            keys += _read_key_file(Path(data["api_keys_file"]))
        return {**data, "api_keys": tuple(SecretStr(k) for k in dict.fromkeys(keys))}

    def api_key_values(self) -> list[str]:
        """The API keys in clear, for the authentication middleware only."""
        return [k.get_secret_value() for k in self.api_keys]

    def sandbox_default_limits(self) -> Limits:
        """The limits of a run whose request names none, within the maxima."""
        return Limits(
            time_s=self.sandbox_time_s,
            memory_mb=self.sandbox_memory_mb,
            compile_time_s=self.sandbox_compile_time_s,
            compile_memory_mb=self.sandbox_compile_memory_mb,
        ).capped(self.sandbox_max_limits())

    def sandbox_max_limits(self) -> Limits:
        """The most any request gets; also what each sandbox's cgroup or container is sized for."""
        return Limits(
            time_s=self.sandbox_max_time_s,
            memory_mb=self.sandbox_max_memory_mb,
            max_processes=self.sandbox_max_processes,
            output_bytes=self.sandbox_max_output_bytes,
            stack_mb=self.sandbox_max_stack_mb,
            file_size_mb=Limits().file_size_mb,
            compile_time_s=self.sandbox_compile_time_s,
            compile_memory_mb=self.sandbox_compile_memory_mb,
        )

    @model_validator(mode="after")
    def _check_sandbox_limits(self) -> Settings:
        for name in ("time_s", "memory_mb"):
            default, maximum = getattr(self, f"sandbox_{name}"), getattr(self, f"sandbox_max_{name}")
            if default > maximum:
                raise ValueError(
                    f"sandbox_{name} ({default}) must not exceed sandbox_max_{name} ({maximum}); "
                    f"raise RLVR_SANDBOX_MAX_{name.upper()} or lower RLVR_SANDBOX_{name.upper()}"
                )
        return self

    @model_validator(mode="after")
    def _check_queue(self) -> Settings:
        if self.max_queued_items < self.max_batch_items:
            raise ValueError(
                f"max_queued_items ({self.max_queued_items}) must be at least max_batch_items "
                f"({self.max_batch_items}), or a full batch could never be admitted; raise RLVR_MAX_QUEUED_ITEMS "
                "or lower RLVR_MAX_BATCH_ITEMS"
            )
        return self

    @model_validator(mode="after")
    def _check_timeouts(self) -> Settings:
        if self.math_timeout_s > self.math_max_timeout_s:
            raise ValueError(
                f"math_timeout_s ({self.math_timeout_s}) must not exceed math_max_timeout_s "
                f"({self.math_max_timeout_s}); raise RLVR_MATH_MAX_TIMEOUT_S or lower RLVR_MATH_TIMEOUT_S"
            )
        return self
