"""``python -m scheduler.agent``: run the node agent (configured by ``GA_*`` variables)."""

import sys

from scheduler.agent.runner import main

sys.exit(main())
