"""``python -m llm_byoc.bench``: the load generator (see ``loadgen``)."""

import sys

from .loadgen import main

sys.exit(main())
