"""Putting a consumer group's committed offsets back as of an instant (jobs.restore_offsets):
the plan per partition (plan, pure) and the cluster's side (cluster: admin requests)."""
