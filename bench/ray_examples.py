"""Ray's own examples as the test: each runs under Ray, then under trainwire, side by side.

The scripts: every example shipped in the installed Ray wheel (``ray/train/examples/**``,
``ray/tune/examples/**``) and Ray's ``doc/source/{train,tune}/doc_code`` files at the installed
version's commit, read from a cache folder (``--ray-src`` / ``TRAINWIRE_RAY_SRC``, default
``~/.cache/trainwire/ray-src``; ``scripts/fetch_ray_doc_code.sh`` fills it). Ray's files are
never copied into this repository. The cache's manifest ``COMMITS.tsv`` (one ``path<TAB>commit``
line a file) says which commit each file came from; a file that is not at the installed Ray's
commit has its commit named in its row.

Each script runs as its own process, from a fresh temporary directory (its ``HOME`` too), with a
timeout that kills its process group: once as is under Ray, once with only its imports rewritten
to trainwire (``bench/ray_examples/launch.py``). Both runs get the same local data for downloads
(``bench/ray_examples/ray_examples_hooks.py``) and the same smoke-test arguments.

    python bench/ray_examples.py --all --write            # every script, both ways; the table
    python bench/ray_examples.py --all --mode ray --write  # Ray's column only (keeps the other)
    python bench/ray_examples.py --only doc_code --mode ray --resume  # some scripts (--only implies --all)
    python bench/ray_examples.py --sample 12               # CI: fast scripts that pass under Ray

The table is ``docs/porting/ray-examples.md``. ``--sample N`` picks, deterministically, the N
fastest scripts that passed under Ray in that table (within ``--budget-s``), runs them under
trainwire and exits 1 if one fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOOKS_DIR = REPO / "bench" / "ray_examples"
TABLE = REPO / "docs" / "porting" / "ray-examples.md"
DEFAULT_RAY_SRC = Path("~/.cache/trainwire/ray-src").expanduser()
DEFAULT_DATA = Path("~/.cache/trainwire/ray-examples-data").expanduser()
RESULTS_NAME = "ray-examples-results.json"
MANIFEST_NAME = "COMMITS.tsv"
DOC_CODE_DIRS = ("doc/source/train/doc_code", "doc/source/tune/doc_code")
WHEEL_DIRS = ("ray/train/examples", "ray/tune/examples")

# Arguments beyond ``--smoke-test`` (given to every script that declares it): smaller sizes
# where a script takes them, the same for both runs.
EXTRA_ARGS: dict[str, list[str]] = {
    "ray/train/examples/horovod/horovod_example.py": ["--num-workers", "2", "--num-epochs", "1"],
    "ray/train/examples/horovod/horovod_pytorch_example.py": ["--num-workers", "2", "--num-epochs", "1"],
    "ray/train/examples/pytorch/torch_fashion_mnist_example.py": ["--num-workers", "2"],
}

EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure|Failed)[\w.]*)(:.*)?$")


@dataclass
class Outcome:
    """One script's run in one mode."""

    result: str  # pass | fail | timeout | not run
    seconds: float
    reason: str = ""


@dataclass
class Script:
    """A Ray script to run: its name in the table, its file, its arguments."""

    name: str
    path: Path
    args: list[str]
    commit: str | None = None  # the Ray commit the file came from, where a manifest says


def ray_version() -> tuple[str, str]:
    """The installed Ray's version and commit (read without importing Ray, which is slow)."""
    import importlib.util

    spec = importlib.util.find_spec("ray")
    assert spec is not None and spec.origin is not None, "Ray is not installed"
    text = (Path(spec.origin).parent / "_version.py").read_text()
    commit = re.search(r'commit = "([0-9a-f]+)"', text)
    version = re.search(r'version = "([^"]+)"', text)
    return (version.group(1) if version else "?", commit.group(1) if commit else "?")


def ray_site_packages() -> Path:
    """The folder that holds the installed ``ray`` package."""
    import importlib.util

    spec = importlib.util.find_spec("ray")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parents[1]


def is_script(path: Path) -> bool:
    """A runnable example, not a helper module another example imports."""
    if path.name == "__init__.py":
        return False
    text = path.read_text(errors="replace")
    return "__main__" in text or path.as_posix().find("/doc_code/") >= 0


