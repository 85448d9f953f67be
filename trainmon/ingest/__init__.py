"""What the agents send, taken in: the socket server for agents (many connections, bounded, hostile input closes
one), who is at the other end of each connection (its user, its pids in the monitor's pid namespace), and the
records and messages handed to the store. Above ``store``, beside ``sources``."""
