"""Remove secrets from a command line before it leaves the training process."""

from __future__ import annotations

import re

MASK = "***"
# "token" but not "tokens"/"tokenizer": --max-tokens and --tokenizer are common and harmless in ML.
_SECRET_WORDS = (
    r"(?:password|passwd|pwd|secret|token(?!s|i[sz]e)|api[-_]?key|access[-_]?key|auth|credential"
    r"|private[-_]?key)"
)
_FLAG_WITH_VALUE = re.compile(rf"^(--?[\w.-]*{_SECRET_WORDS}[\w.-]*)=(.+)$", re.IGNORECASE)
_BARE_FLAG = re.compile(rf"^--?[\w.-]*{_SECRET_WORDS}[\w.-]*$", re.IGNORECASE)
_ASSIGNMENT = re.compile(rf"^([A-Za-z_][\w.]*(?:{_SECRET_WORDS}|_KEY)[\w.]*)=(.+)$", re.IGNORECASE)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^/@:\s]*):(?P<pw>[^/@\s]*)@")
# Inside a longer argument: ``?token=abc&``, ``password=pw`` in a conninfo, ``"api_key": "k"``, ``Bearer k``.
_INLINE = re.compile(
    rf"(?P<key>[\w.-]*{_SECRET_WORDS}[\w.-]*[\"']?\s*[=:]\s*[\"']?)(?P<value>[^\s\"'&;,]+)", re.IGNORECASE
)
_BEARER = re.compile(r"(?P<key>\b(?:bearer|basic)\s+)(?P<value>[\w.~+/=-]+)", re.IGNORECASE)


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
            out.append(_INLINE.sub(_mask_value, _BEARER.sub(_mask_value, arg)))
    return out


def _mask_value(m: re.Match[str]) -> str:
    return f"{m['key']}{MASK}"
