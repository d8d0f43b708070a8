"""Send/recv as a custom collective: every rank sends its buffer to the next rank of a ring and
receives the previous rank's (the postcondition: output of r = input of r - 1). A handshake,
then put + signal; the receiver's wait orders the data before its run ends."""
from cchan.dsl import Custom, Program

VARIANTS = {"sendrecv_mem": {"channel": "memory"}, "sendrecv_port": {"channel": "port"}}
RANKS = (2, 4, 8)


def program(nranks, channel="memory"):
    n = nranks
    post = lambda r, c: {((r - 1) % n, 0): 1}  # noqa: E731
    prog = Program("sendrecv_" + ("mem" if channel == "memory" else "port"), Custom(n, 1, 1, post))
    make = prog.memory_channel if channel == "memory" else prog.port_channel
    for r in range(n):
        send, recv = make(r, (r + 1) % n), make(r, (r - 1) % n)
        recv.signal(0)  # the previous rank may write into my output
        send.wait(0)
        send.put(prog.output((r + 1) % n)[0], prog.input(r)[0], 0)
        send.signal(0)
        recv.wait(0)
        if channel == "port":
            send.flush(0)
    return prog