def script_args(name: str, text: str) -> list[str]:
    """The smoke-test flag where the script takes one, plus any size arguments listed above."""
    args = ["--smoke-test"] if "--smoke-test" in text else []
    return args + EXTRA_ARGS.get(name, [])


def read_manifest(path: Path) -> dict[str, str]:
    """A cache's manifest: repository path -> the commit that file was taken at.

    One ``path<TAB>commit`` line a file; blank lines, ``#`` comments and a header line (any line
    whose second field is not a commit id) are skipped.
    """
    commits: dict[str, str] = {}
    if not path.is_file():
        return commits
    for line in path.read_text().splitlines():
        fields = line.split("\t")
        if len(fields) < 2 or line.startswith("#"):
            continue
        name, commit = fields[0].strip(), fields[1].strip()
        if re.fullmatch(r"[0-9a-f]{7,40}", commit):
            commits[name] = commit
    return commits


def describe_source(ray_src: Path, scripts: list[Script], installed_commit: str) -> str:
    """Where the doc_code files came from, for the table's opening paragraph."""
    doc = [s for s in scripts if s.name.startswith("doc/")]
    known = [s for s in doc if s.commit]
    if known:
        other = [s for s in known if s.commit != installed_commit]
        if not other and len(known) == len(doc):
            return "at the installed Ray's commit"
        commits = len({s.commit for s in other})
        text = (
            f"{len(other)} of them taken at other commits of Ray's repository ({commits} in all), each named"
            " in its row: the installed Ray's own were not to be had"
        )
        if len(known) < len(doc):
            text += f"; {len(doc) - len(known)} of unknown commit"
        return text
    source_file = ray_src / "SOURCE"
    return source_file.read_text().strip() if source_file.exists() else f"from {ray_src}"


def discover(ray_src: Path | None, manifest: Path | None = None) -> list[Script]:
    """The wheel's example scripts, then the doc_code files found in the cache (if any)."""
    scripts: list[Script] = []
    site = ray_site_packages()
    for folder in WHEEL_DIRS:
        for path in sorted((site / folder).rglob("*.py")):
            if is_script(path):
                name = path.relative_to(site).as_posix()
                scripts.append(Script(name, path, script_args(name, path.read_text(errors="replace"))))
    if ray_src is not None:
        commits = read_manifest(manifest or ray_src / MANIFEST_NAME)
        for folder in DOC_CODE_DIRS:
            for path in sorted((ray_src / folder).glob("*.py")) if (ray_src / folder).is_dir() else []:
                name = path.relative_to(ray_src).as_posix()
                args = script_args(name, path.read_text(errors="replace"))
                scripts.append(Script(name, path, args, commits.get(name)))
    return scripts


def make_local_data(data_dir: Path) -> None:
    """Local copies, of the same schema, of the public S3 files Ray's examples read.

    One folder a bucket (``air-example-data``, ``ray-example-data``), keys as in the bucket; the
    hooks map ``s3://[anonymous@]<bucket>/<key>`` to ``<data_dir>/<bucket>/<key>``.
    """
    import numpy as np
    import pandas as pd

    _make_ray_example_data(data_dir / "ray-example-data")
    root = data_dir / "air-example-data"
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    regression = root / "regression.csv"
    if not regression.exists():
        # 100 features x000..x099 and a target y, as Ray's regression.csv.
        x = rng.normal(size=(1000, 100)).round(6)
        frame = pd.DataFrame(x, columns=[f"x{i:03d}" for i in range(100)])
        frame["y"] = (x[:, :10].sum(axis=1) + rng.normal(scale=0.1, size=1000)).round(6)
        frame.to_csv(regression, index=False)
    cancer = root / "breast_cancer.csv"
    if not cancer.exists():
        from sklearn.datasets import load_breast_cancer  # local: sklearn ships it

        frame = load_breast_cancer(as_frame=True).frame
        frame.to_csv(cancer, index=False)
        frame.to_parquet(root / "breast_cancer.parquet", index=False)
    iris = root / "iris.csv"
    if not iris.exists():
        from sklearn.datasets import load_iris

        frame = load_iris(as_frame=True).frame
        frame.to_csv(iris, index=False)
        frame.to_parquet(root / "iris.parquet", index=False)


