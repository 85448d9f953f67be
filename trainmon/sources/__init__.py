"""Sources: agents (socket server), host."""
