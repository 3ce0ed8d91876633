#!/usr/bin/env python3
"""Print each tox env's wall time from a tox log, and the total against CI's budget.

``.ci/run`` calls this at its end (passed or failed) with the log of the whole run, so every
CI log ends with the figures docs/proof.md keeps. It reads tox's own closing summary lines
(``  py311: OK (612.30=setup[40.10]+cmd[572.20] seconds)``); it never fails the run.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: The limit a CI run must stay inside (minutes); docs/proof.md explains the split.
BUDGET_MIN = 30
_SUMMARY = re.compile(r"^\s+(?P<env>[\w.-]+): (?P<verdict>OK|FAIL|SKIP)\w*.*?\((?P<seconds>[\d.]+)")


def env_times(text: str) -> list[tuple[str, str, float]]:
    """(env, verdict, seconds) for every env in tox's closing summary, in its order."""
    found = [
        (m["env"], m["verdict"], float(m["seconds"]))
        for m in map(_SUMMARY.match, text.splitlines())
        if m
    ]
    return list({env: (env, verdict, s) for env, verdict, s in found}.values())


def report(times: list[tuple[str, str, float]]) -> str:
    if not times:
        return "tox printed no env summary (it stopped before the end)"
    lines = ["env wall times (docs/proof.md):"]
    lines += [
        f"  {env:<10} {verdict:<4} {seconds / 60:6.1f} min" for env, verdict, seconds in times
    ]
    total = sum(s for _, _, s in times)
    lines.append(f"  {'total':<10} {'':<4} {total / 60:6.1f} min (budget {BUDGET_MIN} min)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = Path(argv[0]).read_text(encoding="utf-8", errors="replace") if argv else ""
    print(report(env_times(text)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