def _make_ray_example_data(root: Path) -> None:
    """The ``ray-example-data`` bucket's files that Ray's docs read, in their schema."""
    import pandas as pd
    from sklearn.datasets import load_iris

    root.mkdir(parents=True, exist_ok=True)
    iris = load_iris(as_frame=True)
    if not (root / "iris.parquet").exists():
        # The bucket's iris.parquet: dotted feature names and the species name as ``variety``.
        frame = iris.data.copy()
        frame.columns = ["sepal.length", "sepal.width", "petal.length", "petal.width"]
        frame["variety"] = [str(iris.target_names[i]).capitalize() for i in iris.target]
        frame.to_parquet(root / "iris.parquet", index=False)
    if not (root / "iris" / "val" / "1.csv").exists():
        # iris/{train,val}/*.csv: the features and an integer ``target``, split 80/20.
        frame = iris.frame.sample(frac=1.0, random_state=0).reset_index(drop=True)
        cut = int(len(frame) * 0.8)
        for split, part in (("train", frame[:cut]), ("val", frame[cut:])):
            (root / "iris" / split).mkdir(parents=True, exist_ok=True)
            part.to_csv(root / "iris" / split / "1.csv", index=False)
    if not (root / "sms_spam_collection_subset.txt").exists():
        lines = [f"{'spam' if i % 7 == 0 else 'ham'}\tmessage number {i}" for i in range(200)]
        (root / "sms_spam_collection_subset.txt").write_text("\n".join(lines) + "\n")
    if not (root / "dow_jones.csv").exists():
        days = pd.date_range("2020-01-01", periods=200, freq="D")
        pd.DataFrame({"Date": days.strftime("%Y-%m-%d"), "Close": [28000.0 + i for i in range(200)]}).to_csv(
            root / "dow_jones.csv", index=False
        )


ANSI = re.compile(r"\x1b\[[0-9;]*m")
RAY_PREFIX = re.compile(r"^\((?:[^()]*) pid=\d+(?:, ip=[\d.]+)?\)\s*")


def last_exception(output: str, fallback: bool = True) -> str:
    """The last exception line of a run's output (what the table gives as the reason)."""
    found = ""
    lines = [RAY_PREFIX.sub("", ANSI.sub("", line)).rstrip() for line in output.splitlines()]
    for index, line in enumerate(lines):
        match = EXCEPTION_LINE.match(line)
        if match and not line.startswith(("Traceback", "WARNING", "INFO")):
            found = line
            if line.endswith(":") and index + 1 < len(lines):
                found += " " + lines[index + 1].strip()  # a message that starts on the next line
    if not found and fallback:
        tail = [line.strip() for line in lines if line.strip()]
        found = tail[-1] if tail else "(no output)"
    return portable(found)[:240]


def portable(text: str) -> str:
    """A reason without this machine's paths: the table names the package or file, not where it lies."""
    text = re.sub(r"/\S*?/site-packages/", "site-packages/", text)
    text = text.replace(str(REPO) + "/", "")
    return re.sub(r"/\S*?/ray-src/(?=doc/)", "", text)  # the doc_code cache: the repository's own path


