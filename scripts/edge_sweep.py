"""Tries ``train`` at the file system's edge, as a careless user, a hostile file and a scheduler would.

Run ``python scripts/edge_sweep.py`` (about two minutes on 2 cores); ``--list`` prints the cases,
``--only TEXT`` runs those whose name contains ``TEXT``, ``--keep`` keeps each case's folder.

Every case starts from a copy of one finished run (``runs/sp/``: three epochs of the spirals MLP
with checkpoints, a CSV log and TensorBoard files) beside a ``victim/`` folder that stands for a
user's own files, changes one thing (plants a link, breaks the ``last`` pointer, sets a bad
value...), runs ``train`` in a fresh process with a time limit, and checks what must hold in
every case:

- it ends within the limit, with the case's expected exit status;
- stderr has no traceback, and a refusal (exit 2) is one line;
- ``victim/`` is unchanged, and so is every file of the run a refusal must not touch;
- a resume never starts over: the CSV log's epochs go on from the checkpoint it resumed from.

Each case prints ``HELD`` or ``BROKE`` (with why), then a table of counts per group.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = """\
name: sp
seed: 0
data: {type: spirals, n_samples: 200, n_classes: 2}
model: {type: mlp, hidden_units: [8]}
loss: sparse_categorical_crossentropy
metrics: [accuracy]
optimizer: {type: adam, learning_rate: 0.01}
trainer: {epochs: 3, batch_size: 50}
plugins:
  - {type: checkpoint, every_n_epochs: 1}
  - {type: csv_logger}
  - {type: tensorboard}
"""
RUN = "runs/sp"
LAST = f"{RUN}/checkpoints/last"


@dataclass
class Case:
    group: str
    name: str
    setup: Callable[[Path], list[str]]  # changes the folder; returns train's extra arguments
    statuses: tuple[int, ...]
    must_say: str = ""  # a text stderr or stdout must hold
    keeps_run: bool = True  # the run's files stay as they were (a refusal)
    resumes: bool = False  # a resume: the CSV log must go on past epoch 2
    extra_checks: list[Callable[[Path], str | None]] = field(default_factory=list)


def digest(root: Path) -> dict[str, str]:
    """Each entry under ``root`` (links by their target), but for the lock's pid."""
    found = {}
    for p in sorted(root.rglob("*")) if root.exists() else []:
        key = str(p.relative_to(root))
        if p.is_symlink():
            found[key] = "-> " + os.readlink(p)
        elif p.is_file() and p.name != ".train.lock":
            found[key] = hashlib.sha256(p.read_bytes()).hexdigest()
    return found


def link(path: str, target: str) -> Callable[[Path], None]:
    def plant(root: Path) -> None:
        where = root / path
        if where.is_dir() and not where.is_symlink():
            shutil.rmtree(where)
        elif os.path.lexists(where):
            where.unlink()
        where.symlink_to(root / target)

    return plant


def with_args(change: Callable[[Path], object] | None, *args: str) -> Callable[[Path], list[str]]:
    def setup(root: Path) -> list[str]:
        if change is not None:
            change(root)
        return list(args)

    return setup


