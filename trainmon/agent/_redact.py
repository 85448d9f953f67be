"""Remove secrets from a command line before it leaves the training process."""

from __future__ import annotations

import re

MASK = "***"
_SECRET_WORDS = r"(?:password|passwd|pwd|secret|token|api[-_]?key|access[-_]?key|auth|credential|private[-_]?key)"
_FLAG_WITH_VALUE = re.compile(rf"^(--?[\w.-]*{_SECRET_WORDS}[\w.-]*)=(.+)$", re.IGNORECASE)
_BARE_FLAG = re.compile(rf"^--?[\w.-]*{_SECRET_WORDS}[\w.-]*$", re.IGNORECASE)
_ASSIGNMENT = re.compile(rf"^([A-Za-z_][\w.]*(?:{_SECRET_WORDS}|_KEY)[\w.]*)=(.+)$", re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^/@:\s]*):(?P<pw>[^/@\s]*)@")


def redact_argv(argv: list[str]) -> list[str]:
    out: list[str] = []
    mask_next = False
    for arg in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        arg = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", arg)
        if m := _FLAG_WITH_VALUE.match(arg):
            out.append(f"{m[1]}={MASK}")
        elif _BARE_FLAG.match(arg):
            out.append(arg)
            mask_next = True
        elif m := _ASSIGNMENT.match(arg):
            out.append(f"{m[1]}={MASK}")
        else:
            out.append(arg)
    return out
