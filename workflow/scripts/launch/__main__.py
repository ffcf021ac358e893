"""Launch a step on every rank and wait for it (the training rule's launcher).

    python -m workflow.scripts.launch --config C --environment E --log-dir D \
        [--try N --tries tries.json] -- PROGRAM...

The ranks' start and exit are bounded and judged (supervise.py,
verdict.py). On a retry (N > 1) the nodes that answer are chosen first
(hosts.py), and each try is recorded for summary.json (tries.py). A
training try (--tries) runs alone in its run folder and writes into a
folder of its own, `D/try-N/` (attempt.py): the ranks' `--log-dir D` is
pointed there. The launcher, mpirun and the ranks end with the job shell
that started the launcher (SIGTERM: the ranks checkpoint and stop), and
mpirun and the ranks with the launcher, however it ends (guard.py). A
SIGTERM or SIGINT while it waits (for the run's lock, a lease, the ranks
to start) gives back what it holds and ends in one line (errors.Stopped).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

from workflow.scripts.common.errors import stoppable
from workflow.scripts.launch import lifeline

from workflow.scripts.settings import step
from workflow.scripts.settings.views import DistributedSettings, TrainView
from workflow.scripts.launch import attempt, hosts, job, lease, new_nodes, tries


def main(argv=None) -> None:
    with stoppable():  # a SIGTERM or SIGINT in any wait gives back the lock and the lease (errors.Stopped)
        launch(argv)


def launch(argv=None) -> None:
    lifeline.die_with_parent(signal.SIGTERM)  # the job shell is gone: stop this try (supervise.py)
    parser = step.parser(__doc__)
    parser.add_argument("--environment", required=True, help="environment.json of the run")
    parser.add_argument("--log-dir", help="where the ranks write rank<N>.log / rank<N>.exit")
    parser.add_argument("--try", dest="attempt", type=int, default=1, help="which try of the job this is")
    parser.add_argument("--tries", help="JSON list of the tries, appended to")
    parser.add_argument("program", nargs=argparse.REMAINDER, help="-- command for every rank")
    args = parser.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    dist = step.read_view(args, TrainView).distributed  # typed once: everything below takes it
    info = json.loads(Path(args.environment).read_text())
    # Packed runs (profiles/xeon, -j N): the nodes of the run's environment
    # check, or others checked now (launch/lease.py); kept for a next try.
    run = str(Path(args.environment).resolve().parent)
    with one_try(args, dist, program) as (log_dir, program, hold), \
            lease.held(dist, run, "training", keep_when="failed", prefer=new_nodes.described(info)) as leased:
        if not args.tries:
            new_nodes.check_new_nodes(args.config, args.environment, leased)
            job.run(dist, info, program, log_dir, hosts=leased)
            return
        with tries.recorded(args.tries, args.attempt, log_dir, {"log_dir": str(log_dir)}) as entry:
            tries.hopeless(args.tries, args.attempt)
            chosen, dropped = hosts.for_retry(dist, leased) if args.attempt > 1 else (None, [])
            entry.update(hosts=chosen or leased, dropped=dropped)
            entry.update(checked_now=new_nodes.check_new_nodes(args.config, args.environment, chosen or leased))
            if log_dir != args.log_dir:
                attempt.link_newest(args.log_dir, log_dir, job.world_size(dist, info, chosen or leased))
            job.run(dist, info, program, log_dir, hosts=chosen or leased, hold=hold)


@contextmanager
def one_try(args, dist: DistributedSettings, program: list[str]):
    """(log folder, ranks' command, fds the launch's guard holds) of this
    launch. A training try (--tries) first takes its run folder's lock, then
    a try-N folder of its own, which also gets the launcher's output
    (launcher.log, after a header line naming the try: the rule log, which
    every try appends to, has it too). The guard (guard.py) holds the lock too: a next try
    waits until nothing of this one runs, even if this launcher is killed."""
    if not (args.tries and args.log_dir):
        yield args.log_dir, program, ()
        return
    wait = attempt.lock_wait(dist.exit_grace_seconds)
    with attempt.locked(Path(args.tries).parent, wait) as record:
        folder = attempt.new_folder(args.log_dir)
        record(folder=str(folder))
        attempt.copy_output(folder / "launcher.log")
        print(attempt.header(folder, args.attempt), file=sys.stderr, flush=True)
        yield folder, attempt.for_try(program, args.log_dir, folder), (record.fd,)


if __name__ == "__main__":
    step.entry(main)