def write(path: str, data: bytes | str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        target = root / path
        if os.path.lexists(target):
            target.unlink()
        target.write_bytes(data if isinstance(data, bytes) else data.encode())

    return change


def cases() -> list[Case]:
    made: list[Case] = []
    # 1. --overwrite and what a run folder is
    for label, folder_change in [
        ("a project folder with its own config and notes", None),
        (
            "a marker naming '..'",
            write(f"{RUN}/.tapefit-run", '{"format": "tapefit-run", "written": [".."]}'),
        ),
        ("a marker naming /", write(f"{RUN}/.tapefit-run", '{"format": "tapefit-run", "written": ["/"]}')),
        ("a marker that is not JSON", write(f"{RUN}/.tapefit-run", b"\xff\x00garbage")),
        ("a marker of 2 MB", write(f"{RUN}/.tapefit-run", "[" * 2_000_000)),
    ]:
        if folder_change is None:

            def project(root: Path) -> list[str]:
                (root / "project/src").mkdir(parents=True)
                (root / "project/NOTES.md").write_text("mine\n")
                (root / "project/src/a.py").write_text("print(1)\n")
                (root / "project/config.yaml").write_text(
                    CONFIG.replace("batch_size: 50}", "batch_size: 50, output_dir: project}")
                )
                return ["--config", "project/config.yaml", "--overwrite"]

            made.append(Case("overwrite", label, project, (2,), "not a tapefit run folder"))
        else:
            made.append(
                Case(
                    "overwrite",
                    label,
                    with_args(folder_change, "--overwrite"),
                    (2,),
                    "not a tapefit run folder",
                )
            )
    made.append(
        Case(
            "overwrite",
            "a user's file in a run folder",
            with_args(write(f"{RUN}/NOTES.md", "mine\n"), "--overwrite"),
            (0,),
            "kept what no run wrote",
            keeps_run=False,
            extra_checks=[
                lambda root: None if (root / RUN / "NOTES.md").is_file() else "NOTES.md was deleted"
            ],
        )
    )
    # 2. links and odd files planted in the run folder
    for name, target in [
        (".train.lock", "victim/file"),
        (".tapefit-run", "victim/file"),
        ("config.yaml", "victim/file"),
        ("history.csv", "victim/file"),
        ("model.safetensors", "victim/file"),
        ("checkpoints", "victim"),
        ("tensorboard", "victim"),
    ]:
        for extra in ([], ["--resume", "auto"], ["--overwrite"]):
            made.append(
                Case(
                    "links",
                    f"{name} -> {target} {' '.join(extra)}".strip(),
                    with_args(link(f"{RUN}/{name}", target), *extra),
                    (2,),
                    "is a symbolic link",
                )
            )
    for kind, make in [("a folder", lambda p: p.mkdir()), ("a FIFO", os.mkfifo)]:

        def odd_lock(root: Path, make: Callable[[Path], None] = make) -> list[str]:
            (root / RUN / ".train.lock").unlink()
            make(root / RUN / ".train.lock")
            return ["--resume", "auto"]

        made.append(Case("links", f"the lock file is {kind}", odd_lock, (2,), "lock file"))
    # 3. the last pointer
    for label, change, say in [
        (
            "the checkpoint it names is deleted",
            lambda r: (r / RUN / "checkpoints/epoch0002-step00000012.npz").unlink(),
            "continuing from",
        ),
        ("it is deleted", lambda r: (r / LAST).unlink(), "continuing from"),
        (
            "it is a link to /dev/zero",
            lambda r: ((r / LAST).unlink(), (r / LAST).symlink_to("/dev/zero")),
            "continuing from",
        ),
        ("it names /dev/zero", write(LAST, "/dev/zero\n"), "continuing from"),
        ("it names ../../victim/file", write(LAST, "../../victim/file\n"), "continuing from"),
        ("it is 10 MB", write(LAST, "x" * 10_000_000), "continuing from"),
        ("it names 300 characters", write(LAST, "x" * 300 + "\n"), "continuing from"),
        ("it is empty", write(LAST, ""), "continuing from"),
        ("it is binary", write(LAST, b"\xff\xfe\x00\x01"), "continuing from"),
        ("it is a FIFO", lambda r: ((r / LAST).unlink(), os.mkfifo(r / LAST)), "continuing from"),
    ]:
        made.append(
            Case(
                "pointer",
                f"last: {label}",
                with_args(change, "--resume", "auto", "--set", "trainer.epochs=4"),
                (0,),
                say,
                keeps_run=False,
                resumes=True,
            )
        )

    def nothing_intact(root: Path) -> list[str]:
        for p in (root / RUN / "checkpoints").glob("*.npz"):
            p.write_bytes(b"PK\x03\x04" + b"\0" * 60)
        (root / LAST).unlink()
        return ["--resume", "auto"]

    made.append(
        Case("pointer", "no pointer and no intact checkpoint", nothing_intact, (2,), "no intact checkpoint")
    )
    made.append(
        Case(
            "pointer",
            "last: it is a folder",
            with_args(lambda r: ((r / LAST).unlink(), (r / LAST).mkdir()), "--resume", "auto"),
            (2,),
            "is a folder where the 'last' pointer belongs",
        )
    )
    # 8. refused up front
    for label, setting, say in [
        ("output_dir under /proc", "trainer.output_dir=/proc/tapefit-run", "trainer.output_dir"),
        ("output_dir of 300 characters", "trainer.output_dir=runs/" + "x" * 300, "File name too long"),
        ("output_dir under a file", "trainer.output_dir=victim/file/run", "Not a directory"),
        ("learning_rate .inf", "optimizer.learning_rate=.inf", "optimizer.learning_rate"),
        ("learning_rate -.inf", "optimizer.learning_rate=-.inf", "optimizer.learning_rate"),
        ("learning_rate .nan", "optimizer.learning_rate=.nan", "optimizer.learning_rate"),
        ("learning_rate a string", "optimizer.learning_rate=fast", "optimizer.learning_rate"),
        ("separator ''", "plugins[1].separator=''", "separator"),
        ("separator ab", "plugins[1].separator=ab", "separator"),
        ("separator 3", "plugins[1].separator=3", "separator"),
    ]:
        made.append(
            Case("up front", label, with_args(None, "--set", "name=other", "--set", setting), (2,), say)
        )

    def nul_dir(root: Path) -> list[str]:
        (root / "nul.yaml").write_text(
            CONFIG.replace("batch_size: 50}", 'batch_size: 50, output_dir: "a\\0b"}')
        )
        return ["--config", "nul.yaml"]

    made.append(Case("up front", "output_dir with a NUL byte", nul_dir, (2,), "embedded null byte"))
    made.append(
        Case(
            "up front",
            "a failed --export",
            with_args(None, "--set", "name=fresh", "--export", "w.safetensors"),
            (2,),
            "no checkpoint to export",
            extra_checks=[lambda root: "left runs/fresh behind" if (root / "runs/fresh").exists() else None],
        )
    )
    # kept: the learning rate on a resume
    made.append(
        Case(
            "resume",
            "--set optimizer.learning_rate on a resume",
            with_args(
                None, "--resume", "auto", "--set", "trainer.epochs=4", "--set", "optimizer.learning_rate=0.5"
            ),
            (0,),
            "is not used on a resume",
            keeps_run=False,
            resumes=True,
        )
    )
    return made


def base_run(folder: Path) -> None:
    (folder / "c.yaml").write_text(CONFIG)
    (folder / "victim").mkdir()
    (folder / "victim/file").write_text("the user's own file\n")
    done = subprocess.run(
        [sys.executable, "-m", "tapefit", "train", "--config", "c.yaml"],
        cwd=folder,
        capture_output=True,
        text=True,
        env=env(),
    )
    if done.returncode != 0:
        sys.exit(f"the base run failed:\n{done.stderr}")


def env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OPENBLAS_NUM_THREADS": "1",
    }


