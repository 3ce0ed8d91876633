"""The operator's view: ids never wrap, JSON output escapes every control character, inputs are
bounded, and read-only verbs never create a store."""

from __future__ import annotations

import contextlib
import io
import json
import re
import sqlite3
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from cli_helpers import run, stuck_session
from click.testing import CliRunner, Result

from akchat_fsm.cli import main
from akchat_fsm.wire.decode import decode_session_snapshot

DATA = Path(__file__).resolve().parent / "data"
# Every character a terminal may act on: C0 (json.dumps escapes those), DEL, C1 (U+009B is
# CSI), and the line/paragraph separators.
RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: The most a verb reads from a file or stdin, as docs/cli.md states it (64 MiB).
MAX_INPUT_BYTES = 64 * 1024 * 1024


def _long_ids(tmp_path: Path) -> tuple[str, list[str]]:
    """A store whose session holds 32-hex tokens (the default ids) in processing records."""
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    stuck_session(url, "ids")
    wire = json.loads(run("inspect", url, "ids", "--json").stdout)
    ids = [c[key] for c in wire["confirmations"] for key in ("token", "toolCallId")]
    assert all(len(i) >= 36 for i in ids)
    return url, ids


@pytest.mark.parametrize("width", [40, 60, 100])
def test_tokens_and_ids_never_wrap_in_inspect(tmp_path: Path, width: int) -> None:
    url, ids = _long_ids(tmp_path)
    result = run("inspect", url, "ids", "--width", str(width))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    for token in ids:  # each id is whole on one line: copying it gives the working id
        assert any(token in line for line in lines), (token, result.stdout)
        assert not any(token[:20] in line and token not in line for line in lines)


@pytest.mark.parametrize("width", [40, 60])
def test_tokens_and_ids_never_wrap_in_reconcile(tmp_path: Path, width: int) -> None:
    url, ids = _long_ids(tmp_path)
    memory = tmp_path / "memory.json"
    memory.write_text(json.dumps({"version": 1, "messages": []}), encoding="utf-8")
    result = run("reconcile", url, "ids", "--memory", str(memory), "--width", str(width))
    assert result.exit_code == 0, result.stderr
    processing = [i for i in ids if i in result.stdout]
    assert len(processing) == 4  # two processing records: their tokens and tool-call ids
    lines = result.stdout.splitlines()
    for token in processing:
        assert any(token in line for line in lines)
        assert "…" not in result.stdout


def _hostile_envelope(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    envelope = json.loads((DATA / "v1.json").read_text("utf-8"))
    hostile = "csi\u009b[2Jdel\x7fesc\x1b[31mnel\x85sep\u2028end"
    envelope["confirmations"][0]["input"] = {"note": hostile}
    envelope["conversation"]["decisions"][0]["content"] = hostile
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(envelope, ensure_ascii=False), encoding="utf-8")
    snapshot = decode_session_snapshot(path.read_text("utf-8")).snapshot
    assert snapshot is not None
    return path, snapshot.to_wire()


def test_inspect_json_escapes_every_control_character(tmp_path: Path) -> None:
    path, wire = _hostile_envelope(tmp_path)
    result = run("inspect", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    assert RAW_CONTROL.search(result.stdout.rstrip("\n")) is None
    assert "\\u009b" in result.stdout and "\\u007f" in result.stdout
    assert json.loads(result.stdout) == wire  # the same JSON value, only escaped
    shown = run("inspect", str(path))  # the table view is inert too
    assert RAW_CONTROL.search(shown.stdout.replace("\n", "")) is None


def test_json_output_escapes_lone_surrogates_like_json_stringify(tmp_path: Path) -> None:
    envelope = json.loads((DATA / "v1.json").read_text("utf-8"))
    envelope["confirmations"][0]["input"] = {"note": "a\ud800b\x9bc"}
    path = tmp_path / "surrogate.json"
    path.write_text(json.dumps(envelope), encoding="utf-8")  # "\ud800" as JSON.stringify writes it
    result = run("inspect", str(path), "--json")
    assert result.exit_code == 0, result.stderr
    assert '"note":"a\\ud800b\\u009bc"' in result.stdout
    assert json.loads(result.stdout)["confirmations"][0]["input"] == {"note": "a\ud800b\x9bc"}


def test_reconcile_json_is_the_plan_and_then_the_outcome(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    memory = tmp_path / "memory.json"
    memory.write_text(json.dumps(stuck_session(url, "s1")), encoding="utf-8")
    dry = run("reconcile", url, "s1", "--memory", str(memory), "--json")
    assert dry.exit_code == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert (plan["sessionId"], plan["cursor"], plan["applied"]) == ("s1", 5, False)
    assert [(r["status"], r["inMemory"], r["action"], r["after"]) for r in plan["records"]] == [
        ("approving", "requires_confirmation", "left as is: needs upstream", "unchanged"),
        ("rejecting", "error", "complete", "rejected"),
    ]
    applied = json.loads(
        run("reconcile", url, "s1", "--memory", str(memory), "--apply", "--json").stdout
    )
    assert (applied["cursor"], applied["applied"]) == (6, True)
    assert [(r["status"], r["action"], r["after"]) for r in applied["records"]] == [
        ("approving", "left as is", "approving"),
        ("rejecting", "completed", "rejected"),
    ]
    assert [r["token"] for r in applied["records"]] == [r["token"] for r in plan["records"]]


# --------------------------------------------------------------------------- bounded input


def _one_line(result: Any, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return str(lines[0])


@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "/dev/zero"],
        ["show", "/dev/zero"],
        ["reconcile", "memory://", "s1", "--memory", "/dev/zero"],
    ],
    ids=["inspect", "show", "reconcile-memory"],
)
def test_an_endless_file_ends_with_one_line_at_the_limit(argv: list[str]) -> None:
    line = _one_line(run(*argv), 1)
    assert f"larger than {MAX_INPUT_BYTES} bytes; stopped reading there" in line


