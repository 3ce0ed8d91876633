"""``python -m akchat_fsm.cli``: the same command as the ``akchat-fsm`` script."""

from __future__ import annotations

from . import main

if __name__ == "__main__":
    main(prog_name="akchat-fsm")