def child_env(mode: str, home: Path, data_dir: Path, script_dir: Path | None = None) -> dict[str, str]:
    """The run's environment: no address of anything running, its own HOME, the hooks on.

    The script's folder is not put first on ``sys.path`` (``PYTHONSAFEPATH``) but last, by the
    hooks: a sibling file never hides an installed package of the same name.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINWIRE_", "RAY_ADDRESS"))}
    env.update(
        HOME=str(home),
        PYTHONPATH=str(HOOKS_DIR),  # sitecustomize.py: the data hooks, in Ray's workers too
        TRAINWIRE_RAY_EXAMPLES_DATA=str(data_dir),
        TRAINWIRE_RAY_EXAMPLES_MODE=mode,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        WANDB_MODE="offline",
        PYTHONUNBUFFERED="1",
        PYTHONSAFEPATH="1",
    )
    if script_dir is not None:
        env["TRAINWIRE_RAY_EXAMPLES_SCRIPT_DIR"] = str(script_dir)
    return env


def run_one(script: Script, mode: str, timeout_s: float, data_dir: Path, log_dir: Path | None = None) -> Outcome:
    """Run a script once under Ray (``mode="ray"``) or trainwire, in a fresh directory."""
    # A process the script left (outside its session) may still write there as it is removed.
    with tempfile.TemporaryDirectory(prefix="ray-example-", ignore_cleanup_errors=True) as tmp:
        home = Path(tmp)
        command = [sys.executable, str(script.path), *script.args]
        if mode == "trainwire":
            command = [sys.executable, str(HOOKS_DIR / "launch.py"), str(script.path), *script.args]
        started = time.monotonic()
        proc = subprocess.Popen(
            command,
            cwd=home,
            env=child_env(mode, home, data_dir, script.path.parent),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session, killed whole on timeout
        )
        timed_out = False
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_session(proc.pid)
            out, _ = proc.communicate()
        seconds = time.monotonic() - started
        _kill_session(proc.pid)  # what the script left behind (Ray's processes)
        text = out.decode(errors="replace")
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            (log_dir / f"{mode}--{script.name.replace('/', '__')}.log").write_text(text)
    if timed_out:
        last = last_exception(text, fallback=False)
        return Outcome(
            "timeout", seconds, f"no result in {timeout_s:.0f} s" + (f" (last exception: {last})" if last else "")
        )
    if proc.returncode == 0:
        return Outcome("pass", seconds)
    return Outcome("fail", seconds, last_exception(text))


def _kill_session(sid: int) -> None:
    """Kill every process of the run's session: Ray puts its workers in process groups of their own."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # Fields after the command: state, ppid, pgrp, session, ...
        if int(fields[3]) == sid:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


# --- results and the table ------------------------------------------------------------------


def load_results(path: Path) -> dict[str, dict[str, dict]]:
    """Saved outcomes: script -> mode -> Outcome fields."""
    return json.loads(path.read_text()) if path.exists() else {}


