"""The session-id check: every valid id is its own key, however it relates to the others.

A session id is ``[A-Za-z0-9][A-Za-z0-9._:-]{0,127}`` (up to 128 characters). The kit draws
one random 128-character id ``S`` per run and stores a session under *every prefix* of it
(lengths 1 to 128), under case-swapped variants, and under ids that share 40 characters
with ``S`` and then differ. A key column truncated to N characters makes ``S[:N+1]`` and
``S[:N]`` collide; a hashed or bucketed key makes some of the ~170 ids collide; a
case-insensitive key or delete touches the case variant. Look-alike ids outside the alphabet
(full-width and Cyrillic letters, which NFKC or a confusables fold turn into ``S``'s) must
never reach ``S``'s session either: they are refused with a typed error, or miss.

Ids short enough to exist already on a shared database (a previous run drew the same first
letters) are left alone when something is stored under them.
"""

from __future__ import annotations

import contextlib
import random
import string
from typing import Any

from ..errors import AkchatError
from ._envelopes import Observed, make_snapshot, observe
from ._kit import KitContext, expect_save, expect_stored, has_delete

__all__ = ["session_isolation"]

_FIRST = string.ascii_letters + string.digits
_REST = _FIRST + "._:-"
_CYRILLIC = str.maketrans("aceopxyACEHKMOPTX", "асеорхуАСЕНКМОРТХ")


def _ids(rng: random.Random) -> tuple[str, list[str]]:
    """The base id ``S`` and every id the check stores a session under (unique, valid)."""
    # Letters in both cases early on, so even short prefixes have a case variant.
    base = rng.choice("abcdefghjk") + rng.choice("ABCDEFGHJK")
    base += "".join(rng.choice(_REST) for _ in range(126))
    ids = [base[:n] for n in range(1, 129)]
    ids += [base[:n].swapcase() for n in (2, 3, 8, 36, 37, 64, 65, 128)]
    fork = base[:40] + "".join(rng.choice(_FIRST) for _ in range(88))
    ids += [fork[:n] for n in (41, 64, 65, 100, 128) if fork[:n] != base[:n]]
    return base, list(dict.fromkeys(ids))


def _look_alikes(session_id: str) -> list[str]:
    """Invalid ids that fold into ``session_id``: full-width, and Cyrillic homoglyphs."""
    wide = "".join(chr(ord(c) + 0xFEE0) if c in _FIRST else c for c in session_id)
    return [wide, session_id.translate(_CYRILLIC)]


def _write(storage: Any, sid: str, marker: str) -> bool:
    """Create ``sid`` unless its session exists already (then leave it alone)."""
    if observe(storage.load(sid), sid) is not None:
        return False
    expect_save(storage, make_snapshot(sid, 1, marker), None, True, f"create {sid!r}")
    return True


def session_isolation(ctx: KitContext) -> str:
    """Ids of every length 1-128, prefixes of one another, case variants and look-alikes
    never read, overwrite or delete each other."""
    writer, reader = ctx.instances(2)
    rng = random.Random(f"{ctx.seed}:ids")
    base, ids = _ids(rng)
    expected: dict[str, Observed] = {}
    for n, sid in enumerate(ids):
        if _write(writer, sid, f"id{n}"):
            expected[sid] = (1, f"id{n}")
    for sid, want in expected.items():
        expect_stored(reader, sid, want, f"session {sid!r} (length {len(sid)})")
    # Update and delete some; every other session must stay as it was.
    touched = [sid for sid in (base[:36], base[:64], base) if sid in expected]
    for sid in touched:
        expect_save(reader, make_snapshot(sid, 2, "moved"), 1, True, f"update {sid!r}")
        expected[sid] = (2, "moved")
    if has_delete(reader):
        for sid in (base[:37], base[:65].swapcase()):
            if sid in expected:
                reader.delete(sid)
                expected[sid] = None
    for sid, want in expected.items():
        expect_stored(
            writer, sid, want, f"session {sid!r} (length {len(sid)}) after the others changed"
        )
    probed = _probe_look_alikes(writer, base[:36], expected.get(base[:36]))
    return (
        f"{len(expected)} session ids (lengths 1-128, prefixes, case variants, forks) "
        f"stayed independent; {probed} look-alike ids missed"
    )


def _probe_look_alikes(storage: Any, sid: str, want: Observed) -> int:
    if want is None:
        return 0
    probed = 0
    for other in _look_alikes(sid):
        try:
            got = storage.load(other)
        except AkchatError:
            got = None  # refused as an invalid id: fine
        if got is not None:
            found = observe(got)
            raise AssertionError(
                f"load({other!r}), a look-alike of {sid!r} outside the id alphabet, returned "
                f"{found}: keys are folded (NFKC, case or confusables) instead of compared "
                "exactly, or the id is not validated"
            )
        if has_delete(storage):
            with contextlib.suppress(AkchatError):
                storage.delete(other)
            expect_stored(storage, sid, want, f"session {sid!r} after delete({other!r})")
        probed += 1
    return probed
