"""The worker's LoRA slots and in-memory adapters, as the engine drives them (pure Python).

The worker holds at most ``max_cpu_loras`` adapters in memory and ``max_loras``
of them in the slots one step can use. The engine decides every change and
sends it with the next step (``StepBatch.drop_adapters``, ``load_adapters``,
``activate_adapters``), so this mirror is exact. An adapter a waiting sequence
needs is loaded and put in a slot in one step, and the sequence is admitted in
a later one, once the worker has said the load worked: a bad adapter file then
fails only the sequences that asked for it. A slot whose adapter a running
sequence uses is never taken; the least recently used free one is.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from ..adapters.messages import AdapterActivation, AdapterLoadResult, AdapterSpec


@dataclass
class _Slot:
    spec: AdapterSpec
    active: bool = False  # the worker has it (False while the step that puts it there runs)
    last_used: int = 0


class AdapterSlots:
    def __init__(self, max_loras: int, max_cpu_loras: int):
        self.max_loras = max_loras
        self.max_cpu_loras = max_cpu_loras
        self._slots: list[_Slot | None] = [None] * max_loras
        self._memory: OrderedDict[str, AdapterSpec] = OrderedDict()  # uid -> spec, least recent first
        self._drops: list[str] = []
        self._loads: list[AdapterSpec] = []
        self._activations: list[AdapterActivation] = []
        self._in_flight: list[AdapterActivation] = []
        self._tick = 0
        self.loads = 0
        self.load_seconds = 0.0

    # --- what is where -----------------------------------------------------------------

    def slot_of(self, uid: str) -> int | None:
        return next((i for i, s in enumerate(self._slots) if s is not None and s.spec.uid == uid), None)

    def is_active(self, uid: str) -> bool:
        slot = self.slot_of(uid)
        return slot is not None and self._slots[slot].active

    def is_loaded(self, uid: str) -> bool:
        return uid in self._memory

    @property
    def num_loaded(self) -> int:
        return len(self._memory)

    def active_names(self) -> list[str]:
        return [s.spec.name for s in self._slots if s is not None and s.active]

    # --- changes ---------------------------------------------------------------------------

    def request(self, spec: AdapterSpec, pinned: set[str]) -> bool:
        """Start putting ``spec`` in a slot (loading it first if needed). False when every slot
        holds an adapter in ``pinned`` (uids running sequences use): the sequence waits."""
        if self.slot_of(spec.uid) is not None:
            return True
        candidates = [i for i, s in enumerate(self._slots)
                      if s is None or (s.active and s.spec.uid not in pinned)]
        if not candidates:
            return False
        slot = min(candidates, key=lambda i: -1 if self._slots[i] is None else self._slots[i].last_used)
        self._remember(spec, pinned)
        self._slots[slot] = _Slot(spec)
        self._activations.append(AdapterActivation(slot, spec.uid))
        return True

    def preload(self, spec: AdapterSpec) -> None:
        """Load ``spec`` into the worker's memory without a slot (POST /adapters with preload)."""
        self._remember(spec, set())

    def forget(self, uid: str) -> None:
        """The adapter is gone (unregistered): out of the worker's memory and slots."""
        for i, held in enumerate(self._slots):
            if held is not None and held.spec.uid == uid:
                self._slots[i] = None
        if self._memory.pop(uid, None) is not None:
            self._drops.append(uid)

    def touch(self, uids: set[str]) -> None:
        """Running sequences used these this step (slot recency)."""
        self._tick += 1
        for held in self._slots:
            if held is not None and held.spec.uid in uids:
                held.last_used = self._tick

    def _remember(self, spec: AdapterSpec, pinned: set[str]) -> None:
        if spec.uid in self._memory:
            self._memory.move_to_end(spec.uid)
            return
        self._memory[spec.uid] = spec
        self._loads.append(spec)
        in_slots = {s.spec.uid for s in self._slots if s is not None}
        for uid in list(self._memory):
            if len(self._memory) <= self.max_cpu_loras:
                break
            if uid not in in_slots and uid not in pinned and uid != spec.uid:
                del self._memory[uid]
                self._drops.append(uid)

    # --- one step ---------------------------------------------------------------------------

    def has_changes(self) -> bool:
        return bool(self._drops or self._loads or self._activations)

    def take_changes(self) -> tuple[list[str], list[AdapterSpec], list[AdapterActivation]]:
        """The changes for the next StepBatch (the step then carries them)."""
        changes = (self._drops, self._loads, self._activations)
        self._in_flight = self._activations
        self._drops, self._loads, self._activations = [], [], []
        return changes

    def on_step_done(self, results: list[AdapterLoadResult]) -> dict[str, str]:
        """The worker's answers to the step's loads; activations it carried are now active.
        Returns the uids whose load failed, with the reason (they are forgotten)."""
        failed = {}
        for result in results:
            if result.ok:
                self.loads += 1
                self.load_seconds += result.seconds
            else:
                failed[result.uid] = result.message
        for activation in self._in_flight:
            held = self._slots[activation.slot]
            if held is not None and held.spec.uid == activation.uid and activation.uid not in failed:
                held.active = True
        self._in_flight = []
        for uid in failed:
            for i, held in enumerate(self._slots):
                if held is not None and held.spec.uid == uid:
                    self._slots[i] = None
            self._memory.pop(uid, None)
        return failed
