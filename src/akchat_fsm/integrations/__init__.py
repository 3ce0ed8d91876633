"""Bridges to the agent runtimes Python hosts run, on one durable tool-execution ledger.

Each runtime has its own module behind its own extra (``akchat_fsm.integrations.pydantic_ai``
needs ``akchat-fsm[pydantic-ai]``, ``akchat_fsm.integrations.openai_agents`` needs
``akchat-fsm[openai-agents]``); :mod:`akchat_fsm.integrations.ledger`, which they share, needs
neither. See docs/adr/0100-tool-execution-ledger.md.
"""
