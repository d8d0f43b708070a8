"""Errors of the DSL compiler. Each names the operation, rank, thread block and source line."""


class DslError(Exception):
    """Base class. `where` is the operation's context: `file:line: rank R tb T: op`."""

    def __init__(self, message, op=None, rank=None, tb=None):
        self.message = message
        self.op = op
        self.rank = rank
        self.tb = tb
        super().__init__(self._text())

    def _text(self):
        if self.op is None:
            return self.message
        loc = self.op.path_line() if hasattr(self.op, "path_line") else None
        head = f"{loc}: " if loc else ""
        who = []
        if self.rank is not None:
            who.append(f"rank {self.rank}")
        if self.tb is not None:
            who.append(f"thread block {self.tb}")
        who = f" ({', '.join(who)})" if who else ""
        via = self.op.via_text() if hasattr(self.op, "via_text") else ""
        return f"{head}{self.op.name}{who}: {self.message}{via}"


class ChunkRangeError(DslError):
    """A chunk reference outside its buffer."""


class UnknownPeerError(DslError):
    """A channel or operation names a rank that is not in the program (or the rank itself)."""


class UnknownChannelError(DslError):
    """An operation uses a channel that does not exist or does not connect the ranks it names."""


class ChannelUseError(DslError):
    """A channel end is driven by more than one thread block, or an op does not fit the channel."""


class MissingSignalError(DslError):
    """A wait (or semaphore acquire) that no signal (release) matches."""


class UnmatchedSignalError(DslError):
    """A signal (or release) that no wait consumes: the next run would start out of step."""


class DeadlockError(DslError):
    """The simulated schedule stopped with thread blocks still waiting."""


class RaceError(DslError):
    """Unsynchronized accesses to one chunk."""


class PostconditionError(DslError):
    """The program does not compute its collective."""


class InputWriteError(DslError):
    """An operation writes the caller's input: read-only (in-place plans have no input)."""


class ExecutorLimitError(DslError):
    """A plan beyond what the executor runs (vocabulary.json limits): it would fail at load."""


class PlanFormatError(DslError):
    """A plan document that does not match the schema."""


class ProgramError(DslError):
    """Any other misuse of the DSL (bad argument, unsupported combination)."""
