"""Run every benchmark and print one table of ratios (not a test: nothing is asserted).

Each ratio is measured against a raw baseline in the same run, so it means something on any
machine; absolute times do not. The scripts stay runnable on their own (``--help`` on each);
this runner calls them with short settings (``--full`` for the long ones) and reads the lines
they print.

    python benchmarks/run_all.py            # ~2-4 minutes on 2 cores
    python benchmarks/run_all.py --full     # 100,000-confirmation and 10^6-session runs (~8+ min)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Row:
    name: str
    value: float
    target: str

    def verdict(self) -> str:
        match = re.fullmatch(r"(<=|>=) ([\d.]+)", self.target)
        if match is None:
            return ""
        bound = float(match.group(2))
        if match.group(1) == ">=":
            return "ok" if self.value >= bound else "UNDER"
        return "ok" if self.value <= bound else "OVER"


def run(script: str, *args: str) -> str:
    command = [sys.executable, str(HERE / script), *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"FAILED ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
    return done.stdout


def decode_rows(out: str) -> list[Row]:
    found = re.search(r"^ratio:\s+([\d.]+)x", out, flags=re.M)
    return (
        [Row("decode_session_snapshot / json.loads", float(found.group(1)), "<= 2.5")]
        if found
        else []
    )


def hostile_rows(out: str) -> list[Row]:
    found = re.findall(
        r"^(\w+ v\d)\s+\d+\s+[\d.]+\s+([\d.]+)x\s+([\d.]+)\s+([\d.]+)", out, flags=re.M
    )
    if not found:
        return []
    return [
        Row(
            "hostile 3 MB array refused / json.loads (worst)",
            max(float(f[1]) for f in found),
            "<= 5",
        ),
        Row("hostile refusal: heap peak MB (worst)", max(float(f[2]) for f in found), "<= 300"),
        Row("hostile refusal: RSS growth MB (worst)", max(float(f[3]) for f in found), "<= 300"),
    ]


def storage_rows(out: str) -> list[Row]:
    rows = []
    for backend, ratio in re.findall(
        r"^(sqlite|postgres|redis)\s+[\d.]+\s+[\d.]+\s+([\d.]+)", out, re.M
    ):
        rows.append(Row(f"{backend} CAS save / raw driver", float(ratio), "<= 1.25"))
    return rows


def index_rows(out: str) -> list[Row]:
    rows = []
    for backend, sessions, stuck, adapter_ms, ratio in re.findall(
        r"^(sqlite|postgres)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+[\d.]+\s+([\d.]+)", out, re.M
    ):
        rows.append(
            Row(
                f"{backend} find {stuck} stuck of {sessions} (ms)",
                float(adapter_ms),
                "<= 1000",
            )
        )
        rows.append(Row(f"{backend} list_processing / same SQL raw", float(ratio), "report"))
    return rows


def pending_rows(out: str) -> list[Row]:
    rows = []
    found = re.findall(
        r"^(sqlite|postgres|redis)\s+(\d+)\s+\d+\s+(expiry|newest)\s+[\d.]+\s+[\d.]+\s+[\d.]+"
        r"\s+([\d.]+)$",
        out,
        re.M,
    )
    largest = max((int(n) for _, n, _, _ in found), default=0)
    for backend, sessions, order, ratio in found:
        if int(sessions) == largest:
            rows.append(
                Row(
                    f"{backend} first pending page of 50 ({order}, {largest:,} sessions) / raw",
                    float(ratio),
                    "<= 4",
                )
            )
    for backend, order, ratio in re.findall(r"^flat (\w+) (\w+): .* = ([\d.]+)$", out, re.M):
        rows.append(
            Row(
                f"{backend} pending page ratio ({order}): largest / smallest store",
                float(ratio),
                "flat (~1)",
            )
        )
    return rows


def core_rows(out: str) -> list[Row]:
    found = re.search(r"ratio machine/table\s+(\d+)x", out)
    return (
        [Row("psm machine / derived table (per move)", float(found.group(1)), "why tables")]
        if found
        else []
    )


def resolution_rows(out: str) -> list[Row]:
    rows = []
    for records, cpu, ratio in re.findall(
        r"^\s+records\s+(\d+)$.*?^\s+cpu\s.*?ratio ([\d.]+)x.*?^\s+ratio\s+([\d.]+)x",
        out,
        flags=re.M | re.S,
    ):
        rows.append(
            Row(
                f"one approve / one raw durable CAS (SQLite, {records} records)",
                float(ratio),
                "<= 2.3",
            )
        )
        rows.append(Row(f"  the same pairs in CPU time ({records} records)", float(cpu), "report"))
    blocks = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s*$", out, flags=re.M)
    if len(blocks) >= 2:
        first, last = blocks[0], blocks[-1]
        rows.append(
            Row(
                f"envelope bytes at {last[0]} / at {first[0]}",
                int(last[2]) / int(first[2]),
                "flat (~1)",
            )
        )
        rows.append(
            Row(
                f"ms per resolution at {last[0]} / at {first[0]}",
                float(last[3]) / float(first[3]),
                "flat (~1)",
            )
        )
    return rows


def linearizability_rows(out: str) -> list[Row]:
    rows = []
    seconds = re.search(r"^worst seconds: ([\d.]+)", out, flags=re.M)
    rss = re.search(r"^worst peak RSS MB: ([\d.]+)", out, flags=re.M)
    ratio = re.search(r"^ratio: ([\d.]+)x", out, flags=re.M)
    if seconds:
        rows.append(Row("5,000-op history, 20% unknown: seconds", float(seconds[1]), "<= 10"))
    if rss:
        rows.append(Row("5,000-op history, 20% unknown: peak MB", float(rss[1]), "<= 500"))
    if ratio:
        rows.append(Row("that history / a sequential one (checker)", float(ratio[1]), "info"))
    # Issue 27's shapes, default budget: steps against a sequential history, and a shape
    # that got no verdict says so in its name.
    for name, ops, verdict, steps_ratio in re.findall(
        r"^shape ([\w-]+) (\d+): (\w+).*?steps ratio ([\d.]+)x", out, flags=re.M
    ):
        label = f"{name} {int(ops):,}-op, default budget: steps / sequential"
        if verdict != "ok":
            label += f" ({verdict.upper()})"
        rows.append(Row(label, float(steps_ratio), "info"))
    return rows


def bridge_rows(out: str) -> list[Row]:
    found = re.search(r"^\s+ratio\s+([\d.]+)x", out, flags=re.M)
    return (
        [
            Row(
                "bridge per approved call / its raw CAS saves (SQLite)",
                float(found.group(1)),
                "<= 1.3",
            )
        ]
        if found
        else []
    )


def sweep_rows(out: str) -> list[Row]:
    rows = [
        Row(f"reconcile_all / by hand, {int(total):,} sessions (SQLite)", float(ratio), "<= 1.25")
        for total, ratio in re.findall(
            r"^\s*(\d+)\s+\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)$", out, flags=re.M
        )
    ]
    flat = re.search(r"^flat: ratio at (\d+) / at (\d+) sessions = ([\d.]+)", out, flags=re.M)
    if flat:
        name = f"sweep ratio at {int(flat[1]):,} / at {int(flat[2]):,}"
        rows.append(Row(name, float(flat[3]), "flat (~1)"))
    return rows


def langgraph_rows(out: str) -> list[Row]:
    rows = []
    found = re.search(r"^\s+ratio\s+([\d.]+)x", out, flags=re.M)
    if found:
        rows.append(Row("LangGraph bridge approve / LangGraph alone", float(found[1]), "<= 1.5"))
    floor = re.search(r"^\s+floor ratio\s+([\d.]+)x", out, flags=re.M)
    if floor:
        rows.append(Row("  the floor its durable writes set (same run)", float(floor[1]), "report"))
    return rows


def load_rows(out: str) -> list[Row]:
    found = re.findall(
        r"^(\w+)\s+(hot|spread)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)x", out, flags=re.M
    )
    return [
        Row(
            f"approvals/s {store} {shape} x{k} / raw CAS decisions/s",
            float(ratio),
            ">= 0.6" if k == "16" else "",
        )
        for store, shape, k, ratio in found
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the 100,000-confirmation run")
    parser.add_argument("--verbose", action="store_true", help="also print each script's output")
    args = parser.parse_args()
    long = (
        ["--confirmations", "100000", "--every", "20000"]
        if args.full
        else ["--confirmations", "20000", "--every", "5000"]
    )
    outputs = {
        "bench_decode.py": (run("bench_decode.py", "--repeat", "9", "--number", "20"), decode_rows),
        "bench_hostile.py": (run("bench_hostile.py", "--repeat", "5"), hostile_rows),
        "bench_storage.py": (
            run("bench_storage.py", "--saves", "200", "--rounds", "3", "--seconds", "1"),
            storage_rows,
        ),
        "bench_processing_index.py": (
            run("bench_processing_index.py", "--only", "sqlite,postgres", "--no-saves"),
            index_rows,
        ),
        "bench_pending.py": (
            run("bench_pending.py", *(["--full"] if args.full else [])),
            pending_rows,
        ),
        "bench_core.py": (run("bench_core.py"), core_rows),
        "bench_sweep.py": (
            run("bench_sweep.py", *(["--full"] if args.full else ["--totals", "10000,100000"])),
            sweep_rows,
        ),
        "bench_resolution.py": (
            run("bench_resolution.py", "--rounds", "5", "--resolutions", "40", *long),
            resolution_rows,
        ),
        "bench_linearizability.py": (
            run(
                "bench_linearizability.py",
                "--seeds",
                "2",
                *(["--full-shapes"] if args.full else []),
            ),
            linearizability_rows,
        ),
        "bench_bridge.py": (run("bench_bridge.py", "--calls", "200"), bridge_rows),
        "bench_langgraph.py": (run("bench_langgraph.py", "--calls", "100"), langgraph_rows),
    }
    if args.full:  # concurrent approver processes on the three servers: several minutes
        outputs["bench_load.py"] = (run("bench_load.py", "--per", "12", "--rounds", "3"), load_rows)
    rows: list[Row] = []
    for script, (out, parse) in outputs.items():
        if args.verbose or out.startswith("FAILED"):
            print(f"== {script}\n{out}")
        rows.extend(parse(out))
    width = max(len(r.name) for r in rows) if rows else 10
    print(f"{'measure':<{width}}  {'ratio':>8}  {'target':<10} verdict")
    for r in rows:
        print(f"{r.name:<{width}}  {r.value:>8.2f}  {r.target:<10} {r.verdict()}")
    hot = re.search(r"Part 2:.*?\(c = share", outputs["bench_storage.py"][0], flags=re.S)
    if hot:
        print("\ncommitted saves/s on one hot session (from bench_storage.py):")
        print(hot.group(0).rsplit("\n", 1)[0])


if __name__ == "__main__":
    main()
