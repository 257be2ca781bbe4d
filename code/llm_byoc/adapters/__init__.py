"""LoRA adapters over the one base model: their folders, the messages about them, what is loaded.

``peft_folder`` reads and checks a PEFT adapter folder against the base model
(the engine does it at registration, the worker again when it loads the
weights); ``messages`` holds the plain data that crosses processes about
adapters. The engine keeps the registry and the worker's slots
(``engine/adapter_registry.py``, ``engine/adapter_slots.py``); the worker holds
the weights and adds their low-rank products to the base projections
(``worker/lora.py``).
"""
