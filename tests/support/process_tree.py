"""The processes a job started, read from /proc (Linux), for tests that kill or watch
ranks: descendants(pid) and the cohort-train ranks among them."""
import os


def descendants(pid):
    """Every process below `pid` (children, their children, …)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def ranks_of(pid, program="cohort-train"):
    """{rank: pid} of the `program` processes below `pid` (rank from Open MPI's environment)."""
    ranks = {}
    for p in descendants(pid):
        try:
            with open(f"/proc/{p}/comm") as f:
                if f.read().strip() != program[:15]:
                    continue
            with open(f"/proc/{p}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            ranks[int(env.get(b"OMPI_COMM_WORLD_RANK", b"0"))] = p
        except OSError:
            pass
    return ranks
