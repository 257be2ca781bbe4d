"""Quality of LLM_BYOC_QUANTIZATION=int8 against float32 on SmolLM2-135M-Instruct (worker/quant.py).

    PYTHONPATH=code python benchmarks/int8_quality.py [--new-tokens 32] [--json benchmarks/results/issue28_int8_quality.json]

Two ModelRunners in one process, float32 and int8 (each on the kernels the load picks here), each driven
directly (one sequence, prompt in one chunk, then one token per step):

- greedy agreement: over the fixed prompts below (chat-templated), the share
  of prompts whose greedy answers (up to ``--new-tokens`` tokens or the end of
  sequence token) are identical, and the mean length of the common prefix
  (tokens until the first difference);
- perplexity of two fixed English texts (``TEXTS``: plain prose, ~400 tokens, and
  technical prose, ~380 tokens; from the prompt's log-probabilities under the raw
  model), float32 and int8, and their ratio per text. The two disagree by an order
  of magnitude for int8 (8-bit activations cost little on one, several percent on
  the other): one short text does not tell an int8 model's quality.

Also the load time and resident memory each runner added (RSS after load minus
before, weights plus the KV pool; the pool is the same size in both).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import sys
import time
from pathlib import Path

import torch

from llm_byoc import cpu
from llm_byoc.bench.report import print_and_write
from llm_byoc.config import EngineConfig
from llm_byoc.models.default_model import ensure_default_model
from llm_byoc.models.loader import local_folder
from llm_byoc.protocol import NewSequence, SamplingParams, ScheduledChunk, StepBatch
from llm_byoc.worker.runner import ModelRunner

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a hash table is in two sentences.",
    "List three fruits that are red.",
    "How many legs does a spider have?",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 7?",
    "Give me a tip for sleeping better.",
    "Who wrote Romeo and Juliet?",
    "Describe the color blue to someone who cannot see.",
    "What does a compiler do?",
    "Name the planets of the solar system in order.",
    "Why is the sky blue?",
    "Write a Python function that reverses a string.",
    "What is photosynthesis?",
    "Suggest a name for a pet cat.",
]

TEXT = (
    "The history of the bicycle begins in the early nineteenth century. In 1817 the German inventor Karl Drais "
    "built a two-wheeled machine that the rider pushed along with his feet; it had no pedals, and it was called "
    "the running machine, or the dandy horse in England. Pedals attached to the front wheel appeared in France "
    "in the 1860s, and the machines that carried them were nicknamed boneshakers, because their iron tyres on "
    "cobbled streets made for a rough ride. To go faster, makers enlarged the front wheel, which led to the "
    "high-wheeler of the 1870s: a huge front wheel, a tiny rear one, and a rider perched high above the ground, "
    "at real risk of being thrown over the handlebars. The safety bicycle of the 1880s solved that problem. It "
    "had two wheels of similar size and a chain that drove the rear wheel, so the rider sat lower and could put "
    "a foot down. When John Boyd Dunlop introduced the pneumatic tyre in 1888, comfort improved greatly, and a "
    "bicycle boom followed in Europe and North America. Cycling gave ordinary people a cheap way to travel on "
    "their own, and it played a part in changing social habits, including the clothing worn by women. Many "
    "techniques developed for bicycles, such as ball bearings, tubular steel frames and differential gears, "
    "were later used in the first motor cars and aeroplanes. In the twentieth century the bicycle became a "
    "means of everyday transport in many countries, from the Netherlands to China, while racing grew into a "
    "popular sport with famous events such as the Tour de France, first held in 1903. Today bicycles are "
    "made of aluminium, steel, titanium or carbon fibre, and electric bicycles with a small motor that helps "
    "the rider are sold in large numbers. Cities build cycle lanes to reduce traffic and pollution, and many "
    "people ride for their health, for pleasure or to get to work."
)

TECHNICAL_TEXT = (
    "A hash table stores values under keys so that a lookup takes about the same time however many entries the "
    "table holds. It keeps an array of buckets and a hash function that turns a key into an integer; the integer, "
    "taken modulo the number of buckets, selects the bucket where the entry lives. Two keys can land in the same "
    "bucket, which is called a collision. Separate chaining resolves collisions by keeping a short linked list in "
    "each bucket, while open addressing probes other slots of the array, for example the next one, until it finds "
    "a free slot or the key. The load factor, the number of entries divided by the number of buckets, governs how "
    "often collisions occur: when it grows past a threshold such as 0.75, the table allocates an array twice as "
    "large and inserts every entry again, so that an insertion still costs constant time on average, although a "
    "single insertion that triggers the resize is slow. A good hash function spreads similar keys across the whole "
    "array; a poor one sends many keys to a few buckets and turns every lookup into a linear search. Because an "
    "attacker who knows the function can choose keys that collide, servers that hash untrusted input, such as the "
    "field names of an HTTP request, use a function with a secret random seed chosen when the process starts. "
    "Iterating over a hash table visits the buckets in array order, which has nothing to do with the order in "
    "which the keys were inserted; languages such as Python therefore keep a separate compact array of entries, "
    "in insertion order, and store only small integer indices into it in the hash table itself, which also makes "
    "the table smaller and faster to copy. Deleting an entry under open addressing cannot simply empty its slot, "
    "since a later probe for another key might stop there too early; the slot is marked with a tombstone instead, "
    "and tombstones are cleared the next time the table is rebuilt."
)
TEXTS = {"prose": TEXT, "technical": TECHNICAL_TEXT}


PIECE = 512  # tokens per piece of a --text-file


def _perplexity(driven: "Driven", pieces: list[list[int]]) -> float:
    """exp of the mean negative log-likelihood of every token after each piece's first."""
    logprobs = [lp for piece in pieces for lp in driven.prompt_logprobs(piece)]
    return math.exp(-sum(logprobs) / len(logprobs))


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Driven:
    """One runner, one sequence at a time, consecutive blocks from the start of its pool."""

    def __init__(self, runner: ModelRunner):
        self.runner, self.step_id = runner, 0

    def _step(self, **kwargs):
        self.step_id += 1
        return self.runner.step(StepBatch(self.step_id, **kwargs))

    def _table(self, tokens: int) -> list[int]:
        return list(range(1, 1 + -(-tokens // self.runner.block_size)))

    def greedy(self, prompt: list[int], new_tokens: int) -> list[int]:
        seq = f"g{self.step_id}"
        table = self._table(len(prompt) + new_tokens)
        out = self._step(new=[NewSequence(seq, SamplingParams(max_new_tokens=new_tokens))],
                         chunks=[ScheduledChunk(seq, prompt, 0, True, table)])
        tokens, eos = [out.samples[0].token_id], set(self.runner.info.eos_token_ids)
        while len(tokens) < new_tokens and tokens[-1] not in eos:
            out = self._step(chunks=[ScheduledChunk(seq, [tokens[-1]], len(prompt) + len(tokens) - 1, True)])
            tokens.append(out.samples[0].token_id)
        self._step(freed=[seq])
        return tokens

    def prompt_logprobs(self, prompt: list[int]) -> list[float]:
        seq = f"p{self.step_id}"
        out = self._step(new=[NewSequence(seq, SamplingParams(max_new_tokens=1, prompt_logprobs=0))],
                         chunks=[ScheduledChunk(seq, prompt, 0, True, self._table(len(prompt) + 1))])
        self._step(freed=[seq])
        return out.samples[0].prompt.logprobs


def load(model: str, quantization: str) -> tuple[Driven, dict]:
    rss, started = _rss_bytes(), time.perf_counter()
    runner = ModelRunner.from_config(EngineConfig(model=model, max_num_seqs=4, quantization=quantization,
                                                  kv_cache_memory="256MiB", kv_cache_commit="load",
                                                  max_model_len=1024))
    return Driven(runner), {"load_s": round(time.perf_counter() - started, 2),
                            "rss_added_mib": round((_rss_bytes() - rss) / 2**20, 1),
                            "linear_backend": runner.info.linear_backend}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--int8-model", default=None,
                        help="the int8 side's model, if not --model's (a GGUF Q8_0 file of the same model: its "
                             "blocks requantized per channel, against the float32 checkpoint)")
    parser.add_argument("--text-file", action="append", default=[],
                        help="a further text whose perplexity to report (read in 512-token pieces; may repeat)")
    parser.add_argument("--json", default=None, help="write the report here too")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = args.model or str(ensure_default_model())
    int8_model = args.int8_model or model
    runs = {name: load(source, quantization)
            for name, source, quantization in (("float32", model, ""), ("int8", int8_model, "int8"))}
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(local_folder(model))
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
             for p in PROMPTS]
    prompts = [tokenizer(chat, add_special_tokens=False)["input_ids"] for chat in chats]
    outputs = {name: [driven.greedy(p, args.new_tokens) for p in prompts] for name, (driven, _) in runs.items()}
    common = [next((i for i, (a, b) in enumerate(zip(f, q)) if a != b), min(len(f), len(q)))
              for f, q in zip(outputs["float32"], outputs["int8"])]
    identical = sum(f == q for f, q in zip(outputs["float32"], outputs["int8"]))
    texts = {label: [tokenizer(text)["input_ids"]] for label, text in TEXTS.items()}
    for path in args.text_file:
        ids = tokenizer(Path(path).read_text())["input_ids"]
        texts[Path(path).name] = [ids[i : i + PIECE] for i in range(0, len(ids) - PIECE + 1, PIECE)]
    ppl = {label: {name: _perplexity(driven, pieces) for name, (driven, _) in runs.items()}
           for label, pieces in texts.items()}
    report = {
        "model": model, "int8_model": int8_model, "cpu": cpu.describe(), "threads": torch.get_num_threads(),
        "prompts": len(prompts), "new_tokens": args.new_tokens,
        "greedy_identical": identical,
        "greedy_identical_share": round(identical / len(common), 3),
        "answer_tokens_float32": [len(out) for out in outputs["float32"]],
        "mean_common_prefix_tokens": round(sum(common) / len(common), 2),
        "common_prefix_per_prompt": common,
        "perplexity_text_tokens": {label: sum(map(len, pieces)) for label, pieces in texts.items()},
        "text_files_sha256": {Path(p).name: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in args.text_file},
        "perplexity": {label: {name: round(value, 4) for name, value in by_run.items()} for label, by_run in ppl.items()},
        "perplexity_ratio_int8_over_float32": {label: round(by_run["int8"] / by_run["float32"], 4)
                                               for label, by_run in ppl.items()},
        "load": {name: info for name, (_, info) in runs.items()},
        "example": {"prompt": PROMPTS[0], **{name: tokenizer.decode(out[0]) for name, out in outputs.items()}},
    }
    print_and_write(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
