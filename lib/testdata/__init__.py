"""Builders of offsets logs for tests, the bench and the bundled sample (logbuilder,
generate), and the numba kernels' warm-up and measurement (kernels). Production code never
imports this package."""