def record_result(path: Path, script: str, mode: str, outcome: Outcome) -> dict[str, dict[str, dict]]:
    """Add one outcome to the saved ones, under a lock: a Ray sweep and a trainwire sweep may run at once."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = load_results(path)
        results.setdefault(script, {})[mode] = asdict(outcome)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1, sort_keys=True))
        tmp.replace(path)
    return results


def _cell(outcome: dict | None) -> tuple[str, str]:
    if not outcome:
        return "not run", ""
    return outcome["result"], f"{outcome['seconds']:.0f} s"


def render_table(scripts: list[Script], results: dict[str, dict[str, dict]], source: str, timeout_s: float) -> str:
    """The Markdown page: a summary, then one row per script."""
    version, commit = ray_version()
    rows = []
    counts = {kind: {"ray": 0, "both": 0, "trainwire_only": 0, "all": 0} for kind in ("wheel", "doc")}
    for script in scripts:
        kind = counts["doc" if script.name.startswith("doc/") else "wheel"]
        ray_outcome = results.get(script.name, {}).get("ray")
        tw_outcome = results.get(script.name, {}).get("trainwire")
        ray_res, ray_time = _cell(ray_outcome)
        tw_res, tw_time = _cell(tw_outcome)
        kind["all"] += 1
        kind["ray"] += ray_res == "pass"
        kind["both"] += ray_res == "pass" and tw_res == "pass"
        kind["trainwire_only"] += ray_res != "pass" and tw_res == "pass"
        reasons = []
        if ray_outcome and ray_outcome.get("reason"):
            reasons.append(f"Ray: {portable(ray_outcome['reason'])}")
        if tw_outcome and tw_outcome.get("reason"):
            reasons.append(f"trainwire: {portable(tw_outcome['reason'])}")
        reason = "<br>".join(r.replace("|", "\\|").replace("`", "'") for r in reasons)
        args = " ".join(script.args)
        if script.commit and script.commit != commit:
            # Not the installed Ray's file: say which one was run.
            args = (f"(commit `{script.commit[:10]}`) " + args).strip()
        rows.append(f"| `{script.name}` {args} | {ray_res} | {ray_time} | {tw_res} | {tw_time} | {reason} |")
    wheel, doc = counts["wheel"]["all"], counts["doc"]["all"]

    def summary(kind: dict[str, int], what: str) -> list[str]:
        return [
            f"**{what}: pass under Ray: {kind['ray']} of {kind['all']}. Of those, pass under trainwire:"
            f" {kind['both']}.** Pass under trainwire only: {kind['trainwire_only']}.",
            "",
        ]

    lines = [
        "# Ray's own examples under trainwire",
        "",
        f"Every example script shipped in the Ray {version} wheel (`ray/train/examples`, `ray/tune/examples`:",
        f"{wheel} scripts) and Ray's `doc/source/{{train,tune}}/doc_code` files ({doc} files; {source}),",
        "each run once under Ray itself and once under trainwire with only its imports rewritten",
        "(`ray.train`, `ray.tune`, `ray.air` -> `trainwire.*`; `ray.init` / `ray.shutdown` ->",
        "`trainwire.init` / `trainwire.shutdown`; `ray.data`, `ray.remote`, ... stay Ray's).",
        "Downloads are replaced by local data of the same shape (torchvision and Keras datasets, the files",
        "of Ray's `air-example-data` and `ray-example-data` buckets, read by Ray Data or pandas); scripts",
        "that take `--smoke-test` get it in both runs. A script's own folder comes last on `sys.path`, so a",
        "sibling file named like a library (doc_code's `torchmetrics.py`) hides nothing.",
        "Each runs as its own process from a fresh directory, on the 2-core reference machine, with a",
        f"time limit ({timeout_s:.0f} s unless the row says otherwise). Ray commit: `{commit}`.",
        "Times are wall-clock on a machine shared with other runs (other Ray instances too): a timeout",
        "under Ray here says the script needs more than this machine gave it, not that Ray fails it.",
        "",
        "Regenerate the whole table: `python bench/ray_examples.py --all --write`",
        "(`--ray-src DIR` or `TRAINWIRE_RAY_SRC` names the doc_code cache; `scripts/fetch_ray_doc_code.sh` fills it,",
        "from Ray's git repository or, with `--from-dir DIR`, from a folder of Ray's files and its `COMMITS.tsv`).",
        "CI runs a sample: `python bench/ray_examples.py --sample 12` (`tests/e2e/test_ray_examples_sample.py`).",
        "",
        *summary(counts["wheel"], "The wheel's examples"),
        *(summary(counts["doc"], "The doc_code files") if doc else []),
        "The reason is the last exception line of the failing run's output.",
        "",
        "| script | under Ray | time | under trainwire | time | reason |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    return "\n".join(lines)


def parse_table(text: str) -> dict[str, dict[str, Outcome]]:
    """Read the table back: script -> mode -> Outcome (reasons are not needed to pick a sample)."""
    parsed: dict[str, dict[str, Outcome]] = {}
    for line in text.splitlines():
        match = re.match(r"^\| `([^`]+)`[^|]*\| ([^|]+) \| ([^|]*) \| ([^|]+) \| ([^|]*) \|", line)
        if not match:
            continue
        name, ray_res, ray_time, tw_res, tw_time = match.groups()

        def seconds(cell: str) -> float:
            return float(cell.split()[0]) if cell.strip() else 0.0

        parsed[name] = {
            "ray": Outcome(ray_res.strip(), seconds(ray_time)),
            "trainwire": Outcome(tw_res.strip(), seconds(tw_time)),
        }
    return parsed


def pick_sample(scripts: list[Script], table: dict[str, dict[str, Outcome]], n: int, budget_s: float) -> list[Script]:
    """The ``n`` fastest scripts that passed under Ray, within a time budget (deterministic).

    Scripts that timed out under trainwire are left out (their outcome depends on the load).
    """
    # A timeout under trainwire says how loaded the machine was as much as anything: such a script
    # would pass or fail by the machine's load, so it is left out of a sample that must be stable.
    passing = [
        s
        for s in scripts
        if s.name in table and table[s.name]["ray"].result == "pass" and table[s.name]["trainwire"].result != "timeout"
    ]
    passing.sort(key=lambda s: (table[s.name]["ray"].seconds, s.name))
    chosen: list[Script] = []
    spent = 0.0
    for script in passing:
        if len(chosen) >= n:
            break
        # A trainwire run may take longer than Ray's; budget on the slower of the two known times.
        cost = max(table[script.name]["ray"].seconds, table[script.name]["trainwire"].seconds)
        if spent + cost > budget_s and chosen:
            continue
        chosen.append(script)
        spent += cost
    return chosen


def main(argv: list[str] | None = None) -> int:
    """The command line: ``--all`` (with ``--write``) or ``--sample N``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--all", action="store_true", help="run every script")
    what.add_argument("--sample", type=int, metavar="N", help="run N fast scripts that pass under Ray, under trainwire")
    what.add_argument("--list", action="store_true", help="list the scripts and their arguments")
    parser.add_argument("--mode", choices=("both", "ray", "trainwire"), default="both")
    parser.add_argument(
        "--only", action="append", default=[], help="run scripts whose name contains this (repeatable; implies --all)"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per script and mode")
    parser.add_argument(
        "--budget-s", type=float, default=600.0, help="--sample: total seconds (from the table's times)"
    )
    parser.add_argument("--write", action="store_true", help="write docs/porting/ray-examples.md")
    parser.add_argument("--resume", action="store_true", help="skip scripts that already have a result in this mode")
    parser.add_argument("--ray-src", type=Path, default=Path(os.environ.get("TRAINWIRE_RAY_SRC", DEFAULT_RAY_SRC)))
    parser.add_argument(
        "--manifest", type=Path, default=None, help=f"path<TAB>commit lines (default: <ray-src>/{MANIFEST_NAME})"
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--logs", type=Path, default=None, help="keep each run's output here")
    parser.add_argument("--wheel-only", action="store_true", help="leave out the doc_code files")
    args = parser.parse_args(argv)
    if not (args.all or args.sample is not None or args.list):
        if not args.only:
            parser.error("one of --all, --sample, --list or --only is required")
        args.all = True

    ray_src = None if args.wheel_only or not args.ray_src.is_dir() else args.ray_src
    scripts = discover(ray_src, args.manifest)
    if ray_src is None:
        source = "absent here: none of them ran" if not args.wheel_only else "left out (--wheel-only)"
    else:
        source = describe_source(ray_src, scripts, ray_version()[1])
    if args.list:
        for script in scripts:
            print(script.name, " ".join(script.args))
        return 0
    make_local_data(args.data_dir)
    results_path = args.data_dir.parent / RESULTS_NAME

    if args.sample is not None:
        table = parse_table(TABLE.read_text()) if TABLE.exists() else {}
        chosen = pick_sample(scripts, table, args.sample, args.budget_s)
        if not chosen:
            print("no script in the table passed under Ray", file=sys.stderr)
            return 2
        failed = []
        for script in chosen:
            outcome = run_one(script, "trainwire", args.timeout, args.data_dir, args.logs)
            print(f"{outcome.result:8} {outcome.seconds:6.1f} s  {script.name}  {outcome.reason}", flush=True)
            if outcome.result != "pass":
                failed.append(script.name)
        print(f"{len(chosen) - len(failed)} of {len(chosen)} pass under trainwire")
        return 1 if failed else 0

    results = load_results(results_path)
    modes = ("ray", "trainwire") if args.mode == "both" else (args.mode,)
    selected = [s for s in scripts if not args.only or any(o in s.name for o in args.only)]
    for script in selected:
        for mode in modes:
            if args.resume and mode in results.get(script.name, {}):
                continue
            outcome = run_one(script, mode, args.timeout, args.data_dir, args.logs)
            results = record_result(results_path, script.name, mode, outcome)
            print(f"{mode:9} {outcome.result:8} {outcome.seconds:6.1f} s  {script.name}  {outcome.reason}", flush=True)
    if args.write:
        results = load_results(results_path)
        TABLE.parent.mkdir(parents=True, exist_ok=True)
        TABLE.write_text(render_table(scripts, results, source, args.timeout))
        print(f"wrote {TABLE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
