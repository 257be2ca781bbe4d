"""Plain data about adapters that crosses a process boundary (registered in protocol's codec)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AdapterSpec:
    """A checked PEFT LoRA adapter: enough for the worker to load it."""

    name: str  # what requests call it
    uid: str  # this registration: a name registered again is another adapter (caches never mix them)
    path: str  # the adapter folder (resolved, under an allowed root)
    rank: int
    scaling: float  # lora_alpha / r (or / sqrt(r) for rsLoRA), folded into the weights
    target_modules: list[str]  # of LORA_MODULES
    weight_bytes: int = 0  # the adapter file's tensors


@dataclass(frozen=True)
class AdapterActivation:
    """Copy a loaded adapter into a slot of the batch's LoRA weights."""

    slot: int
    uid: str


@dataclass(frozen=True)
class AdapterLoadResult:
    """What became of a load the engine asked for (StepOutput.adapter_results)."""

    uid: str
    ok: bool
    message: str = ""
    bytes: int = 0  # memory its weights take in the worker
    seconds: float = 0.0


@dataclass(frozen=True)
class AdapterStatus:
    """One adapter as GET /adapters shows it."""

    name: str
    rank: int
    target_modules: list[str]
    path: str
    state: str  # "registered" | "loaded" | "active" | "failed"
    requests: int = 0
    tokens: int = 0
    load_seconds: float | None = None
    bytes: int = 0
    message: str = ""


@dataclass(frozen=True)
class AdapterCommand:
    """Front end -> engine: ``action`` is "register" (name, src, preload), "unregister" (name) or "list"."""

    call_id: int
    action: str
    name: str = ""
    src: str = ""
    preload: bool = False


@dataclass(frozen=True)
class AdapterReply:
    """Engine -> front end, for the AdapterCommand with the same call id."""

    call_id: int
    adapters: list[AdapterStatus] = field(default_factory=list)
    error_type: str = ""  # a ServingError type when the command failed
    message: str = ""


@dataclass(frozen=True)
class LoRAStats:
    """Adapters as the engine sees them (HealthReport.lora), for /ping and /metrics."""

    max_loras: int  # adapters one step can use
    max_cpu_loras: int  # adapters kept loaded in the worker's memory
    registered: int
    loaded: int
    active: list[str]  # names in the batch's slots
    running: list[str]  # names of running sequences' adapters
    waiting: list[str]  # names waiting sequences ask for
    loads: int = 0
    load_seconds_total: float = 0.0
