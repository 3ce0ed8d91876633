"""akchat_fsm.machines."""
