"""Exporters of the live monitor state (Prometheus)."""
