"""Kafka's replay rules (Kafka 4.x, spec section 4), each in one place. May import lib.codec
and lib.decode; never pyspark (the *_spark modules, imported only by lib.reporting, hold the
same rules as Spark expressions, side by side with their Python twins).

engine         one offsets partition in log order: per-key latest offsets, transactions,
               tombstones, the group fold and expiry, with numba kernels (Spark tasks and the
               coordinator run it)
offsets        offsets and pending transactional offsets, record by record (the reference)
groups         the per-group fold of GroupMetadata / KIP-848 / share / streams records
expiry         offset expiry and group deletion as of a given time (spec 4.7)
expiry_spark   the same expiry conditions as Spark columns (report, audits)
offsets_spark  which offsets_log rows are applied offset commits, as Spark columns
partitioning   which offsets partition a group id maps to (Utils.abs(hashCode) % partitions)
"""
