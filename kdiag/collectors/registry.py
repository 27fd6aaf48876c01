"""Every collector, registered by its own module: its name, whether a config turns it on, and how it is built.

A module applies `@registered(...)` to its collector class. A class with a `from_config(config, shared)` classmethod
is built by it, any other by `cls()`. `discover()` imports every module of collectors/host and collectors/kafka, so a
new collector is one new module. `collectors:` in the config (and `--no-collector`, `--collector`) switch one off or
on by name.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from kdiag.collectors import Collector
from kdiag.config.settings import Config, ConfigError
from kdiag.families.family import Family, FamilyPattern

C = TypeVar("C", bound=type[Collector])
T = TypeVar("T")
PACKAGES = ("kdiag.collectors.host", "kdiag.collectors.kafka")


def always(config: Config) -> bool:
    """On unless switched off."""
    return True


class Shared:
    """What the collectors built from one config share, each made once on first request (the broker processes)."""

    def __init__(self, config: Config, enabled: Collection[str]):
        self.config = config
        self.enabled = enabled  # the names of the collectors being built
        self._made: dict[Callable[[Shared], Any], Any] = {}

    def get(self, make: Callable[[Shared], T]) -> T:
        """make(self), made at the first call and the same object at every later one."""
        if make not in self._made:
            self._made[make] = make(self)
        return cast(T, self._made[make])


@dataclass(frozen=True)
class Registration:
    """One collector class and how a config turns it on and builds it."""

    name: str
    build: Callable[[Config, Shared], Collector]
    default: Callable[[Config], bool]  # on when `collectors:` does not name it
    kafka_source: str  # the kafka.json state it reads ("admin", "jmx"); empty for a host collector
    after: tuple[str, ...]  # collectors that must run before it in a cycle (it reads what they leave)
    families: tuple[Family | FamilyPattern, ...]  # what it emits


REGISTERED: dict[str, Registration] = {}


def registered(default: Callable[[Config], bool] = always, kafka_source: str = "",
               after: tuple[str, ...] = ()) -> Callable[[C], C]:
    """Register the decorated collector class under its `name`."""
    def register(cls: C) -> C:
        name = cls.name
        if name in REGISTERED:
            raise ValueError(f"collector {name!r} is registered twice")
        from_config = getattr(cls, "from_config", None)
        build = from_config if from_config is not None else (lambda config, shared: cls())
        REGISTERED[name] = Registration(name, build, default, kafka_source, after, cls.families)
        return cls
    return register


def discover() -> dict[str, Registration]:
    """Every registered collector, once each collector module is imported."""
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        for module in pkgutil.iter_modules(path):
            importlib.import_module(f"{package}.{module.name}")
    return REGISTERED


def switches(config: Config) -> dict[str, bool]:
    """Each registered collector's name and whether config turns it on; ConfigError for a name none has."""
    known = discover()
    for name in config.collectors:
        if name not in known:
            raise ConfigError(f"collectors.{name}: unknown collector (expected one of {', '.join(sorted(known))})")
    return {name: config.collectors.get(name, r.default(config)) for name, r in sorted(known.items())}


def in_order(names: Collection[str]) -> list[str]:
    """names by name, each after those of them it runs after."""
    ordered: list[str] = []

    def place(name: str) -> None:
        if name not in ordered:
            for before in REGISTERED[name].after:
                if before in names:
                    place(before)
            ordered.append(name)

    for name in sorted(names):
        place(name)
    return ordered


def build_collectors(config: Config, names: Collection[str]) -> list[Collector]:
    """The named collectors built from config in their cycle order, sharing one Shared."""
    shared = Shared(config, frozenset(names))
    return [REGISTERED[name].build(config, shared) for name in in_order(names)]
