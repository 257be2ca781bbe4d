"""Model handlers: the code that runs inside a model's worker process, one per kind."""

# What the zygote imports for every model process it forks (``process/launcher.py``
# takes the names; ``process/`` itself knows nothing of the handlers). Names, not the
# modules: the server that starts model processes never imports a handler itself.
PRELOADED_HANDLERS = (f"{__name__}.image", f"{__name__}.text")
