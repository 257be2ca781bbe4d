"""What to send and when: prompt/output length distributions and arrival times.

Everything here is seeded, so two runs with the same arguments send the same
prompts in the same order at the same offsets; only the server differs.
Prompts are built from common English words, each about one token for the
BPE tokenizers of the models we serve, so ``input_len`` is a close estimate
of the prompt's token count. Output lengths are exact: the payload asks for
``max_new_tokens`` with ``ignore_eos``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass

_WORDS = (
    "the of and to in is was for on that with as by at from his her they this "
    "have had are not but one all were when we there can an which their said if "
    "do will each about how up out them then she many some so these would other "
    "into has more two time like see no way could people my than first water been "
    "call who its now find long down day did get come made may part over new "
    "sound take only little work know place year live me back give most very after "
    "thing our just name good sentence man think say great where help through much "
    "before line right too mean old any same tell boy follow came want show also "
    "around form three small set put end does another well large must big even "
    "such because turn here why ask went men read need land different home us move "
    "try kind hand picture again change off play spell air away animal house point"
).split()


@dataclass(frozen=True)
class LengthRange:
    low: int
    high: int

    def __post_init__(self) -> None:
        if self.low < 1 or self.high < self.low:
            raise ValueError(f"length range must satisfy 1 <= low <= high, not {self.low}:{self.high}")

    @classmethod
    def parse(cls, text: str) -> LengthRange:
        """'128' (fixed) or '64:256' (uniform, inclusive)."""
        parts = text.split(":")
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"length must be N or MIN:MAX, not {text!r}") from None
        if len(values) == 1:
            return cls(values[0], values[0])
        if len(values) == 2:
            return cls(values[0], values[1])
        raise ValueError(f"length must be N or MIN:MAX, not {text!r}")

    def sample(self, rng: random.Random) -> int:
        return rng.randint(self.low, self.high)


@dataclass(frozen=True)
class LengthProfile:
    input_len: LengthRange
    output_len: LengthRange


# Named workloads. "mixed" draws each request from one of the others.
PRESETS: dict[str, tuple[LengthProfile, ...]] = {
    "short-in-long-out": (LengthProfile(LengthRange(16, 64), LengthRange(128, 256)),),
    "long-in-short-out": (LengthProfile(LengthRange(512, 1024), LengthRange(8, 32)),),
    "mixed": (
        LengthProfile(LengthRange(16, 64), LengthRange(128, 256)),
        LengthProfile(LengthRange(512, 1024), LengthRange(8, 32)),
        LengthProfile(LengthRange(128, 256), LengthRange(64, 128)),
    ),
}


@dataclass(frozen=True)
class RequestSpec:
    index: int
    prompt: str
    input_len: int  # words in the prompt (about one token each)
    output_len: int  # max_new_tokens, sent with ignore_eos


def make_prompt(rng: random.Random, num_words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(num_words))


class RequestSource:
    """The i-th request of a seeded workload, made on first use (thread-safe).

    Requests are drawn in index order from one random stream, so request i is
    the same whatever the run's length, concurrency or thread timing.
    """

    def __init__(self, profiles: tuple[LengthProfile, ...], seed: int):
        if not profiles:
            raise ValueError("at least one length profile is needed")
        self.profiles = profiles
        self._rng = random.Random(seed)
        self._specs: list[RequestSpec] = []
        self._lock = threading.Lock()

    def __call__(self, index: int) -> RequestSpec:
        with self._lock:
            while len(self._specs) <= index:
                self._specs.append(self._draw(len(self._specs)))
            return self._specs[index]

    def first(self, count: int) -> list[RequestSpec]:
        return [self(i) for i in range(count)]

    def _draw(self, index: int) -> RequestSpec:
        profile = self._rng.choice(self.profiles)
        input_len = profile.input_len.sample(self._rng)
        output_len = profile.output_len.sample(self._rng)
        return RequestSpec(index, make_prompt(self._rng, input_len), input_len, output_len)


@dataclass(frozen=True)
class ArrivalProcess:
    """Poisson arrivals at ``rate`` per second, plus ``burst_size`` extra
    simultaneous arrivals every ``burst_every_s`` seconds (0: no bursts)."""

    rate: float
    burst_every_s: float = 0.0
    burst_size: int = 0

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"arrival rate must be > 0 requests/s, not {self.rate}")
        if self.burst_every_s < 0 or self.burst_size < 0:
            raise ValueError("burst interval and size must be >= 0")
        if self.burst_size > 0 and self.burst_every_s <= 0:
            raise ValueError("a burst size needs a burst interval (--burst-every)")

    def times(self, seed: int) -> Iterator[float]:
        """Offsets in seconds from the start, non-decreasing, endless."""
        rng = random.Random(seed)
        next_poisson = rng.expovariate(self.rate)
        next_burst = self.burst_every_s if self.burst_size > 0 else float("inf")
        while True:
            if next_burst <= next_poisson:
                for _ in range(self.burst_size):
                    yield next_burst
                next_burst += self.burst_every_s
            else:
                yield next_poisson
                next_poisson += rng.expovariate(self.rate)
