"""The documentation site: it builds strictly, and it keeps up with the code.

No services: the CLI's help is read in a subprocess, settings from their classes, and the
runnable snippets run each in a subprocess of their own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MKDOCS = Path(sys.executable).with_name("mkdocs")

# The CLI's --help texts, every command and subcommand, as JSON {"trainwire runs list": text}.
# Runs trainwire.cli.main(["runs", "list", "--help"]) for each, so the service commands that
# installed distributions register (coordinator, predictor, console, ...) are read the same way.
HELP_DUMP = textwrap.dedent(
    """
    import argparse, contextlib, io, json
    from trainwire import cli

    def help_of(argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                cli.main(argv + ["--help"])
            except SystemExit:
                pass
        return out.getvalue()

    texts = {}
    def walk(parser, path):
        texts[" ".join(["trainwire", *path])] = help_of(path)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])

    walk(cli.build_parser(), [])
    print(json.dumps(texts))
    """
)

# A python block right after this comment is run by test_runnable_snippets.
RUNNABLE = re.compile(r"<!-- runnable -->\s*\n```python\n(.*?)\n```", re.S)


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_site_builds_strictly(tmp_path: Path) -> None:
    """A broken link, a missing page, an unresolvable API identifier or a page out of the nav fails."""
    proc = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "index.html").exists()
    # the API pages rendered the SDK's classes (mkdocstrings found them)
    api = (tmp_path / "site" / "api" / "trainers" / "index.html").read_text()
    assert "XGBoostTrainer" in api and "doc-heading" in api


def _options(help_text: str) -> list[str]:
    """The long options (--name) in a help text's "options:" section, --help aside."""
    options: set[str] = set()
    in_options = False
    for line in help_text.splitlines():
        if re.match(r"^\S", line):
            in_options = line.strip() == "options:"
        elif in_options:
            flags = re.match(r"^  (-[^ ].*?)(?:\s{2,}|$)", line)
            if flags:
                options.update(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", flags.group(1)))
    return sorted(options - {"--help"})


@pytest.fixture(scope="module")
def help_texts() -> dict[str, str]:
    proc = subprocess.run(
        [sys.executable, "-c", HELP_DUMP], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    texts = json.loads(proc.stdout)
    assert "trainwire runs list" in texts and "trainwire coordinator" in texts, sorted(texts)
    return texts


def _cli_sections(page: str) -> dict[str, set[str]]:
    """The options each command's section of cli.md lists in its table's first column."""
    sections: dict[str, set[str]] = {}
    current = "trainwire"
    for line in page.splitlines():
        heading = re.match(r"^#{2,4} `(trainwire[^`]*)`", line)
        if heading:
            current = heading.group(1)
            sections.setdefault(current, set())
        elif line.startswith("| `"):
            first_cell = line.split("|")[1]
            sections.setdefault(current, set()).update(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", first_cell))
    return sections


def test_every_cli_command_and_option_is_documented(help_texts: dict[str, str]) -> None:
    sections = _cli_sections((DOCS / "operations" / "cli.md").read_text())
    missing = []
    for command, text in help_texts.items():
        assert text.strip(), f"{command} --help printed nothing"
        if command not in sections:
            missing.append(f"a section for {command}")
            continue
        missing += [f"{command} {option}" for option in _options(text) if option not in sections[command]]
    assert not missing, "docs/operations/cli.md does not document: " + ", ".join(missing)


def _settings_classes() -> list[type]:
    from trainwire_coordinator.settings import CoordinatorSettings
    from trainwire_predictor.settings import PredictorSettings

    return [CoordinatorSettings, PredictorSettings]


@pytest.mark.parametrize("cls", _settings_classes(), ids=lambda c: c.__name__)
def test_every_setting_is_documented(cls: type) -> None:
    page = (DOCS / "operations" / "settings.md").read_text()
    prefix = cls.model_config["env_prefix"]
    assert prefix.startswith("TRAINWIRE_"), prefix
    missing = []
    for field in cls.model_fields:
        env = (prefix + field).upper()
        # the field's row: its name and its environment variable on one table line
        if not re.search(rf"^\|\s*`{field}`\s*\|\s*`{env}`\s*\|", page, re.M):
            missing.append(f"{field} ({env})")
    assert not missing, f"docs/operations/settings.md has no row for {cls.__name__}: " + ", ".join(missing)


def test_readme_is_short_and_starts_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.encode()) < 8192, f"README.md is {len(text.encode())} bytes"
    block = re.match(r"# trainwire\n\n```bash\n(.*?)\n```", text, re.S)
    assert block, "README.md must open with a bash block of the set-up commands"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands == ["make demo", "make test"], commands
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    # the scopes' short table (tests and people grep for it)
    for scope in ("submit-code", "submit", "read", "cancel", "predict", "serve", "admin"):
        assert f"| `{scope}` |" in text, scope
    # every docs/ link in README points at a page
    for link in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / link).exists(), link


def _runnable_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in _pages():
        for i, match in enumerate(RUNNABLE.finditer(page.read_text())):
            blocks.append((f"{page.relative_to(DOCS)}#{i}", match.group(1)))
    return blocks


def test_there_are_runnable_snippets() -> None:
    assert len(_runnable_blocks()) >= 3


@pytest.mark.parametrize("name,code", _runnable_blocks(), ids=[name for name, _ in _runnable_blocks()])
def test_runnable_snippets(name: str, code: str, tmp_path: Path) -> None:
    """Blocks marked <!-- runnable --> are pure logic (configs, errors): each must exit 0."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{name}:\n{proc.stdout}{proc.stderr}"
