"""Two ranks under cchan-run: an all-reduce through whichever cchan package and libraries the
interpreter finds; prints where they came from."""
import cchan
import torch

with cchan.Comm(platform="host") as c:
    y = c.all_reduce(torch.ones(4))
    assert bool((y == c.size).all()), y
    if c.rank == 0:
        print("smoke ok:", cchan.__file__, cchan.library_paths())
