"""Built-in demo trainings."""
