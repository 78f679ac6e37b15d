"""Command line: ``python -m reward_server`` serves; ``python -m reward_server score FILE.jsonl`` scores a file.

Also installed as the console script ``reward-server``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

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
    """Start the HTTP server with the settings from RLVR_* variables and these flags.

    SIGTERM (or Ctrl+C) drains it first: new requests get 503, those in flight get RLVR_DRAIN_S to finish.
    """
    from reward_server.engine.reward_models import ModelCatalog, ModelError
    from reward_server.serving import serve as run_server

    # Flags win over the environment; child processes (uvicorn workers) read the same variables.
    if host is not None:
        os.environ["RLVR_HOST"] = host
    if port is not None:
        os.environ["RLVR_PORT"] = str(port)
    if workers is not None:
        os.environ["RLVR_HTTP_WORKERS"] = str(workers)
    settings = _settings()
    try:  # a configured reward model that cannot be used: one line now, not a traceback from each worker
        ModelCatalog.from_settings(settings)
    except ModelError as exc:
        _fail(str(exc), 2)
    run_server(settings)


def _settings() -> Any:
    """The server's :class:`Settings` from the environment; a bad ``RLVR_*`` value stops here with one line that
    names the variable (pydantic's own message is a traceback of several lines)."""
    from pydantic import ValidationError

    from reward_server.settings import Settings

    try:
        return Settings()
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = str(err["msg"]).removeprefix("Value error, ")
        # A field's error names its variable; a check across fields (a model validator) names them in its text.
        where = f"RLVR_{'_'.join(map(str, err['loc'])).upper()}: " if err["loc"] else ""
        _fail(f"bad setting: {where}{msg}", 2)


def _read_items(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The file's items and the line number of each."""
    items, lines = [], []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                _fail(f"{path}:{n}: not JSON ({exc.msg})", 2)
            if not isinstance(row, dict):
                _fail(f"{path}:{n}: each line must be a JSON object", 2)
            row.setdefault("id", str(n))
            items.append(row)
            lines.append(n)
    return items, lines


def _fail(message: str, code: int = 1, bar: Any = None) -> NoReturn:
    """Stop with a one-line message on stderr (no traceback, no decoration): 2 for bad input, 1 otherwise. A
    progress ``bar`` still open is closed first, so the message gets its own line."""
    if bar is not None:
        bar.close()
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


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
    input order, one per item. An output file appears only when every item was scored.
    """
    from tqdm import tqdm

    rows, lines = _read_items(file)
    resolved = None if url else _validate_offline(file, rows, lines, preset)
    tmp = output.with_name(f".{output.name}.partial") if output else None
    out = tmp.open("w", encoding="utf-8") if tmp else sys.stdout
    bar = tqdm(total=len(rows), unit="item", file=sys.stderr, desc="scoring")
    ok = False
    try:
        if url:
            _score_remote(file, rows, lines, url, batch_size, preset, out, bar)
        else:
            asyncio.run(_score_offline(rows, resolved, batch_size, out, bar))
        ok = True
    finally:
        bar.close()
        if tmp is not None and output is not None:
            out.close()
            if ok:
                os.replace(tmp, output)
            else:
                tmp.unlink(missing_ok=True)


def _write(out: Any, result: dict[str, Any]) -> None:
    out.write(json.dumps(result, ensure_ascii=False, separators=(",", ":")) + "\n")


def _validate_offline(
    path: Path, rows: list[dict[str, Any]], lines: list[int], preset: str | None
) -> tuple[list[Any], list[Any]]:
    """Validate every item as the server would, naming the line of the first bad one."""
    from pydantic import ValidationError

    from reward_server.engine.resolve import ComponentSpecError, check_judge, validate_batch
    from reward_server.engine.reward_models import ModelCatalog, ModelError
    from reward_server.schemas.rewards import RewardItem
    from reward_server.settings import Settings

    items = []
    for row, n in zip(rows, lines, strict=True):
        try:
            items.append(RewardItem.model_validate(row))
        except ValidationError as exc:
            err = exc.errors()[0]
            _fail(f"{path}:{n}: {'.'.join(map(str, err['loc']))}: {err['msg']}", 2)
    try:
        settings = Settings()
        catalog = ModelCatalog.from_settings(settings)
    except ModelError as exc:
        _fail(str(exc), 2)
    try:
        resolved = validate_batch(items, None, preset, catalog)
        if settings.judge_url is None:
            check_judge(resolved)
        return items, resolved
    except ComponentSpecError as exc:
        where = f"{path}:{lines[int(exc.loc[1])]}" if exc.loc[:1] == ("items",) else str(path)
        _fail(f"{where}: {exc.msg}", 2)


def _score_remote(
    path: Path,
    rows: list[dict[str, Any]],
    lines: list[int],
    url: str,
    batch_size: int,
    preset: str | None,
    out: Any,
    bar: Any,
) -> None:
    import httpx

    with httpx.Client(base_url=url, timeout=httpx.Timeout(600.0, connect=10.0)) as client:
        for start in range(0, len(rows), batch_size):
            body: dict[str, Any] = {"items": rows[start : start + batch_size]}
            if preset:
                body["preset"] = preset
            try:
                r = client.post("/v1/rewards", json=body)
            except httpx.TransportError as exc:
                _fail(f"cannot reach {url}: {exc}", bar=bar)
            if r.status_code == 422:
                err = r.json()["detail"][0]
                loc = err.get("loc", [])
                where = f"{path}:{lines[start + loc[2]]}" if loc[1:2] == ["items"] and len(loc) > 2 else str(path)
                _fail(f"{where}: {'.'.join(map(str, loc[3:]))}: {err.get('msg')}", 2, bar=bar)
            if r.status_code != 200:
                _fail(f"server answered {r.status_code}: {r.text[:500]}", bar=bar)
            for result in r.json()["results"]:
                _write(out, result)
            bar.update(len(body["items"]))


async def _score_offline(
    rows: list[dict[str, Any]], resolved: tuple[list[Any], list[Any]] | None, batch_size: int, out: Any, bar: Any
) -> None:
    from reward_server.engine.batch import score_batch
    from reward_server.engine.runtime import scoring_runtime
    from reward_server.settings import Settings

    assert resolved is not None
    items, components = resolved
    async with scoring_runtime(Settings()) as ctx:
        for start in range(0, len(items), batch_size):
            chunk = items[start : start + batch_size]
            for result in await score_batch(chunk, components[start : start + batch_size], ctx):
                _write(out, result.model_dump(mode="json"))
            bar.update(len(chunk))


def main() -> None:
    """Console-script entry point (``reward-server``)."""
    app()


if __name__ == "__main__":
    main()
