"""The group coordinator's replay rules (Kafka 4.x, spec section 4) as plain Python state.

groups.py   per-group fold of GroupMetadata / KIP-848 / share / streams records
offsets.py  offsets and pending transactional offsets of one partition (coordinator tail replay)
expiry.py   offset expiry and group deletion as of a given time (spec 4.7)
"""
