"""Every snippet of README.md is a working example.

- each fenced ```yaml block parses and validates against the schema it shows: a job spec
  (:class:`JobSpec`), a daemon config (``providers`` entries built as the daemon builds them,
  budgets as the daemon reads them), a replayed market (:func:`load_market`), or the Prometheus
  scrape config of the Observability section;
- each ``schedctl`` command of a ```bash block, of an unlabelled block of commands and of an
  inline code span names a real command, and each of its options exists (and appears in that
  command's ``--help``); each of ``a|b|c`` alternatives of a value must be named in the
  option's help; paths written with
  ``${GA_DATA_DIR...}`` must exist; the other commands (pip, pytest) name real files and
  markers.

Snippets that read the shared real-data folder are skipped with a reason when it is absent.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from core.config import REPO_ROOT, shared_data_dir
from scheduler.cli.main import app

README = REPO_ROOT / "README.md"


@dataclass(frozen=True)
class Snippet:
    line: int  # 1-based line of the opening fence (or of the inline span)
    lang: str
    text: str

    @property
    def id(self) -> str:
        return f"{self.lang or 'plain'}@L{self.line}"


def fenced_blocks(text: str) -> list[Snippet]:
    out, lang, start, body = [], None, 0, []
    for n, line in enumerate(text.splitlines(), 1):
        fence = re.match(r"^\s*```(\S*)\s*$", line)
        if fence and lang is None:
            lang, start, body = fence.group(1), n, []
        elif fence:
            out.append(Snippet(start, lang, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"README.md: the block opened at line {start} is never closed"
    return out


def inline_commands(text: str) -> list[Snippet]:
    """``schedctl ...`` code spans of the prose (outside fenced blocks)."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if re.match(r"^\s*```", line):
            fenced = not fenced
            continue
        if not fenced:
            out += [Snippet(n, "inline", m.group(1)) for m in re.finditer(r"`(schedctl [^`]+)`", line)]
    return out


TEXT = README.read_text()
BLOCKS = fenced_blocks(TEXT)
YAML_BLOCKS = [b for b in BLOCKS if b.lang == "yaml"]
COMMAND_BLOCKS = [b for b in BLOCKS if b.lang == "bash"
                  or (b.lang == "" and b.text.lstrip().startswith("schedctl "))]
assert all(b.lang in ("", "yaml", "bash") for b in BLOCKS), \
    f"README.md has a block in a language this test does not check: {[b.id for b in BLOCKS]}"


def _needs_shared_data(text: str) -> None:
    if ("GA_DATA_DIR" in text or "aws-real.yaml" in text) and not shared_data_dir().is_dir():
        pytest.skip(f"reads the shared real-data folder, absent at {shared_data_dir()} "
                    "(set GA_DATA_DIR)")


# ----- yaml ------------------------------------------------------------------------------
def _check_job_spec(raw: dict) -> None:
    from core.models import JobSpec

    spec = JobSpec.model_validate(raw)
    if spec.workdir:  # relative to the spec file: the README's spec is examples/'s
        assert (REPO_ROOT / "examples" / spec.workdir).is_dir(), spec.workdir


def _check_providers(entries: list, tmp_path: Path) -> None:
    """Entries as the daemon builds them, relative paths from the repository root (where the
    README's commands run); cloud entries through their settings models (building them
    would only create SDK clients)."""
    from scheduler.provider_setup import AliyunConfig, AwsConfig, build_providers

    local = []
    for entry in entries:
        if entry["kind"] == "aws":
            AwsConfig.model_validate(entry)
        elif entry["kind"] == "aliyun":
            AliyunConfig.model_validate(entry)
        else:
            local.append(entry)
    for adapter in build_providers(local, REPO_ROOT, tmp_path) if local else []:
        adapter.close()


def _check_daemon_config(text: str, tmp_path: Path) -> None:
    from scheduler.daemon_config import load_budget_config, load_config_file

    path = tmp_path / "config.yaml"
    path.write_text(text)
    entries = load_config_file(path)
    load_budget_config(path, env={})
    _check_providers(entries, tmp_path)


def _check_market(text: str, tmp_path: Path) -> None:
    from providers.replay.market import load_market

    path = REPO_ROOT / "examples" / f".readme-snippet-{os.getpid()}.yaml"  # its relative paths
    path.write_text(text)
    try:
        load_market(path)
    finally:
        path.unlink()


def _check_scrape_config(raw: dict) -> None:
    (job,) = raw["scrape_configs"]
    assert job["static_configs"][0]["targets"] and job["authorization"]["type"] == "Bearer"
    assert Path(job["authorization"]["credentials_file"]).name == "api-token"


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=[b.id for b in YAML_BLOCKS])
def test_yaml_snippet_parses_and_validates(block, tmp_path):
    try:
        raw = yaml.safe_load(block.text)
    except yaml.YAMLError as exc:
        pytest.fail(f"README.md line {block.line}: not valid YAML: {exc}")
    assert isinstance(raw, dict), f"README.md line {block.line}: not a mapping"
    _needs_shared_data(block.text)
    if "command" in raw and "name" in raw:
        _check_job_spec(raw)
    elif "providers" in raw:
        _check_daemon_config(block.text, tmp_path)
    elif "offers" in raw or "catalog" in raw:
        _check_market(block.text, tmp_path)
    elif "scrape_configs" in raw:
        _check_scrape_config(raw)
    else:
        pytest.fail(f"README.md line {block.line}: a yaml block of no known kind "
                    f"(keys {sorted(raw)}): teach this test its schema")


def test_the_catalog_example_runs_next_to_the_default_market(tmp_path):
    """The README's catalog entry added to the embedded default market's config."""
    from scheduler.controller.context import ProviderRegistry
    from scheduler.provider_setup import build_providers, default_entries

    (block,) = [b for b in YAML_BLOCKS if "kind: catalog" in b.text]
    _needs_shared_data(block.text)
    (catalog,) = yaml.safe_load(block.text)["providers"]
    catalog["catalogs"] = [c for c in catalog["catalogs"] if "path" in c]  # no network here
    replay, catalog = build_providers(default_entries() + [catalog], REPO_ROOT, tmp_path)
    ProviderRegistry([replay, catalog])
    offers = catalog.list_offers()
    assert offers and {o.provider for o in offers} == {"gcp"}
    assert replay.provider_names == {"aws", "gcp-replay"}


# ----- commands --------------------------------------------------------------------------
ROOT = typer.main.get_command(app)


def _is_group(command) -> bool:
    # typer vendors click (typer._click): duck-typed, not isinstance(click.Group)
    return hasattr(command, "commands")


def _commands(snippet: Snippet) -> list[str]:
    lines = []
    for line in snippet.text.splitlines():
        line = re.split(r"\s+#", line.strip(), maxsplit=1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def _expand(token: str) -> str:
    """``${VAR}`` / ``${VAR:-default}`` as the shell expands them (GA_DATA_DIR: its default)."""
    env = {"GA_DATA_DIR": str(shared_data_dir()), **os.environ}

    def sub(m: re.Match) -> str:
        return env.get(m.group(1)) or (m.group(3) or "")

    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", sub, token)


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, f"schedctl {' '.join(path)} --help: {result.output}"
    return result.output


def _check_schedctl(tokens: list[str], where: str) -> None:
    tokens = [t.strip("[]") for t in tokens if t.strip("[]") not in ("", "|")]
    command, path, i = ROOT, [], 0
    while _is_group(command) and i < len(tokens) and tokens[i] in command.commands:
        command, path, i = command.commands[tokens[i]], path + [tokens[i]], i + 1
    assert path, f"{where}: {tokens[0] if tokens else ''!r} is no schedctl command"
    if _is_group(command) and not command.invoke_without_command:
        pytest.fail(f"{where}: 'schedctl {' '.join(path)}' needs a subcommand "
                    f"({', '.join(command.commands)}); got {tokens[i:]}")
    options = {name: p for p in command.params if p.param_type_name == "option"
               for name in p.opts + p.secondary_opts}
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    help_text = _help(tuple(path))
    positional = []
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("-"):
            name, _, value = token.partition("=")
            assert name in options, (f"{where}: schedctl {' '.join(path)} has no option {name} "
                                     f"(it has {', '.join(sorted(options))})")
            assert name in help_text, f"{where}: {name} is not in the --help of {path}"
            option = options[name]
            if not option.is_flag and not value and i + 1 < len(tokens):
                value, i = tokens[i + 1], i + 1
            if "|" in value:  # alternatives: each must be a value the option's help names
                for alternative in value.split("|"):
                    assert re.search(rf"(?<![\w-]){re.escape(alternative)}(?![\w-])",
                                     option.help or ""), \
                        f"{where}: {name} {alternative!r} not in its help {option.help!r}"
        else:
            positional.append(token)
            if "${" in token:
                expanded = Path(_expand(token))
                expanded = expanded if expanded.is_absolute() else REPO_ROOT / expanded
                assert expanded.exists(), f"{where}: {token} is {expanded}, which does not exist"
        i += 1
    room = sum(float("inf") if a.nargs == -1 else a.nargs for a in arguments)
    assert len(positional) <= room, (f"{where}: schedctl {' '.join(path)} takes "
                                     f"{[a.name for a in arguments]}, got {positional}")


def _check_python(tokens: list[str], where: str) -> None:
    assert tokens[:2] == ["python3", "-m"], f"{where}: {tokens}"
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    if tokens[2] == "pip":
        for flag, value in zip(tokens, tokens[1:]):
            if flag == "-c":
                assert (REPO_ROOT / value).is_file(), f"{where}: no {value}"
            if flag == "-e":
                extras = re.findall(r"\[(.*)\]", value)
                for extra in (extras[0].split(",") if extras else []):
                    assert extra in pyproject["project"]["optional-dependencies"], extra
    elif tokens[2] == "pytest":
        markers = {m.split(":")[0] for m in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
        for flag, value in zip(tokens[3:], tokens[4:]):
            if flag == "-m":
                used = set(re.findall(r"\w+", value)) - {"not", "and", "or"}
                assert used <= markers, f"{where}: unknown marker(s) {used - markers}"
        for arg in tokens[3:]:
            if not arg.startswith("-") and "/" in arg:
                assert (REPO_ROOT / arg).exists(), f"{where}: no test path {arg}"
    else:
        pytest.fail(f"{where}: python3 -m {tokens[2]}: teach this test to check it")


COMMANDS = [(s, line) for s in COMMAND_BLOCKS + inline_commands(TEXT) for line in _commands(s)]


@pytest.mark.parametrize("snippet, line", COMMANDS,
                         ids=[f"{s.id}:{line.split('#')[0][:40]}" for s, line in COMMANDS])
def test_command_snippet_is_a_real_command(snippet, line):
    where = f"README.md line {snippet.line} ({line!r})"
    tokens = shlex.split(line)
    if "GA_DATA_DIR" in line:
        _needs_shared_data(line)
    if tokens[0] == "export":
        _check_variables(tokens[1:2], where)
        return
    # VAR=value prefixes set documented variables for one command; "&" runs it in the background
    assigned = [t for t in itertools.takewhile(lambda t: re.match(r"^[A-Z_]+=", t), tokens)]
    _check_variables(assigned, where)
    tokens = tokens[len(assigned):]
    tokens = tokens[:-1] if tokens and tokens[-1] == "&" else tokens
    if tokens[0] == "schedctl":
        _check_schedctl(tokens[1:], where)
    elif tokens[0] == "python3":
        _check_python(tokens, where)
    elif tokens[0] == "bash":
        assert (REPO_ROOT / tokens[1]).is_file(), f"{where}: no script {tokens[1]}"
    else:
        pytest.fail(f"{where}: {tokens[0]}: teach this test to check it")


def _check_variables(assignments: list[str], where: str) -> None:
    """Each ``NAME=value`` names a variable of the README's configuration table."""
    table = TEXT[TEXT.index("## Configuration"):]
    table = table[:table.index("\n\n", table.index("| variable |"))]
    for assignment in assignments:
        name = assignment.partition("=")[0]
        assert f"`{name}`" in table, f"{where}: {name} is not in the Configuration table"


def test_the_checker_catches_wrong_commands():
    with pytest.raises(AssertionError, match="no option --wacth"):
        _check_schedctl(["status", "JOB", "--wacth"], "test")
    with pytest.raises(AssertionError, match="no schedctl command"):
        _check_schedctl(["stauts", "JOB"], "test")
    with pytest.raises(AssertionError, match="'cubic' not in its help"):
        _check_schedctl(["history", "--by", "zone|cubic"], "test")
    with pytest.raises(AssertionError, match="takes"):
        _check_schedctl(["cancel", "JOB", "JOB2"], "test")


def test_the_market_checker_loads_a_market_and_refuses_a_bad_one(tmp_path):
    from providers.replay.market import MarketError

    _check_market((REPO_ROOT / "examples" / "market.yaml").read_text(), tmp_path)
    with pytest.raises(MarketError, match="offers"):
        _check_market("name: x\noffers: [{provider: aws}]\n", tmp_path)
    assert not list((REPO_ROOT / "examples").glob(".readme-snippet-*"))


def test_ci_runs_exactly_the_quick_starts_setup_and_test_commands():
    quick_start = next(b for b in COMMAND_BLOCKS if "# 3. the tests" in b.text)
    steps = [line.split("#")[0].strip() for line in quick_start.text.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    setup, tests = steps[0], steps[-1]
    ci = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip().startswith("python3 -m p")]
    assert ci[-1] == tests, f".ci/run ends with {ci[-1]!r}, the README's test step is {tests!r}"
    assert any(line.startswith("python3 -m pip install") and "-c constraints.txt" in line
               and "-e '.[test]'" in line for line in ci), ci
    assert setup.startswith("python3 -m pip install -c constraints.txt")
