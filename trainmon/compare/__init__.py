"""Reports held against each other or against limits: CI gates (``gate``) and two runs side by side (``diff``).

Headless, like ``trainmon.report``: it never imports Textual.
"""