def _from_stdin(*args: str, data: bytes) -> Result:
    """``akchat-fsm ARGS -`` with ``data`` on stdin, streamed (never held as text)."""
    return CliRunner().invoke(main, [*args, "-"], input=io.BytesIO(data), catch_exceptions=False)


def test_stdin_is_bounded_too() -> None:
    line = _one_line(_from_stdin("inspect", data=b" " * (MAX_INPUT_BYTES + 1)), 1)
    assert f"-: input larger than {MAX_INPUT_BYTES} bytes" in line
    # at the limit it is read whole and decoded (and refused for what it is, not its size)
    line = _one_line(_from_stdin("inspect", data=b" " * (MAX_INPUT_BYTES - 2) + b"[]"), 1)
    assert "SESSION_INVALID_SNAPSHOT" in line
    line = _one_line(_from_stdin("show", data=b" " * (MAX_INPUT_BYTES + 1)), 1)
    assert f"larger than {MAX_INPUT_BYTES} bytes" in line


# --------------------------------------------------------------------------- read-only


def test_read_only_verbs_never_create_a_sqlite_store(tmp_path: Path) -> None:
    typo = tmp_path / "typo.db"
    memory = tmp_path / "m.json"
    memory.write_text(json.dumps({"version": 1, "messages": []}), encoding="utf-8")
    url = f"sqlite:///{typo}"
    for argv in (
        ["inspect", url, "s1"],
        ["reconcile", url, "s1", "--memory", str(memory)],
        ["reconcile", url, "--all", "--older-than", "5m"],
    ):
        line = _one_line(run(*argv), 2)
        never = "(read-only commands never create one)"
        assert line == f"error: no store at {url}: {typo} does not exist {never}"
        assert not typo.exists()
        assert not list(tmp_path.glob("typo.db*"))


def test_an_sqlite_file_that_is_not_a_store_is_left_untouched(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE notes (x TEXT)")
        conn.commit()
    before = other.read_bytes()
    line = _one_line(run("inspect", f"sqlite:///{other}", "s1"), 2)
    assert "has no table 'akchat_sessions': not an akchat-fsm store" in line
    assert other.read_bytes() == before and not list(tmp_path.glob("other.db-*"))


@pytest.mark.postgres
def test_read_only_verbs_never_create_a_postgres_table(pg_url: str) -> None:
    import psycopg

    table = f"ro_{uuid.uuid4().hex[:12]}"
    line = _one_line(run("inspect", f"{pg_url}?table={table}", "s1"), 2)
    assert f"has no table '{table}'" in line
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,)


@pytest.mark.mysql
def test_cli_verbs_never_create_a_mysql_table(mysql_url: str) -> None:
    import pymysql

    table = f"ro_{uuid.uuid4().hex[:12]}"
    url = f"{mysql_url}?table={table}"
    # inspect opens read-only; settle writes, but only into a store that already exists.
    for argv in (["settle", url, "s1", "c9", "--did-not-run"], ["inspect", url, "s1"]):
        line = _one_line(run(*argv), 2)
        assert f"has no table '{table}' (read-only commands never create one)" in line
    parts = urlsplit(mysql_url)
    conn = pymysql.connect(
        host=parts.hostname,
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=parts.path.lstrip("/"),
    )
    try:
        with conn.cursor() as cur:
            assert cur.execute("SHOW TABLES LIKE %s", (f"{table}%",)) == 0
    finally:
        conn.close()
