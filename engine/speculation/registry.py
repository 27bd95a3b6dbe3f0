"""The proposer registry: every proposer the engine has, found in engine/speculation/proposers/.

A proposer package there whose `__init__` sets `SPEC` is registered when the registry is first
read: its declaration alone, what drafts is imported when the proposer is loaded. `register` adds
one from anywhere else (a plugin, a test). Front ends ask `proposer_specs()` what exists, `offered(sources)` what the user's options allow, and `load_proposer` for a
`LoadedProposer` that makes proposers of any k.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from engine.errors import EngineError
from engine.limits import check_k
from engine.speculation import proposers
from engine.speculation.proposers.spec import ProposerOptions, ProposerSpec

if TYPE_CHECKING:
    from engine.speculation.proposers.base import Proposer

_specs: dict[str, ProposerSpec] = {}
_found = False


def register(spec: ProposerSpec) -> ProposerSpec:
    _specs[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    _specs.pop(name, None)


def proposer_specs() -> list[ProposerSpec]:
    """Every registered proposer, cheapest first."""
    global _found
    if not _found:
        for module in pkgutil.iter_modules(proposers.__path__, proposers.__name__ + "."):
            if not module.ispkg:
                continue  # base.py, spec.py: what every proposer shares
            spec = getattr(importlib.import_module(module.name), "SPEC", None)
            if isinstance(spec, ProposerSpec):
                _specs.setdefault(spec.name, spec)
        _found = True
    return sorted(_specs.values(), key=lambda s: (s.order, s.name))


def find_spec(name: str) -> ProposerSpec:
    """The proposer called `name` (its name or its label, any case), or one clear error."""
    for spec in proposer_specs():
        if name.lower() in (spec.name, spec.label.lower()):
            return spec
    known = ", ".join(s.name for s in proposer_specs())
    raise EngineError(f"no proposer {name!r}; choose one of {known}")


def given(spec: ProposerSpec, sources: dict[str, str | None], target=None) -> str | None:
    """The value of the spec's need: as the user gave it, else as the spec finds it for `target`."""
    value = sources.get(spec.need.option)
    if not value and target is not None and spec.find is not None:
        value = spec.find(target)
    return value


def offered(sources: dict[str, str | None], target=None) -> list[ProposerSpec]:
    """The proposers the user's options allow: those that need nothing, and those whose need was
    given (or, with the loaded target, found: a drafter trained for it in the cache)."""
    return [s for s in proposer_specs() if s.need is None or given(s, sources, target)]


def missing(sources: dict[str, str | None], target=None) -> dict[str, str]:
    """Why each proposer that is not offered is missing (label -> reason)."""
    return {s.label: s.need.missing for s in proposer_specs() if s.need and not given(s, sources, target)}


@dataclass
class LoadedProposer:
    """A proposer kind with what it drafts with loaded: `make(k)` builds a proposer of k drafts."""

    spec: ProposerSpec
    loaded: Any

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def label(self) -> str:
        return self.spec.describe(self.loaded) if self.spec.describe else self.spec.label

    @property
    def max_k(self) -> int:
        return self.spec.max_k(self.loaded)

    def make(self, k: int | None = None) -> Proposer:
        k = min(self.spec.default_k, self.max_k) if k is None else k
        return self.spec.make(self.loaded, check_k(k, self.max_k, f"what {self.label} can draft"))


def load_proposer(name: str, target, options: ProposerOptions) -> LoadedProposer:
    """Load what proposer `name` drafts with (slow for a draft model or drafter: once per run)."""
    spec = find_spec(name)
    if spec.need:
        value = given(spec, options.sources, target)
        if not value:
            raise EngineError(f"{spec.label} needs --{spec.need.option} {spec.need.metavar}")
        options = replace(options, sources={**options.sources, spec.need.option: value})
    return LoadedProposer(spec, spec.load(target, options))
