"""Records runs of examples and benchmarks for the documentation site.

``python tools/docs_record.py example ppo_cartpole [-- EXTRA ARGS]`` runs
``examples/ppo_cartpole.py --out DIR --no-progress`` and writes ``docs/results/ppo_cartpole.json``
(the command, the machine, the date, the final score and frames parsed from the summary line the
example prints) and ``docs/results/ppo_cartpole.png`` (the learning curve the example wrote).

``python tools/docs_record.py bench gae [-- EXTRA ARGS]`` runs ``benchmarks/gae.py`` and writes
``docs/benchmarks/gae.json``: every JSON object the benchmark printed, the command and the
machine. ``make bench-docs`` records every benchmark named in ``BENCH_DOCS`` of the Makefile.

``python tools/docs_record.py device DIR`` records what ``tools/device_checks.sh`` wrote in
``DIR`` on a lent GPU machine (its ``$OUT``): ``compile_cuda.jsonl`` and ``vectorized_cuda.jsonl``
become ``docs/benchmarks/compile_cuda.json`` and ``vectorized_cuda.json``, ``breakout.json`` (PPO
on Breakout) ``docs/results/ppo_atari_breakout_gpu.json`` with its curve; the machine is read
from ``machine.txt``.

The documentation build only reads these files (see ``tools/docs_pages.py``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCORE_RE = re.compile(r"final deterministic evaluation return (?P<score>-?[\d.]+(?:e[-+]?\d+)?)")
TARGET_RE = re.compile(r"\(target (?P<target>-?[\d.]+(?:e[-+]?\d+)?)\)")
SOLVED_RE = re.compile(r"(?:solved|reached) at (?P<solved>\d+) frames")
BUDGET_RE = re.compile(
    r"(?P<n>\d+) (?:[A-Za-z]+ )?(?P<unit>frames|gradient steps) in (?P<wall>[\d.]+) s"
)


def machine() -> dict:
    """What the figures were measured on."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": f"{os.cpu_count()} cores",
        "torch": f"torch {torch.__version__}",
        "python": f"Python {platform.python_version()}",
    }


def parse_summary(stdout: str) -> dict | None:
    """The fields of the last line holding ``final deterministic evaluation return X``.

    Every example ends with such a line: ``TITLE: ... final deterministic evaluation return X
    [(target T)]; [solved|reached at N frames]; N [word] frames|gradient steps in W s``.
    """
    for line in reversed(stdout.splitlines()):
        m = SCORE_RE.search(line)
        if not m:
            continue
        line = line.strip()
        title, _, rest = line.partition(": ")
        out: dict = {
            "title": title,
            "final_score": float(m.group("score")),
            "final_score_text": rest,
            "frames": None,
            "budget_unit": None,
            "wall_s": None,
            "target": None,
            "solved_at": None,
        }
        if t := TARGET_RE.search(line):
            out["target"] = float(t.group("target"))
        if solved := SOLVED_RE.search(line):
            out["solved_at"] = int(solved.group("solved"))
        budgets = list(BUDGET_RE.finditer(line))
        if budgets:
            out["frames"] = int(budgets[-1].group("n"))
            out["budget_unit"] = budgets[-1].group("unit")
            out["wall_s"] = float(budgets[-1].group("wall"))
        return out
    return None


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)


def record_example(name: str, extra: list[str]) -> Path:
    """Runs ``examples/<name>.py`` and writes its record; raises when it fails or prints no score."""
    out_json = ROOT / "docs" / "results" / f"{name}.json"
    with tempfile.TemporaryDirectory() as tmp:
        shown = ["python", f"examples/{name}.py", *extra]
        proc = _run([sys.executable, f"examples/{name}.py", "--out", tmp, "--no-progress", *extra])
        if proc.returncode != 0:
            raise RuntimeError(
                f"examples/{name}.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
            )
        summary = parse_summary(proc.stdout)
        if summary is None:
            raise RuntimeError(
                f"examples/{name}.py printed no 'final deterministic evaluation' line"
            )
        pngs = sorted(Path(tmp).rglob("*.png"))
        record = {
            "example": f"examples/{name}.py",
            "command": " ".join(shown),
            "machine": machine(),
            "date": datetime.date.today().isoformat(),
            **summary,
            "curve": None,
        }
        out_json.parent.mkdir(parents=True, exist_ok=True)
        if pngs:
            curve = out_json.with_suffix(".png")
            shutil.copyfile(pngs[0], curve)
            record["curve"] = curve.relative_to(ROOT / "docs" / "results").as_posix()
    out_json.write_text(json.dumps(record, indent=1) + "\n")
    return out_json


def record_bench(name: str, extra: list[str]) -> Path:
    """Runs ``benchmarks/<name>.py`` and writes every JSON line it printed."""
    proc = _run([sys.executable, f"benchmarks/{name}.py", *extra])
    records = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    out = ROOT / "docs" / "benchmarks" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "benchmark": f"benchmarks/{name}.py",
        "command": " ".join(["python", f"benchmarks/{name}.py", *extra]),
        "returncode": proc.returncode,
        "machine": machine(),
        "date": datetime.date.today().isoformat(),
        "records": records,
    }
    if proc.returncode != 0:
        data["stderr_tail"] = proc.stderr[-2000:]
    out.write_text(json.dumps(data, indent=1) + "\n")
    return out


