"""Other processes' command lines with their secrets masked, the way ps-style tools and process exporters show them."""

from __future__ import annotations

import functools
import json
import re
import shlex

MASK = "***"
LABEL_MAX = 256
# Any process may choose its argv: bound the work, and mask what is past a bound rather than cut a secret in two.
ARG_MAX = 4096  # longer arguments are masked whole
ARGS_MAX = 4096  # arguments past this many are left out
TOTAL_MAX = 65536  # characters looked at in all; later arguments are masked whole
SCRIPTS_MAX = 16384  # characters of scripts parsed word by word (shlex is slow); later scripts are masked whole
SCRIPT_DEPTH_MAX = 3

# Over-redaction is deliberate: `--keyspace V` or `mkdir -p DIR` lose their value rather than risk a password.
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|key|credential|auth", re.IGNORECASE)
# Every pattern starts at a boundary and never backtracks (possessive quantifiers): linear in the argument's length.
# scheme://user:password@ (the password may hold '/' or ':'); scheme://user@ only for http(s), where it is a token.
_URL_PASSWORD = re.compile(r"(?<![\w+.-])(?P<head>[A-Za-z][\w+.-]*+://[^\s/@:]*+):[^\s@]*+@")
_URL_TOKEN = re.compile(r"(?<![\w+.-])(?P<head>https?://)[^\s/@:]++@", re.IGNORECASE)
_QUERY_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[\w.-]++)=)[^&;#\s]*+")
_JSON_PAIR = re.compile(r'(?P<head>"(?P<name>[\w.-]++)"\s*+:\s*+")[^"]*+"')
_NAME = re.compile(r"-{0,2}[A-Za-z_][\w.-]*+")
_FLAG = re.compile(r"-{1,2}(?P<name>[A-Za-z][\w.-]*+)")
_HEADER = re.compile(r"(?P<name>[\w-]++):\s*+\S.*", re.DOTALL)
_USER_FLAGS = {"-u", "--user", "--proxy-user", "-U"}  # curl style user:password
# Flags that take a password only in some programs (`cp -a` keeps its value): active once the program's word is seen.
PROGRAM_SECRET_FLAGS = {"redis-cli": {"-a"}, "redis-benchmark": {"-a"}, "keydb-cli": {"-a"}, "valkey-cli": {"-a"}}
_SPACE = re.compile(r"\s")
_WORD_SEPARATORS = re.compile(r"[\s'\"]+")

# What the word after a flag is: nothing special, a secret value, or user:password.
PLAIN, SECRET, USERPASS = 0, 1, 2


def is_secret_name(name: str) -> bool:
    """Whether an option, variable or header name says its value is a secret."""
    return bool(_SECRET_NAME.search(name))


def redact_argv(argv: list[str]) -> list[str]:
    """argv with the secret values masked (masking it again masks nothing new)."""
    return _redact(argv, 0)[0]


def _redact(argv: list[str], depth: int) -> tuple[list[str], int]:
    """argv masked, and what the word after it is (a script's last word may be a secret flag)."""
    out = []
    expect = PLAIN
    total = scripts = 0
    secret_flags: set[str] = set()
    for i, arg in enumerate(argv):
        if i == ARGS_MAX - 1 and len(argv) > ARGS_MAX:
            out.append(f"{MASK}(+{len(argv) - i} args)")
            break
        script = bool(_SPACE.search(arg))
        total += len(arg) if len(arg) <= ARG_MAX else 0
        scripts += len(arg) if script else 0
        if len(arg) > ARG_MAX or total > TOTAL_MAX or (script and scripts > SCRIPTS_MAX):
            out.append(f"{MASK}({len(arg)} chars)")
            expect = PLAIN
        elif expect == SECRET and not arg.startswith("--"):
            out.append(MASK)
            # A value that is itself a secret flag (`-p -p PASSWORD`) masks what follows too.
            expect = SECRET if _redact_word(arg, depth)[1] == SECRET else PLAIN
        elif expect == USERPASS and ":" in arg:
            out.append(f"{arg.split(':', 1)[0]}:{MASK}")
            expect = PLAIN
        elif arg in secret_flags:
            out.append(arg)
            expect = SECRET
        else:
            secret_flags |= PROGRAM_SECRET_FLAGS.get(arg.rsplit("/", 1)[-1], set())
            masked, expect = _redact_word(arg, depth)
            out.append(masked)
    return out, expect


def _redact_word(arg: str, depth: int) -> tuple[str, int]:
    """One argument masked, and what the next argument is."""
    arg = arg.strip()  # a quoted word of a script may keep the blanks around it
    arg = _URL_PASSWORD.sub(rf"\g<head>:{MASK}@", arg)
    arg = _URL_TOKEN.sub(rf"\g<head>{MASK}@", arg)
    arg = _QUERY_PARAM.sub(_mask_named, arg)
    arg = _JSON_PAIR.sub(lambda m: _mask_named(m, '"'), arg)
    # A secret value may hold blanks (--password='a b c'): the whole of it goes before the argument counts as a script.
    name = arg.split("=", 1)[0]
    if "=" in arg and _NAME.fullmatch(name) and is_secret_name(name):
        return f"{name}={MASK}", PLAIN
    flag = _FLAG.fullmatch(arg)
    expect = SECRET if arg == "-p" or (flag and is_secret_name(flag["name"])) else PLAIN
    if arg.startswith("-p") and len(arg) > 2 and not arg.startswith("--"):
        # mysql's -pPASSWORD, or a secret-named flag such as -password (or a word that joined one: -p\ --password)
        return f"-p{MASK}", SECRET if is_secret_name(arg) else expect
    if _SPACE.search(arg) and not _is_json(arg):  # JSON is one word, its pairs masked above
        return _redact_script(arg, depth + 1)
    if "=" in arg and _NAME.fullmatch(name):
        return _redact_assignment(arg), PLAIN
    if arg in _USER_FLAGS:
        return arg, USERPASS
    return arg, expect


def _is_json(text: str) -> bool:
    """Whether text is a JSON object or array."""
    if not text.lstrip().startswith(("{", "[")):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _mask_named(match: re.Match, tail: str = "") -> str:
    """A name=value (or "name": "value") match with the value masked when the name says secret."""
    return match["head"] + MASK + tail if is_secret_name(match["name"]) else match[0]


def _redact_assignment(arg: str) -> str:
    """NAME=VALUE (also --opt=k.password=v): everything after the first secret-named part is masked."""
    parts = arg.split("=")
    name = parts[0]
    if name in _USER_FLAGS and ":" in parts[1]:
        return f"{name}={parts[1].split(':', 1)[0]}:{MASK}"
    for i, part in enumerate(parts[:-1]):
        if is_secret_name(part):
            return "=".join(parts[: i + 1]) + "=" + MASK
    return arg


def _redact_script(text: str, depth: int) -> tuple[str, int]:
    """An argument made of words (`sh -c "..."`, a rewritten process title, an HTTP header) masked word by word."""
    if (header := _HEADER.fullmatch(text)) and is_secret_name(header["name"]):
        return f"{header['name']}: {MASK}", PLAIN
    try:
        # Quoted words may hold words of their own (sh -c "su -c '...'"); past a few levels, plain words.
        words = shlex.split(text) if depth < SCRIPT_DEPTH_MAX else _plain_words(text)
    except ValueError:  # unbalanced quotes
        words = _plain_words(text)
    masked, expect = _redact(words, depth)
    return " ".join(shlex.quote(w) if _SPACE.search(w) else w for w in masked), expect


def _plain_words(text: str) -> list[str]:
    """The words of text with every quote taken for a separator: no word holds another."""
    return [w for w in _WORD_SEPARATORS.split(text) if w]


def redact_cmdline_file(text: str) -> str:
    """A NUL-separated /proc/PID/cmdline with its secrets masked, still NUL-separated."""
    args = text.split("\0")
    trailing = args[-1] == ""
    masked = redact_argv(args[:-1] if trailing else args)
    return "\0".join(masked) + ("\0" if trailing and masked else "")


def cmdline_label(argv: list[str], mode: str = "redacted", limit: int = LABEL_MAX) -> str:
    """The command line as a label: masked (mode redacted) or as is (full), cut to limit characters."""
    return _cmdline_label(tuple(argv), mode, limit)


@functools.lru_cache(maxsize=256)
def _cmdline_label(argv: tuple[str, ...], mode: str, limit: int) -> str:
    # The same few processes are labelled every cycle, and a JVM's command line is kilobytes of classpath.
    text = " ".join(redact_argv(list(argv)) if mode == "redacted" else argv)
    return text if len(text) <= limit else text[: limit - 3] + "..."
