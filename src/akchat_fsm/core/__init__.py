"""akchat_fsm.core."""
