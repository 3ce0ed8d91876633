"""akchat_fsm.wire."""
