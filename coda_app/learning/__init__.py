"""``coda learn``: the closed loop on real desktops, shown to make a planner better."""
