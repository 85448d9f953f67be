"""Every node and rank of every job, read back from Prometheus (headless: never imports Textual)."""
