"""The adapters this engine serves, by name: registration, lookup, what GET /adapters shows.

A registration is checked whole (``adapters/peft_folder.py``) before it is
accepted, so a request never meets a half-valid adapter, and a name that is
not registered is a 404: a request is never silently served by the base
model instead. Each registration gets its own uid (``name#n``): registering a
name again after removing it makes another adapter, which shares neither the
worker's copy nor prefix-cache blocks with the old one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ..adapters.messages import AdapterSpec, AdapterStatus
from ..adapters.peft_folder import BaseShapes, check_adapter, check_name
from ..config import ENV_ADAPTERS_DIR, ENV_ADAPTERS_OPTIONAL, EngineConfig
from ..errors import AdapterExists, AdapterNotFound, ModelLoadError, ServingError
from ..protocol import ModelInfo
from .adapter_slots import AdapterSlots

log = logging.getLogger(__name__)


@dataclass
class _Entry:
    spec: AdapterSpec
    failed: str = ""  # why its last load failed
    load_seconds: float | None = None
    bytes: int = 0


class AdapterRegistry:
    def __init__(self, config: EngineConfig, info: ModelInfo):
        self.config = config
        modules = {name: (features[0], features[1]) for name, features in info.lora_modules.items()}
        self.base = BaseShapes(info.model_type, info.num_layers, modules, info.decoder)
        self._entries: dict[str, _Entry] = {}
        self._registrations = 0

    def __len__(self) -> int:
        return len(self._entries)

    def register(self, name: str, src: str, roots: tuple[str, ...] | None = None) -> AdapterSpec:
        """Check and add an adapter; InvalidRequest (400) or AdapterExists (409)."""
        check_name(name)
        if name in self._entries:
            raise AdapterExists(f"adapter {name!r} is already registered; DELETE /adapters/{name} first")
        uid = f"{name}#{self._registrations + 1}"
        spec = check_adapter(name, src, uid, roots or self.config.adapter_roots, self.config.max_lora_rank, self.base)
        self._registrations += 1
        self._entries[name] = _Entry(spec)
        log.info("adapter %s registered: rank %d on %s from %s", name, spec.rank, ",".join(spec.target_modules),
                 spec.path)
        return spec

    def specs(self) -> list[AdapterSpec]:
        """Every registered adapter, by name."""
        return [self._entries[name].spec for name in sorted(self._entries)]

    def unregister(self, name: str) -> AdapterSpec:
        return self._entries.pop(self._known(name)).spec

    def resolve(self, name: str) -> AdapterSpec:
        return self._entries[self._known(name)].spec

    def _known(self, name: str) -> str:
        if name not in self._entries:
            known = ", ".join(sorted(self._entries)[:20]) or "none"
            raise AdapterNotFound(f"adapter {name!r} is not registered (registered: {known})")
        return name

    def on_load(self, uid: str, ok: bool, message: str = "", seconds: float = 0.0, nbytes: int = 0) -> None:
        for entry in self._entries.values():
            if entry.spec.uid == uid:
                entry.failed = "" if ok else message
                if ok:
                    entry.load_seconds, entry.bytes = seconds, nbytes

    def statuses(self, slots: AdapterSlots, requests: dict[str, int], tokens: dict[str, int],
                 names: list[str] | None = None) -> list[AdapterStatus]:
        out = []
        for name in names if names is not None else sorted(self._entries):
            entry = self._entries[self._known(name)]
            spec = entry.spec
            if entry.failed:
                state = "failed"
            elif slots.is_active(spec.uid):
                state = "active"
            elif slots.is_loaded(spec.uid):
                state = "loaded"
            else:
                state = "registered"
            out.append(AdapterStatus(name, spec.rank, list(spec.target_modules), spec.path, state,
                                     requests.get(name, 0), tokens.get(name, 0), entry.load_seconds,
                                     entry.bytes, entry.failed))
        return out

    def register_folder(self, folder: str, optional: bool = False) -> list[AdapterSpec]:
        """Register every ``<name>/`` adapter folder under ``folder`` (at start-up).

        One that cannot be registered raises ModelLoadError naming each such folder and why: the
        start fails, as for a model that does not load, instead of serving requests that name the
        adapter a 404. ``optional`` (LLM_BYOC_ADAPTERS_OPTIONAL): they are logged and skipped.
        """
        root = Path(folder)
        if not root.is_dir():
            return []
        specs, failures = [], []
        try:
            children = sorted(p for p in root.iterdir() if p.is_dir())
        except OSError as exc:
            children, failures = [], [f"{root}: cannot list it: {exc.strerror}"]
        for child in children:
            try:
                specs.append(self.register(child.name, str(child), roots=(*self.config.adapter_roots, str(root))))
            except ServingError as exc:
                failures.append(f"{child}: {exc.message}")
        if failures and not optional:
            raise ModelLoadError(f"{len(failures)} adapter folder(s) in {ENV_ADAPTERS_DIR}={folder} cannot be "
                                 f"registered: {'; '.join(failures)} (fix or remove them, or set "
                                 f"{ENV_ADAPTERS_OPTIONAL}=true to serve without them)")
        for failure in failures:
            log.error("adapter folder not registered (%s=true): %s", ENV_ADAPTERS_OPTIONAL, failure)
        return specs
