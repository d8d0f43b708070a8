"""cchan: Python interfaces to the cchan GPU communication SDK.

Subpackages:
    cchan.dsl  the algorithm DSL and plan compiler (pure Python, standard library only).
"""
