"""Trainer-side client of an AveragingSwarm agent: hivemind's DecentralizedAverager over a local agent.

    from averaging_swarm import DecentralizedAverager
    averager = DecentralizedAverager({"w": w, "b": b})      # shared memory in $AVS_SHM_DIR
    with averager.get_tensors() as tensors:
        tensors["w"][...] = w
    result = averager.step(weight=samples)

PyTorch: ``averaging_swarm.torch`` (ParameterAverager, DiLoCoOptimizer).
"""
from .averager import DecentralizedAverager
from .client import AgentClient, AgentError, OuterStep, StepResult

__all__ = ["AgentClient", "AgentError", "DecentralizedAverager", "OuterStep", "StepResult"]
__version__ = "0.1.0"
