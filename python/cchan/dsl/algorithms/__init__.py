"""The shipped algorithms. Each module defines program(nranks, **options) -> Program,
VARIANTS (plan name -> options) and RANKS (the rank counts its plans are shipped for)."""
