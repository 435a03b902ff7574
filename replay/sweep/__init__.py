"""What-if sweeps: a grid of replay parameters expanded into points, each an independent replay, run on a
local process pool or as Ray tasks, checkpointed per point so a rerun skips what finished."""
