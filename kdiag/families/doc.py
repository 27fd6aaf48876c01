"""docs/METRICS.md: every declared family, grouped as declared, rendered from the declarations."""

from __future__ import annotations

from collections.abc import Mapping

from kdiag.families import host, kafka, network, own, probe, process, storage
from kdiag.families.family import Family, FamilyPattern

MODULES = (host, storage, network, process, kafka, probe, own)
HEADER = """\
# kdiag metrics

Every metric family kdiag exports, generated from its declarations in `kdiag/families/` by `kdiag metrics doc`
(do not edit: regenerate). Counters end in `_total`; a unit is the name's suffix. Kafka series (`kdiag_kafka_*`,
`kdiag_consumer_*`, `kdiag_jvm_*`, `kdiag_probe_*`, `kdiag_coordination_*`) also carry `cluster` once the cluster is
known. Labels in brackets are on some series only.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(f: Family, emitted_by: Mapping[str, list[str]]) -> str:
    labels = ", ".join([*f.labels, *(f"[{label}]" for label in f.optional)])
    by = ", ".join(emitted_by.get(f.name, []))
    return f"| `{f.name}` | {f.kind} | {f.unit or '-'} | {labels or '-'} | {by or 'kdiag'} | {_cell(f.help)} |"


def metrics_markdown(emitted_by: Mapping[str, list[str]]) -> str:
    """The whole page; emitted_by names the collectors emitting each family (none: kdiag itself)."""
    parts = [HEADER]
    for module in MODULES:
        families = [v for v in vars(module).values() if isinstance(v, Family)]
        title = module.__name__.rsplit(".", 1)[-1]
        doc = (module.__doc__ or "").strip()
        parts.append(f"\n## {title}\n\n{doc}\n\n| family | type | unit | labels | emitted by | help |\n"
                     "| --- | --- | --- | --- | --- | --- |")
        parts += [_row(f, emitted_by) for f in sorted(families, key=lambda f: f.name)]
        patterns = [v for v in vars(module).values() if isinstance(v, FamilyPattern)]
        parts += [f"| `{p.prefix}<field>{p.suffix}` | {p.kind} | {'bytes' if p.suffix == '_bytes' else '-'} | - | "
                  f"meminfo | {_cell(p.help.format(key='<field>'))} (every field this kernel has) |" for p in patterns]
    return "\n".join(parts) + "\n"
