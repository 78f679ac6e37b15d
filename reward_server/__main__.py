"""Command line: ``python -m reward_server`` serves; ``python -m reward_server score FILE.jsonl`` scores a file.

Also installed as the console script ``reward-server``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="rlvr reward server: verifiable rewards for RL on reasoning models.",
    add_completion=False,
    no_args_is_help=False,
    pretty_exceptions_enable=False,
)


@app.callback(invoke_without_command=True)
def main_callback(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option(help="Interface to bind (default RLVR_HOST or 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default RLVR_PORT or 8000).")] = None,
    workers: Annotated[
        int | None, typer.Option(help="HTTP worker processes (default RLVR_HTTP_WORKERS or 1); each has its own pools.")
    ] = None,
) -> None:
    """Start the server (the default command)."""
    if ctx.invoked_subcommand is None:
        serve(host=host, port=port, workers=workers)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to bind.")] = None,
    port: Annotated[int | None, typer.Option(help="Port.")] = None,
    workers: Annotated[int | None, typer.Option(help="HTTP worker processes.")] = None,
) -> None:
    """Start the HTTP server with the settings from RLVR_* variables and these flags."""
    import uvicorn

    from reward_server.settings import Settings

    # Flags win over the environment; child processes (uvicorn workers) read the same variables.
    if host is not None:
        os.environ["RLVR_HOST"] = host
    if port is not None:
        os.environ["RLVR_PORT"] = str(port)
    if workers is not None:
        os.environ["RLVR_HTTP_WORKERS"] = str(workers)
    settings = Settings()
    uvicorn.run(
        "reward_server.app:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.http_workers,
        log_level=settings.log_level,
        timeout_graceful_shutdown=10,
    )


def _read_items(path: Path) -> list[dict[str, Any]]:
    items = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise typer.BadParameter(f"{path}:{n}: not JSON ({exc.msg})") from exc
            if not isinstance(row, dict):
                raise typer.BadParameter(f"{path}:{n}: each line must be a JSON object")
            row.setdefault("id", str(n))
            items.append(row)
    return items


@app.command()
def score(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="JSONL: one reward item per line.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Where to write results (JSONL; default: stdout).")
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="Score against a running server instead of offline, e.g. http://127.0.0.1:8000")
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Items per request / per offline batch.")] = 256,
    preset: Annotated[str | None, typer.Option(help="Default preset for every item (r1_zero, r1).")] = None,
) -> None:
    """Score a JSONL file of reward items (the fields of a /v1/rewards item; `id` defaults to the line number).

    Offline (no --url) it runs the same verifier code in local worker processes. Results are JSONL, in
    input order, one per item.
    """
    from tqdm import tqdm

    rows = _read_items(file)
    out = output.open("w", encoding="utf-8") if output else sys.stdout
    bar = tqdm(total=len(rows), unit="item", file=sys.stderr, desc="scoring")
    try:
        if url:
            _score_remote(rows, url, batch_size, preset, out, bar)
        else:
            asyncio.run(_score_offline(rows, batch_size, preset, out, bar))
    finally:
        bar.close()
        if output:
            out.close()


def _score_remote(
    rows: list[dict[str, Any]], url: str, batch_size: int, preset: str | None, out: Any, bar: Any
) -> None:
    import httpx

    with httpx.Client(base_url=url, timeout=httpx.Timeout(600.0, connect=10.0)) as client:
        for start in range(0, len(rows), batch_size):
            body: dict[str, Any] = {"items": rows[start : start + batch_size]}
            if preset:
                body["preset"] = preset
            r = client.post("/v1/rewards", json=body)
            if r.status_code != 200:
                raise typer.BadParameter(f"server answered {r.status_code}: {r.text[:500]}")
            for result in r.json()["results"]:
                out.write(json.dumps(result, ensure_ascii=False) + "\n")
            bar.update(len(body["items"]))


async def _score_offline(rows: list[dict[str, Any]], batch_size: int, preset: str | None, out: Any, bar: Any) -> None:
    from pydantic import ValidationError

    from reward_server.rewards import ComponentSpecError, score_batch, validate_batch
    from reward_server.runtime import scoring_runtime
    from reward_server.schemas.rewards import RewardItem
    from reward_server.settings import Settings

    settings = Settings()
    try:
        items = [RewardItem.model_validate(r) for r in rows]
        resolved = validate_batch(items, None, preset)
    except (ValidationError, ComponentSpecError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    async with scoring_runtime(settings) as ctx:
        for start in range(0, len(items), batch_size):
            chunk = items[start : start + batch_size]
            results = await score_batch(chunk, resolved[start : start + batch_size], ctx)
            for result in results:
                out.write(result.model_dump_json() + "\n")
            bar.update(len(chunk))


def main() -> None:
    """Console-script entry point (``reward-server``)."""
    app()


if __name__ == "__main__":
    main()
