"""``trainmon doctor``: what works on this machine; exit 1 when the monitor cannot run here."""

from __future__ import annotations

import argparse
import sys

from trainmon.cli.command import Command


class DoctorCommand(Command):
    name = "doctor"
    help = "what works here: NVML, py-spy/ptrace, socket directory, torch"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """No options of its own."""

    def run(self, args: argparse.Namespace) -> int:
        from trainmon.doctor import format_doctor, run_doctor

        rows, can_run = run_doctor()
        text = format_doctor(rows, can_run)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0 if can_run else 1
