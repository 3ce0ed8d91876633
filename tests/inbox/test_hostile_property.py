"""Whatever JSON a model puts in a call's arguments, the page shows exactly the bounded text of
:func:`pretty_arguments`, as inert markup, with no hidden or reordering character anywhere."""

from __future__ import annotations

import html
import re
import unicodedata

from hypothesis import event, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from akchat_fsm import ConfigError
from akchat_fsm.inbox import pretty_arguments

from ._world import World, by_header

HIDDEN = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
PRE = re.compile(r'<pre class="arguments" dir="ltr" id="arguments">(.*?)</pre>', re.S)
hostile_text = st.lists(
    st.characters(codec="utf-8", categories=("Cc", "Cf", "Co", "Zl", "Zp", "P", "S", "L"))
    | st.sampled_from(["<", ">", "&", '"', "'", "</pre>", "<script>", "\u202e", "\u2066"]),
    max_size=20,
).map("".join)
arguments = st.dictionaries(
    st.text(max_size=8).filter(lambda k: "\x00" not in k),
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | hostile_text,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3)
        ),
        max_leaves=12,
    ),
    max_size=4,
)


@settings(max_examples=40)
@given(args=arguments)
def test_the_page_shows_the_bounded_text_and_nothing_else(args: dict[str, object]) -> None:
    world = World()
    try:
        record = world.propose("s-1", "tool.call", args)
    except ConfigError:  # the session's own bounds refused it (LimitExceeded): nothing shown
        event("refused by the session's bounds")
        return
    client = TestClient(world.app(authorize=by_header), headers={"x-user": "ana"})
    page = client.get(f"/call/{record.token}", params={"session": "s-1"}).text
    match = PRE.search(page)
    assert match is not None
    shown = match.group(1)
    assert "<" not in shown and ">" not in shown  # every bracket is an entity
    assert html.unescape(shown) == pretty_arguments(record.input)
    assert all(unicodedata.category(ch) not in HIDDEN or ch == "\n" for ch in page)
