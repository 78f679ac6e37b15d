"""Command line: ``python -m trainer train|sft|sample --config CONFIG.yaml`` (``train`` is also ``grpo-train``),
``plot``, ``merge``, ``fields`` and ``convert`` (a TRL or verl config carried over)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from trainer.config import CONFIG_CLASSES, ConfigError, field_docs, load_config, parse_overrides

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="GRPO trainer scored by the rlvr reward server, with SFT and rejection sampling.",
)


ConfigOption = Annotated[
    Path, typer.Option("--config", "-c", help="YAML config (see `fields`).", exists=True, dir_okay=False)
]
SetOption = Annotated[
    list[str] | None, typer.Option("--set", help="Override one option, e.g. --set max_steps=10 (repeatable).")
]


def _run(command: str, config: Path, overrides: list[str] | None) -> Any:
    """Load the command's config and run it; each failure a user must fix is one line and an exit code."""
    # torch and transformers load only for the commands that need them
    from rlvr_client.client import RewardServerError
    from trainer.data import DataError

    try:
        cfg = load_config(config, parse_overrides(overrides or []), cls=CONFIG_CLASSES[command])
    except ConfigError as exc:
        typer.echo(f"config error: {exc}", err=True)
        raise typer.Exit(2) from exc
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per reward request drowns the log
    try:
        if command == "train":
            from trainer.train import train as run

            return run(cfg)
        if command == "sft":
            from trainer.sft import sft as run_sft

            return run_sft(cfg)  # type: ignore[arg-type]
        from trainer.sample import sample as run_sample

        return run_sample(cfg)  # type: ignore[arg-type]
    except ConfigError as exc:  # found only once things load: a model path, a checkpoint past max_steps
        typer.echo(f"config error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except (DataError, RewardServerError, TimeoutError, FileNotFoundError) as exc:
        # What the user must fix or wait out, said in one message; a traceback would only bury it.
        label = {DataError: "data error", RewardServerError: "reward server error"}.get(type(exc), "error")
        typer.echo(f"{label}: {exc}", err=True)
        raise typer.Exit(1) from exc


@app.command()
def train(config: ConfigOption, overrides: SetOption = None) -> None:
    """Train a policy with GRPO against running reward server(s)."""
    result = _run("train", config, overrides)
    typer.echo(f"done: metrics in {result.output_dir / 'metrics.jsonl'}, final checkpoint {result.checkpoint}")


@app.command()
def sft(config: ConfigOption, overrides: SetOption = None) -> None:
    """Supervised fine-tuning on prompt/completion rows or chat messages, loss on completion tokens only."""
    result = _run("sft", config, overrides)
    typer.echo(f"done: metrics in {result.output_dir / 'metrics.jsonl'}, final checkpoint {result.checkpoint}")


@app.command()
def sample(config: ConfigOption, overrides: SetOption = None) -> None:
    """Rejection sampling: k completions per prompt, scored by the server; the verified ones become an SFT set."""
    result = _run("sample", config, overrides)
    typer.echo(result.report())


@app.command()
def plot(
    run_dir: Annotated[
        Path, typer.Argument(help="A run directory holding metrics.jsonl.", exists=True, file_okay=False)
    ],
    out: Annotated[Path | None, typer.Option(help="PNG path (default RUN_DIR/curves.png).")] = None,
    metric: Annotated[list[str] | None, typer.Option(help="Draw only these metrics (repeatable).")] = None,
) -> None:
    """Draw the run's curves to PNG."""
    from trainer.plot import plot_run

    try:
        typer.echo(str(plot_run(run_dir, metrics=metric, out=out)))
    except (FileNotFoundError, ValueError) as exc:  # no metrics.jsonl yet, nothing numeric logged yet
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@app.command()
def merge(
    checkpoint: Annotated[
        Path, typer.Argument(help="A LoRA checkpoint (adapter_config.json).", exists=True, file_okay=False)
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory for the merged model.")],
    base_model: Annotated[
        str | None, typer.Option(help="The base model (default: base_model_name_or_path in adapter_config.json).")
    ] = None,
) -> None:
    """Write a LoRA checkpoint's adapter merged into its base, as one model for from_pretrained or vLLM."""
    from trainer.rollout.weights import merge_adapter

    try:
        typer.echo(str(merge_adapter(checkpoint, output, base_model)))
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc


@app.command()
def fields(
    command: Annotated[str, typer.Argument(help="The command whose options to list: train, sft or sample.")] = "train",
) -> None:
    """List every config option of a command with its one-line description."""
    if command not in CONFIG_CLASSES:
        typer.echo(f"error: no command {command!r}; choose one of {', '.join(CONFIG_CLASSES)}", err=True)
        raise typer.Exit(2)
    for name, doc in field_docs(CONFIG_CLASSES[command]).items():
        typer.echo(f"{name:28s} {doc}")


@app.command()
def convert(
    source: Annotated[Path, typer.Argument(help="TRL GRPOConfig as JSON/YAML (its to_dict()), or a verl YAML.")],
    from_: Annotated[str, typer.Option("--from", help="trl or verl")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the YAML here (default: stdout).")
    ] = None,
) -> None:
    """Carry a TRL or verl config over: our YAML (add model_name_or_path and train_data where missing), and a
    report of what was mapped, defaulted (the source's default where it differs from ours), dropped as neutral and
    ignored (docs/trainer/from_trl_verl.md has the table)."""
    import yaml

    from trainer.config.conversion import convert as run_convert

    if from_ not in ("trl", "verl"):
        typer.echo(f"error: --from must be trl or verl, got {from_!r}", err=True)
        raise typer.Exit(2)
    try:
        values = yaml.safe_load(source.read_text())
        if not isinstance(values, dict):
            raise ConfigError(f"{source} holds no mapping of options")
        result = run_convert(values, from_)  # type: ignore[arg-type]
    except (OSError, yaml.YAMLError, ConfigError) as exc:
        typer.echo(f"config error: {exc}", err=True)
        raise typer.Exit(2) from exc
    text = yaml.safe_dump(result.options, sort_keys=False)
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text)
    labels = {
        "mapped": "mapped",
        "defaulted": "defaulted (not set in the source)",
        "refused": "dropped (no counterpart, neutral value)",
        "ignored": "ignored",
    }
    for kind, entries in result.report.items():
        if kind in ("mapped", "ignored") or not entries:  # names only, on one line
            shown = "; ".join(entries) if kind == "mapped" else f"{len(entries)} options (logging, hub, hardware, ...)"
            typer.echo(f"# {labels[kind]}: {shown if entries else 'none'}", err=True)
        else:  # each with its reason, one a line
            typer.echo(f"# {labels[kind]}:" + "".join(f"\n#   {entry}" for entry in entries), err=True)


def main() -> None:
    """Entry point of ``python -m trainer`` and the ``grpo-train`` console script."""
    app()


if __name__ == "__main__":
    main()
