"""Other processes' command lines with their secrets masked, the way ps-style tools and process exporters show them."""

from __future__ import annotations

import re
import shlex

MASK = "***"
LABEL_MAX = 256

# Over-redaction is deliberate: `--keyspace V` or `mkdir -p DIR` lose their value rather than risk a password.
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|key|credential|auth", re.IGNORECASE)
# scheme://user:password@ (the password may hold '/' or ':'); scheme://user@ only for http(s), where it is a token.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][\w+.-]*://[^\s/@:]*):[^\s@]*@")
_URL_TOKEN = re.compile(r"(?P<head>https?://)[^\s/@:]+@", re.IGNORECASE)
_QUERY_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[\w.-]+)=)[^&;#\s]*")
_ASSIGNMENT = re.compile(r"(?P<name>-{0,2}[A-Za-z_][\w.-]*)=(?P<value>.*)", re.DOTALL)
_FLAG = re.compile(r"-{1,2}(?P<name>[A-Za-z][\w.-]*)")
_HEADER = re.compile(r"(?P<name>[\w-]+):\s*\S.*", re.DOTALL)
_USER_FLAGS = {"-u", "--user", "--proxy-user", "-U"}  # curl style user:password

# What the word after a flag is: nothing special, a secret value, or user:password.
PLAIN, SECRET, USERPASS = 0, 1, 2


def is_secret_name(name: str) -> bool:
    """Whether an option, variable or header name says its value is a secret."""
    return bool(_SECRET_NAME.search(name))


def redact_argv(argv: list[str]) -> list[str]:
    """argv with the secret values masked; masking a masked argv changes nothing."""
    out = []
    expect = PLAIN
    for arg in argv:
        if expect == SECRET and not arg.startswith("--"):
            out.append(MASK)
            expect = PLAIN
            continue
        if expect == USERPASS and ":" in arg:
            user = arg.split(":", 1)[0]
            out.append(f"{user}:{MASK}")
            expect = PLAIN
            continue
        masked, expect = _redact_word(arg)
        out.append(masked)
    return out


def _redact_word(arg: str) -> tuple[str, int]:
    """One argument masked, and what the next argument is."""
    if any(c.isspace() for c in arg.strip()):
        return _redact_script(arg.strip()), PLAIN
    arg = _URL_PASSWORD.sub(rf"\g<head>:{MASK}@", arg)
    arg = _URL_TOKEN.sub(rf"\g<head>{MASK}@", arg)
    arg = _QUERY_PARAM.sub(lambda m: m["head"] + MASK if is_secret_name(m["name"]) else m[0], arg)
    if assignment := _ASSIGNMENT.fullmatch(arg):
        name, value = assignment["name"], assignment["value"]
        if is_secret_name(name):
            return f"{name}={MASK}", PLAIN
        if name in _USER_FLAGS and ":" in value:
            return f"{name}={value.split(':', 1)[0]}:{MASK}", PLAIN
        return f"{name}={_redact_word(value)[0]}", PLAIN
    flag = _FLAG.fullmatch(arg)
    expect = SECRET if arg == "-p" or (flag and is_secret_name(flag["name"])) else PLAIN
    if arg.startswith("-p") and len(arg) > 2 and not arg.startswith("--"):
        return f"-p{MASK}", expect  # mysql's -pPASSWORD (or a secret-named flag such as -password)
    if arg in _USER_FLAGS:
        return arg, USERPASS
    return arg, expect


def _redact_script(text: str) -> str:
    """An argument made of words (`sh -c "..."`, a rewritten process title, an HTTP header) masked word by word."""
    if (header := _HEADER.fullmatch(text)) and is_secret_name(header["name"]):
        return f"{header['name']}: {MASK}"
    try:
        words = shlex.split(text)
    except ValueError:  # unbalanced quotes: plain words still get masked
        words = text.split()
    return " ".join(shlex.quote(w) if any(c.isspace() for c in w) else w for w in redact_argv(words))


def redact_cmdline_file(text: str) -> str:
    """A NUL-separated /proc/PID/cmdline with its secrets masked, still NUL-separated."""
    args = text.split("\0")
    trailing = args[-1] == ""
    masked = redact_argv(args[:-1] if trailing else args)
    return "\0".join(masked) + ("\0" if trailing and masked else "")


def cmdline_label(argv: list[str], mode: str = "redacted", limit: int = LABEL_MAX) -> str:
    """The command line as a label: masked (mode redacted) or as is (full), cut to limit characters."""
    text = " ".join(redact_argv(argv) if mode == "redacted" else argv)
    return text if len(text) <= limit else text[: limit - 3] + "..."
