"""Python stacks from outside the process, through py-spy: one-off dumps, agentless sampling of a training's main
thread, the stacks' data model and parsers, and time-weighted samples of where a training thread's time goes."""
