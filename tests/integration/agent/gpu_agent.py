"""The real agent (``scheduler.agent.runner.Agent``) in its own process, sampling a stand-in
NVML of two GPUs instead of the machine's (which has none): GPU 0 busy at 90 % with 20 GiB of
its 24 GiB used, GPU 1 idle at 0 % with 1 GiB used."""

import logging
import sys

from scheduler.agent.gpus import open_gpu_sampler
from scheduler.agent.runner import Agent
from scheduler.agent.settings import AgentSettings
from tests.unit.agent.nvml_standin import FakeNvml

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
nvml = FakeNvml([[(90, 20.0)], [(0, 1.0)]], total_gib=24.0)
sys.exit(Agent(AgentSettings.from_env(), gpus=lambda: open_gpu_sampler(nvml)).run())