def run_case(case: Case, base: Path, work: Path) -> tuple[Case, str | None]:
    root = work / f"{case.group}-{abs(hash(case.name)):x}"
    shutil.copytree(base, root, symlinks=True)
    args = case.setup(root)
    if "--config" not in args:
        args = ["--config", "c.yaml", *args]
    victim, run_before = digest(root / "victim"), digest(root / RUN)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tapefit", "train", *args],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
            env=env(),
        )
    except subprocess.TimeoutExpired:
        return case, "did not end within 60 s"
    err, said = done.stderr.strip(), done.stdout + done.stderr
    problems = []
    if done.returncode not in case.statuses:
        problems.append(f"exit {done.returncode}, expected {case.statuses}: {err[-300:]}")
    if "Traceback" in err:
        problems.append("a traceback")
    if done.returncode == 2 and len(err.splitlines()) != 1:
        problems.append(f"{len(err.splitlines())} lines on stderr")
    if case.must_say and case.must_say not in said:
        problems.append(f"does not say {case.must_say!r}: {err[-200:]}")
    if digest(root / "victim") != victim:
        problems.append("victim/ changed")
    if case.keeps_run and digest(root / RUN) != run_before:
        problems.append("the run's files changed")
    if case.resumes:
        history = (
            (root / RUN / "history.csv").read_text().splitlines()
            if (root / RUN / "history.csv").is_file()
            else []
        )
        epochs = [row.split(",")[0] for row in history[1:]]
        if epochs != ["0", "1", "2", "3"][: len(epochs)] or len(epochs) != 4:
            problems.append(f"history.csv holds epochs {epochs}: it did not go on from the checkpoint")
    problems += [p for check in case.extra_checks if (p := check(root)) is not None]
    return case, "; ".join(problems) or None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--only", default="")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    chosen = [c for c in cases() if args.only in f"{c.group}: {c.name}"]
    if args.list:
        print("\n".join(f"{c.group}: {c.name}" for c in chosen))
        return 0
    work = Path(tempfile.mkdtemp(prefix="edge-sweep-"))
    base = work / "base"
    base.mkdir()
    base_run(base)
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for case, problem in pool.map(lambda c: run_case(c, base, work), chosen):
            counts[case.group]["held" if problem is None else "broke"] += 1
            print(
                f"{'HELD ' if problem is None else 'BROKE'} {case.group}: {case.name}"
                + (f": {problem}" if problem else "")
            )
    print(
        textwrap.dedent("""
        | group | tried | held | broke |
        | --- | --- | --- | --- |""")
    )
    for group, c in counts.items():
        print(f"| {group} | {c['held'] + c['broke']} | {c['held']} | {c['broke']} |")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    broke = sum(c["broke"] for c in counts.values())
    print(f"{sum(c['held'] for c in counts.values())} passed, {broke} failed")
    return 1 if broke else 0


if __name__ == "__main__":
    sys.exit(main())
