"""One module per ``trainmon`` command; ``trainmon.cli.program`` lists them in the order ``trainmon --help`` shows."""
