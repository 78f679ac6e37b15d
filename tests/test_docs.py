"""The docs site: generated reference pages cover the code, every page is in the nav, the README's test
command is the one CI runs. (`mkdocs build --strict` in .ci/run checks links and anchors.)"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from types import ModuleType

import pytest
import yaml

from tests.conftest import REPO_ROOT

pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference_hook", REPO_ROOT / "docs/hooks/reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _nav_pages(nav: list) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_api_page_lists_every_endpoint_and_model() -> None:
    hook = _hook()
    spec = hook.openapi_spec()
    text = hook.render_openapi(spec)
    for path, ops in spec["paths"].items():
        for method in ops:
            assert f"### `{method.upper()} {path}`" in text
    for name in spec["components"]["schemas"]:
        assert f"### {name} {{#schema-{name.lower()}}}" in text
    # A field row, checked by hand against reward_server/schemas: RewardItem.id is required, 1 to 256 characters.
    row = next(line for line in text.splitlines() if line.startswith("| `id` | string | yes |"))
    assert "length ≥ 1" in row and "length ≤ 256" in row


def test_config_page_lists_every_option_with_its_docstring() -> None:
    from trainer.config import GRPOConfig, field_docs

    text = _hook().render_config()
    docs = field_docs()
    for f in dataclasses.fields(GRPOConfig):
        row = next(line for line in text.splitlines() if line.startswith(f"| `{f.name}` |"))
        assert docs[f.name].split("``")[0].strip() in row.replace("\\|", "|")
    assert "| `num_generations` | `int` | `8` |" in text
    assert "| `model_name_or_path` | `str` | required |" in text
    assert "## Model and data" in text and "## GRPO" in text


def test_every_page_is_in_the_nav_and_exists() -> None:
    config = yaml.load((REPO_ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    nav = _nav_pages(config["nav"])
    on_disk = {str(p.relative_to(REPO_ROOT / "docs")) for p in (REPO_ROOT / "docs").rglob("*.md")}
    assert sorted(set(nav)) == sorted(nav), "a page is in the nav twice"
    assert set(nav) == on_disk


def test_readme_test_command_is_the_one_ci_runs() -> None:
    ci = (REPO_ROOT / ".ci/run").read_text().splitlines()
    command = ci[ci.index("# The README's test command, verbatim.") + 1]
    readme = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    assert any(command in block.splitlines() for block in blocks), command
    assert len(readme.splitlines()) <= 250


def test_readme_links_reach_pages_and_headings() -> None:
    from markdown.extensions.toc import slugify

    readme = (REPO_ROOT / "README.md").read_text()
    links = re.findall(r"\]\(((?:docs|examples)/[^)#\s]+)(?:#([^)\s]+))?\)", readme)
    assert len(links) > 20
    for path, anchor in links:
        target = REPO_ROOT / path
        assert target.is_file(), path
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), flags=re.M)
            assert anchor in {slugify(h, "-") for h in headings}, f"{path}#{anchor}"


@pytest.mark.parametrize("class_name", ["SFTConfig", "SampleConfig"])
def test_the_recipe_page_lists_every_sft_and_sample_option(class_name: str) -> None:
    import trainer.config

    cls = getattr(trainer.config, class_name)
    text = _hook().render_config(class_name, level=4)
    for f in dataclasses.fields(cls):
        assert any(line.startswith(f"| `{f.name}` |") for line in text.splitlines()), f.name
    assert "#### Model and data" in text