# What tools/device_checks.sh runs: file it writes -> (record name, script, command).
DEVICE_BENCHES = {
    "compile_cuda.jsonl": (
        "compile_cuda",
        "benchmarks/compile.py",
        "python benchmarks/compile.py --cases sac ppo collect --variants reduce_overhead "
        "--seconds 0.3 --rounds 2 --env-batch 1 32 --device cuda",
    ),
    "vectorized_cuda.jsonl": (
        "vectorized_cuda",
        "benchmarks/vectorized.py",
        "python benchmarks/vectorized.py --envs 256 4096 32768 --seconds 1 --no-peers "
        "--device cuda",
    ),
}
DEVICE_BREAKOUT_COMMAND = (
    "ATARI_LEARNING_MAX_WALL_S=200 pytest -m slow test/test_learning_atari.py "
    "(examples/ppo_atari.py: Breakout, 8 games in worker processes, networks on the GPU)"
)


def device_machine(path: Path) -> dict:
    """The machine ``tools/device_checks.sh`` described in ``machine.txt``."""
    lines = path.read_text().splitlines()
    gpu = lines[1].split(", ") if len(lines) > 1 else ["unknown GPU"]
    cores = next((line.split(": ", 1)[1] for line in lines if line.startswith("cores: ")), "?")
    versions = lines[-1].split()
    return {
        "gpu": f"{gpu[0]} ({', '.join(gpu[1:])})" if len(gpu) > 1 else gpu[0],
        "cores": f"{cores} cores",
        "torch": f"torch {versions[1]}" if len(versions) > 1 else "",
        "python": f"Python {versions[0]}" if versions else "",
    }


def record_device(folder: Path) -> list[Path]:
    """Writes the records of one ``tools/device_checks.sh`` run found in ``folder``."""
    machine_info = device_machine(folder / "machine.txt")
    date = datetime.date.fromtimestamp((folder / "machine.txt").stat().st_mtime).isoformat()
    written = []
    for filename, (name, script, command) in DEVICE_BENCHES.items():
        source = folder / filename
        if not source.exists():
            continue
        records = [json.loads(x) for x in source.read_text().splitlines() if x.startswith("{")]
        out = ROOT / "docs" / "benchmarks" / f"{name}.json"
        data = {
            "benchmark": script,
            "command": command,
            "returncode": 0 if records else 1,
            "machine": machine_info,
            "date": date,
            "records": records,
        }
        out.write_text(json.dumps(data, indent=1) + "\n")
        written.append(out)
    breakout = folder / "breakout.json"
    if breakout.exists():
        written += record_breakout(json.loads(breakout.read_text()), machine_info, date)
    return written


def record_breakout(run: dict, machine_info: dict, date: str) -> list[Path]:
    """The PPO Breakout run as an example record: the mean score of 30-game windows, and a
    curve of every training game's score with that running mean."""
    curve = [(int(step), float(score)) for step, score in run["train"]]
    first = sum(score for _, score in curve[:30]) / 30
    last = sum(score for _, score in curve[-30:]) / 30
    out_json = ROOT / "docs" / "results" / "ppo_atari_breakout_gpu.json"
    record = {
        "example": "examples/ppo_atari.py",
        "command": DEVICE_BREAKOUT_COMMAND,
        "machine": machine_info,
        "date": date,
        "final_score_text": (
            f"mean score of the last 30 training games {last:.2f} (first 30: {first:.2f}; "
            f"{len(curve)} games)"
        ),
        "frames": run["frames"],
        "budget_unit": "agent steps (x4 frames)",
        "wall_s": round(run["wall"], 1),
        "title": "PPO, Breakout, on a GPU",
        "curve": None,
    }
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, scores = zip(*curve)
    window = [
        sum(scores[max(0, i - 29) : i + 1]) / len(scores[max(0, i - 29) : i + 1])
        for i in range(len(scores))
    ]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, scores, ".", alpha=0.3, markersize=3, label="training game score")
    ax.plot(steps, window, "-", label="mean of the last 30 games")
    ax.set_xlabel("agent steps (x4 frames)")
    ax.set_ylabel("game score (unclipped)")
    ax.set_title(record["title"])
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    png = out_json.with_suffix(".png")
    fig.savefig(png)
    plt.close(fig)
    record["curve"] = png.name
    out_json.write_text(json.dumps(record, indent=1) + "\n")
    return [out_json, png]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["example", "bench", "device"])
    parser.add_argument("names", nargs="+", help="example or benchmark names, without .py")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    status = 0
    if args.kind == "device":
        for folder in args.names:
            for path in record_device(Path(folder)):
                print(f"wrote {path.relative_to(ROOT)}")
        return status
    for name in args.names:
        try:
            path = (record_example if args.kind == "example" else record_bench)(name, extra)
            print(f"wrote {path.relative_to(ROOT)}")
        except RuntimeError as err:
            print(f"error: {err}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
