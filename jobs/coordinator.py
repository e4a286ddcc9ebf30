"""Play the group coordinator's load step for offsets partitions: warm-start from the Delta
tables, replay the tail of the live topic (or of a log dir), then answer lookups.

    python -m jobs.coordinator --warehouse WH --bootstrap-servers HOST:PORT --partitions 0,12
        [--group G ...]      # print those groups' description and committed offsets
    python -m jobs.coordinator --warehouse WH --input LOG_DIR --partitions 12
"""

from __future__ import annotations

import argparse
import sys

from lib.cli import add_fetch_max_bytes_argument, exit_now, fetch_max_bytes_error, parse_partitions


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="coordinator", description=__doc__.splitlines()[0])
    p.add_argument("--warehouse", help="Delta tables written by jobs.replay_offsets (omit: load from offset 0)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--bootstrap-servers", metavar="HOST:PORT")
    src.add_argument("--input", metavar="LOG_DIR")
    p.add_argument("--partitions", required=True, help="offsets partitions to immigrate, e.g. 0,12 or 0-49")
    p.add_argument("--group", action="append", default=[], help="group to describe (repeatable)")
    add_fetch_max_bytes_argument(p)
    args = p.parse_args(argv)
    if error := fetch_max_bytes_error(args):
        p.error(error)

    from lib.coordinator.group_coordinator import GroupCoordinator, NotCoordinatorError

    coordinator = GroupCoordinator(
        args.warehouse, args.bootstrap_servers, log_dir=args.input, fetch_max_bytes=args.fetch_max_bytes
    )
    for partition in parse_partitions(args.partitions) or []:
        state = coordinator.immigrate(partition)
        print(
            f"partition {partition}: {state.loaded_from_tables} entries from the tables, "
            f"{state.tail_records} tail records, next offset {state.next_offset}, {state.load_seconds:.2f}s"
        )
    groups = coordinator.list_groups()
    print(f"\n{len(groups)} groups owned")
    for g in groups[:50]:
        print(f"  {g['group_id']:<40} {g['group_type']:<9} {g['state']:<12} partition {g['offsets_partition']}")
    for group in args.group:
        try:
            desc = coordinator.describe_group(group)
            offsets = coordinator.committed_offsets(group)
        except NotCoordinatorError as e:
            print(f"\n{group}: {e}", file=sys.stderr)
            continue
        print(
            f"\n{group}: {desc['group_type'] if desc else 'no such group'}"
            + (f", {desc['state']}, generation {desc['generation']}, {len(desc['members'])} members" if desc else "")
        )
        for (topic, part), entry in sorted(offsets.items()):
            print(f"  {topic}-{part}: {entry['committed_offset']} (metadata {entry['metadata']!r})")
    return 0


if __name__ == "__main__":
    exit_now(main())
