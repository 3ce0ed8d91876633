"""akchat_fsm.testing."""
