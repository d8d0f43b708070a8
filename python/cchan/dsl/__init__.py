"""cchan.dsl: communication algorithms as Python programs, compiled to verified execution plans.

See docs/dsl.md. Standard library only; importing it needs no C library and no GPU.
"""
from .collectives import AllGather, AllReduce, AllToAll, Broadcast, Custom, ReduceScatter
from .errors import (ChannelUseError, ChunkRangeError, DeadlockError, DslError,
                     ExecutorLimitError, InputWriteError, MissingSignalError, PlanFormatError,
                     PostconditionError, ProgramError, RaceError, UnknownChannelError,
                     UnknownPeerError, UnmatchedSignalError)
from .program import Program, TBGroup

__all__ = [
    "Program", "TBGroup", "AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast",
    "Custom", "DslError", "ChunkRangeError", "UnknownPeerError", "UnknownChannelError",
    "ChannelUseError", "MissingSignalError", "UnmatchedSignalError", "DeadlockError",
    "RaceError", "PostconditionError", "PlanFormatError", "ProgramError", "InputWriteError",
    "ExecutorLimitError",
]
