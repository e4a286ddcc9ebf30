"""The JVM-free group coordinator: on immigration, warm-start an offsets partition from the
Delta tables, then catch up on the log's tail with the same engine as the Spark tasks. May
import lib.codec, lib.decode, lib.replay, lib.source, lib.lake; never pyspark."""

from lib.coordinator.group_coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
