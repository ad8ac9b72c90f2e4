"""Control side of headroom: the pure planner, the training queue, the simulator and tuning."""
