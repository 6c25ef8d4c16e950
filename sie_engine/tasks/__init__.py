"""Task implementations beyond encode: each prepares work items for the scheduler
and turns head results into the task's answer."""
