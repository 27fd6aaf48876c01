"""Other processes' command lines with their secrets masked, the way ps-style tools and process exporters show them.

Two layers: patterns mask the secret forms known in the wild (every mode, every process), and by default any process
that is not Kafka's or kdiag's own shows only its program, flags and plain absolute paths (an allow-list): a form
no pattern knows stays masked.
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import re
import shlex
from collections.abc import Iterable

MASK = "***"
LABEL_MAX = 256
# Any process may choose its argv: bound the work, and mask what is past a bound rather than cut a secret in two.
ARG_MAX = 4096  # longer arguments are masked whole
ARGS_MAX = 4096  # arguments past this many are left out
TOTAL_MAX = 65536  # characters looked at in all; later arguments are masked whole
SCRIPTS_MAX = 16384  # characters of scripts parsed word by word (shlex is slow); later scripts are masked whole
SCRIPT_DEPTH_MAX = 3

# Over-redaction is deliberate: `--keyspace V` or `mkdir -p DIR` lose their value rather than risk a password.
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|key|credential|auth|cookie|session|bearer|jwt|signature|private",
                          re.IGNORECASE)
# Short names that are secrets only as a whole word of a name (--pw, sig=, --pin, but not --design or --spinner).
_SECRET_PARTS = {"pw", "sig", "pin", "otp"}
_NAME_PARTS = re.compile(r"[^a-z0-9]+")
# Every pattern starts at a boundary and never backtracks (possessive quantifiers): linear in the argument's length.
# What comes before a password that runs to the last '@' before a stop (mysql://app:p@ss@host), and the stop:
# scheme://user: (the password may hold '/' or ':'), and user: or user/ with no scheme (Go's root:pw@tcp(host)/db,
# Oracle's scott/tiger@db).
_URL_USER = re.compile(r"(?<![\w+.-])[A-Za-z][\w+.-]*+://[^\s/@:]*+:"), re.compile(r"\s")
_USER = re.compile(r"""(?:^|(?<=[\s=,;'"(]))[\w.+%-]++[:/]"""), re.compile(r"[\s/]")
_AT = re.compile("@")
# scheme://user@ only for http(s), where the user is a token.
_URL_TOKEN = re.compile(r"(?<![\w+.-])(?P<head>https?://)[^\s/@:]++@", re.IGNORECASE)
_QUERY_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[\w.-]++)=)[^&;#\s]*+")
# name=value inside a word or script: connect(password='x'), f(a=1, token="t"), {password=x}, npm's //host/:_authToken=t.
_KEYWORD = re.compile(r"""(?P<head>(?:^|(?<=[(,{:\s]))(?P<name>[A-Za-z_][\w.-]*+)\s*+=\s*+)(?:'[^']*+'|"[^"]*+"|[^\s&;#'"]*+)""")
# "name": value of JSON and 'name': value of a Python dict, the value a string or not.
_PAIR = re.compile(r"""(?P<head>(?P<q>["'])(?P<name>[\w.-]++)(?P=q)\s*+:\s*+)(?:"[^"]*+"|'[^']*+'|[^\s,}\]'"]++)""")
# Secrets whose shape tells what they are wherever they appear: AWS key ids, GitHub, Slack, Google, Stripe, JWTs.
_SECRET_SHAPE = re.compile(r"(?<![\w-])(?:(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}|gh[pousr]_[A-Za-z0-9]{20,}+"
                           r"|github_pat_\w{20,}+|xox[abposr]-[\w-]{10,}+|AIza[\w-]{30,}+|[sr]k_(?:live|test)_\w{10,}+"
                           r"|eyJ[\w-]{4,}+\.[\w-]{4,}+\.[\w-]*+)")
_NAME = re.compile(r"-{0,2}[A-Za-z_][\w.-]*+")
_FLAG = re.compile(r"-{1,2}(?P<name>[A-Za-z][\w.-]*+)")
_HEADER = re.compile(r"(?P<name>[\w-]++):\s*+\S.*", re.DOTALL)
_USER_FLAGS = {"-u", "--user", "--proxy-user", "-U"}  # user:password (curl), user%password (smbclient), user,password (lftp)
_USER_SEPARATOR = re.compile(r"[:%,]")
# Flags that take a password only in some programs (`cp -a` keeps its value): active once the program's word is seen.
PROGRAM_SECRET_FLAGS = {"redis-cli": {"-a"}, "redis-benchmark": {"-a"}, "keydb-cli": {"-a"}, "valkey-cli": {"-a"},
                        "openssl": {"-k"}, "sqlcmd": {"-P"}, "bcp": {"-P"}, "zip": {"-P"}, "unzip": {"-P"},
                        "ldapsearch": {"-w"}, "ldapmodify": {"-w"}, "ldapadd": {"-w"}, "ldapdelete": {"-w"},
                        "curl": {"-b"}, "http": {"-a"}, "https": {"-a"}, "ssh-keygen": {"-N", "-P"},
                        "mosquitto_pub": {"-P"}, "mosquitto_sub": {"-P"}}
# A setting's name as a word of its own: `aws configure set aws_secret_access_key V`, `CONFIG SET requirepass V`.
_SETTING = re.compile(r"[A-Za-z][\w.]*+")
_SPACE = re.compile(r"\s")
_WORD_SEPARATORS = re.compile(r"[\s'\"]+")

# What the word after a flag is: nothing special, a secret value, or user:password.
PLAIN, SECRET, USERPASS = 0, 1, 2

# processes.cmdline: the allow-list (default), every argument with only the known secret forms masked, or no label.
MASKED, FULL, OFF = "masked", "full", "off"
CMDLINE_MODES = (MASKED, FULL, OFF)
# Main classes of Kafka's JVMs: kafka.Kafka, kafka.tools.*, org.apache.kafka.tools.* (the perf tests), connect.
_KAFKA_CLASS = re.compile(r"(?:org\.apache\.)?kafka\.[\w.$]++")
# What the allow-list shows of other processes: a program word, flags (--name, -la, -Xmx6G, - and --) and plain
# absolute paths (which files and dirs a process works on is what the foreign_io_scanner rule needs).
_PROGRAM = re.compile(r"[\w.+:-]++")
_PLAIN_FLAG = re.compile(r"-{1,2}(?:[A-Za-z][\w.-]*+)?")
_PLAIN_PATH = re.compile(r"/[\w./-]*+")
_FLAG_HEAD = re.compile(r"--|-[A-Za-z]?")


def mask_values(text: str, secrets: Iterable[str]) -> str:
    """text with every known secret value in it replaced by MASK, the longest first (one secret may hold another)."""
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def is_secret_name(name: str) -> bool:
    """Whether an option, variable or header name says its value is a secret."""
    return bool(_SECRET_NAME.search(name)) or not _SECRET_PARTS.isdisjoint(_NAME_PARTS.split(name.lower()))


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
        elif expect == USERPASS and _USER_SEPARATOR.search(arg):
            out.append(_mask_password(arg))
            expect = PLAIN
        elif arg in secret_flags:
            out.append(arg)
            expect = SECRET
        else:
            secret_flags |= PROGRAM_SECRET_FLAGS.get(arg.rsplit("/", 1)[-1], set())
            masked, expect = _redact_word(arg, depth)
            out.append(masked)
            if i and _SETTING.fullmatch(arg) and is_secret_name(arg):
                expect = SECRET
    return out, expect


def _redact_word(arg: str, depth: int) -> tuple[str, int]:
    """One argument masked, and what the next argument is."""
    arg = arg.strip()  # a quoted word of a script may keep the blanks around it
    arg = _SECRET_SHAPE.sub(MASK, arg)
    arg = _mask_passwords(arg, *_URL_USER)
    arg = _URL_TOKEN.sub(rf"\g<head>{MASK}@", arg)
    arg = _mask_passwords(arg, *_USER)
    arg = _QUERY_PARAM.sub(_mask_named, arg)
    arg = _KEYWORD.sub(_mask_named, arg)
    arg = _PAIR.sub(lambda m: _mask_named(m, m["q"], m["q"]), arg)
    # A secret value may hold blanks (--password='a b c'): the whole of it goes before the argument counts as a script.
    name, _, value = arg.partition("=")
    if value and _NAME.fullmatch(name) and is_secret_name(name):
        return f"{name}={MASK}", PLAIN
    if value and _NAME.fullmatch(name) and _is_secret_header(value):  # --header=Authorization: Bearer T
        return f"{name}={_redact_header(value)}", PLAIN
    if _is_secret_header(arg):
        return _redact_header(arg), PLAIN
    if arg[:2] in _USER_FLAGS and len(arg) > 2 and _USER_SEPARATOR.search(arg):  # curl -uadmin:password
        return _mask_password(arg), PLAIN
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


def _mask_passwords(text: str, head: re.Pattern[str], stop: re.Pattern[str]) -> str:
    """text with what runs from each head to the last '@' before the next stop masked."""
    if "@" not in text:
        return text
    # Found by bisection, not by a regex scanning on from every head: a word of 4,000 heads and no '@' stays linear.
    ats = [m.start() for m in _AT.finditer(text)]
    stops = [m.start() for m in stop.finditer(text)]
    out, done = [], 0
    for m in head.finditer(text):
        end = stops[i] if (i := bisect.bisect_left(stops, m.end())) < len(stops) else len(text)
        at = ats[bisect.bisect_left(ats, end) - 1] if ats and ats[0] < end else -1
        if m.start() >= done and at >= m.end():
            out += [text[done:m.end()], MASK]
            done = at
    return "".join(out) + text[done:]


def _is_json(text: str) -> bool:
    """Whether text is a JSON object or array."""
    if not text.lstrip().startswith(("{", "[")):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _mask_named(match: re.Match[str], before: str = "", after: str = "") -> str:
    """A name=value (or "name": value) match with the value masked (quoted so) when the name says secret."""
    return match["head"] + before + MASK + after if is_secret_name(match["name"]) else match[0]


def _mask_password(userpass: str) -> str:
    """user:password (or user%password, user,password) with the password masked."""
    separator = _USER_SEPARATOR.search(userpass)
    return userpass[: separator.end()] + MASK if separator else userpass


def _is_secret_header(text: str) -> bool:
    """Whether text is an HTTP header (Name: value) whose name says its value is a secret."""
    return bool((header := _HEADER.fullmatch(text)) and is_secret_name(header["name"]))


def _redact_header(text: str) -> str:
    """An HTTP header with its value masked."""
    return f"{text.split(':', 1)[0]}: {MASK}"


def _redact_assignment(arg: str) -> str:
    """NAME=VALUE (also --opt=k.password=v): everything after the first secret-named part is masked."""
    parts = arg.split("=")
    name = parts[0]
    if name in _USER_FLAGS and _USER_SEPARATOR.search(parts[1]):
        return f"{name}={_mask_password(parts[1])}"
    for i, part in enumerate(parts[:-1]):
        if is_secret_name(part):
            return "=".join(parts[: i + 1]) + "=" + MASK
    return arg


def _redact_script(text: str, depth: int) -> tuple[str, int]:
    """An argument made of words (`sh -c "..."`, a rewritten process title, an HTTP header) masked word by word."""
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


def is_kafka_or_kdiag(argv: list[str]) -> bool:
    """Whether argv runs a Kafka JVM (broker, tool, perf test) or kdiag: command lines whose forms are known."""
    program = os.path.basename(argv[0]) if argv else ""
    script = os.path.basename(argv[1]) if len(argv) > 1 else ""
    python_kdiag = program.startswith("python") and (script == "kdiag" or argv[1:3] == ["-m", "kdiag"])
    return program == "kdiag" or python_kdiag or any(map(_KAFKA_CLASS.fullmatch, argv))


def mask_argv(argv: list[str]) -> list[str]:
    """argv as shown by default: Kafka's and kdiag's with their secrets masked, any other as program, flags and paths."""
    redacted = redact_argv(argv)
    if not redacted or is_kafka_or_kdiag(argv):
        return redacted
    program, *title = redacted[0].split(None, 1) or [""]  # a rewritten title: "postgres: alice db 10.0.0.1 idle"
    shown = program if not program or _PROGRAM.fullmatch(program) or _PLAIN_PATH.fullmatch(program) else MASK
    return [" ".join([shown, *(MASK for _ in title)]), *map(_allowed, redacted[1:])]


def _allowed(arg: str) -> str:
    """One argument as the allow-list shows it: a flag or a plain absolute path as is, any value masked."""
    if _PLAIN_FLAG.fullmatch(arg) or _PLAIN_PATH.fullmatch(arg):
        return arg
    name, equals, value = arg.partition("=")
    if equals and _PLAIN_FLAG.fullmatch(name):
        return f"{name}={value if _PLAIN_PATH.fullmatch(value) else MASK}"
    head = _FLAG_HEAD.match(arg)
    return (head[0] if head else "") + MASK


def redact_cmdline_file(text: str) -> str:
    """A NUL-separated /proc/PID/cmdline as a recording keeps it (masked, whatever the config), still NUL-separated."""
    args = text.split("\0")
    trailing = args[-1] == ""
    masked = mask_argv(args[:-1] if trailing else args)
    return "\0".join(masked) + ("\0" if trailing and masked else "")


def cmdline_label(argv: list[str], mode: str = MASKED, limit: int = LABEL_MAX) -> str:
    """The command line as a label, masked or (full) with only its known secret forms masked, cut to limit characters."""
    return _cmdline_label(tuple(argv), mode, limit)


@functools.lru_cache(maxsize=256)
def _cmdline_label(argv: tuple[str, ...], mode: str, limit: int) -> str:
    # The same few processes are labelled every cycle, and a JVM's command line is kilobytes of classpath.
    text = " ".join(mask_argv(list(argv)) if mode == MASKED else redact_argv(list(argv)))
    return text if len(text) <= limit else text[: limit - 3] + "..."
