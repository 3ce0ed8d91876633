"""akchat_fsm.storage."""
